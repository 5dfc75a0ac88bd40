"""What the trainer adapters share: TaskRef (JSON round trip, strict keys) and dataset rows; every adapter module
imports without its trainer."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.integrations.tasks import TaskRef, task_rows


def test_task_ref_round_trip_and_reset():
    ref = TaskRef("agentgym/SearchQA-v0", {"dataset": "tiny"}, seed=3, options={"task_id": "test-00007"})
    assert TaskRef.from_json(ref.to_json()) == TaskRef.from_dict(ref.to_dict())
    assert TaskRef.from_json(ref.to_json()).to_dict() == ref.to_dict()
    env = ref.make_env()
    obs, info = ref.reset(env)
    assert info["task_id"] == "test-00007" and obs[0]["role"] == "user" and isinstance(obs[0]["content"], str)
    with pytest.raises(ValueError, match="unknown TaskRef key"):
        TaskRef.from_dict({**ref.to_dict(), "task": 1})
    with pytest.raises(ValueError, match="env_id"):
        TaskRef.from_dict({"env_kwargs": {}})


def test_task_rows_hold_the_env_prompt():
    rows = task_rows("agentgym/SearchQA-v0", [2, 0], env_kwargs={"dataset": "tiny"})
    assert [r["task_id"] for r in rows] == ["test-00002", "test-00000"]
    for row in rows:
        ref = TaskRef.from_dict(row["agentgym"])
        assert ref.reset(ref.make_env())[0] == row["prompt"]
    assert len(task_rows("agentgym/SearchQA-v0", 3, env_kwargs={"dataset": "tiny"})) == 3


ADAPTERS = [
    "agentgym.integrations",
    "agentgym.integrations.skyrl",
    "agentgym.integrations.verl",
    "agentgym.integrations.openrlhf",
    "agentgym.integrations.trl",
]


@pytest.mark.slow
def test_adapters_import_without_their_trainer():
    """The trainers are imported lazily: with them blocked, every adapter module still imports."""
    blocked = ["trl", "skyrl_gym", "verl", "openrlhf", "datasets"]
    code = (
        "import sys, importlib\n"
        f"for m in {blocked!r}: sys.modules[m] = None\n"
        f"for name in {ADAPTERS!r}: importlib.import_module(name)\n"
        f"assert not any(sys.modules.get(m) for m in {blocked!r})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)  # hang guard
    assert out.returncode == 0, out.stderr
    for name in ADAPTERS:
        importlib.import_module(name)
