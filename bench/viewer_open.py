"""How fast `agentgym view` opens and pages a 1M-episode trajectories file, against reading the file whole.

    python bench/viewer_open.py                      # 1,000,000 episodes (about 1.4 GB in a temporary folder)
    python bench/viewer_open.py --episodes 100000 --keep runs/viewer_bench

The file is real trajectory records (Chain-v0 played by its oracle and random agents, H = 4), repeated to the size
asked. Measured through the viewer's HTTP API on loopback, as the page asks:

- open: the viewer built over the file and its first page of 50 episodes answered (what the page waits for);
- page: the next page, and a page 50 episodes long starting at a random line (through /api/line once the index is
  done), medians of 20;
- the index: how long the background scan takes to find every line;
- the naive peer, in the same run: reading every line and parsing it (what a viewer that loads the file does
  before it can show anything), and reading the file's lines without parsing them (its lower bound).

It prints a table and the ratio of the naive open to the viewer's. The issue's targets: open under 2 s, a page of
50 under 200 ms, on this machine.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from agentgym.running.runner import run
from agentgym.tools.serving import BackgroundServer
from agentgym.viewer.app import Viewer, create_app


def make_file(path: Path, episodes: int) -> int:
    """``episodes`` real trajectory lines (a 100-episode sample, repeated); returns the file's size."""
    sample = path.parent / "sample.jsonl"
    run("agentgym/Chain-v0", "oracle", 50, out=sample, progress=False, env_kwargs={"horizon": 4})
    run("agentgym/Chain-v0", "random", 50, out=sample, progress=False, env_kwargs={"horizon": 4})
    lines = [line for line in sample.read_bytes().splitlines(keepends=True) if b'"kind":"run"' not in line[:40]]
    sample.unlink()
    block = b"".join(lines)
    with open(path, "wb") as f:
        for _ in range(episodes // len(lines)):
            f.write(block)
        f.write(b"".join(lines[: episodes % len(lines)]))
    return path.stat().st_size


def naive_open(path: Path) -> tuple[float, float]:
    """Seconds to parse every line (what a viewer that loads the file does first; the parsed records are dropped
    as they come, so this is a lower bound on its time and memory), and to read the lines without parsing."""
    t = time.perf_counter()
    with open(path, "rb") as f:
        for line in f:
            json.loads(line)
    parse = time.perf_counter() - t
    t = time.perf_counter()
    with open(path, "rb") as f:
        for _ in f:
            pass
    return parse, time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1_000_000)
    parser.add_argument("--keep", default=None, help="a folder to write the file into and keep (default: a temp one)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="viewer_bench_"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trajectories.jsonl"
    try:
        t = time.perf_counter()
        size = make_file(path, args.episodes)
        print(f"wrote {args.episodes:,} episodes, {size / 1e9:.2f} GB, in {time.perf_counter() - t:.1f} s")

        t0 = time.perf_counter()
        viewer = Viewer.of(path)
        with BackgroundServer(create_app(path, viewer=viewer)) as server, httpx.Client(base_url=server.url) as http:
            first = http.get("/api/page", params={"source": "s0", "n": 50}).json()
            t_open = time.perf_counter() - t0
            assert len(first["items"]) == 50
            nexts, cursor = [], first["next"]
            for _ in range(20):
                t = time.perf_counter()
                page = http.get("/api/page", params={"source": "s0", "n": 50, "cursor": cursor}).json()
                nexts.append(time.perf_counter() - t)
                cursor = page["next"]
            index = viewer.sources[0].index
            index.wait()
            t_index = time.perf_counter() - t0
            rng = random.Random(args.seed)
            jumps = []
            for _ in range(20):
                t = time.perf_counter()
                line = http.get("/api/line", params={"source": "s0", "line": rng.randrange(args.episodes)}).json()
                page = http.get("/api/page", params={"source": "s0", "n": 50, "cursor": line["cursor"]}).json()
                jumps.append(time.perf_counter() - t)
                assert page["items"]
        naive, read_only = naive_open(path)
        rows = [
            ("open: first page of 50 answered", t_open),
            ("next page of 50 (median of 20)", statistics.median(nexts)),
            ("page at a random line (median of 20)", statistics.median(jumps)),
            ("index of every line done (from open)", t_index),
            ("naive: parse every line before showing any", naive),
            ("naive lower bound: read the lines", read_only),
        ]
        print("\n| what | seconds |\n|---|---:|")
        for name, secs in rows:
            print(f"| {name} | {secs:.3f} |")
        print(f"\nopen: the viewer is {naive / t_open:,.0f}x faster than parsing the file whole "
              f"({read_only / t_open:,.1f}x faster than only reading its lines); targets: open < 2 s "
              f"({'met' if t_open < 2 else 'NOT met'}), page < 0.2 s "
              f"({'met' if max(statistics.median(nexts), statistics.median(jumps)) < 0.2 else 'NOT met'})")  # fmt: skip
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
