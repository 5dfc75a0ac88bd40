"""Reference-trainer throughput on CPU: rollout and update tokens/s of this checkout against another revision, run
alternately in the same session (so both see the same machine load).

    python bench/bench_trainer.py                    # against the trainer before the refactor (REFACTOR_BASE)
    python bench/bench_trainer.py --baseline HEAD~3 --rounds 5 --iterations 6

The baseline revision is exported with ``git archive`` and installed (no dependencies) into a temp dir; each
measurement is a fresh process that runs ``--iterations`` trainer iterations of each workload (the first is a
warm-up and not counted) with one torch thread, and reports ``sampled tokens / rollout seconds`` and ``trained
tokens / update seconds``. Rounds alternate baseline, current, baseline, ...; the table shows the median over rounds
and the ratio current / baseline (> 1: faster now).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: The last commit with the single-file trainer (before it was split into config/backends/credit/update).
REFACTOR_BASE = "06d51b1"
ROOT = Path(__file__).resolve().parents[1]

WORKLOADS: dict[str, dict] = {
    "SearchQA tiny (2 turns)": {"max_turns": 2, "max_new_tokens": 12, "batch_tasks": 4, "group_size": 4},
    "Chain-v0 H=8 (ppo)": {"env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 8}, "max_turns": 8,
                           "max_new_tokens": 8, "stop": ["</answer>"], "algo": "ppo", "batch_tasks": 4,
                           "group_size": 4},
}  # fmt: skip

WORKER = """
import json, sys, tempfile, torch
torch.set_num_threads(1)
from agentgym.baselines.trainer import load_config, train
workloads, iterations = json.loads(sys.argv[1]), int(sys.argv[2])
out = {}
for name, overrides in workloads.items():
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config("tiny", overrides={**overrides, "iterations": iterations, "minibatch_size": 8,
                             "plot": False, "progress": False, "checkpoint_every": 0, "out_dir": tmp})
        hist = [h for h in train(config)["history"] if h.get("iteration", 0) > 1]
    sampled = sum(h["sampled_tokens"] for h in hist)
    out[name] = {"rollout": sampled / sum(h["time_rollout"] for h in hist),
                 "update": sampled / sum(h["time_update"] for h in hist)}
print(json.dumps(out))
"""


def measure(pythonpath: str | None, iterations: int, cwd: str) -> dict[str, dict[str, float]]:
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.run([sys.executable, "-c", WORKER, json.dumps(WORKLOADS), str(iterations)], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"benchmark process failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def install(revision: str, tmp: Path) -> str:
    """``revision`` of this repository installed under ``tmp``; returns its import path."""
    src, pkg = tmp / "src", tmp / "pkg"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(pkg), str(src)], check=True, cwd=tmp)  # fmt: skip
    return str(pkg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=REFACTOR_BASE, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"baseline": [], "current": []}
    with tempfile.TemporaryDirectory() as tmp:
        baseline = install(args.baseline, Path(tmp))
        for k in range(args.rounds):
            for side, path in (("baseline", baseline), ("current", None)):
                runs[side].append(measure(path, args.iterations, tmp))
                print(f"round {k + 1}/{args.rounds} {side}: {json.dumps(runs[side][-1])}", file=sys.stderr)
    print(f"| workload | phase | {args.baseline} tokens/s | current tokens/s | current / {args.baseline} |")
    print("|---|---|---:|---:|---:|")
    for name in WORKLOADS:
        for phase in ("rollout", "update"):
            before = statistics.median(r[name][phase] for r in runs["baseline"])
            after = statistics.median(r[name][phase] for r in runs["current"])
            print(f"| {name} | {phase} | {before:,.0f} | {after:,.0f} | {after / before:.2f} |")


if __name__ == "__main__":
    main()
