"""``agentgym train`` as a user first meets it, through the real CLI (``agentgym.cli.main``): a misspelled config key
or env arguments the env's constructor refuses are one line on stderr and exit 2 before any model is built or any
run folder is written, and a run folder left by a start that failed does not refuse the corrected command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium
import pytest

from agentgym.cli import main as cli_main

NO_ORACLE_ID = "agentgym_test/TrainCliNoOracle-v0"


class NoOracleEnv(gymnasium.Env):
    """One turn, reward 1 for any answer; no demonstration agent, so an SFT warm start on it fails."""

    observation_space = gymnasium.spaces.Text(64)
    action_space = gymnasium.spaces.Text(4096)

    def __init__(self, width: int = 3) -> None:
        self.width = width

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return [{"role": "user", "content": f"say something {seed}"}], {"task_id": f"t-{seed}"}

    def step(self, action: str):
        return [], 1.0, True, False, {"success": True}


if NO_ORACLE_ID not in gymnasium.registry:
    gymnasium.register(id=NO_ORACLE_ID, entry_point=NoOracleEnv, disable_env_checker=True)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/baselines/conftest.py

#: A run of one tiny iteration on NoOracleEnv.
SMALL = ["--preset", "tiny", "--iterations", "1", "--set", f"env_id={NO_ORACLE_ID}", "--set", "env_kwargs={}",
         "--set", "max_turns=1", "--set", "max_new_tokens=3", "--set", "progress=false", "--set", "plot=false",
         "--set", "reward_components=all"]  # fmt: skip


def train_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``agentgym train ARGS`` in this process: its exit code, stdout and stderr."""
    try:
        code = cli_main(["train", *args])
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(result: tuple[int, str, str]) -> str:
    """The one stderr line of a usage error (exit 2, no traceback)."""
    code, _, err = result
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    assert lines[0].startswith("agentgym train: error: ")
    return lines[0]


def test_a_misspelled_config_key_is_one_line_with_the_closest_key(tmp_path, capsys):
    out = tmp_path / "run"
    line = one_line_error(train_cli(capsys, "--preset", "tiny", "--out-dir", str(out), "--set", "lerning_rate=1e-5"))
    assert "unknown config key 'lerning_rate' (did you mean 'lr'?)" in line
    line = one_line_error(train_cli(capsys, "--preset", "tiny", "--out-dir", str(out), "--set", "grup_size=4"))
    assert "unknown config key 'grup_size' (did you mean 'group_size'?)" in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("sets", "needles"),
    [
        # the tiny preset's env is SearchQA, which has no horizon
        (['env_kwargs={"horizon": "x"}'], ["env_kwargs: agentgym/SearchQA-v0 takes no argument 'horizon'", "dataset"]),
        (["env_id=agentgym/Chain-v0", 'env_kwargs={"horizn": 2}'], ["(did you mean 'horizon'?)"]),
        (["env_id=agentgym/Chain-v0", 'env_kwargs={"horizon": "x"}'], ["Chain-v0's 'horizon' must be int, got 'x'"]),
        (["env_id=agentgym/Chain-v0", 'env_kwargs={"horizon": true}'], ["'horizon' must be int, got True"]),
        (["env_id=agentgym/Chain-v0", 'env_kwargs={"horizon": 0}'], ["do not build agentgym/Chain-v0", "horizon"]),
        (["env_id=agentgym/Chain-v0", 'env_kwargs={"horizon": 2}', 'eval_env_kwargs={"horizon": "2"}'],
         ["eval_env_kwargs: agentgym/Chain-v0's 'horizon' must be int, got '2'"]),
    ],
)  # fmt: skip
def test_env_arguments_the_constructor_refuses_are_one_line_before_anything_is_built(tmp_path, capsys, sets, needles):
    out = tmp_path / "run"
    args = ["--preset", "tiny", "--out-dir", str(out), *(x for s in sets for x in ("--set", s))]
    line = one_line_error(train_cli(capsys, *args))
    for needle in needles:
        assert needle in line, line
    assert not out.exists()  # no run folder, so the corrected command is not refused


def test_a_failed_start_leaves_no_run_and_the_corrected_command_runs(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="gives no demonstrations"):  # the SFT warm start needs an oracle agent
        train_cli(capsys, *SMALL, "--out-dir", str(out), "--set", "sft_steps=1")
    assert not out.exists()
    code, stdout, err = train_cli(capsys, *SMALL, "--out-dir", str(out))
    assert code == 0, err
    assert [json.loads(x)["iteration"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1]
    assert '"metrics_path"' in stdout


def test_a_folder_without_a_record_is_no_run(tmp_path, capsys):
    """What a start killed before its first record leaves (config.json, an empty metrics.jsonl) is started afresh;
    a folder with a record is still refused without --resume or --overwrite."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}", encoding="utf-8")
    (out / "metrics.jsonl").write_text("", encoding="utf-8")
    code, _, err = train_cli(capsys, *SMALL, "--out-dir", str(out))
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["env_id"] == NO_ORACLE_ID
    line = one_line_error(train_cli(capsys, *SMALL, "--out-dir", str(out)))
    assert "holds a run" in line and "--resume" in line
    assert Path(out / "checkpoint.pt").is_file()
