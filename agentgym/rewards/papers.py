"""The bibliography of the method catalogue: the paper each method follows, by the system's name.

>>> cite("GRPO").year
2024
>>> cite("no such system") is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from agentgym.rewards.catalogue import Paper

#: System name -> the paper that introduced it.
BIBLIOGRAPHY: Mapping[str, Paper] = MappingProxyType({
    "GRPO": Paper("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models", 2024,
                  "2402.03300"),
})  # fmt: skip


def cite(system: str) -> Paper | None:
    """The paper of ``system`` (None where the bibliography has none)."""
    return BIBLIOGRAPHY.get(system)
