"""WebShop-v0: Shop-v0's protocol and reward over the real WebShop data, for users who have downloaded it.

WebShop (Yao et al., 2022) ships its catalogue and instructions as JSON files, downloaded by its ``setup.sh``:
``items_shuffle.json`` (1.18M scraped products; ``items_shuffle_1000.json`` is the first thousand),
``items_ins_v2.json`` (per ASIN: the product's attributes and a synthetic instruction; ``items_ins_v2_1000.json``)
and ``items_human_ins.json`` (per ASIN: the instructions people wrote). ``load_webshop`` reads them with WebShop's
rules (``web_agent_site/engine/engine.py: load_products`` and ``goal.py``) and ``WebShopEnv`` plays them with
Shop-v0's pages, search (BM25 over WebShop's indexed text), reward and signals (``agentgym.envs.shop.env``).

Loading, as WebShop does: products whose ASIN is ``"nan"`` or longer than 10 characters are skipped, and so are
repeated ASINs (the first one stays); ``num_products`` keeps the first N entries of the file before that. The
title is ``name``, the description ``full_description``, the features ``small_description`` (a list, or one
string). ``pricing`` is ``"$x"`` or ``"$x$y"`` (any other characters dropped); an empty or missing one is
``[100.0]`` shown as ``$100.0``. Option names are lower-cased; option values are stripped, ``"/"`` becomes
``" | "`` and they are lower-cased. Attributes come from ``items_ins_v2``, else ``["DUMMY_ATTR"]``. The scraping
query is lower-cased and stripped. Reviews are empty and the rating ``N.A.`` (WebShop's loader leaves reviews out).

Goals: with ``human_goals`` (the default), one per human instruction that has attributes, in product order; its
text is the instruction with ``"."`` stripped from both ends (WebShop's ``strip('.')``) plus ``", and price lower
than X.XX dollars"`` where the product's price has a cap (``products.price_cap``). Without, WebShop's synthetic
goals: for each product with an ``items_ins_v2`` instruction, one goal per combination of its option values (option
names sorted), the text ``"<instruction> with name: value, and name: value"`` and the price text, one cap per
product. Then the goals are shuffled by ``random.Random(233).shuffle``, as WebShop does after ``random.seed(233)``,
so goal ``i`` is WebShop's goal ``i`` and the standard splits hold: goals 0-499 ``test``, 500-1499 ``eval``, 1500
on ``train``.

Differences from WebShop, on purpose:

- **Prices.** WebShop draws each range-priced product's price (uniformly in its range) and each goal's cap with
  Python's global ``random``, unseeded, so they differ from run to run. Here they are drawn in the same order (the
  prices in product order, then the caps in goal order) from one ``random.Random(seed)``: reproducible, and the same
  goals, though not the same numbers as any one WebShop run.
- **Synthetic goals' options.** WebShop's reward matches a synthetic goal's options as ``(name, value)`` pairs
  (``goal_options.items()``), which thefuzz 0.19 reads as the text ``"('name', 'value')"``: the goal's value is not
  reduced to its colour and the name's words count. Here they are the values, as for human goals. The two agree on
  a selected value equal to the goal's or one token-set match away (``large`` / ``x-large``); WebShop's way also
  accepts a selected value whose words all appear in ``name value`` (``navy`` for ``color: navy blue``).
- The reward's noun tagger is Shop-v0's stand-in for spaCy (``agentgym.envs.shop.reward``); search is Shop-v0's
  BM25 over the same text WebShop's Lucene index holds.

>>> env = WebShopEnv(data_dir="/nonexistent")
>>> env.unavailable_reason.startswith("agentgym/WebShop-v0 is unavailable here")
True
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.contract.env import AgentEnv
from agentgym.contract.trust import declare, flag, one_of
from agentgym.envs.shop.env import STORE_CACHE, ShopBase, Store, build_store
from agentgym.envs.shop.products import NO_CAP, Goal, Product, price_cap, price_tag

DATA_ENV = "WEBSHOP_DATA"
PRODUCTS_GLOB, PRODUCTS_FULL = "items_shuffle*.json", "items_shuffle.json"
INS_GLOB, INS_FULL = "items_ins_v2*.json", "items_ins_v2.json"
HUMAN_FILE = "items_human_ins.json"
#: WebShop's goal splits (``baseline_models/env.py``): goal indices ``[start, stop)``, ``None`` for the end.
SPLITS: dict[str, tuple[int, int | None]] = {"test": (0, 500), "eval": (500, 1500), "train": (1500, None),
                                            "all": (0, None)}  # fmt: skip
#: WebShop's seed for shuffling the goals.
GOAL_SHUFFLE_SEED = 233
#: The price of a product without pricing, and the attribute list of one missing from ``items_ins_v2``.
DEFAULT_PRICE, DUMMY_ATTR = 100.0, "DUMMY_ATTR"
DOWNLOAD_HINT = (
    "WebShop's data files (items_shuffle.json, items_ins_v2.json and items_human_ins.json, or the 1,000-product "
    "items_shuffle_1000.json and items_ins_v2_1000.json): the gdown lines of setup.sh in "
    "https://github.com/princeton-nlp/WebShop (`setup.sh -d all` or `-d small`) download them into its data/ folder; "
    f"set ${DATA_ENV} to that folder (or pass data_dir=)"
)


@dataclass(frozen=True)
class WebShopFiles:
    """The files ``load_webshop`` reads (``human`` is None for synthetic goals)."""

    products: str
    ins: str
    human: str | None

    def key(self) -> tuple[Any, ...]:
        """The files' paths, sizes and modification times (a cache key that changes when a file does)."""
        out: list[Any] = []
        for path in (self.products, self.ins, self.human):
            if path is not None:
                st = os.stat(path)
                out += [os.path.realpath(path), st.st_size, st.st_mtime_ns]
        return tuple(out)


def _pick(data_dir: str, pattern: str, full: str, explicit: str | None, suffix: str, what: str) -> str:
    """The file of ``pattern`` to read: ``explicit``, else the one named ``full`` + ``suffix`` (the products file's
    suffix, e.g. ``_1000``), else ``full``, else the only match. ``FileNotFoundError`` when there is none,
    ``ValueError`` when several match and none is preferred."""
    if explicit is not None:
        if not explicit or os.path.basename(explicit) != explicit or explicit in (".", ".."):
            raise ValueError(f"{what} must be a file name inside data_dir, got {explicit!r}")
        path = os.path.join(data_dir, explicit)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{explicit} (the {what} asked for) in {data_dir}")
        return path
    found = sorted(os.path.basename(p) for p in glob.glob(os.path.join(glob.escape(data_dir), pattern)))
    stem = full.removesuffix(".json")
    for name in (f"{stem}{suffix}.json", full):
        if name in found:
            return os.path.join(data_dir, name)
    if len(found) == 1:
        return os.path.join(data_dir, found[0])
    if not found:
        raise FileNotFoundError(f"{pattern} in {data_dir}")
    raise ValueError(f"{data_dir} holds several {pattern} files ({', '.join(found)}) and no {full}: "
                     f"name the one to read with {what}=")  # fmt: skip


def webshop_files(data_dir: str, *, human_goals: bool = True, products_file: str | None = None,
                  ins_file: str | None = None) -> WebShopFiles:  # fmt: skip
    """The files under ``data_dir`` that ``load_webshop`` reads (see ``load_webshop``); ``FileNotFoundError`` naming
    what is missing."""
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"the folder {data_dir}")
    products = _pick(data_dir, PRODUCTS_GLOB, PRODUCTS_FULL, products_file, "", "products_file")
    suffix = os.path.basename(products).removeprefix(PRODUCTS_FULL.removesuffix(".json")).removesuffix(".json")
    ins = _pick(data_dir, INS_GLOB, INS_FULL, ins_file, suffix, "ins_file")
    human = None
    if human_goals:
        human = os.path.join(data_dir, HUMAN_FILE)
        if not os.path.isfile(human):
            raise FileNotFoundError(f"{HUMAN_FILE} in {data_dir} (the human instructions; human_goals=False plays "
                                    "the synthetic ones without it)")  # fmt: skip
    return WebShopFiles(products, ins, human)


# -- reading the files -------------------------------------------------------------------------------------------------


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None


def _strings(value: Any, path: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{path}: {where} must be a list of strings, got {value!r:.120}")
    return value


def _text(record: Mapping[str, Any], key: str, path: str, where: str, *, optional: bool = False) -> str:
    value = record.get(key)
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{path}: {where}: {key!r} must be a string, got {value!r:.120}")
    return value


def parse_pricing(pricing: Any, path: str = "<pricing>", where: str = "") -> tuple[float, ...]:
    """WebShop's pricing rule: the numbers after each ``$`` (other characters dropped), at most two; ``(100.0,)``
    for an empty or missing one.

    >>> parse_pricing("$12.99"), parse_pricing("$8.49 - $15.99"), parse_pricing("$1,299.00"), parse_pricing(None)
    ((12.99,), (8.49, 15.99), (1299.0,), (100.0,))
    """
    if pricing is None or pricing == "" or pricing == []:
        return (DEFAULT_PRICE,)
    if isinstance(pricing, list) and all(isinstance(p, int | float) and not isinstance(p, bool) for p in pricing):
        return tuple(float(p) for p in pricing[:2])  # an already converted file
    if not isinstance(pricing, str):
        raise ValueError(f"{path}: {where}'pricing' must be a string like '$12.99' or '$9.99$14.99', got "
                         f"{pricing!r:.80}")  # fmt: skip
    try:
        prices = tuple(float(re.sub(r"[^\d.]", "", piece)) for piece in pricing.split("$")[1:])
    except ValueError:
        prices = ()
    if not prices:
        raise ValueError(f"{path}: {where}'pricing' {pricing!r:.80} has no price after a '$'")
    return prices[:2]


def _options(raw: Any, path: str, where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """WebShop's option grid: names lower-cased, values stripped, ``/`` -> `` | ``, lower-cased; None lists
    skipped; a repeated (lower-cased) name keeps its first place and its last values, as a dict does."""
    if raw is None or raw == {}:
        return ()
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: {where}'customization_options' must be an object or null, got {raw!r:.80}")
    options: dict[str, tuple[str, ...]] = {}
    for name, contents in raw.items():
        if contents is None:
            continue
        if not isinstance(contents, list) or not all(isinstance(c, dict) and isinstance(c.get("value"), str)
                                                     for c in contents):  # fmt: skip
            raise ValueError(f"{path}: {where}customization option {name!r} must be a list of "
                             f'{{"value": ..., "image": ...}} objects, got {contents!r:.80}')  # fmt: skip
        options[name.lower()] = tuple(c["value"].strip().replace("/", " | ").lower() for c in contents)
    return tuple(options.items())


def _bullets(raw: Any, path: str, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        return (raw,)
    return tuple(_strings(raw, path, f"{where}'small_description'"))


def _read_products(path: str, num_products: int | None) -> list[dict[str, Any]]:
    raw = _read_json(path)
    if not isinstance(raw, list) or not all(isinstance(p, dict) for p in raw):
        raise ValueError(f"{path} must hold a JSON list of product objects (WebShop's items_shuffle format), got "
                         f"{type(raw).__name__}")  # fmt: skip
    return raw if num_products is None else raw[:num_products]


def _read_mapping(path: str, kind: type, what: str) -> dict[str, Any]:
    raw = _read_json(path)
    if not isinstance(raw, dict):
        raise ValueError(f"{path} must hold a JSON object of ASIN -> {what}, got {type(raw).__name__}")
    bad = next((asin for asin, v in raw.items() if not isinstance(v, kind)), None)
    if bad is not None:
        raise ValueError(f"{path} must hold a JSON object of ASIN -> {what}; {bad} has {raw[bad]!r:.80}")
    return raw


# -- the data ----------------------------------------------------------------------------------------------------------


@dataclass
class WebShopData:
    """WebShop's products and goals, loaded (a ``ShopData``; see the module docstring). ``skipped`` counts the
    human instructions without attributes, which WebShop skips."""

    products: list[Product]
    goals: list[Goal]
    files: WebShopFiles
    skipped: int = 0
    by_asin: dict[str, Product] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_asin = {p.asin: p for p in self.products}

    @property
    def num_goals(self) -> int:
        return len(self.goals)

    def goal(self, index: int) -> Goal:
        return self.goals[index]


@dataclass
class GoalRange:
    """Goals ``start`` to ``stop`` of ``data`` (a split), as a ``ShopData`` whose goal 0 is ``data``'s ``start``."""

    data: WebShopData
    start: int
    stop: int
    products: list[Product] = field(init=False, repr=False)
    by_asin: dict[str, Product] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.products, self.by_asin = self.data.products, self.data.by_asin

    @property
    def num_goals(self) -> int:
        return self.stop - self.start

    def goal(self, index: int) -> Goal:
        if not 0 <= index < self.num_goals:
            raise IndexError(f"goal {index} of a range of {self.num_goals}")
        return self.data.goals[self.start + index]


def _goal(product: Product, text: str, attributes: Sequence[str], options: Sequence[str], cap: float) -> Goal:
    return Goal(product.asin, text, tuple(attributes), tuple(options), cap, product.title, product.query,
                product.category, product.product_category)  # fmt: skip


def _price_text(cap: float) -> str:
    return "" if cap == NO_CAP else f", and price lower than {cap:.2f} dollars"


def load_webshop(
    data_dir: str,
    *,
    human_goals: bool = True,
    num_products: int | None = None,
    seed: int = 0,
    products_file: str | None = None,
    ins_file: str | None = None,
) -> WebShopData:
    """Read WebShop's data files in ``data_dir`` (see the module docstring).

    Files: ``products_file`` (a name in ``data_dir``), else ``items_shuffle.json``, else the only
    ``items_shuffle*.json``; ``ins_file``, else the ``items_ins_v2*.json`` of the products file's suffix
    (``items_ins_v2_1000.json`` beside ``items_shuffle_1000.json``), else ``items_ins_v2.json``, else the only one;
    ``items_human_ins.json`` for human goals. ``seed`` seeds the price draws. ``FileNotFoundError`` when a file is
    missing, ``ValueError`` naming the file and what is wrong when one is not in WebShop's format.
    """
    if num_products is not None and num_products < 1:
        raise ValueError(f"num_products must be at least 1 (or None for all), got {num_products}")
    files = webshop_files(data_dir, human_goals=human_goals, products_file=products_file, ins_file=ins_file)
    raw_products = _read_products(files.products, num_products)
    ins = _read_mapping(files.ins, dict, 'an object {"attributes", "instruction", "instruction_attributes"}')
    human = {} if files.human is None else _read_mapping(files.human, list, "a list of instruction objects")
    rng = random.Random(seed)
    products: list[Product] = []
    seen: set[str] = set()
    for i, p in enumerate(raw_products):
        asin = p.get("asin")
        if not isinstance(asin, str):
            raise ValueError(f"{files.products}: product {i}: 'asin' must be a string, got {asin!r:.40}")
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        where = f"product {i} ({asin}): "
        pricing = parse_pricing(p.get("pricing"), files.products, where)
        price = pricing[0] if len(pricing) == 1 else rng.uniform(*pricing)  # WebShop's generate_product_prices
        info = ins.get(asin)
        attributes = info.get("attributes") if isinstance(info, dict) else None
        attributes = [DUMMY_ATTR] if attributes is None else _strings(attributes, files.ins, f"{asin}: 'attributes'")
        products.append(Product(
            asin=asin,
            title=_text(p, "name", files.products, where),
            category=_text(p, "category", files.products, where),
            query=_text(p, "query", files.products, where).lower().strip(),
            product_category=_text(p, "product_category", files.products, where),
            price=price,
            price_tag=price_tag(pricing),
            attributes=tuple(attributes),
            options=_options(p.get("customization_options"), files.products, where),
            description=_text(p, "full_description", files.products, where, optional=True),
            bullet_points=_bullets(p.get("small_description"), files.products, where),
            reviews=(),
        ))  # fmt: skip
    goals, skipped = (_human_goals(products, human, files, rng) if human_goals
                      else (_synthetic_goals(products, ins, files, rng), 0))  # fmt: skip
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return WebShopData(products, goals, files, skipped)


def _human_goals(products: list[Product], human: Mapping[str, Any], files: WebShopFiles,
                 rng: random.Random) -> tuple[list[Goal], int]:  # fmt: skip
    """WebShop's ``get_human_goals``: one goal per instruction with attributes, in product order."""
    path = str(files.human)
    goals, skipped = [], 0
    for product in products:
        for k, record in enumerate(human.get(product.asin, ())):
            where = f"{product.asin}[{k}]"
            if not isinstance(record, dict):
                raise ValueError(f"{path}: {where} must be an instruction object, got {record!r:.80}")
            attributes = _strings(record.get("instruction_attributes"), path, f"{where}: 'instruction_attributes'")
            if not attributes:
                skipped += 1
                continue
            options = _strings(record.get("instruction_options"), path, f"{where}: 'instruction_options'")
            text = _text(record, "instruction", path, where).strip(".")
            cap = price_cap(product.price, rng)
            goals.append(_goal(product, text + _price_text(cap), attributes, options, cap))
    return goals, skipped


def _synthetic_goals(products: list[Product], ins: Mapping[str, Any], files: WebShopFiles,
                     rng: random.Random) -> list[Goal]:  # fmt: skip
    """WebShop's ``get_synthetic_goals``: for each product with an instruction, one goal per option combination."""
    goals = []
    for product in products:
        info = ins.get(product.asin) or {}
        instruction = info.get("instruction")
        if instruction is None:
            continue
        where = f"{product.asin}: 'instruction_attributes'"
        attributes = _strings(info.get("instruction_attributes"), files.ins, where)
        if not isinstance(instruction, str) or not attributes:
            raise ValueError(f"{files.ins}: {product.asin}: an instruction needs a string and at least one "
                             "instruction attribute")  # fmt: skip
        cap = price_cap(product.price, rng)
        grid = dict(product.options)
        names = sorted(grid)
        for values in itertools.product(*(grid[n] for n in names)):
            said = ", and ".join(f"{n}: {v}" for n, v in zip(names, values, strict=True))
            text = instruction + (f" with {said}" if said else "") + _price_text(cap)
            goals.append(_goal(product, text, attributes, values, cap))
    return goals


# -- the env -----------------------------------------------------------------------------------------------------------


class WebShopEnv(ShopBase):
    """WebShop's real data with Shop-v0's protocol (see the module docstring and ``ShopEnv``).

    Tasks are the split's goals; a task id is ``webshop/<goal index>``, the goal's index in the whole shuffled
    list, so an id means the same goal in every split.

    Args:
        data_dir: the folder of WebShop's data files (default ``$WEBSHOP_DATA``). Without it, or without the files,
            the env still constructs (``unavailable_reason`` says what to download) and ``reset`` raises
            ``EnvUnavailableError``; Shop-v0 is the offline stand-in.
        split: ``"test"`` (goals 0-499, the default), ``"eval"`` (500-1499), ``"train"`` (1500 on) or ``"all"``.
        human_goals: play the human instructions (WebShop's default) or the synthetic ones.
        num_products: read only the first N entries of the products file (as WebShop's ``num_products``).
        products_file, ins_file: which ``items_shuffle*.json`` / ``items_ins_v2*.json`` to read (see
            ``load_webshop``).
        show_attrs, show_actions, max_turns, invalid_action_penalty: as in ``ShopEnv``.
    """

    #: ``data_dir``, ``products_file``, ``ins_file`` (files) and ``human_goals``, ``num_products`` (the build's
    #: size) are the operator's.
    public_args = declare(AgentEnv.public_args, split=one_of(*SPLITS), show_attrs=flag(), show_actions=flag())

    def __init__(
        self,
        *,
        data_dir: str | None = None,
        split: str = "test",
        human_goals: bool = True,
        num_products: int | None = None,
        products_file: str | None = None,
        ins_file: str | None = None,
        show_attrs: bool = False,
        show_actions: bool = True,
        max_turns: int = 15,
        invalid_action_penalty: float = 0.0,
    ):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty)
        if split not in SPLITS:
            raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
        self.split = split
        self.show_attrs, self.show_actions = show_attrs, show_actions
        self._start = 0
        data = data_dir or os.environ.get(DATA_ENV)
        missing = None
        if not data:
            missing = DOWNLOAD_HINT
        else:
            try:
                files = webshop_files(data, human_goals=human_goals, products_file=products_file, ins_file=ins_file)
            except FileNotFoundError as e:
                missing = f"{e}; {DOWNLOAD_HINT}"
        if missing is not None:
            self.unavailable_reason = (f"agentgym/WebShop-v0 is unavailable here: it needs {missing}. "
                                       "agentgym/Shop-v0 is the offline, WebShop-compatible stand-in.")  # fmt: skip
            self.agents = {}  # type: ignore[misc]  # no agents: ``agentgym bench`` plays none on it
            return
        assert data is not None  # found above
        key = ("webshop", files.key(), human_goals, num_products)
        if key not in STORE_CACHE:
            loaded = load_webshop(data, human_goals=human_goals, num_products=num_products,
                                  products_file=products_file, ins_file=ins_file)  # fmt: skip
            STORE_CACHE[key] = build_store(loaded)
        store = STORE_CACHE[key]
        full = store.data
        assert isinstance(full, WebShopData)
        start, stop = SPLITS[split]
        stop = full.num_goals if stop is None else min(stop, full.num_goals)
        if start >= stop:
            raise ValueError(f"split {split!r} (goals {start}-{SPLITS[split][1] or 'end'}) is empty: the data has "
                             f"{full.num_goals} goals")  # fmt: skip
        self._start = start
        self._setup(Store(GoalRange(full, start, stop), store.index), "webshop", show_attrs, show_actions)

    @property
    def num_tasks(self) -> int:  # type: ignore[override]
        return 0 if self.unavailable_reason is not None else self.store.data.num_goals

    def task_index_of(self, task_id: str) -> int:
        prefix, _, number = task_id.rpartition("/")
        local = int(number) - self._start if number.isdigit() else -1
        if prefix != "webshop" or not 0 <= local < self.num_tasks:
            raise ValueError(f"unknown task_id {task_id!r}: the {self.split!r} split's ids are 'webshop/{self._start}'"
                             f" to 'webshop/{self._start + self.num_tasks - 1}'")  # fmt: skip
        return local

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        obs, info = super()._reset(task_index, options)
        info["task_id"] = f"webshop/{self._start + task_index}"
        return obs, info
