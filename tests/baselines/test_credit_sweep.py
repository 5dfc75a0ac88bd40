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
