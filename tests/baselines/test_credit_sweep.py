"""bench/credit_sweep.py on a micro grid: the warm start is shared, results land once per run, a second invocation
resumes (runs nothing finished), and the report has one row per (env, H, method) with the start measured at each H."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "credit_sweep.py"
ARGS = ["--cells", "Chain:1,2", "--methods", "grpo", "progress", "--seeds", "0", "--more-seeds", "1",
        "--more-seeds-at", "2", "--iterations", "1", "--sft-steps", "2", "--eval-episodes", "4",
        "--jobs", "1"]  # fmt: skip


def sweep(out: Path, *extra: str) -> str:
    proc = subprocess.run([sys.executable, str(SCRIPT), *ARGS, "--out", str(out), *extra], capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_micro_sweep_runs_resumes_and_reports(tmp_path):
    out = tmp_path / "sweep"
    sweep(out)
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    # seeds 0 at H in {1, 2}, seed 1 only at H=2 (--more-seeds-at 2), two methods each
    assert sorted((r["horizon"], r["seed"], r["method"]) for r in runs) == sorted(
        [(1, 0, "grpo"), (1, 0, "progress"), (2, 0, "grpo"), (2, 0, "progress"), (2, 1, "grpo"), (2, 1, "progress")]
    )
    assert all(len(r["success_rate"]) == 1 and 0.0 <= r["after"] <= 1.0 for r in runs)
    starts = {(r["seed"], r["horizon"]): r["before"] for r in runs}
    assert all(r["before"] == starts[(r["seed"], r["horizon"])] for r in runs)  # one warm start per seed
    assert sorted(p.name for p in (out / "sft").iterdir()) == ["Chain-s0", "Chain-s1"]
    assert not list((out / "rl").glob("*/checkpoint.pt"))  # finished runs keep their result, not their weights
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/*/result.json")}
    report = sweep(out)  # everything finished: nothing runs again
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/*/result.json")} == stamps
    rows = [line for line in report.splitlines() if line.startswith("| Chain")]
    pivot = [r for r in rows if "`" not in r]  # one row per (env, H), one column per method
    assert len(pivot) == 2 and all(r.count("±") == 2 for r in pivot)
    assert len(rows) - len(pivot) == 4  # one row per (env, H, method)
    assert (out / "credit_sweep.png").stat().st_size > 0


def _sweep_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("credit_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_method_is_a_valid_trainer_config(tmp_path):
    import argparse

    from agentgym.baselines.config import load_config

    cs = _sweep_module()
    args = argparse.Namespace(num_options=2, eval_episodes=4, batch_tasks=2, group_size=2, minibatch_size=4,
                              lr=1e-3, iterations=1, sft_horizon=2)  # fmt: skip
    for env in ("Chain", "Umbrella"):
        warm = cs.Job(env, 2, 0).directory(tmp_path) / "checkpoint.pt"  # init_from must name a file; not loaded here
        warm.parent.mkdir(parents=True)
        warm.touch()
        for method in cs.METHODS:
            config = load_config("tiny", overrides=cs.config_overrides(cs.Job(env, 2, 0, method), args, tmp_path))
            assert config.env_id == f"agentgym/{env}-v0"
    critic = load_config("tiny", overrides=cs.config_overrides(cs.Job("Chain", 2, 0, "progress_td"), args, tmp_path))
    assert (critic.algo, critic.lam, critic.detach_critic, critic.progress_key) == ("ppo", 0.0, True, "progress")


def test_collapsed_runs_are_counted_not_averaged_or_paired():
    cs = _sweep_module()

    def run(method: str, seed: int, after: float | None, collapsed: str | None = None) -> dict:
        history = [{"iteration": 1, "success_rate": 0.5, "zero_std_group_frac": 0.25}]
        return {"job": {"env": "Chain", "horizon": 4, "seed": seed, "method": method}, "history": history,
                "before": 0.4, "after": after, "collapsed": collapsed}  # fmt: skip

    results = [run("grpo", 0, 0.6), run("grpo", 1, 0.8), run("progress", 0, 0.7),
               run("progress", 1, None, "valid-action share fell from 0.84 to 0.12"),
               run("rloo", 0, None, "gradient norm exploded"),
               run("rloo", 1, None, "gradient norm exploded")]  # fmt: skip
    text, records = cs.table(results, ["grpo", "progress", "rloo"])
    by = {r["method"]: r for r in records}
    assert (by["grpo"]["seeds"], by["grpo"]["collapsed"], by["grpo"]["after_mean"]) == (2, 0, 0.7)
    assert (by["progress"]["seeds"], by["progress"]["collapsed"]) == (1, 1)
    assert by["progress"]["after_mean"] == 0.7  # the collapsed seed is not a zero in the mean
    assert by["progress"]["diff_to_grpo"] == pytest.approx(0.7 - 0.6)  # paired on the surviving seed only
    assert (by["rloo"]["seeds"], by["rloo"]["collapsed"]) == (0, 2)
    assert "| Chain | 4 | `rloo` | 0 | 2 |" in text
    assert "`rloo`" not in cs.pivot(records, ["grpo", "progress", "rloo"])  # no mean to show
