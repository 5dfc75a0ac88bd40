"""Sandbox overhead: ``print(1)`` latency per back-end against a plain ``subprocess.run([python, "-c", ...])``, and
the warm pool of this revision against the pool of an earlier one, measured in the same run.

Run by hand (not a test)::

    python bench/bench_sandbox.py                          # about a minute; Docker rows where an engine answers
    python bench/bench_sandbox.py --calls 50 --old-rev ''  # quicker, no old-revision row

Rows: ``plain`` (``subprocess.run([sys.executable, "-c", "print(1)"])``, no isolation at all), ``subprocess``
(``SubprocessSandbox``: a fresh interpreter per call + namespaces, private /tmp, rlimits), ``pooled``
(``PooledSandbox``: a warm fork server forks a fresh isolated process per call), ``pooled@REV`` (the same class from
``git archive REV tools/sandbox``, imported as another package), ``bwrap`` (the peer: Debian's bubblewrap starts
``python3 -I -S`` afresh in new namespaces per call; skipped where it is not installed) and ``docker``
(``DockerSandbox``: a fresh container per call, image ``$AGENTGYM_DOCKER_IMAGE`` or ``agentgym-sandbox:bookworm``;
``--docker-calls`` of them, in rounds of their own since a call takes ~0.5 s). Latency rounds are interleaved (one call
of each row per round) so load on the machine hits them alike; p50 and p90 in ms. Throughput: calls/s with 2 client
threads (each pool has 2 workers). Ratios are to ``plain``; the last line is the pooled p50 of this revision over the
old one's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

from agentgym.tools.sandbox import DockerSandbox, PooledSandbox, SubprocessSandbox

CODE = "print(1)"
REPO = Path(__file__).resolve().parent.parent


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def throughput(call: Callable[[], object], n: int, workers: int = 2) -> float:
    with ThreadPoolExecutor(workers) as pool:
        t = time.perf_counter()
        list(pool.map(lambda _: call(), range(n)))
        return n / (time.perf_counter() - t)


def load_old(rev: str, where: str) -> ModuleType:
    """``tools/sandbox`` as of ``rev`` (``git archive``), imported as the package ``sandbox_old``."""
    archive = subprocess.run(["git", "archive", rev, "tools/sandbox"], cwd=REPO, capture_output=True, check=False)
    if archive.returncode != 0:
        sys.exit(f"bench_sandbox: git archive {rev} failed: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", where], input=archive.stdout, check=True)
    root = os.path.join(where, "tools", "sandbox")
    spec = importlib.util.spec_from_file_location(
        "sandbox_old", os.path.join(root, "__init__.py"), submodule_search_locations=[root]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["sandbox_old"] = module
    spec.loader.exec_module(module)
    return module


def bwrap_call() -> Callable[[], object] | None:
    """A call of the peer: Debian's ``bwrap`` (bubblewrap) starting ``python3 -I -S`` afresh in new namespaces of
    every kind, the system directories and the interpreter's prefix read-only, a fresh /proc, /dev and /tmp: what
    a sandbox built on it pays per call (it cannot keep a warm interpreter: each call is a new ``execve``)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return None
    cmd = [exe, "--unshare-all", "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev",
           "--tmpfs", "/tmp", "--ro-bind", "/usr", "/usr"]  # fmt: skip
    for d in ("/bin", "/sbin", "/lib", "/lib64"):
        if os.path.islink(d):
            cmd += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            cmd += ["--ro-bind", d, d]
    if not sys.base_prefix.startswith("/usr/"):
        cmd += ["--ro-bind", sys.base_prefix, sys.base_prefix]
    python = os.path.realpath(os.path.join(sys.base_prefix, "bin", "python3"))
    cmd += [python, "-I", "-S", "-c", CODE]

    def call() -> object:
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert out.stdout == "1\n", out.stderr
        return out

    return call


def checked(box) -> Callable[[], object]:
    def call() -> object:
        r = box.run(CODE)
        assert r.stdout == "1\n", r
        return r

    return call


def rounds(rows: dict[str, Callable[[], object]], n: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(n):
        for name, call in rows.items():
            t = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100, help="latency rounds (one call of each row per round)")
    parser.add_argument("--old-rev", default="70136f3", help="git revision of the old pool row ('' for none)")
    parser.add_argument("--docker-calls", type=int, default=20, help="Docker calls (0: no Docker row)")
    args = parser.parse_args()
    if args.calls < 2 or args.docker_calls < 0:
        parser.error("--calls must be >= 2 and --docker-calls >= 0")

    old_dir = tempfile.mkdtemp(prefix="agentgym-bench-old-")
    boxes: list = [SubprocessSandbox(), PooledSandbox(workers=2)]

    def plain() -> object:
        out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=False)
        assert out.stdout == "1\n"
        return out

    rows: dict[str, Callable[[], object]] = {
        "plain": plain,
        "subprocess": checked(boxes[0]),
        "pooled": checked(boxes[1]),
    }
    old_name = f"pooled@{args.old_rev}"
    if args.old_rev:
        boxes.append(load_old(args.old_rev, old_dir).PooledSandbox(workers=2))
        rows[old_name] = checked(boxes[-1])
    bwrap = bwrap_call()
    if bwrap is not None:
        rows["bwrap"] = bwrap
    else:
        print("no bwrap row: bubblewrap is not installed (apt-get install bubblewrap)")
    docker_rows: dict[str, Callable[[], object]] = {}
    docker_ok, why = DockerSandbox.available()
    if args.docker_calls and docker_ok:
        boxes.append(DockerSandbox())
        docker_rows["docker"] = checked(boxes[-1])
    elif args.docker_calls:
        print(f"no docker row: {why}")
    try:
        for call in [*rows.values(), *docker_rows.values()]:  # warm up (the pools start their servers)
            for _ in range(3):
                call()
        times = rounds(rows, args.calls)
        times |= rounds(docker_rows, args.docker_calls)
        rates = {name: throughput(call, max(args.calls // 2, 10)) for name, call in rows.items()}
        rates |= {name: throughput(call, max(args.docker_calls // 2, 4)) for name, call in docker_rows.items()}
    finally:
        for box in boxes:
            box.close()
        shutil.rmtree(old_dir, ignore_errors=True)

    base = statistics.median(times["plain"])
    print(f"{'back-end':<18}{'p50 ms':>9}{'p90 ms':>9}{'calls/s (2)':>13}{'p50 / plain':>13}")
    for name in times:
        p50, p90 = statistics.median(times[name]), percentile(times[name], 0.9)
        print(f"{name:<18}{p50 * 1e3:>9.1f}{p90 * 1e3:>9.1f}{rates[name]:>13.1f}{p50 / base:>13.2f}")
    if args.old_rev:
        new, old = statistics.median(times["pooled"]), statistics.median(times[old_name])
        print(f"pooled p50: this revision {new * 1e3:.1f} ms, {args.old_rev} {old * 1e3:.1f} ms, ratio {new / old:.2f}")


if __name__ == "__main__":
    main()
