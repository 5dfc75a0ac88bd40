"""WebShop's reward for a purchase, exactly as WebShop computes it, with a documented stand-in for spaCy.

For a goal with attributes ``A``, option values ``O`` and price cap ``c``, buying product ``p`` at price ``x`` with
the selected option values ``S`` scores::

    R = r_type * (n_att + n_opt + [x <= c]) / (|A| + |O| + 1)

- ``n_att``: goal attributes that match one of ``p``'s attributes fuzzily (``token_set_ratio`` above 85), or else
  occur as a substring of ``p``'s lower-cased title, bullet points or description;
- ``n_opt``: goal option values that match one of ``S`` fuzzily (above 85) after both are reduced to the first
  colour word they contain (``normalize_color``). Every option, sizes included, is matched fuzzily, as WebShop does:
  ``token_set_ratio`` scores 100 when one side's words are a subset of the other's, so ``small`` matches
  ``x-small``;
- ``r_type`` in {0, 0.1, 0.5, 1}: from ``title_score``, the share of the goal product's title nouns that the bought
  product's title has (0 -> 0, below 0.1 -> 0.1); 0.5 where the title score is at most 0.2 and neither the scraping
  query is equal nor at least two breadcrumb levels are shared; else 1.

``token_set_ratio`` is thefuzz's: the text keeps only code points outside 128-255, is lower-cased with every
non-alphanumeric character made a space (rapidfuzz's ``default_process``), then rapidfuzz's ``token_set_ratio``
rounded to an integer.

**The noun stand-in.** WebShop tags title words with spaCy's ``en_core_web_sm`` and keeps nouns and proper nouns.
That model is a download, so Shop-v0 uses a deterministic rule instead (``title_nouns``): the lower-cased title is
split into runs of letters and digits, and a run counts as a noun unless it is a function word (``FUNCTION_WORDS``),
an adjective or descriptive word of product titles (``DESCRIPTIVE_WORDS``, colours and sizes included), has a
digit, or is a single character. The generated catalogue's titles are built so that the rule tags them as a tagger
would (brand and type words are nouns, descriptors are listed); on real WebShop titles the rule and spaCy can
differ on individual words.

>>> bought = Product("B1", "Acme Cotton Crew T-Shirt", "fashion", "men's shirts", "Clothing › Men › Shirts", 9.0,
...                  "$9.0", ("machine wash", "cotton"), (("size", ("small", "large")),), "", (), ())
>>> goal = Goal("B1", "i want a machine wash t-shirt", ("machine wash", "slim fit"), ("large",), 20.0,
...             bought.title, bought.query, bought.category, bought.product_category)
>>> s = purchase_score(bought, goal, 9.0, {"size": "large"})
>>> s.total, s.attributes_matched, s.options_matched, s.price_ok, s.r_type
(0.75, 1, 1, True, 1.0)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from agentgym.envs.shop.products import Goal, Product

#: WebShop's colour words: an option value is reduced to the first of them it contains before matching.
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass",
    "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light",
    "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow",
    "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone",
    "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white",
    "wine", "yellow",
)  # fmt: skip
#: A fuzzy match needs a ``token_set_ratio`` above this (WebShop's threshold).
MATCH_THRESHOLD = 85


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


FUNCTION_WORDS = _words(
    "a an the and or but nor for of in on at to from by with without into onto over under up down out off as "
    "per via than then so if is are be been being was were it its this that these those there here he she they "
    "we you i me my our your their his her s t not no yes all any each every both either some such own same "
    "more most less very too also just only can will may might would should could"
)
DESCRIPTIVE_WORDS = _words(
    # general adjectives of product titles
    "new best premium natural organic soft hard high low top long short portable heavy light lightweight "
    "waterproof water resistant durable comfortable casual classic slim easy fresh healthy pure large small "
    "medium mini big extra super ultra professional compact adjustable quick fast slow cool warm hot cold smooth "
    "strong thin thick wide narrow deep dry wet clean sweet sour spicy rich fine full half double single multi "
    "vintage modern elegant cute stylish luxury simple sturdy breathable stretchy foldable wireless electric "
    "digital smart ergonomic non slip anti rechargeable reusable washable handmade round square flat curly "
    "straight gentle daily everyday unscented scented sensitive lasting fit loose regular tall petite plus "
    "mens womens unisex kids baby adult size sized inch inches pack count piece pieces set "
    "x xl xxl xs"
) | frozenset(COLOR_SET)
_WORDS = re.compile(r"[a-z0-9]+")
_LATIN1 = {i: None for i in range(128, 256)}


def fuzzy_score(a: str, b: str) -> int:
    """thefuzz's ``token_set_ratio(a, b)``: 0-100 (see the module docstring).

    >>> fuzzy_score("cool powder snow", "powder snow"), fuzzy_score("XL", "L"), fuzzy_score("x-small", "small")
    (100, 67, 100)
    """
    pa, pb = default_process(a.translate(_LATIN1)), default_process(b.translate(_LATIN1))
    if not pa or not pb:
        return 0
    return round(fuzz.token_set_ratio(pa, pb))


def normalize_color(value: str) -> str:
    """The first of ``COLOR_SET`` that ``value`` contains as a substring, else ``value`` (WebShop's rule).

    >>> normalize_color("dark blue"), normalize_color("heather grey"), normalize_color("xx-large")
    ('blue', 'grey', 'xx-large')
    """
    return next((c for c in COLOR_SET if c in value), value)


def title_nouns(title: str) -> list[str]:
    """The title's words that the stand-in tags as nouns, in order, with repeats (see the module docstring).

    >>> title_nouns("Acme Soft Cotton Crew T-Shirt for Men, Pack of 2")
    ['acme', 'cotton', 'crew', 'shirt', 'men']
    """
    return [w for w in _WORDS.findall(title.lower())
            if len(w) > 1 and w not in FUNCTION_WORDS and w not in DESCRIPTIVE_WORDS
            and not any(ch.isdigit() for ch in w)]  # fmt: skip


@dataclass(frozen=True)
class TypeMatch:
    """WebShop's type reward and the three tests it combines."""

    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_match(bought: Product, goal: Goal) -> TypeMatch:
    """Whether ``bought`` is the kind of product ``goal`` asks for (see the module docstring)."""
    query_match = bought.query == goal.query
    levels_bought = {x.strip() for x in bought.product_category.split("›")}
    levels_goal = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(levels_bought & levels_goal) >= 2
    desired = title_nouns(goal.name)
    title_score = len(set(title_nouns(bought.title)) & set(desired)) / len(desired) if desired else 0.2
    r_type = 1.0 if query_match or category_match or title_score > 0.2 else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeMatch(r_type, query_match, category_match, title_score)


def attribute_matches(bought: Product, goal_attributes: Iterable[str]) -> int:
    """How many goal attributes ``bought`` has (see the module docstring)."""
    texts = (bought.title.lower(), " ".join(bought.bullet_points).lower(), bought.description.lower())
    n = 0
    for wanted in goal_attributes:
        fuzzy = any(fuzzy_score(have, wanted) > MATCH_THRESHOLD for have in bought.attributes)
        n += fuzzy or any(wanted in text for text in texts)
    return n


def option_matches(selected: Iterable[str], goal_options: Iterable[str]) -> int:
    """How many goal option values one of the ``selected`` values matches (see the module docstring)."""
    have = [normalize_color(v) for v in selected]
    return sum(any(fuzzy_score(h, normalize_color(w)) > MATCH_THRESHOLD for h in have) for w in goal_options)


@dataclass(frozen=True)
class PurchaseScore:
    """A purchase's reward and its parts (``info["reward_parts"]``)."""

    total: float
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float
    attributes_matched: int
    attributes_wanted: int
    options_matched: int
    options_wanted: int
    price_ok: bool

    def to_json(self) -> dict[str, float | int | bool]:
        return asdict(self)


def purchase_score(bought: Product, goal: Goal, price: float, selected: Mapping[str, str]) -> PurchaseScore:
    """WebShop's reward for buying ``bought`` at ``price`` with ``selected`` options (option name -> value)."""
    t = type_match(bought, goal)
    n_att = attribute_matches(bought, goal.attributes)
    n_opt = option_matches(selected.values(), goal.options)
    price_ok = price <= goal.price_upper
    total = t.r_type * (n_att + n_opt + int(price_ok)) / (len(goal.attributes) + len(goal.options) + 1)
    return PurchaseScore(total, t.r_type, t.query_match, t.category_match, t.title_score, n_att,
                         len(goal.attributes), n_opt, len(goal.options), price_ok)  # fmt: skip
