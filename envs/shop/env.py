"""Shop-v0: WebShop's shopping protocol and reward over a generated catalogue, offline.

Each episode is one instruction ("i need a t-shirt for men that is machine wash, in navy color, in size large, and
price lower than 30.00 dollars"). The agent searches, opens results, picks options and buys; the episode ends at
``click[buy now]`` with WebShop's reward (``agentgym.envs.shop.reward``). The pages are WebShop's text mode
(``agentgym.envs.shop.pages``): the visible texts joined by ``" [SEP] "``.

Actions are WebShop's: ``search[keywords]`` (on the search page only) and ``click[value]`` (a clickable of the
current page, in any case; spaces around the brackets and around punctuation, as a word-piece tokenizer decodes
``click[x-large]``, are allowed), written bare, after ``Action:``, or inside ``<action>`` / ``<answer>`` tags; anything
else is an invalid step that says why and leaves the page as it was. With ``show_actions=True`` (the default) each
observation ends with the page's available actions; ``info["admissible_commands"]`` always lists them.

Search ranks the catalogue with BM25 (``agentgym.tools.retrieval``, Lucene's idf, as WebShop's Lucene index) over
each product's title, description, first bullet point and options, and returns the top 50.

Rewards: ``outcome`` is WebShop's score of the purchase (0 to 1) on the step that buys; its parts are in
``info["reward_parts"]``; ``success`` is a score of 1.0. Verified turn signals, in every step's ``info``:
``purchase_value`` (the score buying now would get: the viewed product with the options selected so far; None off
an item page), ``attributes_matched`` / ``options_matched`` / ``type_match`` / ``price_ok`` (its parts for the
viewed product; None off a product's pages), ``best_purchase_value`` (the highest ``purchase_value`` of the episode
so far, 0.0 at the start: never None, never lower), ``target_rank`` (the goal product's rank in the current search's
results, 1-50, or None) and ``page``; ``anchor`` is the task and the page, canonically.

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/Shop-v0", catalogue="tiny", show_actions=False)
>>> obs, info = env.reset(options={"task_index": 0})
>>> obs[-1]["content"].rsplit(chr(10), 1)[-1].split(" [SEP] ")[:2]
['WebShop', 'Instruction:']
>>> obs, r, term, trunc, info = env.step(f"search[{info['gold']['search']}]")
>>> info["page"], 1 <= info["target_rank"] <= 10  # the goal's product is on the first results page
('results', True)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

from agentgym.contract.env import AgentEnv, StepResult
from agentgym.contract.trust import declare, flag, integer, one_of
from agentgym.envs.shop.agents import HeuristicAgent, OracleAgent, RandomAgent, RuleAgent
from agentgym.envs.shop.catalogue import SIZES, build_catalogue
from agentgym.envs.shop.pages import RESULTS, Page, clickables, render
from agentgym.envs.shop.products import Goal, Product
from agentgym.envs.shop.reward import PurchaseScore, purchase_score
from agentgym.tools.retrieval import BM25Retriever, Document

#: Catalogue sizes a client may pick (the larger ones take seconds to minutes to build: the operator's choice).
CHEAP_SIZES = ("tiny", "1k", "5k")
#: A ``search[...]`` longer than this is refused (WebShop has no limit; ours keeps a query's cost bounded).
MAX_QUERY_CHARS = 500
_ACTION = re.compile(r"(search|click)\s*\[(.*)\]", re.IGNORECASE | re.DOTALL)
_TAGGED = re.compile(r"<(action|answer)>(.*?)</\1>", re.IGNORECASE | re.DOTALL)

INTRO = (
    "You are shopping on WebShop for what the instruction asks for. Each turn, answer with one action: "
    "search[keywords] on the search page, or click[value] for a button, product or option shown on the page "
    "(e.g. click[b0abc12345], click[large], click[next >], click[buy now]). Select the options the instruction "
    "names before you buy; buying ends the episode."
)


class ShopData(Protocol):
    """What the env plays: products (looked up by ASIN) and goals (see ``catalogue.Catalogue``)."""

    @property
    def products(self) -> Sequence[Product]: ...

    @property
    def by_asin(self) -> Mapping[str, Product]: ...

    @property
    def num_goals(self) -> int: ...

    def goal(self, index: int) -> Goal: ...


@dataclass
class Store:
    """A catalogue and its search index, built once per process and shared by the envs that play it."""

    data: ShopData
    index: BM25Retriever

    def search(self, keywords: str) -> tuple[str, ...]:
        return tuple(hit.doc.id for hit in self.index.search(keywords, RESULTS))


def build_store(data: ShopData) -> Store:
    docs = [Document(p.asin, p.search_text()) for p in data.products]
    return Store(data, BM25Retriever(docs, idf="lucene", n_threads=1))


#: Stores built in this process: ``(catalogue, seed)`` or an adapter's key -> ``Store``. Never mutated once built.
STORE_CACHE: dict[Any, Store] = {}


@dataclass(frozen=True)
class Episode:
    """The env's episode state (immutable: snapshots share it)."""

    goal: Goal
    page: Page
    score: PurchaseScore | None = None
    best: float = 0.0  # the highest purchase_value of the episode so far


def _tight(text: str) -> str:
    """``text`` without the spaces around its punctuation: ``"x - large"`` -> ``"x-large"``, ``"< prev"`` ->
    ``"<prev"``."""
    return re.sub(r"\s*([^\w\s])\s*", r"\1", text)


def parse_action(text: str) -> tuple[str, str] | str:
    """``(name, argument)`` of a WebShop action, or why ``text`` is not one.

    >>> parse_action("Thought: the second one.\\nAction: click[B0ABC12345]")
    ('click', 'B0ABC12345')
    >>> parse_action("<action>search[red shoes]</action>"), parse_action("click [ buy now ]")
    (('search', 'red shoes'), ('click', 'buy now'))
    >>> parse_action("buy it")[:30]
    'No action found: write search['

    """
    tagged = _TAGGED.findall(text)
    candidate = tagged[-1][1].strip() if tagged else text.strip()
    if not tagged and "\n" in candidate:  # "Thought: ...\nAction: click[...]": the last line names the action
        candidate = candidate.rsplit("\n", 1)[1].strip()
    if candidate.lower().startswith("action:"):
        candidate = candidate[7:].strip()
    m = _ACTION.fullmatch(candidate)
    if m is None:
        return "No action found: write search[keywords] or click[value], e.g. click[buy now]."
    return m[1].lower(), m[2].strip()


class ShopBase(AgentEnv):
    """What Shop-v0 and WebShop-v0 share: the pages, actions, reward, signals, anchors and snapshots over a
    ``Store``. A subclass builds its store and calls ``_setup`` in its constructor."""

    agents: ClassVar[Mapping[str, Any]] = {"oracle": OracleAgent, "heuristic": HeuristicAgent, "rule": RuleAgent,
                                           "random": RandomAgent}  # fmt: skip
    store: Store

    def _setup(self, store: Store, prefix: str, show_attrs: bool, show_actions: bool) -> None:
        self.store, self._prefix = store, prefix
        self.show_attrs, self.show_actions = show_attrs, show_actions
        self._ep: Episode | None = None

    @property
    def num_tasks(self) -> int:  # type: ignore[override]
        return self.store.data.num_goals

    def task_index_of(self, task_id: str) -> int:
        prefix, _, local = task_id.rpartition("/")
        if prefix != self._prefix or not local.isdigit() or int(local) >= self.num_tasks:
            raise ValueError(f"unknown task_id {task_id!r}: ids look like '{self._prefix}/0'")
        return int(local)

    # -- episode

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        goal = self.store.data.goal(task_index)
        self._ep = Episode(goal, Page("search"))
        target = self.store.data.by_asin.get(goal.asin)
        choose = {}
        if target is not None:  # the target's option names of the goal's values, in the product's order
            for name, values in target.options:
                if want := next((v for v in goal.options if v in values), None):
                    choose[name] = want
        gold = {"goal": goal.to_json(), "asin": goal.asin, "select": choose, "category": goal.category,
                "search": target.title.lower() if target else goal.instruction}  # fmt: skip
        text, info = self._page_out()
        obs = [{"role": "user", "content": f"{INTRO}\n\n{text}"}]
        return obs, {"task_id": f"{self._prefix}/{task_index}", "gold": gold, **info}

    def _page_out(self) -> tuple[str, dict[str, Any]]:
        """The current page as observation text and its step info (the signals and the admissible commands, computed
        once); a purchase value above the episode's best so far becomes the new best."""
        assert self._ep is not None
        ep = self._ep
        commands = self._admissible()
        info = self._signals(commands)
        if info["purchase_value"] is not None and info["purchase_value"] > ep.best:
            self._ep = ep = replace(ep, best=info["purchase_value"])
        info["best_purchase_value"] = ep.best
        score = None if ep.score is None else round(ep.score.total, 4)
        text = render(ep.page, ep.goal.instruction, self.store.data.by_asin, show_attrs=self.show_attrs, score=score)
        if self.show_actions and ep.page.kind != "done":
            text += "\nAvailable actions: " + ", ".join(commands)
        return text, info

    def _admissible(self) -> list[str]:
        assert self._ep is not None
        page = self._ep.page
        search = ["search[<keywords>]"] if page.kind == "search" else []
        return search + [f"click[{c}]" for c in clickables(page, self.store.data.by_asin, self.show_attrs)]

    def _signals(self, commands: list[str]) -> dict[str, Any]:
        """The verified turn signals of the current page (see the module docstring), but the running best."""
        assert self._ep is not None
        ep, data = self._ep, self.store.data
        page = ep.page
        out: dict[str, Any] = {"page": page.kind, "admissible_commands": commands, "purchase_value": None,
                               "attributes_matched": None, "options_matched": None, "type_match": None,
                               "price_ok": None, "target_rank": None}  # fmt: skip
        if page.results and page.kind != "search":
            out["target_rank"] = page.results.index(ep.goal.asin) + 1 if ep.goal.asin in page.results else None
        if page.kind in ("item", "sub"):
            s = purchase_score(data.by_asin[page.asin], ep.goal, data.by_asin[page.asin].price, page.selected())
            out.update(attributes_matched=s.attributes_matched, options_matched=s.options_matched,
                       type_match=s.r_type, price_ok=s.price_ok)  # fmt: skip
            if page.kind == "item":
                out["purchase_value"] = s.total
        if ep.score is not None:
            out["purchase_value"] = ep.score.total
        return out

    def _invalid(self, why: str) -> StepResult:
        text, info = self._page_out()
        return StepResult([{"role": "user", "content": f"Invalid action: {why}\n\n{text}"}], action_valid=False,
                          parse_error=why, info=info)  # fmt: skip

    def _step(self, action: str) -> StepResult:
        assert self._ep is not None
        ep, data = self._ep, self.store.data
        page = ep.page
        parsed = parse_action(action)
        if isinstance(parsed, str):
            return self._invalid(parsed)
        name, arg = parsed
        if name == "search":
            if page.kind != "search":
                return self._invalid("search[...] works only on the search page: click[back to search] first.")
            keywords = " ".join(arg.lower().split())
            if not keywords:
                return self._invalid("search[...] needs keywords.")
            if len(keywords) > MAX_QUERY_CHARS:
                return self._invalid(f"search[...] takes at most {MAX_QUERY_CHARS} characters.")
            return self._moved(Page("results", keywords, 1, results=self.store.search(keywords)))
        arg = arg.lower()
        options = clickables(page, data.by_asin, self.show_attrs)
        if arg not in options:  # spacing around punctuation aside ("x - large" as a tokenizer decodes "x-large")
            arg = {_tight(c): c for c in options}.get(_tight(arg), arg)
        if arg not in options:
            where = "the search page has nothing to click: search[...] first" if page.kind == "search" else (
                "click one of: " + ", ".join(f"click[{c}]" for c in options))  # fmt: skip
            return self._invalid(f"{arg[:80]!r} is not clickable here; {where}.")
        what, value = options[arg]
        if what == "buy":
            product = data.by_asin[page.asin]
            score = purchase_score(product, ep.goal, product.price, page.selected())
            self._ep = replace(ep, page=Page("done", asin=page.asin, options=page.options), score=score)
            text, info = self._page_out()
            return StepResult([{"role": "user", "content": text}], {"outcome": score.total}, terminated=True,
                              success=score.total == 1.0, info={**info, "reward_parts": score.to_json()})  # fmt: skip
        if what == "back":
            new = Page("search")
        elif what == "next":
            new = replace(page, page=page.page + 1)
        elif what == "prev" and page.kind == "results":
            new = replace(page, page=page.page - 1)
        elif what == "prev" and page.kind == "item":  # back to the results page it was opened from
            new = replace(page, kind="results", asin="", options=())
        elif what == "prev":  # a sub-page: back to the item page
            new = replace(page, kind="item", sub="")
        elif what == "product":
            new = replace(page, kind="item", asin=value, options=())
        elif what == "option":
            new = page.select(value, arg)
        else:  # a sub-page
            new = replace(page, kind="sub", sub=value)
        return self._moved(new)

    def _moved(self, page: Page) -> StepResult:
        """Go to ``page`` (a step that buys nothing: outcome 0)."""
        assert self._ep is not None
        self._ep = replace(self._ep, page=page)
        text, info = self._page_out()
        return StepResult([{"role": "user", "content": text}], {"outcome": 0.0}, info=info)

    def anchor(self) -> str:
        """The task and the page, canonically (``Page.canonical``)."""
        assert self._ep is not None
        return f"{self._task_id}|{self._ep.page.canonical()}"

    def _snapshot_state(self) -> Episode | None:
        return self._ep  # immutable

    def _restore_state(self, state: Episode | None) -> None:
        self._ep = state


class ShopEnv(ShopBase):
    """WebShop over a generated catalogue (see the module docstring).

    Args:
        catalogue: a size of ``catalogue.SIZES`` (``"tiny"`` 100 products, ``"1k"``, ``"5k"`` the default,
            ``"100k"``, ``"300k"``); one goal per product.
        seed: the catalogue's seed.
        show_attrs: show the ``Attributes`` sub-page (WebShop hides it by default).
        show_actions: end each observation with the page's available actions.
        max_turns: turns before truncation (15, as the WebShop agents of the seed papers use).
        invalid_action_penalty: subtracted (component ``format``) for each invalid step.
    """

    public_args = declare(AgentEnv.public_args, catalogue=one_of(*CHEAP_SIZES), seed=integer(0, 2**31 - 1),
                          show_attrs=flag(), show_actions=flag())  # fmt: skip

    def __init__(
        self,
        *,
        catalogue: str = "5k",
        seed: int = 0,
        show_attrs: bool = False,
        show_actions: bool = True,
        max_turns: int = 15,
        invalid_action_penalty: float = 0.0,
    ):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty)
        if catalogue not in SIZES:
            raise ValueError(f"catalogue must be one of {list(SIZES)}, got {catalogue!r}")
        key = ("generated", catalogue, seed)
        if key not in STORE_CACHE:
            STORE_CACHE[key] = build_store(build_catalogue(SIZES[catalogue], seed))
        self._setup(STORE_CACHE[key], f"{catalogue}/s{seed}", show_attrs, show_actions)
