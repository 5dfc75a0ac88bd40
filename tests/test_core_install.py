"""The light core install: ``pip install agentgym-suite`` (no extras) lists, runs and checks the text envs with the
built-in and API-model agents, and never imports an optional dependency (torch, transformers, fastapi, ray...) to do
so; a command that needs one says which extra installs it, in one line. The distribution is ``agentgym-suite`` (the
name ``agentgym`` on PyPI is another project's) and every extra that names the project itself says so."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from agentgym import cli

ROOT = Path(__file__).resolve().parents[1]
#: What a core install must not import: the optional dependencies' top-level modules.
HEAVY = sorted(cli.OPTIONAL_MODULES)
TIMEOUT = 600  # a hang guard only


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)


#: The adapters' own packages: building TextWorld-v0, ALFWorld-v0 or BFCL-v0 imports them where they are installed.
ADAPTER_MODULES = {"textworld", "alfworld", "mpmath"}


@pytest.mark.slow
def test_the_cli_and_the_text_envs_import_no_optional_dependency(tmp_path):
    code = f"""
import json, sys
import gymnasium as gym
import agentgym
from agentgym.cli import main
from agentgym.contract.registry import list_envs
heavy = lambda: sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
assert main(["list"]) == 0
assert main(["run", "agentgym/SearchQA-v0", "--agent", "oracle", "--episodes", "2", "--quiet", "--out", "r"]) == 0
assert main(["run", "agentgym/Chain-v0", "--agent", "openai", "--agent-arg", "base_url=http://127.0.0.1:9/v1"]) == 2
assert main(["check", "agentgym/Chain-v0"]) == 0
after_cli = heavy()
for env_id in list_envs():  # build, reset and step every env
    env = gym.make(env_id)
    if getattr(env.unwrapped, "unavailable_reason", None) is None:
        env.reset(seed=0)
        env.step("<answer>x</answer>")
    env.close()
print(json.dumps([after_cli, heavy()]))
"""
    res = run_python(code, tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    after_cli, after_envs = json.loads(res.stdout.splitlines()[-1])
    assert after_cli == []  # list, run (an offline agent and the OpenAI-compatible one) and check
    assert set(after_envs) <= ADAPTER_MODULES  # every env, stepped: torch, transformers, fastapi... never


@pytest.mark.parametrize(
    ("argv", "module", "extra"),
    [
        (["serve", "agentgym/Chain-v0", "--port", "0"], "fastapi", "server"),
        (["run", "agentgym/Chain-v0", "--agent", "hf", "--agent-arg", "model_path=."], "transformers", "hf"),
        (["train", "--preset", "tiny"], "torch", "train"),
    ],
)
def test_a_command_that_needs_an_extra_says_which_in_one_line(argv, module, extra, tmp_path):
    """As in a core install: the module is absent (``sys.modules[name] = None`` makes its import fail as Python does
    for a missing package)."""
    code = f"import sys; sys.modules[{module!r}] = None\nfrom agentgym.cli import main\nsys.exit(main({argv!r}))\n"
    res = run_python(code, tmp_path)
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 2 and len(res.stderr.splitlines()) == 1, res.stderr
    assert f"pip install 'agentgym-suite[{extra}]'" in res.stderr and module in res.stderr


def test_the_distribution_is_agentgym_suite_with_its_license():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == "agentgym-suite"
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"] and "END OF TERMS AND CONDITIONS" in text
    extras = project["optional-dependencies"]
    # an extra naming the project by its old name would install the other project called agentgym from PyPI
    own = [req for reqs in extras.values() for req in reqs if re.match(r"agentgym\b", req)]
    assert own and all(req.startswith("agentgym-suite[") for req in own), own
    for req in own:
        assert set(req.removeprefix("agentgym-suite[").rstrip("]").split(",")) <= set(extras), req
    assert {"train", "adapters", "server", "dense"} <= set(extras)
    heavy = re.compile(r"^(torch|transformers|fastapi|uvicorn|ray|faiss)", re.IGNORECASE)
    assert not [d for d in project["dependencies"] if heavy.match(d)]
    assert set(cli.OPTIONAL_MODULES.values()) <= set(extras)
