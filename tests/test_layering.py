"""The package layers hold: core never imports envs or baselines, envs never import baselines, tools never import
envs or baselines (docs/architecture.md, 'Layers').

Every ``.py`` file under agentgym/ (core, agentgym/rewards included), envs/, tools/ and baselines/ is parsed with
``ast`` and every import is checked, wherever it sits: module level, inside functions, ``if TYPE_CHECKING:``
blocks, try/except. Relative imports are resolved against the file's installed package name (envs/ installs as
``agentgym.envs`` and so on). bench/ and tests/ are not layered.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Source folder -> (its installed package, its layer).
FOLDERS: dict[str, tuple[str, str]] = {
    "agentgym": ("agentgym", "core"),
    "envs": ("agentgym.envs", "envs"),
    "tools": ("agentgym.tools", "tools"),
    "baselines": ("agentgym.baselines", "baselines"),
}

#: (importing layer, imported layer) -> the rule it breaks. agentgym.rewards is core, so "rewards never import envs"
#: is the first rule.
FORBIDDEN: dict[tuple[str, str], str] = {
    ("core", "envs"): "core never imports envs",
    ("core", "baselines"): "core never imports baselines",
    ("envs", "baselines"): "envs never import baselines",
    ("tools", "envs"): "tools never import envs",
    ("tools", "baselines"): "tools never import baselines",
}


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name; None outside agentgym (the standard library, third-party packages)."""
    parts = module.split(".")
    if parts[0] != "agentgym":
        return None
    if len(parts) > 1 and parts[1] in ("envs", "tools", "baselines"):
        return parts[1]
    return "core"


def module_name(path: Path, root: Path) -> tuple[str, bool]:
    """The installed dotted name of a source file under ``root``, and whether it is a package ``__init__``."""
    folder, *rest = path.relative_to(root).with_suffix("").parts
    is_package = rest[-1:] == ["__init__"]
    parts = rest[:-1] if is_package else rest
    return ".".join((FOLDERS[folder][0], *parts)), is_package


def imported_modules(tree: ast.AST, name: str, is_package: bool) -> list[tuple[int, str]]:
    """``(line, module)`` of every import anywhere in ``tree``; relative imports resolved against ``name``.

    ``from pkg import sub`` yields ``pkg.sub`` when that changes the layer (``from agentgym import envs`` is an
    import of the envs layer), else ``pkg``.
    """
    package = name if is_package else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: max(len(anchor) - (node.level - 1), 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}" if base else alias.name
                target = full if alias.name != "*" and layer_of(full) != layer_of(base) else base
                found.append((node.lineno, target))
    return sorted(set(found))


def layering_violations(root: Path) -> list[str]:
    """Every forbidden import under ``root`` (a tree laid out like the repo), as ``file:line: layer imports module
    (rule)``, sorted by file and line."""
    out: list[str] = []
    for folder, (_, layer) in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            name, is_package = module_name(path, root)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for line, module in imported_modules(tree, name, is_package):
                rule = FORBIDDEN.get((layer, layer_of(module) or ""))
                if rule is not None:
                    out.append(f"{path.relative_to(root).as_posix()}:{line}: {layer} imports {module} ({rule})")
    return out


def test_the_layers_hold():
    violations = layering_violations(ROOT)
    assert not violations, "forbidden imports:\n" + "\n".join(violations)


def test_layering_violations_reports_every_rule(tmp_path):
    files = {
        # forbidden, one per rule, in every position an import can take
        "agentgym/core.py": "import agentgym.envs.search_qa\n",
        "agentgym/rewards/information.py": "from agentgym.envs.search_qa.scoring import f1_score\n",
        "agentgym/cli.py": "def main():\n    from agentgym.baselines.trainer import main\n",
        "agentgym/agents/x.py": "import typing\nif typing.TYPE_CHECKING:\n    from ..envs.household import world\n",
        "envs/search_qa/env.py": "try:\n    from agentgym.baselines import rollout\nexcept ImportError:\n    pass\n",
        "envs/household/__init__.py": "from ...baselines import trainer\n",
        "tools/llm.py": "from agentgym import envs\n",
        "tools/retrieval/__init__.py": "class A:\n    def f(self):\n        import agentgym.baselines.rollout as r\n",
        # allowed
        "agentgym/runner.py": "import json\nfrom agentgym.tools.llm import LLMClient\nfrom . import core\n",
        "agentgym/rewards/base.py": "from agentgym.trajectory import Trajectory\nfrom ..agents import base\n",
        "envs/search_qa/agents.py": "from agentgym.tools.retrieval import bm25\nfrom agentgym.core import AgentEnv\n",
        "envs/household/world.py": "from . import catalog\nfrom .. import search_qa\nfrom agentgym import core\n",
        "tools/openai_server.py": "from agentgym.agents.base import Message\nfrom .retrieval import bm25\n",
        "baselines/trainer.py": "import agentgym.envs\nfrom agentgym.tools import llm\nfrom . import rollout\n",
    }
    for rel, source in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(source, encoding="utf-8")
    assert layering_violations(tmp_path) == [
        "agentgym/agents/x.py:3: core imports agentgym.envs.household (core never imports envs)",
        "agentgym/cli.py:2: core imports agentgym.baselines.trainer (core never imports baselines)",
        "agentgym/core.py:1: core imports agentgym.envs.search_qa (core never imports envs)",
        "agentgym/rewards/information.py:1: core imports agentgym.envs.search_qa.scoring (core never imports envs)",
        "envs/household/__init__.py:1: envs imports agentgym.baselines (envs never import baselines)",
        "envs/search_qa/env.py:2: envs imports agentgym.baselines (envs never import baselines)",
        "tools/llm.py:1: tools imports agentgym.envs (tools never import envs)",
        "tools/retrieval/__init__.py:3: tools imports agentgym.baselines.rollout (tools never import baselines)",
    ]


def test_layer_of():
    assert layer_of("agentgym") == layer_of("agentgym.rewards.information") == "core"
    assert layer_of("agentgym.envs") == layer_of("agentgym.envs.search_qa.env") == "envs"
    assert layer_of("agentgym.tools.local_lm") == "tools" and layer_of("agentgym.baselines") == "baselines"
    assert layer_of("json") is layer_of("agentgym_extra") is None
