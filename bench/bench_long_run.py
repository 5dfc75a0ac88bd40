"""A long `agentgym run` as a user starts it: time to the first record on disk, RSS as the run grows, and a
SIGKILL followed by `--append`.

Run by hand (not a test)::

    python bench/bench_long_run.py --episodes 1000000                 # the whole run (about 30 minutes, 9 GB)
    python bench/bench_long_run.py --episodes 100000 --kill-at 40000   # kill -9 at 40,000 records, then --append

It starts ``agentgym run agentgym/Household-v0 --agent oracle --episodes N --out DIR`` in a subprocess, polls
the record count and the process's RSS (``/proc/PID/status``, VmRSS) every 0.2 s, and prints the time of the
first record and the RSS when the run passes 1k, 10k, 100k, ... records. With ``--kill-at K`` it sends SIGKILL
once K records are on disk, restarts the same command with ``--append``, and checks that the file then holds N
episodes whose task indices run in order (``--replay M`` also replays the run header and the first M episodes:
replay then reports the rest of the run as cut short, which the result counts apart).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from agentgym.contract.trajectory import count_records, read_trajectories


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def watch(cmd: list[str], path: str, kill_at: int | None) -> dict[str, object]:
    """Run ``cmd``; returns its first-record time, RSS at each power of ten, and whether it was killed."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = None
    marks: dict[int, float] = {}
    peak = 0.0
    size = 0
    killed = False
    while proc.poll() is None:
        time.sleep(0.2)
        try:
            size, rss = count_records(path), rss_mb(proc.pid)
        except (FileNotFoundError, StopIteration, ProcessLookupError):
            continue
        peak = max(peak, rss)
        if first is None and size:
            first = time.monotonic() - start
        mark = 10 ** (len(str(size)) - 1) if size >= 1000 else 0
        if mark and mark not in marks:
            marks[mark] = rss
            print(f"  {size:>9,} records  {time.monotonic() - start:8.1f} s  RSS {rss:7.1f} MB", flush=True)
        if kill_at is not None and size >= kill_at:
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
    proc.wait()
    if proc.returncode not in (0, -signal.SIGKILL):
        raise SystemExit(f"the run failed ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}")
    return {"first_record_s": first, "rss_mb_at": marks, "peak_rss_mb": peak, "seconds": time.monotonic() - start,
            "records": count_records(path), "killed": killed}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--agent", default="oracle")
    parser.add_argument("--kill-at", type=int, default=None, help="SIGKILL once this many records are on disk")
    parser.add_argument("--replay", type=int, default=0, help="replay the header and the first N episodes at the end")
    parser.add_argument("--out", default=None, help="run folder (default: a temporary one, removed at the end)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="agentgym-long-run-")
    path = os.path.join(out, "trajectories.jsonl")
    cmd = [sys.executable, "-m", "agentgym.cli", "run", "agentgym/Household-v0", "--agent", args.agent,
           "--episodes", str(args.episodes), "--out", out, "--quiet", "--overwrite"]  # fmt: skip
    print(f"run: {' '.join(cmd[2:])}")
    result = {"run": watch(cmd, path, args.kill_at)}
    if result["run"]["killed"]:
        print(f"killed at {result['run']['records']:,} records; continuing with --append")
        result["append"] = watch([*cmd[:-1], "--append"], path, None)
    records = count_records(path)
    # the task index of every episode, streamed (the run header is skipped)
    order_ok = all(t.options["task_index"] == i % 140 for i, t in enumerate(read_trajectories(path)))
    result["final"] = {"records": records, "task_indices_in_order": order_ok, "bytes": os.path.getsize(path)}
    if args.replay:
        from agentgym.running.replay import replay_file

        head = os.path.join(out, "head.jsonl")  # the run header and the first M episodes: a prefix of the run
        with open(path, "rb") as f, open(head, "wb") as g:
            g.writelines(itertools.islice(f, args.replay + 1))
        results = list(replay_file(head))
        episodes = [r for r in results if r.kind == "episode"]
        result["final"]["replayed_ok"] = f"{sum(r.ok for r in episodes)}/{len(episodes)}"
        result["final"]["run_problems"] = [r.divergence for r in results if r.kind == "run"]  # "cut short" expected
    print(json.dumps(result, indent=2))
    if args.out is None:
        import shutil

        shutil.rmtree(out)


if __name__ == "__main__":
    main()
