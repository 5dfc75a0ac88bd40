"""The generated catalogue: seeded products of WebShop's five categories, and one instruction per product.

Each product is of a *type* (``TYPES``: 30 of them, six per category: fashion, beauty, food, furniture,
electronics). A type fixes the scraping query, the breadcrumb, the words of the title's type, the attributes its
products draw from, the option grid (e.g. size x colour, flavour x pack) and the price range. A product draws a
brand (a made-up word), descriptors, two to five attributes, each option's values and a price; its description,
bullet points and reviews are written from its own attributes, so a product never mentions an attribute it lacks.
Option values are the words of real listings (sizes, colours, "pack of 6"): most passages of the search index share
them, which is where BM25 meets common terms.

Goal ``i`` is written from product ``i``: one to three of its attributes, one value of each of its options (human
style: sometimes fewer) and a price cap above its price (WebShop's rule, ``products.price_cap``), in WebShop's two
instruction styles (``"i need ..."`` as people wrote them; ``"i am looking for ... with color: navy, and size:
large"`` as the synthetic ones). Product ``i`` itself scores 1.0 on goal ``i``, so every goal is solvable.

Everything is a function of ``(size, seed)``: products from one ``random.Random`` seeded with ``seed``, goal ``i``
from its own generator seeded with ``(seed, i)`` (built on demand).

>>> cat = build_catalogue(50, seed=0)
>>> len(cat.products), cat.goal(3).asin == cat.products[3].asin
(50, True)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentgym.envs.shop.products import NO_CAP, Goal, Product, Review, price_cap, price_tag

Strings = tuple[str, ...]
#: How many variants a listing family has (drawn uniformly): same brand, type and title, their own attributes,
#: options and prices.
FAMILY_SIZES = (1, 2, 3, 4, 5, 6)
#: Catalogue sizes by name (products; one goal per product).
SIZES = {"tiny": 100, "1k": 1_000, "5k": 5_000, "100k": 100_000, "300k": 300_000}


@dataclass(frozen=True)
class ProductType:
    """What every product of one type shares (see the module docstring)."""

    category: str
    query: str
    breadcrumb: str
    name: str  # the type's words in titles and instructions ("running shoes")
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]
    audience: tuple[str, ...] = ()  # "for Women", ... appended to some titles


CLOTHING_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large")
SHOE_SIZES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12")
COLOURS = ("black", "white", "navy", "heather grey", "dark blue", "light blue", "olive green", "red", "burgundy",
           "khaki", "pink", "charcoal", "beige", "brown", "purple", "teal", "mustard yellow", "ivory")  # fmt: skip
PACKS = ("pack of 1", "pack of 2", "pack of 3", "pack of 4", "pack of 6", "pack of 12")
COUNTS = ("6 count", "12 count", "24 count", "30 count", "60 count")
OUNCES = ("1.7 fl oz", "3.4 fl oz", "8 fl oz", "16 fl oz", "32 fl oz")
FLAVOURS = ("chocolate", "vanilla", "strawberry", "peanut butter", "salted caramel", "original", "cinnamon",
            "lemon", "mixed berry", "coconut")  # fmt: skip
SCENTS = ("lavender", "unscented", "rose", "eucalyptus", "coconut", "vanilla", "citrus", "sandalwood")
WOODS = ("walnut", "oak", "white", "black", "espresso", "natural", "grey wash", "cherry")
BED_SIZES = ("twin", "full", "queen", "king")
LENGTHS = ("3 ft", "6 ft", "10 ft", "15 ft")

FASHION = ("machine wash", "hand wash", "slim fit", "relaxed fit", "long sleeve", "short sleeve", "button closure",
           "elastic waist", "cotton spandex", "polyester cotton", "moisture wicking", "classic fit", "drawstring "
           "closure", "rubber sole", "lace up", "arch support", "quick drying", "soft material")  # fmt: skip
BEAUTY = ("long lasting", "paraben free", "cruelty free", "natural ingredients", "sensitive skin", "dry skin",
          "travel size", "easy apply", "tea tree", "essential oils", "sulfate free", "alcohol free", "hyaluronic "
          "acid", "fine lines", "dead skin", "hair growth", "high quality", "vitamin c")  # fmt: skip
FOOD = ("gluten free", "sugar free", "non gmo", "low calorie", "keto friendly", "high protein", "plant based",
        "dairy free", "ready eat", "individually wrapped", "low carb", "fat free", "certified organic", "grain free",
        "artificial flavors", "natural flavors", "kosher certified", "great gift")  # fmt: skip
FURNITURE = (
    "easy assemble",
    "solid wood",
    "living room",
    "storage space",
    "space saving",
    "metal frame",
    "engineered wood",
    "easy clean",
    "assembly required",
    "heavy duty",
    "wood finish",
    "dining room",
    "memory foam",
    "lumbar support",
    "height adjustable",
    "non slip",
    "mid century",
    "bedroom furniture",
)
ELECTRONICS = ("fast charging", "high definition", "noise cancelling", "easy install", "long battery life",
               "usb port", "plug play", "high speed", "water resistant", "wireless bluetooth", "dual band",
               "aluminum alloy", "carrying case", "hands free", "4k ultra hd", "quad core", "stereo sound",
               "shock absorption")  # fmt: skip


def _t(category: str, query: str, crumb: str, name: str, pool: tuple[str, ...], options: dict[str, tuple[str, ...]],
       price: tuple[float, float], audience: tuple[str, ...] = ()) -> ProductType:  # fmt: skip
    return ProductType(category, query, crumb, name, pool, tuple(options.items()), price, audience)


TYPES: tuple[ProductType, ...] = (
    _t(
        "fashion",
        "men's t-shirts",
        "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts",
        "t-shirt",
        FASHION,
        {"color": COLOURS, "size": CLOTHING_SIZES},
        (9.0, 35.0),
        ("for Men",),
    ),
    _t(
        "fashion",
        "women's jeans",
        "Clothing, Shoes & Jewelry › Women › Clothing › Jeans",
        "jeans",
        FASHION,
        {"color": COLOURS, "size": ("24w x 30l", "26w x 30l", "28w x 32l", "30w x 32l", "32w x 32l", "34w x 34l")},
        (25.0, 80.0),
        ("for Women",),
    ),
    _t(
        "fashion",
        "men's running shoes",
        "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
        "running shoes",
        FASHION,
        {"color": COLOURS, "size": SHOE_SIZES},
        (35.0, 140.0),
        ("for Men",),
    ),
    _t(
        "fashion",
        "women's dresses",
        "Clothing, Shoes & Jewelry › Women › Clothing › Dresses",
        "maxi dress",
        FASHION,
        {"color": COLOURS, "size": CLOTHING_SIZES},
        (20.0, 70.0),
        ("for Women",),
    ),
    _t(
        "fashion",
        "hoodies",
        "Clothing, Shoes & Jewelry › Women › Clothing › Fashion Hoodies & Sweatshirts",
        "pullover hoodie",
        FASHION,
        {"color": COLOURS, "size": CLOTHING_SIZES},
        (18.0, 60.0),
        ("for Women", "for Men"),
    ),
    _t(
        "fashion",
        "women's sandals",
        "Clothing, Shoes & Jewelry › Women › Shoes › Sandals",
        "slide sandals",
        FASHION,
        {"color": COLOURS, "size": SHOE_SIZES},
        (15.0, 55.0),
        ("for Women",),
    ),
    _t(
        "beauty",
        "shampoo",
        "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
        "shampoo",
        BEAUTY,
        {"scent": SCENTS, "size": OUNCES},
        (6.0, 30.0),
    ),
    _t(
        "beauty",
        "face moisturizer",
        "Beauty & Personal Care › Skin Care › Face › Creams & Moisturizers",
        "face moisturizer cream",
        BEAUTY,
        {"size": OUNCES},
        (9.0, 45.0),
    ),
    _t(
        "beauty",
        "lipstick",
        "Beauty & Personal Care › Makeup › Lips › Lipstick",
        "matte lipstick",
        BEAUTY,
        {"color": ("red", "nude", "pink", "berry", "coral", "plum", "mauve", "wine"), "size": PACKS},
        (5.0, 25.0),
    ),
    _t(
        "beauty",
        "hair extensions",
        "Beauty & Personal Care › Hair Care › Hair Extensions, Wigs & Accessories",
        "clip in hair extensions",
        BEAUTY,
        {
            "color": ("black", "dark brown", "light brown", "blonde", "ash blonde", "burgundy"),
            "size": ("14 inch", "16 inch", "18 inch", "20 inch", "22 inch"),
        },
        (15.0, 90.0),
    ),
    _t(
        "beauty",
        "nail polish",
        "Beauty & Personal Care › Foot, Hand & Nail Care › Nail Polish",
        "gel nail polish",
        BEAUTY,
        {"color": COLOURS, "size": PACKS},
        (4.0, 22.0),
    ),
    _t(
        "beauty",
        "body wash",
        "Beauty & Personal Care › Personal Care › Bath & Bathing Accessories › Body Washes",
        "body wash",
        BEAUTY,
        {"scent": SCENTS, "size": OUNCES},
        (5.0, 28.0),
    ),
    _t(
        "food",
        "protein bars",
        "Grocery & Gourmet Food › Snacks & Sweets › Nutrition Bars › Protein Bars",
        "protein bars",
        FOOD,
        {"flavor name": FLAVOURS, "size": COUNTS},
        (12.0, 45.0),
    ),
    _t(
        "food",
        "coffee beans",
        "Grocery & Gourmet Food › Beverages › Coffee › Whole Coffee Beans",
        "whole bean coffee",
        FOOD,
        {
            "flavor name": ("original", "dark roast", "medium roast", "espresso roast", "french vanilla", "hazelnut"),
            "size": ("12 ounce", "2 pound", "5 pound"),
        },
        (9.0, 60.0),
    ),
    _t(
        "food",
        "green tea",
        "Grocery & Gourmet Food › Beverages › Tea › Green Tea",
        "green tea bags",
        FOOD,
        {"flavor name": ("original", "jasmine", "mint", "lemon", "honey ginseng"), "size": COUNTS},
        (4.0, 25.0),
    ),
    _t(
        "food",
        "almond butter",
        "Grocery & Gourmet Food › Pantry Staples › Nut Butters › Almond Butter",
        "almond butter",
        FOOD,
        {
            "flavor name": ("original", "salted", "honey", "cinnamon", "chocolate"),
            "size": ("12 ounce", "16 ounce", "pack of 2", "pack of 6"),
        },
        (7.0, 35.0),
    ),
    _t(
        "food",
        "beef jerky",
        "Grocery & Gourmet Food › Meat & Seafood › Jerky",
        "beef jerky",
        FOOD,
        {"flavor name": ("original", "teriyaki", "peppered", "sweet and spicy", "smoked"), "size": PACKS},
        (8.0, 40.0),
    ),
    _t(
        "food",
        "sparkling water",
        "Grocery & Gourmet Food › Beverages › Bottled Beverages › Sparkling Water",
        "sparkling water",
        FOOD,
        {
            "flavor name": ("lime", "grapefruit", "black cherry", "lemon", "original"),
            "size": ("8 count", "12 count", "24 count"),
        },
        (6.0, 30.0),
    ),
    _t(
        "furniture",
        "office chair",
        "Home & Kitchen › Furniture › Home Office Furniture › Home Office Chairs",
        "office chair",
        FURNITURE,
        {"color": ("black", "grey", "white", "blue", "pink")},
        (60.0, 320.0),
    ),
    _t(
        "furniture",
        "bookshelf",
        "Home & Kitchen › Furniture › Living Room Furniture › Bookcases",
        "bookshelf",
        FURNITURE,
        {"color": WOODS, "size": ("3 tier", "4 tier", "5 tier")},
        (35.0, 200.0),
    ),
    _t(
        "furniture",
        "coffee table",
        "Home & Kitchen › Furniture › Living Room Furniture › Tables › Coffee Tables",
        "coffee table",
        FURNITURE,
        {"color": WOODS},
        (50.0, 300.0),
    ),
    _t(
        "furniture",
        "bed frame",
        "Home & Kitchen › Furniture › Bedroom Furniture › Beds, Frames & Bases",
        "platform bed frame",
        FURNITURE,
        {"color": WOODS, "size": BED_SIZES},
        (90.0, 450.0),
    ),
    _t(
        "furniture",
        "bar stools",
        "Home & Kitchen › Furniture › Game & Recreation Room Furniture › Home Bar Furniture",
        "bar stools",
        FURNITURE,
        {"color": WOODS, "size": ("24 inch", "26 inch", "30 inch", "set of 2", "set of 4")},
        (45.0, 220.0),
    ),
    _t(
        "furniture",
        "nightstand",
        "Home & Kitchen › Furniture › Bedroom Furniture › Nightstands",
        "nightstand",
        FURNITURE,
        {"color": WOODS, "size": ("1 drawer", "2 drawer", "3 drawer")},
        (30.0, 160.0),
    ),
    _t(
        "electronics",
        "wireless earbuds",
        "Electronics › Headphones, Earbuds & Accessories › Earbud Headphones",
        "wireless earbuds",
        ELECTRONICS,
        {"color": ("black", "white", "navy", "rose gold", "silver")},
        (15.0, 150.0),
    ),
    _t(
        "electronics",
        "phone case",
        "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
        "phone case",
        ELECTRONICS,
        {"color": COLOURS, "style": ("iphone 13", "iphone 14", "iphone 15", "galaxy s23", "pixel 8")},
        (6.0, 30.0),
    ),
    _t(
        "electronics",
        "hdmi cable",
        "Electronics › Accessories & Supplies › Audio & Video Accessories › HDMI Cables",
        "hdmi cable",
        ELECTRONICS,
        {"size": LENGTHS, "style": PACKS},
        (5.0, 28.0),
    ),
    _t(
        "electronics",
        "power bank",
        "Cell Phones & Accessories › Chargers & Power Adapters › Portable Power Banks",
        "portable power bank",
        ELECTRONICS,
        {"color": ("black", "white", "blue", "pink"), "capacity": ("5000mah", "10000mah", "20000mah", "26800mah")},
        (12.0, 70.0),
    ),
    _t(
        "electronics",
        "bluetooth speaker",
        "Electronics › Portable Audio & Video › Portable Speakers & Docks",
        "bluetooth speaker",
        ELECTRONICS,
        {"color": ("black", "blue", "red", "grey", "green")},
        (18.0, 160.0),
    ),
    _t(
        "electronics",
        "security camera",
        "Electronics › Camera & Photo › Video Surveillance › Surveillance Cameras",
        "security camera",
        ELECTRONICS,
        {"style": ("1 camera", "2 cameras", "4 cameras"), "size": ("1080p", "2k", "4k")},
        (25.0, 200.0),
    ),
)

#: How people wrote attributes in WebShop's human instructions: the words often differ from the listing's, so a
#: search for the instruction's words does not find the product's attribute text. Used for about half of the
#: attributes of human-style goals (the goal still asks for the canonical attribute).
PARAPHRASES: dict[str, tuple[str, ...]] = {
    "machine wash": ("machine washable", "that i can wash in the machine"),
    "hand wash": ("hand washable",),
    "slim fit": ("fitted", "with a slim cut"),
    "relaxed fit": ("loose fitting", "with a relaxed cut"),
    "long sleeve": ("with long sleeves",),
    "short sleeve": ("with short sleeves",),
    "elastic waist": ("with a stretchy waistband",),
    "moisture wicking": ("that keeps sweat off",),
    "quick drying": ("that dries fast",),
    "arch support": ("that supports my arches",),
    "long lasting": ("that lasts all day", "that lasts long"),
    "paraben free": ("without parabens",),
    "cruelty free": ("not tested on animals",),
    "natural ingredients": ("made from natural stuff",),
    "sensitive skin": ("good for sensitive skin", "gentle on my skin"),
    "dry skin": ("for my dry skin",),
    "travel size": ("small enough for travel",),
    "sulfate free": ("with no sulfates",),
    "alcohol free": ("with no alcohol",),
    "gluten free": ("with no gluten", "without gluten"),
    "sugar free": ("with no sugar", "without sugar"),
    "non gmo": ("without gmos",),
    "low calorie": ("with few calories",),
    "keto friendly": ("ok for a keto diet",),
    "high protein": ("with lots of protein", "protein rich"),
    "plant based": ("vegan",),
    "dairy free": ("without dairy", "with no milk"),
    "low carb": ("with few carbs",),
    "fat free": ("with no fat",),
    "individually wrapped": ("wrapped one by one",),
    "easy assemble": ("easy to assemble", "easy to put together"),
    "space saving": ("that saves space",),
    "easy clean": ("easy to clean", "easy to wipe down"),
    "heavy duty": ("very sturdy",),
    "height adjustable": ("with adjustable height",),
    "easy install": ("easy to install", "easy to set up"),
    "fast charging": ("that charges quickly",),
    "noise cancelling": ("that blocks noise",),
    "long battery life": ("with a battery that lasts",),
    "water resistant": ("waterproof",),
    "high speed": ("fast",),
    "hands free": ("that i can use hands-free",),
}
#: Other names people gave each type (used in about half of the human-style goals).
TYPE_NAMES: dict[str, tuple[str, ...]] = {
    "t-shirt": ("tee", "shirt"), "jeans": ("denim pants",), "running shoes": ("sneakers", "trainers"),
    "maxi dress": ("long dress", "dress"), "pullover hoodie": ("hooded sweatshirt", "hoodie"),
    "slide sandals": ("sandals", "slides"), "face moisturizer cream": ("face cream", "moisturizer"),
    "matte lipstick": ("lipstick",), "clip in hair extensions": ("hair extensions",), "gel nail polish":
    ("nail polish",), "whole bean coffee": ("coffee beans", "coffee"), "green tea bags": ("green tea",),
    "beef jerky": ("jerky",), "sparkling water": ("seltzer", "fizzy water"), "office chair": ("desk chair",),
    "bookshelf": ("bookcase", "shelf for books"), "platform bed frame": ("bed frame", "bed"),
    "bar stools": ("counter stools",), "nightstand": ("bedside table",), "wireless earbuds": ("earbuds",
    "bluetooth earphones"), "phone case": ("cover for my phone",), "portable power bank": ("power bank",
    "portable charger"), "bluetooth speaker": ("portable speaker",), "security camera": ("surveillance camera",),
}  # fmt: skip

_SIZE_WORDS = {"x-small": "xs", "small": "s", "medium": "m", "large": "l", "x-large": "xl", "xx-large": "xxl",
               "3x-large": "3xl"}  # fmt: skip


def said_option(value: str) -> str:
    """An option value as a person might write it: ``x-large`` as ``xl``, ``pack of 6`` as ``6 pack``, ``16 fl oz``
    as ``16 ounce``; other values as they are."""
    if value in _SIZE_WORDS:
        return _SIZE_WORDS[value]
    if value.startswith("pack of "):
        return f"{value[8:]} pack"
    if value.endswith(" fl oz"):
        return f"{value[:-6]} ounce"
    if value.endswith(" count"):
        return f"{value[:-6]} pieces"
    return value


# made-up brand names: two or three syllables
_ONSETS = ("b", "br", "c", "d", "f", "g", "gl", "k", "l", "m", "n", "p", "pr", "r", "s", "st", "t", "tr", "v", "z")
_NUCLEI = ("a", "e", "i", "o", "u", "ai", "ea", "ou")
_CODAS = ("", "n", "r", "x", "l", "s", "m", "k")
DESCRIPTORS = (
    "premium",
    "classic",
    "soft",
    "lightweight",
    "durable",
    "portable",
    "modern",
    "vintage",
    "casual",
    "compact",
    "professional",
    "luxury",
    "sturdy",
    "stylish",
    "natural",
    "organic",
    "ergonomic",
    "slim",
)
_OPENERS = ("i need", "i want", "i am looking for", "i would like", "find me", "i'm searching for", "get me")
_REVIEW_TITLES = {
    5: ("Love it", "Exactly as described", "Great value"),
    4: ("Pretty good", "Works well"),
    3: ("It's okay", "Average"),
    2: ("Not great", "Disappointed"),
    1: ("Do not buy", "Broke fast"),
}


def _brand(rng: random.Random) -> str:
    n = 2 + (rng.random() < 0.3)
    word = "".join(rng.choice(_ONSETS) + rng.choice(_NUCLEI) for _ in range(n)) + rng.choice(_CODAS)
    return word.capitalize()


def _pick(rng: random.Random, pool: Sequence[str], lo: int, hi: int) -> list[str]:
    return rng.sample(list(pool), min(len(pool), rng.randint(lo, hi)))


def _asin(rng: random.Random, taken: set[str]) -> str:
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
    while True:
        asin = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _product(rng: random.Random, kind: ProductType, family: tuple[str, str, tuple[str, ...], str],
             asin: str) -> Product:  # fmt: skip
    brand, descriptor, base, audience = family
    own = [a for a in _pick(rng, kind.attributes, 1, 3) if a not in base]
    attributes = (*base, *own)
    options = []
    for name, values in kind.options:
        if rng.random() < 0.9:
            chosen = set(_pick(rng, values, 2, len(values)))
            options.append((name, tuple(v for v in values if v in chosen)))  # in the type's order
    shown = list(base[:1])  # the family's first attribute is in its titles
    title = " ".join([brand, descriptor.capitalize(), *(a.title() for a in shown), kind.name.title()]) + audience
    lo, hi = kind.price
    low = round(rng.uniform(lo, hi), 2)
    if rng.random() < 0.3:
        pricing: tuple[float, ...] = (low, round(low * rng.uniform(1.1, 1.6), 2))
        price = round(rng.uniform(*pricing), 2)
    else:
        pricing = (float(int(low)) + 0.99,)
        price = pricing[0]
    said = [a for a in attributes if a not in shown]
    description = (f"The {brand} {kind.name} is {descriptor} and made to last. "
                   + " ".join(f"It is {a}." for a in said[: len(said) // 2 + 1]))  # fmt: skip
    bullets = tuple(f"{a.capitalize()}: designed for everyday use." for a in said[len(said) // 2 + 1 :]) or (
        f"{descriptor.capitalize()} {kind.name} by {brand}.",
    )
    reviews = []
    for _ in range(rng.randint(0, 3)):
        score = rng.choice((5, 5, 4, 4, 3, 2, 1))
        reviews.append(Review(rng.choice(_REVIEW_TITLES[score]), score, f"The {kind.name} arrived on time."))
    rating = f"{sum(r.score for r in reviews) / len(reviews):.1f}" if reviews else "N.A."
    return Product(asin, title, kind.category, kind.query, kind.breadcrumb, price, price_tag(pricing), attributes,
                   tuple(options), description, bullets, tuple(reviews), rating)  # fmt: skip


def _article(name: str) -> str:
    """``name`` with its article: none for plurals ("running shoes"), "an" before a vowel."""
    if name.endswith("s") and not name.endswith("ss"):
        return name
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _instruction(rng: random.Random, product: Product, kind: ProductType) -> tuple[str, Strings, Strings]:
    attributes = tuple(rng.sample(product.attributes, rng.randint(1, min(3, len(product.attributes)))))
    picks = [(name, rng.choice(values)) for name, values in product.options]
    if rng.random() < 0.5:  # synthetic style: every option, named
        options = tuple(v for _, v in picks)
        opts = ", and ".join(f"{name}: {v}" for name, v in picks)
        text = f"i am looking for {' and '.join(attributes)} {kind.name}" + (f" with {opts}" if opts else "")
    else:  # human style: a free sentence; some options left out
        kept = [p for p in picks if rng.random() < 0.85]
        options = tuple(v for _, v in kept)
        said = {"color": "in {} color", "size": "in size {}", "flavor name": "in {} flavor", "scent": "with a {} "
                "scent", "style": "in the {} style", "capacity": "with {} capacity"}  # fmt: skip
        parts = [said[n].format(said_option(v) if rng.random() < 0.4 else v) for n, v in kept]
        who = f" {kind.audience[0]}" if kind.audience and rng.random() < 0.5 else ""
        name = rng.choice(TYPE_NAMES[kind.name]) if kind.name in TYPE_NAMES and rng.random() < 0.5 else kind.name
        said_as = [rng.choice(PARAPHRASES[a]) if a in PARAPHRASES and rng.random() < 0.5 else a for a in attributes]
        body = f"{rng.choice(_OPENERS)} {_article(name)}{who.lower()}, {' and '.join(said_as)}"
        text = body + (", " + ", ".join(parts) if parts else "")
    return text, attributes, options


@dataclass
class Catalogue:
    """Products (a list, their order is the task order) and the goals written from them (built on demand)."""

    products: list[Product]
    seed: int
    by_asin: dict[str, Product] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_asin = {p.asin: p for p in self.products}

    @property
    def num_goals(self) -> int:
        return len(self.products)

    def goal(self, index: int) -> Goal:
        """Goal ``index``, written from product ``index`` (see the module docstring)."""
        product = self.products[index]
        rng = random.Random(f"shop-goal:{self.seed}:{index}")
        kind = _KIND[(product.category, product.query)]
        text, attributes, options = _instruction(rng, product, kind)
        cap = price_cap(product.price, rng)
        if cap != NO_CAP:
            text += f", and price lower than {cap:.2f} dollars"
        return Goal(product.asin, text, attributes, options, cap, product.title, product.query, product.category,
                    product.product_category)  # fmt: skip


_KIND = {(t.category, t.query): t for t in TYPES}


def build_catalogue(n_products: int, seed: int = 0) -> Catalogue:
    """``n_products`` products in families (see the module docstring); brands are shared by about 20 products
    each, so titles repeat words across products as real listings do."""
    rng = random.Random(f"shop-catalogue:{seed}")
    brands = sorted({_brand(rng) for _ in range(max(8, n_products // 20))})
    taken: set[str] = set()
    products: list[Product] = []
    while len(products) < n_products:
        kind = rng.choice(TYPES)
        base = tuple(_pick(rng, kind.attributes, 1, 3)) if rng.random() < 0.6 else ()
        audience = f" {rng.choice(kind.audience)}" if kind.audience and rng.random() < 0.7 else ""
        family = (rng.choice(brands), rng.choice(DESCRIPTORS), base, audience)
        for _ in range(min(rng.choice(FAMILY_SIZES), n_products - len(products))):
            products.append(_product(rng, kind, family, _asin(rng, taken)))
    return Catalogue(products, seed)
