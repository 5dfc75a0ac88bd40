"""Shop-v0's data: products and goals, as WebShop keeps them (one class each, immutable).

A ``Product`` holds the fields WebShop's pages and reward read: the ASIN, the title, the scraping ``query`` and
``category``, the breadcrumb ``product_category`` (levels joined by ``" › "``), the price (WebShop draws one price
per product from its listed range and scores against it), the shown price tag, the attributes, the option grid
(name -> values, lower case), description, bullet points ("Features") and reviews. A ``Goal`` is one instruction:
the product it was written from, its text, the attributes and option values it asks for and the price cap.

>>> p = Product("B0TEST0001", "Acme Cotton T-Shirt", "fashion", "men's shirts", "Clothing › Men › Shirts", 12.5,
...             "$12.5", ("machine wash",), (("size", ("small", "large")),), "A shirt.", ("Soft cotton.",), ())
>>> p.search_text()
'acme cotton t-shirt a shirt. soft cotton. size: small, large'
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Review:
    """One review: its title, a score of 1-5 and its text."""

    title: str
    score: int
    body: str


@dataclass(frozen=True)
class Product:
    """One product (see the module docstring)."""

    asin: str
    title: str
    category: str
    query: str
    product_category: str
    price: float
    price_tag: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    description: str
    bullet_points: tuple[str, ...]
    reviews: tuple[Review, ...]
    rating: str = "N.A."

    def search_text(self) -> str:
        """The text WebShop indexes for search: title, description, the first bullet point and the options (``name:
        v1, v2, and name2: ...``), lower-cased."""
        options = ", and ".join(f"{name}: {', '.join(values)}" for name, values in self.options)
        first = self.bullet_points[0] if self.bullet_points else ""
        return " ".join([self.title, self.description, first, options]).lower()

    def option_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.options)


@dataclass(frozen=True)
class Goal:
    """One instruction (see the module docstring). ``options`` are option values (WebShop's ``goal_options``);
    ``price_upper`` is 1,000,000 where the instruction states no cap (WebShop's value)."""

    asin: str
    instruction: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    price_upper: float
    # the target's type fields, which the type reward compares with the bought product's
    name: str
    query: str
    category: str
    product_category: str

    def to_json(self) -> dict[str, object]:
        """The goal as JSON data (``info["gold"]["goal"]``)."""
        return {"asin": self.asin, "instruction": self.instruction, "attributes": list(self.attributes),
                "options": list(self.options), "price_upper": self.price_upper, "name": self.name,
                "query": self.query, "category": self.category, "product_category": self.product_category}  # fmt: skip


def price_tag(pricing: tuple[float, ...]) -> str:
    """WebShop's price tag: ``$x`` for one price, ``$x to $y`` for a range (Python's float text, as WebShop).

    >>> price_tag((19.99,)), price_tag((10.0, 24.5))
    ('$19.99', '$10.0 to $24.5')
    """
    return f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"


#: WebShop's price caps are multiples of ten: an instruction caps at a value above the price.
PRICE_STEPS = tuple(10.0 * i for i in range(1, 100))
NO_CAP = 1_000_000.0


def price_cap(price: float, rng: random.Random) -> float:
    """WebShop's cap for a product of ``price``: of the (up to four) multiples of ten above it, the larger of two
    distinct ones drawn by ``rng``; ``NO_CAP`` when fewer than two exist.

    >>> price_cap(23.0, random.Random(0)) in (40.0, 50.0, 60.0), price_cap(985.0, random.Random(0))
    (True, 1000000.0)
    """
    above = [p for p in PRICE_STEPS if p > price][:4]
    if len(above) < 2:
        return NO_CAP
    i, j = rng.sample(range(len(above)), 2)
    return max(above[i], above[j])
