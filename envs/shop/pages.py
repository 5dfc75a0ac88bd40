"""WebShop's pages in its text mode: what each page shows (joined by ``" [SEP] "``) and what can be clicked on it.

Pages (``Page.kind``): ``search`` (the instruction and a search bar: only ``search[...]`` works there),
``results`` (page ``n`` of the search's top 50, ten products a page: ASIN, title, price tag; ``< Prev`` from page
2 on, ``Next >`` always, as WebShop), ``item`` (the product's options, title, price, rating and the buttons
``Description``, ``Features``, ``Reviews``, ``Attributes`` when shown, ``Buy Now``), ``sub`` (one of those four
sub-pages) and ``done`` (after ``Buy Now``). Every page but the search page has ``Back to Search``; item and
sub-pages have ``< Prev`` (to the results page and to the item page).

Clickables are matched in lower case, as WebShop lowers the argument of ``click[...]``: ``click[b0abc12345]``,
``click[next >]``, ``click[large]``, ``click[buy now]``.

>>> from agentgym.envs.shop.catalogue import build_catalogue
>>> cat = build_catalogue(20, seed=0)
>>> render(Page("search"), "i need a shirt", cat.by_asin)
'WebShop [SEP] Instruction: [SEP] i need a shirt [SEP] Search'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from agentgym.envs.shop.products import Product

SEP = " [SEP] "
BUY, NEXT, PREV, BACK = "Buy Now", "Next >", "< Prev", "Back to Search"
SUB_PAGES = ("Description", "Features", "Reviews", "Attributes")
#: The search returns this many products, shown this many a page (WebShop's SEARCH_RETURN_N, PRODUCT_WINDOW).
RESULTS, PER_PAGE = 50, 10


@dataclass(frozen=True)
class Page:
    """Where the agent is (immutable; see the module docstring). ``options`` are the selected ``(name, value)``
    pairs in the order first selected; ``results`` the search's ASINs, best first."""

    kind: str
    keywords: str = ""
    page: int = 1
    asin: str = ""
    options: tuple[tuple[str, str], ...] = ()
    sub: str = ""
    results: tuple[str, ...] = ()

    def selected(self) -> dict[str, str]:
        return dict(self.options)

    def select(self, name: str, value: str) -> Page:
        """The item page with ``name`` set to ``value`` (a new name goes last, as in WebShop's dict)."""
        chosen = dict(self.options)
        chosen[name] = value
        return replace(self, kind="item", options=tuple(chosen.items()), sub="")

    def shown(self) -> tuple[str, ...]:
        """The ASINs on this results page."""
        return self.results[(self.page - 1) * PER_PAGE : self.page * PER_PAGE]

    def canonical(self) -> str:
        """The page as a key: equal exactly when two pages show the same thing and offer the same clicks."""
        opts = ",".join(f"{n}={v}" for n, v in sorted(self.options))
        return f"{self.kind}|{self.keywords}|{self.page}|{self.asin}|{opts}|{self.sub}"


def clickables(page: Page, products: Mapping[str, Product], show_attrs: bool = False) -> dict[str, tuple[str, str]]:
    """What ``click[...]`` accepts on ``page``: lower-case text -> ``(what, value)``, ``what`` one of ``back``,
    ``prev``, ``next``, ``product``, ``option`` (``value`` = the option's name), ``sub``, ``buy``."""
    out: dict[str, tuple[str, str]] = {}
    if page.kind in ("search", "done"):
        return out
    out[BACK.lower()] = ("back", "")
    if page.kind == "results":
        if page.page > 1:
            out[PREV.lower()] = ("prev", "")
        out[NEXT.lower()] = ("next", "")
        for asin in page.shown():
            out[asin.lower()] = ("product", asin)
        return out
    out[PREV.lower()] = ("prev", "")
    if page.kind == "item":
        product = products[page.asin]
        for name, values in product.options:
            for value in values:
                out.setdefault(value, ("option", name))  # WebShop's last-wins map keeps one entry a value
        for sub in SUB_PAGES if show_attrs else SUB_PAGES[:3]:
            out[sub.lower()] = ("sub", sub)
        out[BUY.lower()] = ("buy", "")
    return out


def render(page: Page, instruction: str, products: Mapping[str, Product], *, show_attrs: bool = False,
           score: float | None = None) -> str:  # fmt: skip
    """The page's visible text in WebShop's simple text mode (see the module docstring); ``score`` for ``done``."""
    if page.kind == "search":
        return SEP.join(["WebShop", "Instruction:", instruction, "Search"])
    if page.kind == "done":
        return SEP.join(["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{score}"])
    parts = ["Instruction:", instruction, BACK]
    if page.kind == "results":
        parts.append(f"Page {page.page} (Total results: {len(page.results)})")
        if page.page > 1:
            parts.append(PREV)
        parts.append(NEXT)
        for asin in page.shown():
            p = products[asin]
            parts += [asin, p.title, p.price_tag]
        return SEP.join(parts)
    product = products[page.asin]
    parts.append(PREV)
    if page.kind == "item":
        for name, values in product.options:
            parts += [name, *values]
        parts += [product.title, f"Price: {product.price_tag}", f"Rating: {product.rating}"]
        parts += [*(SUB_PAGES if show_attrs else SUB_PAGES[:3]), BUY]
    elif page.sub == "Description":
        parts.append(product.description)
    elif page.sub == "Features":
        parts += list(product.bullet_points)
    elif page.sub == "Reviews":
        for r in product.reviews:
            parts += [f'"{r.title}"', str(r.score), r.body]
    else:  # Attributes
        parts += [*product.attributes, product.category, product.query, product.product_category]
    return SEP.join(p for p in parts if p)
