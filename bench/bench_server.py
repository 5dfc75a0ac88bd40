"""The env server (``agentgym serve``) under load, and what playing through ``RemoteEnv`` costs.

Run by hand (not a test; ``tests/core/test_server.py`` runs a bounded ``load``)::

    python bench/bench_server.py                 # everything below, about 2 minutes on 2 cores
    python bench/bench_server.py throughput      # RemoteEnv vs in-process steps/s
    python bench/bench_server.py load --sessions 500 --processes 5
    python bench/bench_server.py restart

Every part starts its own server, ``agentgym.serving.server.serve`` on a free loopback port in a subprocess (``--url``
points ``load`` at a running one instead). The policy is each env's built-in ``random`` agent, seeded, so every
episode can be played again in-process and compared.

* ``throughput``: Household and SearchQA (``dataset="tiny"``: its episodes are short and its env builds in 10 ms;
  the retriever's cost is the same through the server) played for ``--seconds`` each in-process
  (``gymnasium.make``) and through ``RemoteEnv``, in the same run, one client, one episode at a time. Steps/s is
  steps over the time spent in ``reset`` and ``step`` (not in the agent; resets count as time, not steps, so
  short episodes lower it); ``overhead`` is in-process / remote; ``us/call`` is the mean time of one ``reset`` or
  ``step``.
* ``load``: ``--sessions`` sessions opened at once from ``--processes`` client processes (each with ``--threads``
  threads over one shared connection pool); each thread steps its sessions round-robin, so every session is
  mid-episode at the same time, until each has played ``--episodes`` episodes or ``--time-limit`` seconds have
  passed (episodes under way then finish). Reported: requests, p50/p99 request latency, aggregate steps/s, and
  after the timed part every episode is played again in-process and compared as JSON: ``mismatched`` counts
  episodes whose observations, rewards, flags or info differ (a lost or mixed-up episode), ``errors`` the
  sessions that raised.
* ``restart``: a session is stepped, the server is killed (what the client sees: the error message), started again
  on the same port, and the session stepped again (the restarted server has lost it: the message says so).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

import agentgym  # noqa: F401  (registers the envs)
from agentgym.running.runner import format_table, make_agent
from agentgym.serving.remote import EnvServerError, RemoteEnv, http_client
from agentgym.serving.server import ServerProcess

ENVS: dict[str, tuple[str, dict[str, Any]]] = {
    "Household": ("agentgym/Household-v0", {}),
    "SearchQA (tiny)": ("agentgym/SearchQA-v0", {"dataset": "tiny"}),
}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * q // 100) - 1)] if ordered else float("nan")


def canonical(x: Any) -> str:
    return json.dumps(x, sort_keys=True)


# -- episodes ----------------------------------------------------------------------------------------------


@dataclass
class Episode:
    """One session's episode in progress, played one step at a time."""

    env: gym.Env
    agent: Any
    seed: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    record: list[str] = field(default_factory=list)
    done: bool = True


def play_local(env_id: str, env_kwargs: dict[str, Any], seed: int, env: gym.Env | None = None) -> list[str]:
    """The episode with ``seed`` played in-process, as JSON lines (reset, then each step)."""
    env = env or gym.make(env_id, **env_kwargs)
    agent = make_agent("random", env)
    agent.reset(seed=seed)
    obs, info = env.reset(seed=seed)
    messages, record = list(obs), [canonical([obs, info])]
    while True:
        action = agent.act(messages, info)
        out = env.step(action)
        record.append(canonical(list(out)))
        messages += [{"role": "assistant", "content": action}, *out[0]]
        info = out[4]
        if out[2] or out[3]:
            return record


# -- throughput: RemoteEnv vs in-process ---------------------------------------------------------------------


def throughput(url: str, env_id: str, env_kwargs: dict[str, Any], seconds: float) -> dict[str, dict[str, float]]:
    """In-process and through ``RemoteEnv``: steps per second of env time (``reset`` and ``step`` calls, not the
    agent) and the mean time of one call."""
    out: dict[str, dict[str, float]] = {}
    for mode in ("in-process", "remote"):
        env = gym.make(env_id, **env_kwargs) if mode == "in-process" else RemoteEnv(url, env_id, env_kwargs)
        agent = make_agent("random", env if mode == "in-process" else gym.make(env_id, **env_kwargs))
        env_time, steps, calls, seed, start = 0.0, 0, 0, 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            seed += 1
            agent.reset(seed=seed)
            t = time.perf_counter()
            obs, info = env.reset(seed=seed)
            env_time += time.perf_counter() - t
            messages, calls = list(obs), calls + 1
            while True:
                action = agent.act(messages, info)
                t = time.perf_counter()
                obs, _, terminated, truncated, info = env.step(action)
                env_time += time.perf_counter() - t
                steps, calls = steps + 1, calls + 1
                messages += [{"role": "assistant", "content": action}, *obs]
                if terminated or truncated:
                    break
        env.close()
        out[mode] = {"steps_per_s": steps / env_time, "us_per_call": 1e6 * env_time / calls, "steps_per_episode":
                     steps / seed}  # fmt: skip
    return out


# -- load: many sessions from several processes -----------------------------------------------------------


def load_worker(job: dict[str, Any]) -> dict[str, Any]:
    """One client process: open its sessions, play them round-robin from its threads, then check every episode
    against an in-process replay."""
    env_id, env_kwargs = job["env_id"], job["env_kwargs"]
    client = http_client(job["url"], max_connections=job["threads"])
    opened: list[RemoteEnv] = []
    errors: list[str] = []
    try:
        for _ in range(job["sessions"]):
            opened.append(RemoteEnv(job["url"], env_id, env_kwargs, client=client, timeout=job["timeout"]))
    except Exception as e:
        errors.append(f"open: {type(e).__name__}: {e}")
    job_start = job["start_at"]
    while time.time() < job_start:  # every process starts playing at the same moment
        time.sleep(0.001)
    deadline = time.monotonic() + job["time_limit"]
    latencies: list[list[float]] = [[] for _ in range(job["threads"])]
    finished: list[list[tuple[int, list[str]]]] = [[] for _ in range(job["threads"])]
    base = job["first_seed"]

    def run(t: int) -> None:
        mine = [Episode(env, make_agent("random", gym.make(env_id, **env_kwargs)), 0)
                for env in opened[t :: job["threads"]]]  # fmt: skip
        played = [0] * len(mine)
        index = list(range(t, len(opened), job["threads"]))
        live = list(range(len(mine)))
        while live:
            for i in list(live):
                ep = mine[i]
                try:
                    if ep.done:
                        if played[i] >= job["episodes"] or time.monotonic() > deadline:
                            live.remove(i)
                            continue
                        ep.seed = base + index[i] * 1000 + played[i]
                        ep.agent.reset(seed=ep.seed)
                        s = time.perf_counter()
                        obs, ep.info = ep.env.reset(seed=ep.seed)
                        latencies[t].append(time.perf_counter() - s)
                        ep.messages, ep.record, ep.done = list(obs), [canonical([obs, ep.info])], False
                        continue
                    action = ep.agent.act(ep.messages, ep.info)
                    s = time.perf_counter()
                    out = ep.env.step(action)
                    latencies[t].append(time.perf_counter() - s)
                    ep.record.append(canonical(list(out)))
                    ep.messages += [{"role": "assistant", "content": action}, *out[0]]
                    ep.info = out[4]
                    if out[2] or out[3]:
                        ep.done = True
                        played[i] += 1
                        finished[t].append((ep.seed, ep.record))
                except Exception as e:
                    errors.append(f"session {index[i]}: {type(e).__name__}: {e}")
                    live.remove(i)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(job["threads"])]
    start = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - start
    sessions_open = len(opened)
    for env in opened:
        env.close()
    client.close()
    episodes = [e for per in finished for e in per]
    local = gym.make(env_id, **env_kwargs)
    mismatched = sum(play_local(env_id, env_kwargs, seed, local) != record for seed, record in episodes)
    return {"sessions": sessions_open, "episodes": len(episodes), "mismatched": mismatched, "errors": errors,
            "steps": sum(len(r) - 1 for _, r in episodes), "requests": sum(map(len, latencies)),
            "latencies": [x for per in latencies for x in per], "wall": wall}  # fmt: skip


def run_load(
    url: str,
    env_id: str,
    env_kwargs: dict[str, Any],
    *,
    sessions: int,
    processes: int,
    threads: int,
    episodes: int,
    time_limit: float,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """``sessions`` sessions from ``processes`` client processes; a summary with latency percentiles."""
    per = [sessions // processes + (i < sessions % processes) for i in range(processes)]
    start_at = time.time() + 3.0 + 0.02 * sessions / processes  # time for the processes to start and open sessions
    jobs = [{"url": url, "env_id": env_id, "env_kwargs": env_kwargs, "sessions": n, "threads": threads,
             "episodes": episodes, "time_limit": time_limit, "timeout": timeout, "start_at": start_at,
             "first_seed": 1_000_000 * p} for p, n in enumerate(per)]  # fmt: skip
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        results = pool.map(load_worker, jobs)
    latencies = [x for r in results for x in r["latencies"]]
    wall = max(r["wall"] for r in results)
    steps = sum(r["steps"] for r in results)
    return {
        "env": env_id,
        "processes": processes,
        "sessions": sum(r["sessions"] for r in results),
        "episodes": sum(r["episodes"] for r in results),
        "mismatched": sum(r["mismatched"] for r in results),
        "errors": sum(len(r["errors"]) for r in results),
        "error_messages": [m for r in results for m in r["errors"]][:5],
        "requests": len(latencies),
        "steps": steps,
        "wall_s": wall,
        "steps_per_s": steps / wall if wall else 0.0,
        "p50_ms": 1000 * percentile(latencies, 50),
        "p99_ms": 1000 * percentile(latencies, 99),
        "max_ms": 1000 * max(latencies, default=float("nan")),
    }


# -- restart ---------------------------------------------------------------------------------------------------


def restart_check() -> dict[str, str]:
    """What a client sees when the server dies mid-episode, and after it restarts."""
    server = ServerProcess(env_ids=["agentgym/Household-v0"]).start()
    env = RemoteEnv(server.url, "agentgym/Household-v0", timeout=10.0)
    env.reset(seed=0)
    env.step("look")
    server.stop()
    out: dict[str, str] = {}
    try:
        env.step("look")
    except EnvServerError as e:
        out["server down"] = str(e)
    with ServerProcess(port=server.port, env_ids=["agentgym/Household-v0"]):
        try:
            env.step("look")
        except EnvServerError as e:
            out["server restarted"] = str(e)
    return out


# -- main ----------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", nargs="?", default="all", choices=["all", "throughput", "load", "restart"])
    parser.add_argument("--seconds", type=float, default=5.0, help="throughput: seconds per env and mode")
    parser.add_argument("--url", default=None, help="load: a running server (default: start one)")
    parser.add_argument("--env", default="agentgym/Household-v0", help="load: the env id")
    parser.add_argument("--env-kwargs", default="{}", help="load: env constructor arguments, as JSON")
    parser.add_argument("--sessions", type=int, default=500, help="load: sessions open at once")
    parser.add_argument("--processes", type=int, default=5, help="load: client processes")
    parser.add_argument("--threads", type=int, default=4, help="load: threads per client process")
    parser.add_argument("--episodes", type=int, default=2, help="load: episodes per session at most")
    parser.add_argument("--time-limit", type=float, default=60.0, help="load: no new episode starts after this")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}

    if args.part in ("all", "throughput"):
        rows = []
        with ServerProcess(env_ids=[e for e, _ in ENVS.values()]) as server:
            for label, (env_id, kwargs) in ENVS.items():
                r = throughput(server.url, env_id, kwargs, args.seconds)
                local, remote = r["in-process"], r["remote"]
                rows.append({"env": label, "steps/episode": remote["steps_per_episode"],
                             "in-process steps/s": local["steps_per_s"], "RemoteEnv steps/s": remote["steps_per_s"],
                             "overhead (x)": local["steps_per_s"] / remote["steps_per_s"],
                             "in-process us/call": local["us_per_call"],
                             "RemoteEnv us/call": remote["us_per_call"]})  # fmt: skip
        report["throughput"] = rows
        if not args.json:
            print(format_table(rows), flush=True)

    if args.part in ("all", "load"):
        kwargs = json.loads(args.env_kwargs)
        load_args = {"sessions": args.sessions, "processes": args.processes, "threads": args.threads,
                     "episodes": args.episodes, "time_limit": args.time_limit}  # fmt: skip
        if args.url:
            result = run_load(args.url, args.env, kwargs, **load_args)
        else:
            # one trusted client (every process comes from 127.0.0.1): the operator gives it every session
            with ServerProcess(env_ids=[args.env], max_sessions_per_client=max(args.sessions, 1)) as server:
                result = run_load(server.url, args.env, kwargs, **load_args)
        report["load"] = result
        if not args.json:
            shown = {k: v for k, v in result.items() if k != "error_messages"}
            print("\n" + format_table([shown]), flush=True)
            for m in result["error_messages"]:
                print("error:", m)

    if args.part in ("all", "restart"):
        report["restart"] = restart_check()
        if not args.json:
            print()
            for when, message in report["restart"].items():
                print(f"{when}: {message}")

    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
