"""The house holds, drawn from the imports themselves.

Layers (docs/architecture.md): core never imports envs, baselines or the trainer adapters; envs never import
baselines; tools never import envs or baselines; only the adapters (``agentgym.integrations``) sit above the trainer.
Rooms: each subpackage of the core says in its docstring what it holds and, on a ``May import:`` line, which other
rooms it may import; the test reads that line, so the docstring is the rule. No import circle anywhere: neither
between modules (lazy and ``TYPE_CHECKING`` imports included) nor between rooms.

Every ``.py`` file under agentgym/ (core, agentgym/rewards included), envs/, tools/ and baselines/ is parsed with
``ast`` and every import is checked, wherever it sits: module level, inside functions, ``if TYPE_CHECKING:``
blocks, try/except. Relative imports are resolved against the file's installed package name (envs/ installs as
``agentgym.envs`` and so on). bench/ and tests/ are not layered.
"""

from __future__ import annotations

import ast
import re
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
    ("core", "integrations"): "core never imports the trainer adapters",
    ("envs", "baselines"): "envs never import baselines",
    ("envs", "integrations"): "envs never import the trainer adapters",
    ("tools", "envs"): "tools never import envs",
    ("tools", "baselines"): "tools never import baselines",
    ("tools", "integrations"): "tools never import the trainer adapters",
    ("baselines", "integrations"): "baselines never import the trainer adapters",
}


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name; None outside agentgym (the standard library, third-party packages)."""
    parts = module.split(".")
    if parts[0] != "agentgym":
        return None
    if len(parts) > 1 and parts[1] in ("envs", "tools", "baselines", "integrations"):
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
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            name, is_package = module_name(path, root)
            layer = layer_of(name)
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
    assert layer_of("agentgym.integrations.trl") == "integrations"
    assert layer_of("json") is layer_of("agentgym_extra") is None


# -- rooms and circles -------------------------------------------------------------------------------------------

#: Where the core's rooms live; the package root (agentgym/__init__.py, cli.py, _moved.py) is the front door above them.
CORE = ROOT / "agentgym"


def modules(root: Path = ROOT) -> dict[str, list[str]]:
    """Every agentgym module under ``root`` -> the agentgym modules it imports (anywhere in the file), each resolved
    to the module that defines it (``from agentgym.contract.env import AgentEnv`` is ``agentgym.contract.env``)."""
    sources = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            sources[module_name(path, root)] = path
    names = {name for name, _ in sources}

    def defining(module: str) -> str:
        while module and module not in names:
            module = module.rpartition(".")[0]
        return module

    graph: dict[str, list[str]] = {}
    for (name, is_package), path in sources.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found = {defining(m) for m in imported_names(tree, name, is_package, names) if layer_of(m)}
        graph[name] = sorted(found - {"", name})
    return graph


def imported_names(tree: ast.AST, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """The module each import anywhere in ``tree`` names: ``from pkg import sub`` is ``pkg.sub`` when that is a
    module (an import of the submodule, not of the package's ``__init__``), else ``pkg``."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: max(len(package.split(".")) - (node.level - 1), 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else base)
    return found


def room_of(module: str) -> str:
    """The room a module lives in: a subpackage of the core (``agentgym.running``), a top-level module of the core
    (``agentgym.cli``), or one package or module of envs, tools or baselines (``agentgym.tools.sandbox``)."""
    parts = module.split(".")
    depth = 3 if layer_of(module) in ("envs", "tools", "baselines") else 2
    return ".".join(parts[:depth])


def circles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted: every import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def room_graph(graph: dict[str, list[str]]) -> dict[str, list[str]]:
    rooms: dict[str, set[str]] = {}
    for module, imported in graph.items():
        rooms.setdefault(room_of(module), set()).update(room_of(m) for m in imported)
    return {room: sorted(targets - {room}) for room, targets in rooms.items()}


def may_import(room: Path) -> list[str]:
    """The rooms a core room's docstring allows it to import: the names on its ``May import:`` line (which may wrap;
    remarks in parentheses are skipped)."""
    doc = ast.get_docstring(ast.parse((room / "__init__.py").read_text(encoding="utf-8"))) or ""
    _, found, rest = doc.partition("May import:")
    assert found, f"{room.name}/__init__.py's docstring has no 'May import:' line"
    listed = re.sub(r"\([^)]*\)", "", rest.split("\n\n")[0])
    return [name.strip(" .") for name in listed.replace("\n", " ").split(",") if name.strip(" .")]


def allows(allowed: list[str], module: str) -> bool:
    """Whether ``module`` is one of the ``allowed`` rooms or inside one (``agentgym`` alone is the package root)."""
    return any(module == a or (a != "agentgym" and module.startswith(a + ".")) for a in allowed)


def test_no_import_circle_between_modules():
    found = circles(modules())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_import_circle_between_rooms():
    found = circles(room_graph(modules()))
    assert not found, "rooms importing each other:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_each_room_imports_only_what_its_docstring_allows():
    graph = modules()
    rooms = sorted(p.parent for p in CORE.glob("*/__init__.py"))
    assert {r.name for r in rooms} >= {"contract", "grading", "agents", "rewards", "running", "serving", "integrations"}
    broken = []
    for room in rooms:
        allowed = may_import(room)
        prefix = f"agentgym.{room.name}"
        for module, imported in graph.items():
            if room_of(module) != prefix:
                continue
            for target in imported:
                if room_of(target) == prefix or allows(allowed, target):
                    continue
                broken.append(f"{module} imports {target}; {room.name}/__init__.py allows {allowed}")
    assert not broken, "\n".join(broken)


def test_every_trainer_adapter_lives_in_one_room():
    adapters = {p.stem for p in (CORE / "integrations").glob("*.py")} - {"__init__", "tasks"}
    assert adapters == {"trl", "verl", "skyrl", "openrlhf"}
    stray = [p for p in ROOT.glob("baselines/**/*.py") if p.stem in adapters]
    assert not stray


def test_circles_finds_every_circle():
    graph = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["d", "a"], "e": ["f"], "f": ["e"], "g": []}
    assert circles(graph) == [["a", "b", "c"], ["e", "f"]]
    assert room_of("agentgym.running.pool") == "agentgym.running" and room_of("agentgym.cli") == "agentgym.cli"
    assert room_of("agentgym.tools.sandbox.local") == "agentgym.tools.sandbox"


def test_old_import_paths_are_the_new_modules_with_a_warning():
    """Every path that moved in 0.2 still imports, as the same module object, and says where it went."""
    import importlib
    import sys
    import warnings

    from agentgym._moved import MOVED

    for old, new in MOVED.items():
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        assert any(w.category is DeprecationWarning and new in str(w.message) for w in caught), old
        sys.modules.pop(old, None)


def floors(rooms: dict[str, list[str]]) -> list[list[str]]:
    """The rooms by floor: floor 0 imports no other room, floor n imports only rooms below it (at least one on
    floor n - 1). Defined because rooms form no circle."""
    level: dict[str, int] = {}

    def floor(room: str) -> int:
        if room not in level:
            level[room] = 1 + max((floor(r) for r in rooms.get(room, ()) if r in rooms), default=-1)
        return level[room]

    for room in rooms:
        floor(room)
    return [sorted(r for r in rooms if level[r] == n) for n in range(max(level.values(), default=-1) + 1)]


def test_floors():
    assert floors({"a": [], "b": ["a"], "c": ["a", "b"], "d": []}) == [["a", "d"], ["b"], ["c"]]
    drawn = floors(room_graph(modules()))
    floor_of = {room: n for n, rooms in enumerate(drawn) for room in rooms}
    assert floor_of["agentgym.contract"] < min(floor_of["agentgym.running"], floor_of["agentgym.serving"])
    core = [room for room in floor_of if layer_of(room) == "core"]
    assert floor_of["agentgym.integrations"] > max(floor_of[r] for r in [*core, "agentgym.baselines.rollout"])


if __name__ == "__main__":
    # python tests/test_layering.py: the house, floor by floor, drawn from the imports
    for n, rooms in enumerate(floors(room_graph(modules()))):
        core = [r.removeprefix("agentgym.") for r in rooms if layer_of(r) in ("core", "integrations")]
        if core:
            print(f"floor {n}: {', '.join(core)}")
