"""Packaging: every package folder is installed under agentgym.*, and nothing generic at top level."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPING = {
    "agentgym": "agentgym",
    "envs": "agentgym.envs",
    "tools": "agentgym.tools",
    "baselines": "agentgym.baselines",
}


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for folder, name in MAPPING.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    assert found == listed


def test_packages_import_under_agentgym_only(tmp_path):
    """From a neutral directory (as a user would), agentgym.* imports and envs/tools/baselines do not."""
    import subprocess
    import sys

    code = (
        "import importlib.util as u, agentgym.envs.search_qa, agentgym.tools.retrieval, agentgym.baselines;"
        "print([n for n in ('envs', 'tools', 'baselines') if u.find_spec(n)])"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
