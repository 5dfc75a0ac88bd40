"""Import paths of agentgym 0.1 that moved when the core was grouped into rooms (0.2); they keep working, with a
``DeprecationWarning``, until 0.3.

``import agentgym.runner`` (or ``from agentgym.core import AgentEnv``) gives the module at its new home, the same
module object, so patches, ``isinstance`` checks and pickles that name the old path all still work.

>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     from agentgym.core import AgentEnv
>>> AgentEnv.__module__, caught[0].category.__name__
('agentgym.contract.env', 'DeprecationWarning')
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: Old module -> its home since 0.2.
MOVED: dict[str, str] = {
    "agentgym.core": "agentgym.contract.env",
    "agentgym.spaces": "agentgym.contract.spaces",
    "agentgym.parsing": "agentgym.contract.parsing",
    "agentgym.registry": "agentgym.contract.registry",
    "agentgym.branching": "agentgym.contract.branching",
    "agentgym.trajectory": "agentgym.contract.trajectory",
    "agentgym.trust": "agentgym.contract.trust",
    "agentgym.agents.base": "agentgym.contract.agent",
    "agentgym.answers": "agentgym.grading.answers",
    "agentgym.facts": "agentgym.grading.facts",
    "agentgym.stats": "agentgym.running.stats",
    "agentgym.runner": "agentgym.running.runner",
    "agentgym.pool": "agentgym.running.pool",
    "agentgym.bench": "agentgym.running.bench",
    "agentgym.checker": "agentgym.running.checker",
    "agentgym.replay": "agentgym.running.replay",
    "agentgym.reward_bench": "agentgym.running.reward_bench",
    "agentgym.server": "agentgym.serving.server",
    "agentgym.remote": "agentgym.serving.remote",
    "agentgym.openenv_compat": "agentgym.serving.openenv",
    "agentgym.baselines.integrations.trl": "agentgym.integrations.trl",
    "agentgym.baselines.integrations": "agentgym.integrations",
}


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new home (one module object under two names)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.new}; the old path goes away in agentgym 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        pass  # already executed under its new name


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds the names in :data:`MOVED` and nothing else."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        return None if new is None else importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once (``import agentgym`` calls this)."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
