"""The knobs of SearchQA's synthetic dataset (``DatasetConfig``), its named sizes and its hop types.

Its own module so that the knowledge base (``kb``), the questions and the dataset builder (``data``) all read it
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HOP_TYPES: tuple[str, ...] = ("1hop", "bridge", "comparison", "multihop")

_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(n_people=100, n_cities=30, n_companies=25, n_films=30, n_rivers=10, n_countries=6,
                 event_docs=20, n_train=60, n_test=40),
    "small": dict(n_people=1500, n_cities=250, n_companies=300, n_films=450, n_rivers=60, n_countries=25,
                  event_docs=300, n_train=2000, n_test=2000),
    "100k": dict(n_people=32000, n_cities=6000, n_companies=7000, n_films=9000, n_rivers=1500, n_countries=250,
                 distractors_per_entity=0.8, event_docs=3000, n_train=20000, n_test=2000),
}  # fmt: skip


@dataclass(frozen=True)
class DatasetConfig:
    """Knobs of the synthetic dataset. ``preset("tiny" | "small" | "100k")`` gives the named sizes.

    Entity counts: ``n_people`` .. ``n_countries``. ``distractors_per_entity`` (0-2): mean number of distractor
    passages per entity; ``event_docs``: event reports naming random entities; ``surname_ratio``: distinct
    surnames per person (lower = more people sharing a surname); ``employed_fraction``: people with an employer;
    ``directors_per_film``: distinct directors per film. Questions: ``n_train``/``n_test`` per split,
    ``hop_mix`` the weight of each hop type, ``four_hop_fraction`` the share of 4-hop among multihop questions,
    ``test_anchor_fraction`` the share of each kind's entities reserved as test anchors.
    """

    name: str = "custom"
    n_people: int = 1500
    n_cities: int = 250
    n_companies: int = 300
    n_films: int = 450
    n_rivers: int = 60
    n_countries: int = 25
    distractors_per_entity: float = 1.0
    event_docs: int = 300
    surname_ratio: float = 0.7
    employed_fraction: float = 0.5
    directors_per_film: float = 0.5
    n_train: int = 2000
    n_test: int = 500
    hop_mix: tuple[tuple[str, float], ...] = (
        ("1hop", 0.25),
        ("bridge", 0.25),
        ("comparison", 0.25),
        ("multihop", 0.25),
    )
    four_hop_fraction: float = 0.5
    test_anchor_fraction: float = 0.5

    def __post_init__(self) -> None:
        object.__setattr__(self, "hop_mix", tuple((str(t), float(w)) for t, w in self.hop_mix))  # lists from JSON
        counts = {
            f: getattr(self, f) for f in ("n_people", "n_cities", "n_companies", "n_films", "n_rivers", "n_countries")
        }
        for f, v in counts.items():
            if not isinstance(v, int) or v < 2:
                raise ValueError(f"{f} must be an int >= 2, got {v!r}")
        if self.n_cities < max(3, self.n_countries):
            raise ValueError("n_cities must be >= max(3, n_countries) (every country has a city)")
        if self.n_people < self.n_companies:
            raise ValueError("n_people must be >= n_companies (every company has its own founder)")
        if not 0 <= self.distractors_per_entity <= 2:
            raise ValueError(f"distractors_per_entity must be in [0, 2], got {self.distractors_per_entity}")
        for f in ("surname_ratio", "employed_fraction", "directors_per_film", "four_hop_fraction"):
            if not 0 <= getattr(self, f) <= 1:
                raise ValueError(f"{f} must be in [0, 1], got {getattr(self, f)}")
        if self.surname_ratio <= 0 or self.directors_per_film <= 0:
            raise ValueError("surname_ratio and directors_per_film must be > 0")
        if not 0 < self.test_anchor_fraction < 1:
            raise ValueError(f"test_anchor_fraction must be in (0, 1), got {self.test_anchor_fraction}")
        if self.event_docs < 0 or self.n_train < 0 or self.n_test < 0:
            raise ValueError("event_docs, n_train and n_test must be >= 0")
        mix = dict(self.hop_mix)
        if len(mix) != len(self.hop_mix) or not set(mix) <= set(HOP_TYPES):
            raise ValueError(f"hop_mix must name distinct hop types among {HOP_TYPES}, got {self.hop_mix}")
        if any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
            raise ValueError(f"hop_mix weights must be >= 0 with a positive sum, got {self.hop_mix}")

    @classmethod
    def preset(cls, name: str) -> DatasetConfig:
        """``"tiny"`` (tests), ``"small"`` (default, ~6k docs), ``"100k"`` (>= 100,000 docs, benchmarks)."""
        if name not in _PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(_PRESETS)}")
        return cls(name=name, **_PRESETS[name])

    def hop_counts(self, n: int) -> dict[str, int]:
        """Questions of each hop type among ``n`` (largest-remainder rounding of ``hop_mix``)."""
        mix = dict(self.hop_mix)
        total = sum(mix.values())
        exact = {t: n * w / total for t, w in mix.items()}
        counts = {t: int(v) for t, v in exact.items()}
        by_remainder = sorted(mix, key=lambda t: (-(exact[t] - counts[t]), HOP_TYPES.index(t)))
        for t in by_remainder[: n - sum(counts.values())]:
            counts[t] += 1
        return counts
