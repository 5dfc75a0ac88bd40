"""The retail store behind CustomerService-v0: its database world, its service policy, and seeded tasks.

* ``RetailStore`` is a ToolUse ``World``: its public attributes ``users``, ``orders`` and ``products`` are the
  database (the state a tau-style check compares), its ``@tool`` methods the agent's functions. The store's back
  office does what it is told when the data allow it (a known order, items of that order not yet returned, a
  variant of the same product in stock) and raises ``ToolError`` otherwise; the *service policy* is not its job.
* ``POLICY`` is the policy document of the system prompt, and ``policy_violation`` enforces it before a call runs:
  authentication, an explicit confirmation of exactly the action (``describes``), and the rules on order status,
  the 30-day window and refunds to the original payment method. ``RULES`` names every rule a violation can cite.
* ``make_task(difficulty, index)`` draws a task from its index alone: a small database (the customer, their orders,
  other customers), the customer's scenario (``goals``: what they want, what they know) and the gold: the write
  calls that achieve it (``replay`` applies them to a fresh store), the facts the agent must tell the user, and the
  turns of a privileged agent (``turns``).

>>> task = make_task("easy", 0)
>>> store = RetailStore.from_init(task["init"])
>>> store.find_user_by_email(task["customer"]["email"]) == task["customer"]["user_id"]
True
>>> store.cancel_order("#W0000000", "no longer needed")
Traceback (most recent call last):
...
agentgym.envs.tool_use.tools.ToolError: no order with id '#W0000000'
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import random
import re
from typing import Any, Literal

from agentgym.envs.tool_use.tools import ToolError, tool
from agentgym.envs.tool_use.worlds import World
from agentgym.envs.user_sim.users import find_word
from agentgym.grading.facts import states

DIFFICULTIES = ("easy", "medium", "hard")
TASKS_PER_LEVEL = 10_000
#: Days after delivery during which items may be returned, exchanged or refunded.
RETURN_WINDOW_DAYS = 30
WRITE_TOOLS = ("cancel_order", "modify_order_address", "return_items", "exchange_items", "refund_item")
#: The rules a policy violation can cite (``info["policy_violation"]["rule"]``).
RULES: dict[str, str] = {
    "unauthenticated": "the user's data were read or changed before that user was authenticated",
    "unconfirmed": "a change was made without the user's explicit yes to a message stating exactly that action",
    "cancel_not_pending": "only pending orders can be cancelled",
    "modify_not_pending": "only pending orders can have their shipping address changed",
    "not_delivered": "only delivered orders can have items returned, exchanged or refunded",
    "return_window": f"items can be returned, exchanged or refunded only within {RETURN_WINDOW_DAYS} days of delivery",
    "refund_method": "refunds and price differences go only to the order's original payment method",
}
#: Word stems that name each write action (in a confirmation request).
VERBS: dict[str, tuple[str, ...]] = {
    "cancel_order": ("cancel",),
    "modify_order_address": ("address",),
    "return_items": ("return",),
    "exchange_items": ("exchang", "swap"),
    "refund_item": ("refund",),
}
KIND_TOOL = {
    "cancel": "cancel_order",
    "address": "modify_order_address",
    "return": "return_items",
    "exchange": "exchange_items",
    "refund": "refund_item",
}

POLICY = f"""Store policy:
1. Authenticate the user before anything else: find their user id by email (find_user_by_email), or by first name, \
last name and zip code (find_user_by_name_zip). Never look up or change the details or orders of a user who has not \
been authenticated, or of another user.
2. Before any call that changes the database ({", ".join(WRITE_TOOLS)}), tell the user exactly what you will do (the \
action, the order id, the items, and the new address or new item) and ask them to confirm; make the call only after \
they answer that message with an explicit "yes". A confirmation covers the actions its message stated, once each; \
after any further message to the user you need a new one.
3. Only pending orders can be cancelled or have their shipping address changed.
4. Only delivered orders can have items returned, exchanged or refunded, and only within {RETURN_WINDOW_DAYS} days of \
the delivery date.
5. An exchange is for another variant of the same product (get_product lists them); the price difference is charged \
or refunded to the original payment method.
6. Refunds go only to the order's original payment method, never to another one.
7. An item that arrived damaged, or is missing from a delivered order, can be refunded without a return \
(refund_item).
8. If the user asks for something this policy forbids, do not do it: explain why, and change nothing.
9. After acting, tell the user the outcome, including any amount refunded or charged.
Breaking rule 1, 2, 3, 4 or 6 ends the conversation at once, as a failure."""

# -- the catalog ------------------------------------------------------------------------------------------------
#: (product name, attribute, options, price of the first option, price step between options)
CATALOG: tuple[tuple[str, str, tuple[str, ...], float, float], ...] = (
    ("water bottle", "color", ("blue", "green", "black", "red"), 18.50, 1.75),
    ("desk lamp", "color", ("white", "black", "silver"), 42.00, 3.50),
    ("t-shirt", "size", ("small", "medium", "large"), 15.00, 1.25),
    ("backpack", "color", ("grey", "navy", "olive"), 64.90, 4.00),
    ("headphones", "color", ("black", "white", "red"), 89.00, 6.50),
    ("coffee mug", "color", ("white", "yellow", "teal"), 12.40, 0.85),
    ("yoga mat", "color", ("purple", "blue", "grey"), 29.95, 2.10),
    ("hoodie", "size", ("small", "medium", "large"), 39.00, 2.75),
    ("notebook", "style", ("lined", "dotted", "blank"), 8.60, 0.45),
    ("phone case", "color", ("clear", "black", "pink"), 19.99, 1.50),
    ("rain jacket", "size", ("small", "medium", "large"), 74.50, 5.25),
    ("wall clock", "color", ("black", "white", "oak"), 33.30, 2.60),
)
PRODUCT_IDS = tuple(f"P{101 + i}" for i in range(len(CATALOG)))
#: product name -> its options.
OPTIONS_OF = {c[0]: c[2] for c in CATALOG}


def _item_id(name: str, option: str) -> str:
    return str(100_000 + int(hashlib.blake2b(f"{name}|{option}".encode(), digest_size=4).hexdigest(), 16) % 900_000)


#: item id -> (product id, option, price) for every variant of the catalog.
VARIANTS: dict[str, tuple[str, str, float]] = {
    _item_id(name, opt): (pid, opt, round(base + k * step, 2))
    for pid, (name, _, options, base, step) in zip(PRODUCT_IDS, CATALOG, strict=True)
    for k, opt in enumerate(options)
}
assert len(VARIANTS) == sum(len(c[2]) for c in CATALOG), "item ids collide"

FIRST = (
    "ana",
    "ben",
    "chloe",
    "david",
    "emma",
    "farid",
    "grace",
    "hugo",
    "iris",
    "jonas",
    "kira",
    "liam",
    "maya",
    "noah",
    "olga",
    "pedro",
    "quinn",
    "rosa",
    "sven",
    "tara",
    "umar",
    "vera",
    "wei",
    "yara",
    "zoe",
)
LAST = (
    "silva",
    "novak",
    "kim",
    "garcia",
    "muller",
    "rossi",
    "okafor",
    "larsen",
    "dubois",
    "tanaka",
    "cohen",
    "petrov",
    "haddad",
    "moreau",
    "lopez",
    "fischer",
    "nguyen",
    "walsh",
    "ito",
    "berg",
)
CITIES = ("Springfield", "Riverton", "Lakeside", "Fairview", "Brookfield", "Maplewood", "Hillcrest", "Oakdale")
STREETS = (
    "Oak Street",
    "Maple Avenue",
    "Pine Road",
    "Cedar Lane",
    "Elm Street",
    "Birch Way",
    "Willow Drive",
    "Harbor Road",
    "Mill Lane",
    "Park Avenue",
)
PAYMENT_KINDS = ("credit card", "debit card", "gift card")
CANCEL_REASONS = ("no longer needed", "ordered by mistake")
REFUND_REASONS = ("damaged", "missing")


def money(x: float) -> str:
    return f"{x:.2f}"


# -- text matching (confirmations, facts) -------------------------------------------------------------------------
_ORDER_ID = re.compile(r"(?<!\w)#?w(\d{7})(?!\d)")


def norm(text: str) -> str:
    """Lower case, without ``$`` and thousands commas, whitespace collapsed (amounts compare as ``1234.50``).

    >>> norm("Refunded $1,234.50, to  your card")
    'refunded 1234.50 to your card'
    """
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text.lower().replace("$", ""))
    return " ".join(text.replace(",", " ").split())


def says(text: str, phrase: str) -> bool:
    """Whether normalised ``text`` states ``phrase`` as a whole word or phrase (``find_word``)."""
    return find_word(norm(phrase), text) is not None


def order_ids_in(text: str) -> set[str]:
    """The order ids a text names, as ``#W1234567`` (with or without the ``#``, any case)."""
    return {f"#W{d}" for d in _ORDER_ID.findall(text.lower())}


def told(alternatives: list[str], text: str) -> bool:
    """Whether ``text`` states one of a fact's values, compared by value (``agentgym.grading.facts.states``, the kind
    read from the canonical form: an amount ``161.50``, a date ``2026-05-08``, a card's last four digits, a status
    word).

    >>> told(["161.50"], "$161.5 has been refunded"), told(["2026-05-08"], "It was delivered on the 8th of May.")
    (True, True)
    >>> told(["0.45"], "45 cents"), told(["0.45"], "$0.54"), told(["processed"], "It is already Processed.")
    (True, False, True)
    """
    return any(states(text, alt) for alt in alternatives)


def has_verb(text: str, name: str) -> bool:
    """Whether normalised ``text`` names write action ``name`` (a word starting with one of its ``VERBS``)."""
    return any(re.search(rf"(?<![\w-]){stem}", text) for stem in VERBS[name])


# -- the world ----------------------------------------------------------------------------------------------------
class RetailStore(World):
    """An online store's customer database: ``users``, ``orders`` and ``products`` (see the module docstring).

    Order ids look like ``#W1234567``; each order line is one item (a product variant, with its ``item_id``) and
    has a ``status`` (``ordered``, ``returned``, ``exchanged``, ``refunded``); an order's ``transactions`` record the
    payment and every refund or charge, each with its payment method.
    """

    name = "retail"
    description = "online store's customer database"

    def __init__(self, users: dict[str, Any], orders: dict[str, Any], products: dict[str, Any], today: str):
        self.users: dict[str, Any] = copy.deepcopy(users)
        self.orders: dict[str, Any] = copy.deepcopy(orders)
        self.products: dict[str, Any] = copy.deepcopy(products)
        self._today = today

    @classmethod
    def from_init(cls, init: dict[str, Any]) -> RetailStore:
        return cls(init["users"], init["orders"], init["products"], init["today"])

    def context(self) -> str:
        return f"Today is {self._today}."

    @property
    def today(self) -> str:
        return self._today

    # -- helpers ----------------------------------------------------------------------------------------------
    def owner(self, order_id: str) -> str | None:
        """The user id of an order, or None for an unknown order."""
        order = self.orders.get(order_id)
        return None if order is None else order["user_id"]

    def _order(self, order_id: str) -> dict[str, Any]:
        if order_id not in self.orders:
            raise ToolError(f"no order with id {order_id!r}")
        return self.orders[order_id]

    def _user(self, user_id: str) -> dict[str, Any]:
        if user_id not in self.users:
            raise ToolError(f"no user with id {user_id!r}")
        return self.users[user_id]

    def _lines(self, order: dict[str, Any], item_ids: list[str]) -> list[dict[str, Any]]:
        if not item_ids:
            raise ToolError("give at least one item id")
        if len(set(item_ids)) != len(item_ids):
            raise ToolError("an item id is given twice")
        lines = {line["item_id"]: line for line in order["items"]}
        out = []
        for iid in item_ids:
            if iid not in lines:
                raise ToolError(f"item {iid!r} is not in this order; its items are {sorted(lines)}")
            if lines[iid]["status"] != "ordered":
                raise ToolError(f"item {iid!r} was already {lines[iid]['status']}")
            out.append(lines[iid])
        return out

    def _method(self, order: dict[str, Any], payment_method_id: str) -> None:
        if payment_method_id not in self.users[order["user_id"]]["payment_methods"]:
            raise ToolError(f"{payment_method_id!r} is not a payment method of this user")

    def describe_item(self, line: dict[str, Any]) -> str:
        """``"blue water bottle"``: an order line's option and product name."""
        return f"{next(iter(line['options'].values()))} {line['name']}"

    # -- reads ------------------------------------------------------------------------------------------------
    @tool
    def find_user_by_email(self, email: str) -> str:
        """Find a user's id by their email address; this authenticates the user.

        Args:
            email: the email address of the user's account.
        """
        for uid, user in self.users.items():
            if user["email"] == email.strip().lower():
                return uid
        raise ToolError(f"no user with email {email!r}")

    @tool
    def find_user_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Find a user's id by their name and the zip code of their address; this authenticates the user.

        Args:
            first_name: the user's first name.
            last_name: the user's last name.
            zip: the zip code of the user's address.
        """
        key = (first_name.strip().lower(), last_name.strip().lower(), zip.strip())
        for uid, user in self.users.items():
            if (user["first_name"].lower(), user["last_name"].lower(), user["address"]["zip"]) == key:
                return uid
        raise ToolError("no user with that name and zip code")

    @tool
    def get_user_details(self, user_id: str) -> dict[str, Any]:
        """Return a user's name, email, address, payment methods and order ids.

        Args:
            user_id: the user's id.
        """
        user = self._user(user_id)
        methods = [{"id": k, "description": v["description"]} for k, v in user["payment_methods"].items()]
        return {
            "user_id": user_id,
            "name": f"{user['first_name']} {user['last_name']}",
            "email": user["email"],
            "address": dict(user["address"]),
            "payment_methods": methods,
            "orders": list(user["orders"]),
        }

    @tool
    def list_orders(self, user_id: str) -> list[dict[str, Any]]:
        """List a user's orders: id, status, date placed and the items (option and product name).

        Args:
            user_id: the user's id.
        """
        user = self._user(user_id)
        return [
            {
                "order_id": oid,
                "status": self.orders[oid]["status"],
                "placed": self.orders[oid]["placed"],
                "items": [self.describe_item(line) for line in self.orders[oid]["items"]],
            }
            for oid in user["orders"]
        ]

    @tool
    def get_order(self, order_id: str) -> dict[str, Any]:
        """Return an order's details: status, dates, items (with item ids and prices), total, shipping address,
        payment method and transactions.

        Args:
            order_id: the order id, like '#W1234567'.
        """
        order = self._order(order_id)
        method = self.users[order["user_id"]]["payment_methods"][order["payment_method_id"]]
        out = copy.deepcopy(order)
        out["total"] = round(sum(line["price"] for line in order["items"]), 2)
        out["payment_method"] = {"id": order["payment_method_id"], "description": method["description"]}
        del out["payment_method_id"]
        return {"order_id": order_id, **out}

    @tool
    def get_product(self, product_id: str) -> dict[str, Any]:
        """Return a product's variants: item id, option, price and whether it is available.

        Args:
            product_id: the product id, like 'P101'.
        """
        if product_id not in self.products:
            raise ToolError(f"no product with id {product_id!r}")
        p = self.products[product_id]
        return {
            "product_id": product_id,
            "name": p["name"],
            "attribute": p["attribute"],
            "variants": [{"item_id": k, **v} for k, v in p["variants"].items()],
        }

    # -- writes -----------------------------------------------------------------------------------------------
    @tool
    def cancel_order(self, order_id: str, reason: Literal["no longer needed", "ordered by mistake"]) -> dict[str, Any]:
        """Cancel a whole order; its total is refunded to its payment method.

        Args:
            order_id: the order id.
            reason: why the user cancels.
        """
        order = self._order(order_id)
        if order["status"] == "cancelled":
            raise ToolError(f"order {order_id} is already cancelled")
        total = round(sum(line["price"] for line in order["items"] if line["status"] == "ordered"), 2)
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["transactions"].append(
            {"kind": "refund", "amount": total, "payment_method_id": order["payment_method_id"]}
        )
        return {
            "order_id": order_id,
            "status": "cancelled",
            "refunded": total,
            "payment_method_id": order["payment_method_id"],
        }

    @tool
    def modify_order_address(self, order_id: str, street: str, city: str, zip: str) -> dict[str, Any]:
        """Change the shipping address of an order.

        Args:
            order_id: the order id.
            street: house number and street, like '12 Oak Street'.
            city: the city.
            zip: the zip code.
        """
        order = self._order(order_id)
        if order["status"] == "cancelled":
            raise ToolError(f"order {order_id} is cancelled")
        new = {"street": street.strip(), "city": city.strip(), "zip": zip.strip()}
        if not all(new.values()):
            raise ToolError("street, city and zip must not be empty")
        if new == order["address"]:
            raise ToolError("that is already the shipping address")
        order["address"] = new
        return {"order_id": order_id, "address": dict(new)}

    @tool
    def return_items(self, order_id: str, item_ids: list[str], payment_method_id: str) -> dict[str, Any]:
        """Return items of an order; their price is refunded to a payment method.

        Args:
            order_id: the order id.
            item_ids: the item ids of the order lines to return.
            payment_method_id: where the refund goes.
        """
        order = self._order(order_id)
        lines = self._lines(order, item_ids)
        self._method(order, payment_method_id)
        amount = round(sum(line["price"] for line in lines), 2)
        for line in lines:
            line["status"] = "returned"
        order["transactions"].append({"kind": "refund", "amount": amount, "payment_method_id": payment_method_id})
        return {
            "order_id": order_id,
            "returned": list(item_ids),
            "refunded": amount,
            "payment_method_id": payment_method_id,
        }

    @tool
    def exchange_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> dict[str, Any]:
        """Exchange items of an order for other variants of the same products; the price difference is charged
        (new item dearer) or refunded (cheaper) to a payment method.

        Args:
            order_id: the order id.
            item_ids: the item ids of the order lines to exchange.
            new_item_ids: the item ids of the new variants, in the same order.
            payment_method_id: where the price difference is charged or refunded.
        """
        order = self._order(order_id)
        lines = self._lines(order, item_ids)
        if len(new_item_ids) != len(item_ids):
            raise ToolError("give one new item id per item id")
        self._method(order, payment_method_id)
        for line, new in zip(lines, new_item_ids, strict=True):
            variants = self.products[line["product_id"]]["variants"]
            if new not in variants:
                raise ToolError(f"{new!r} is not a variant of {line['name']} ({line['product_id']})")
            if new == line["item_id"]:
                raise ToolError(f"{new!r} is the item itself")
            if not variants[new]["available"]:
                raise ToolError(f"{new!r} is not available")
        diff = round(
            sum(
                self.products[ln["product_id"]]["variants"][n]["price"] - ln["price"]
                for ln, n in zip(lines, new_item_ids, strict=True)
            ),
            2,
        )
        for line, new in zip(lines, new_item_ids, strict=True):
            line["status"] = "exchanged"
            line["exchanged_for"] = new
        if diff:
            kind = "charge" if diff > 0 else "refund"
            order["transactions"].append({"kind": kind, "amount": abs(diff), "payment_method_id": payment_method_id})
        return {
            "order_id": order_id,
            "exchanged": list(item_ids),
            "new_items": list(new_item_ids),
            "charged": max(diff, 0.0),
            "refunded": max(-diff, 0.0),
            "payment_method_id": payment_method_id,
        }

    @tool
    def refund_item(
        self, order_id: str, item_id: str, reason: Literal["damaged", "missing"], payment_method_id: str
    ) -> dict[str, Any]:
        """Refund an item that arrived damaged or is missing from the delivery, without a return.

        Args:
            order_id: the order id.
            item_id: the item id of the order line.
            reason: what was wrong with the item.
            payment_method_id: where the refund goes.
        """
        order = self._order(order_id)
        (line,) = self._lines(order, [item_id])
        self._method(order, payment_method_id)
        line["status"] = "refunded"
        line["refund_reason"] = reason
        order["transactions"].append(
            {"kind": "refund", "amount": line["price"], "payment_method_id": payment_method_id}
        )
        return {
            "order_id": order_id,
            "item_id": item_id,
            "refunded": line["price"],
            "payment_method_id": payment_method_id,
        }


# -- the policy ---------------------------------------------------------------------------------------------------
def describes(store: RetailStore, name: str, args: dict[str, Any], message: str) -> bool:
    """Whether ``message`` states exactly the write call ``name(**args)``: the action, the order id, exactly the
    order's items the call touches (by product name or item id), the new variants (option or item id) and the new
    address (street and zip). The order must exist.

    >>> store = RetailStore.from_init(make_task("easy", 0)["init"])
    >>> oid = next(iter(store.orders))
    >>> describes(store, "cancel_order", {"order_id": oid, "reason": "no longer needed"}, f"Cancel {oid}?")
    True
    """
    text = norm(message)
    order = store.orders[args["order_id"]]
    if not has_verb(text, name) or args["order_id"] not in order_ids_in(text):
        return False
    if name in ("return_items", "exchange_items", "refund_item"):
        ids = args["item_ids"] if "item_ids" in args else [args["item_id"]]
        named = {ln["item_id"] for ln in order["items"] if says(text, ln["name"]) or says(text, ln["item_id"])}
        if named != set(ids):
            return False
    if name == "exchange_items":
        for new in args["new_item_ids"]:
            variant = VARIANTS.get(new)
            if not (says(text, new) or (variant is not None and says(text, variant[1]))):
                return False
    if name == "modify_order_address":
        return says(text, args["street"]) and says(text, args["zip"])
    return True


def _days_since(store: RetailStore, iso: str) -> int:
    return (dt.date.fromisoformat(store.today) - dt.date.fromisoformat(iso)).days


def policy_violation(
    store: RetailStore, name: str, args: dict[str, Any], auth: str | None, confirmed: str | None, used: list[str]
) -> str | None:
    """The ``RULES`` key a (schema-valid) call would break, or None.

    ``auth``: the authenticated user id; ``confirmed``: the agent message the user last answered with an explicit
    yes (None if the latest message got no yes); ``used``: the ``call_key`` of the writes that confirmation already
    covered. Reads of another or an unknown user's data and every write need ``auth``; a write on an existing order
    must keep the rules of its order, then be ``confirmed`` by a message that ``describes`` it.
    """
    if name in ("get_user_details", "list_orders"):
        return "unauthenticated" if args["user_id"] in store.users and args["user_id"] != auth else None
    if name == "get_order":
        return "unauthenticated" if store.owner(args["order_id"]) not in (None, auth) else None
    if name not in WRITE_TOOLS:
        return None
    owner = store.owner(args["order_id"])
    if auth is None or owner not in (None, auth):
        return "unauthenticated"
    if owner is not None:
        order = store.orders[args["order_id"]]
        if name == "cancel_order" and order["status"] != "pending":
            return "cancel_not_pending"
        if name == "modify_order_address" and order["status"] != "pending":
            return "modify_not_pending"
        if name in ("return_items", "exchange_items", "refund_item"):
            if order["status"] != "delivered":
                return "not_delivered"
            if _days_since(store, order["delivered"]) > RETURN_WINDOW_DAYS:
                return "return_window"
            if args["payment_method_id"] != order["payment_method_id"]:
                return "refund_method"
    if confirmed is None or call_key(name, args) in used:
        return "unconfirmed"
    if owner is not None and not describes(store, name, args, confirmed):
        return "unconfirmed"
    return None


def call_key(name: str, args: dict[str, Any]) -> str:
    return json.dumps([name, args], sort_keys=True)


# -- tasks --------------------------------------------------------------------------------------------------------
#: difficulty -> the variants it draws from.
VARIANTS_OF = {"easy": ("single",), "medium": ("two_requests", "lookup"), "hard": ("forbidden", "distractor")}
REQUESTS = {
    "cancel": "cancel an order",
    "address": "change the shipping address of an order",
    "return": "return something I bought",
    "exchange": "exchange an item for a different {attribute}",
    "refund": "get a refund for an item of an order that had a problem",
}


class _Builder:
    """Builds one task's database with a seeded ``random.Random``."""

    def __init__(self, rng: random.Random, today: dt.date):
        self.rng, self.today = rng, today
        self.users: dict[str, Any] = {}
        self.orders: dict[str, Any] = {}
        self.products: dict[str, Any] = {}
        self.names: set[tuple[str, str]] = set()

    def user(self) -> str:
        rng = self.rng
        first, last = rng.choice(FIRST), rng.choice(LAST)
        while (first, last) in self.names:
            first, last = rng.choice(FIRST), rng.choice(LAST)
        self.names.add((first, last))
        uid = f"{first}_{last}_{rng.randrange(1000, 10_000)}"
        kinds = rng.sample(PAYMENT_KINDS, rng.choice((2, 2, 3)))
        methods: dict[str, Any] = {}
        for kind in kinds:
            last4 = str(rng.randrange(1000, 10_000))
            while any(m["last4"] == last4 for m in methods.values()):
                last4 = str(rng.randrange(1000, 10_000))
            methods[f"{kind.replace(' ', '_')}_{last4}"] = {
                "kind": kind,
                "last4": last4,
                "description": f"{kind} ending in {last4}",
            }
        address = {
            "street": f"{rng.randrange(1, 200)} {rng.choice(STREETS)}",
            "city": rng.choice(CITIES),
            "zip": str(rng.randrange(10_000, 100_000)),
        }
        self.users[uid] = {
            "first_name": first.capitalize(),
            "last_name": last.capitalize(),
            "email": f"{first}.{last}{rng.randrange(10, 100)}@example.com",
            "address": address,
            "payment_methods": methods,
            "orders": [],
        }
        return uid

    def order(
        self, uid: str, status: str, products: list[int], *, late: bool = False, options: dict | None = None
    ) -> str:
        """A new order of ``uid`` with one line per catalog index in ``products`` (``options``: index -> option)."""
        rng = self.rng
        oid = f"#W{rng.randrange(1_000_000, 10_000_000)}"
        while oid in self.orders:
            oid = f"#W{rng.randrange(1_000_000, 10_000_000)}"
        delivered = None
        if status == "delivered":
            age = rng.randrange(33, 91) if late else rng.randrange(1, 29)
            delivered = self.today - dt.timedelta(days=age)
            placed = delivered - dt.timedelta(days=rng.randrange(2, 6))
        else:
            low, high = {"pending": (0, 3), "processed": (2, 6), "cancelled": (5, 60)}[status]
            placed = self.today - dt.timedelta(days=rng.randrange(low, high))
        lines = []
        for p in products:
            name, attribute, opts, _, _ = CATALOG[p]
            opt = (options or {}).get(p) or rng.choice(opts)
            iid = _item_id(name, opt)
            lines.append(
                {
                    "item_id": iid,
                    "product_id": PRODUCT_IDS[p],
                    "name": name,
                    "options": {attribute: opt},
                    "price": VARIANTS[iid][2],
                    "status": "ordered",
                }
            )
            if PRODUCT_IDS[p] not in self.products:
                self.products[PRODUCT_IDS[p]] = {
                    "name": name,
                    "attribute": attribute,
                    "variants": {
                        _item_id(name, o): {
                            "option": o,
                            "price": VARIANTS[_item_id(name, o)][2],
                            "available": rng.random() < 0.8,
                        }
                        for o in opts
                    },
                }
        pm = rng.choice(sorted(self.users[uid]["payment_methods"]))
        total = round(sum(line["price"] for line in lines), 2)
        self.orders[oid] = {
            "user_id": uid,
            "status": status,
            "placed": placed.isoformat(),
            "delivered": delivered and delivered.isoformat(),
            "address": dict(self.users[uid]["address"]),
            "payment_method_id": pm,
            "items": lines,
            "transactions": [{"kind": "payment", "amount": total, "payment_method_id": pm}],
        }
        if status == "cancelled":
            self.orders[oid]["cancel_reason"] = "no longer needed"
            self.orders[oid]["transactions"].append({"kind": "refund", "amount": total, "payment_method_id": pm})
        self.users[uid]["orders"].append(oid)
        return oid


def make_task(difficulty: str, index: int) -> dict[str, Any]:
    """Task ``index`` of a difficulty level (a pure function of both; see the module docstring).

    >>> task = make_task("hard", 3)
    >>> task["id"], task["variant"], [g["kind"] for g in task["goals"]]
    ('hard/3', 'forbidden', ['cancel'])
    """
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty!r}")
    rng = random.Random(f"customer-service:{difficulty}:{index}")
    variant = rng.choice(VARIANTS_OF[difficulty])
    today = dt.date(2026, 1, 1) + dt.timedelta(days=rng.randrange(0, 330))
    b = _Builder(rng, today)
    uid = b.user()
    for _ in range(2):  # other customers
        other = b.user()
        for _ in range(rng.randrange(1, 3)):
            b.order(
                other,
                rng.choice(("pending", "delivered", "delivered", "processed")),
                rng.sample(range(len(CATALOG)), rng.randrange(1, 3)),
            )
    free = list(range(len(CATALOG)))
    rng.shuffle(free)  # catalog indices not used by the customer's orders yet
    kinds = ["cancel", "address", "return", "exchange", "refund"]
    forbidden = None
    if variant == "two_requests":
        kinds = rng.sample(kinds, 2)
    elif variant == "forbidden":
        forbidden = rng.choice(("cancel_not_pending", "return_window", "refund_method"))
        kinds = ["cancel" if forbidden == "cancel_not_pending" else "return"]
    else:
        kinds = [rng.choice(kinds)]
    knows_email = variant not in ("lookup", "distractor") or rng.random() < 0.5
    knows_order = variant not in ("lookup", "distractor") and (variant != "forbidden" or rng.random() < 0.5)
    goals = [_goal(b, uid, kind, forbidden, knows_order, variant == "distractor", free) for kind in kinds]
    for _ in range(rng.randrange(1, 3)):  # filler orders of the customer, with products no goal involves
        b.order(uid, rng.choice(("pending", "processed", "delivered", "cancelled")), [free.pop()])
    distractor = None
    if variant == "distractor":  # an order the opening mentions, which the request is not about
        distractor = b.order(uid, "delivered", [free.pop()])
    user_orders = b.users[uid]["orders"]
    rng.shuffle(user_orders)
    c = b.users[uid]
    customer = {
        "user_id": uid,
        "first_name": c["first_name"],
        "last_name": c["last_name"],
        "email": c["email"],
        "zip": c["address"]["zip"],
        "knows_email": knows_email,
        "payment_methods": [{"id": k, **v} for k, v in c["payment_methods"].items()],
    }
    init = {"users": b.users, "orders": b.orders, "products": b.products, "today": today.isoformat()}
    first = goals[0]
    opening = "Hi! I'd like to " + first["request"] + "."
    if distractor is not None:
        opening = (
            f"Hi! My order {distractor} arrived just fine, but I have another one: I'd like to {first['request']}."
        )
    task = {
        "id": f"{difficulty}/{index}",
        "difficulty": difficulty,
        "variant": variant,
        "today": today.isoformat(),
        "init": init,
        "customer": customer,
        "goals": goals,
        "opening": opening,
        "distractor_order": distractor,
    }
    task["goal"] = _details(task)
    task["turns"] = _gold_turns(task)
    return task


def _goal(b: _Builder, uid: str, kind: str, forbidden: str | None, knows_order: bool, twin: bool, free: list[int]):
    """One request of the customer: its target order (built here), what they know and the gold write call."""
    rng = b.rng
    methods = sorted(b.users[uid]["payment_methods"])
    status = {"cancel": "pending", "address": "pending"}.get(kind, "delivered")
    if forbidden == "cancel_not_pending":
        status = rng.choice(("processed", "delivered"))
    n_items = rng.randrange(1, 4) if kind in ("cancel", "address", "return") else rng.randrange(1, 3)
    products = [free.pop() for _ in range(n_items)]
    oid = b.order(uid, status, products, late=forbidden == "return_window")
    order = b.orders[oid]
    goal: dict[str, Any] = {
        "kind": kind,
        "forbidden": forbidden,
        "order_id": oid,
        "knows_order": knows_order,
        "order_names": [ln["name"] for ln in order["items"]],
        "items": [],
        "reason": None,
        "new_item_id": None,
        "new_option": None,
        "old_option": None,
        "attribute": None,
        "address": None,
        "payment_method_id": order["payment_method_id"],
        "call": None,
        "facts": [],
    }
    if twin:  # another delivered order holding the same product in another option
        line = order["items"][0]
        opts = CATALOG[PRODUCT_IDS.index(line["product_id"])][2]
        other = rng.choice([o for o in opts if o != line["options"][next(iter(line["options"]))]])
        b.order(
            uid,
            "delivered",
            [PRODUCT_IDS.index(line["product_id"])],
            options={PRODUCT_IDS.index(line["product_id"]): other},
        )
    lines = order["items"]
    if kind == "return":
        chosen = rng.sample(lines, rng.randrange(1, len(lines) + 1))
        goal["items"] = [ln["item_id"] for ln in lines if ln in chosen]
    elif kind in ("exchange", "refund"):
        goal["items"] = [lines[0]["item_id"]]
    store_line = {ln["item_id"]: ln for ln in lines}
    goal["item_names"] = [store_line[i]["name"] for i in goal["items"]]
    goal["descs"] = [f"{next(iter(store_line[i]['options'].values()))} {store_line[i]['name']}" for i in goal["items"]]
    if not goal["items"]:  # the whole order: the user describes it by one of its items
        ln = lines[0]
        goal["descs"] = [f"{next(iter(ln['options'].values()))} {ln['name']}"]
    goal["request"] = REQUESTS[kind].format(attribute=CATALOG[PRODUCT_IDS.index(lines[0]["product_id"])][1])
    amount = round(sum(store_line[i]["price"] for i in goal["items"]), 2)
    pm = order["payment_method_id"]
    if kind == "cancel":
        goal["reason"] = rng.choice(CANCEL_REASONS)
        goal["call"] = {"name": "cancel_order", "arguments": {"order_id": oid, "reason": goal["reason"]}}
        amount = round(sum(ln["price"] for ln in lines), 2)
    elif kind == "address":
        user_addr = b.users[uid]["address"]
        new = user_addr
        while new["zip"] == user_addr["zip"] or new["street"] == user_addr["street"]:
            new = {
                "street": f"{rng.randrange(1, 200)} {rng.choice(STREETS)}",
                "city": rng.choice(CITIES),
                "zip": str(rng.randrange(10_000, 100_000)),
            }
        goal["address"] = new
        goal["call"] = {"name": "modify_order_address", "arguments": {"order_id": oid, **new}}
    elif kind == "return":
        goal["call"] = {
            "name": "return_items",
            "arguments": {"order_id": oid, "item_ids": goal["items"], "payment_method_id": pm},
        }
    elif kind == "refund":
        goal["reason"] = rng.choice(REFUND_REASONS)
        goal["call"] = {
            "name": "refund_item",
            "arguments": {
                "order_id": oid,
                "item_id": goal["items"][0],
                "reason": goal["reason"],
                "payment_method_id": pm,
            },
        }
    elif kind == "exchange":
        line = lines[0]
        product = b.products[line["product_id"]]
        old = line["options"][product["attribute"]]
        new_option = rng.choice([o for o in CATALOG[PRODUCT_IDS.index(line["product_id"])][2] if o != old])
        new_id = _item_id(line["name"], new_option)
        product["variants"][new_id]["available"] = True
        goal.update(new_item_id=new_id, new_option=new_option, old_option=old, attribute=product["attribute"])
        goal["call"] = {
            "name": "exchange_items",
            "arguments": {
                "order_id": oid,
                "item_ids": [line["item_id"]],
                "new_item_ids": [new_id],
                "payment_method_id": pm,
            },
        }
        amount = round(abs(VARIANTS[new_id][2] - line["price"]), 2)
    if kind != "address":
        goal["facts"] = [[money(amount)]]
    if forbidden is not None:
        goal["call"] = None
        if forbidden == "cancel_not_pending":
            goal["facts"] = [[status]]
        elif forbidden == "return_window":
            goal["facts"] = [[order["delivered"]]]  # any written form of the date counts (``told``)
        else:  # the user wants the refund on another of their payment methods
            goal["payment_method_id"] = rng.choice([m for m in methods if m != pm])
            wanted = b.users[uid]["payment_methods"][goal["payment_method_id"]]["kind"]
            goal["request"] = f"return something I bought, and I want the refund on my {wanted}"
            goal["facts"] = [[b.users[uid]["payment_methods"][pm]["last4"]]]
    return goal


def _details(task: dict[str, Any]) -> dict[str, str]:
    """The details the agent needs from the user, ``{name: value}`` as the user states them (elicitation)."""
    c = task["customer"]
    out = (
        {"email": c["email"]} if c["knows_email"] else {"name": f"{c['first_name']} {c['last_name']}", "zip": c["zip"]}
    )
    for k, g in enumerate(task["goals"]):
        sfx = "" if k == 0 else f"_{k + 1}"
        if g["knows_order"]:
            out["order_id" + sfx] = g["order_id"]
        if g["items"] or not g["knows_order"]:
            out["items" + sfx] = " and ".join(g["descs"])
        if g["reason"] is not None:
            out["reason" + sfx] = g["reason"]
        if g["new_option"] is not None:
            out["new_option" + sfx] = g["new_option"]
        if g["address"] is not None:
            out["address" + sfx] = ", ".join(g["address"].values())
    return out


def action_text(store: RetailStore, call: dict[str, Any]) -> str:
    """What a write call does, in words that ``describes`` it (for confirmation requests).

    >>> task = make_task("easy", 0)
    >>> action_text(RetailStore.from_init(task["init"]), task["goals"][0]["call"])
    'exchange the blank notebook (item 462042) of order #W8670072 for the dotted one (item 954015), settling ...'
    """
    name, args = call["name"], call["arguments"]
    order = store.orders[args["order_id"]]
    lines = {ln["item_id"]: ln for ln in order["items"]}
    method = store.users[order["user_id"]]["payment_methods"][order["payment_method_id"]]["description"]
    if name == "cancel_order":
        return f"cancel order {args['order_id']} (reason: {args['reason']})"
    if name == "modify_order_address":
        return (
            f"change the shipping address of order {args['order_id']} to {args['street']}, {args['city']} {args['zip']}"
        )
    if name == "exchange_items":
        (old,), (new,) = args["item_ids"], args["new_item_ids"]
        return (
            f"exchange the {store.describe_item(lines[old])} (item {old}) of order {args['order_id']} for the "
            f"{VARIANTS[new][1]} one (item {new}), settling the price difference on your {method}"
        )
    ids = args["item_ids"] if name == "return_items" else [args["item_id"]]
    items = " and the ".join(f"{store.describe_item(lines[i])} (item {i})" for i in ids)
    if name == "return_items":
        return f"return the {items} of order {args['order_id']}, with a refund to your {method}"
    return f"refund the {items} of order {args['order_id']} ({args['reason']}) to your {method}"


def _gold_turns(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The turns of a privileged agent that plays the task by the policy (as ``OracleAgent`` replays them): one
    question per detail, the lookups, a confirmation request, the write, the outcome with its facts."""
    store = RetailStore.from_init(task["init"])
    c = task["customer"]
    uid = c["user_id"]
    turns: list[dict[str, Any]] = []

    def say(text: str) -> None:
        turns.append({"calls": [], "reply": text})

    def call(name: str, **arguments: Any) -> Any:
        turns.append({"calls": [{"name": name, "arguments": arguments}], "reply": None})
        return getattr(store, name)(**arguments)

    if c["knows_email"]:
        say("I can help with that. First, could you give me the email address of your account?")
        call("find_user_by_email", email=c["email"])
    else:
        say("I can help with that. First, could you tell me your full name?")
        say("Thank you. And what is the zip code of your address?")
        call("find_user_by_name_zip", first_name=c["first_name"], last_name=c["last_name"], zip=c["zip"])
    for k, g in enumerate(task["goals"]):
        oid = g["order_id"]
        if g["knows_order"]:
            say("Thanks. What is the order id?" if k == 0 else "Sure. What is the order id of that order?")
        else:
            say("Thanks. Which item is it about?")
            call("list_orders", user_id=uid)
        order = call("get_order", order_id=oid)
        if g["items"] and g["knows_order"]:
            say(f"Which items of order {oid} are concerned?")
        if g["reason"] is not None:
            say("What is the reason?" if g["kind"] == "cancel" else "What was the problem with the item?")
        if g["kind"] == "exchange":
            say(f"Which {g['attribute']} would you like instead?")
            call("get_product", product_id=order["items"][0]["product_id"])
        if g["kind"] == "address":
            say("What is the new shipping address?")
        if g["forbidden"] is not None:
            method = store.users[uid]["payment_methods"][order["payment_method"]["id"]]["description"]
            why = {
                "cancel_not_pending": f"cancel order {oid}: it is already {order['status']}, and only pending orders "
                "can be cancelled",
                "return_window": f"accept this return: order {oid} was delivered on {order['delivered']}, more than "
                f"{RETURN_WINDOW_DAYS} days ago",
                "refund_method": f"refund to another payment method: refunds go only to the original one, your "
                f"{method}",
            }[g["forbidden"]]
            say(f"I'm sorry, but I cannot {why}.")
            continue
        say(f"To confirm: I will {action_text(store, g['call'])}. Shall I proceed (yes/no)?")
        result = call(g["call"]["name"], **g["call"]["arguments"])
        amount = money(result.get("refunded") or result.get("charged") or 0.0)
        done = {
            "cancel_order": f"Order {oid} is cancelled; {amount} will be refunded.",
            "modify_order_address": f"The shipping address of order {oid} is updated.",
            "return_items": f"The return is registered; {amount} will be refunded.",
            "refund_item": f"The refund of {amount} is on its way.",
            "exchange_items": f"The exchange is registered; the price difference is {amount}.",
        }
        say(f"Done. {done[g['call']['name']]} Is there anything else I can help you with?")
    return turns


def replay(task: dict[str, Any]) -> dict[str, Any]:
    """The gold database: the task's initial store after every goal's write call (``World.state``)."""
    store = RetailStore.from_init(task["init"])
    for g in task["goals"]:
        if g["call"] is not None:
            getattr(store, g["call"]["name"])(**g["call"]["arguments"])
    return store.state()
