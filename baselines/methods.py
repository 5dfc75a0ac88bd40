"""The whole method catalogue: the reward modules' cards (``agentgym.rewards.catalogue``), the trainer's own (its
branch, loss and schedule modes, in ``TRAINER_MODULES``) and the planned ones; ``agentgym methods`` lists it.

>>> get_method("grpo").kind
'estimator'
"""

from __future__ import annotations

import difflib
import importlib

from agentgym.rewards.catalogue import Method, collect, merge, reward_methods

#: The trainer modules that hold cards (imported only when the catalogue is read).
TRAINER_MODULES: tuple[str, ...] = ()


def catalogue() -> tuple[Method, ...]:
    """Every card: the reward modules', the trainer's, then the planned systems no built card replaces."""
    from agentgym.rewards.planned import PLANNED

    built = reward_methods() + collect(importlib.import_module(name) for name in TRAINER_MODULES)
    return merge(built, PLANNED)


def get_method(name: str) -> Method:
    """The card named ``name``; ``KeyError`` says which names are close."""
    cards = {card.name: card for card in catalogue()}
    if name in cards:
        return cards[name]
    close = difflib.get_close_matches(name, list(cards), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else " (agentgym methods lists them)"
    raise KeyError(f"unknown method {name!r}{hint}")
