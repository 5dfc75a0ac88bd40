"""Cost of branching an episode: snapshot + restore per env, against replaying the episode from its start.

Run by hand (not a test)::

    python bench/bench_snapshot.py            # about 30 s
    python bench/bench_snapshot.py --quick

For each env, episodes are played with the built-in ``random`` agent to a mid-episode turn (turn 3 of SearchQA,
turn 20 of Household), then timed, each as the median over ``--reps`` repetitions:

* ``snapshot``: ``agentgym.contract.branching.snapshot(env)`` (the env and its Gymnasium wrappers),
* ``restore``: ``agentgym.contract.branching.restore(env, snap)`` into the same env,
* ``pickle round trip``: ``pickle.loads(pickle.dumps(snap))`` (what sending a snapshot to another process costs)
  and the pickled size,
* ``replay from start`` (the naive baseline, what a fork costs without snapshots): ``reset`` with the episode's
  seed and task, then step the recorded actions again.

The ratio is replay / (snapshot + restore): how many times cheaper a fork is.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.branching import restore, snapshot
from agentgym.running.runner import format_table, make_agent

ENVS: tuple[tuple[str, str, dict[str, Any], int], ...] = (
    ("SearchQA (small, BM25)", "agentgym/SearchQA-v0", {}, 3),
    ("Household", "agentgym/Household-v0", {}, 20),
    ("Household (expert_plan)", "agentgym/Household-v0", {"expert_plan": True}, 20),
    ("Household (verl prompt)", "agentgym/Household-v0", {"prompt": "verl"}, 20),
)


def median_us(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def prefix(env: gym.Env, seed: int, turns: int) -> list[str] | None:
    """Play ``turns`` turns with the random agent; the actions, or None if the episode ended first."""
    agent = make_agent("random", env)
    agent.reset(seed=seed)
    obs, info = env.reset(seed=seed, options={"task_index": seed})
    messages, actions = list(obs), []
    for _ in range(turns):
        actions.append(agent.act(messages, info))
        obs, _, terminated, truncated, info = env.step(actions[-1])
        if terminated or truncated:
            return None
        messages += [{"role": "assistant", "content": actions[-1]}, *obs]
    return actions


def bench_env(env_id: str, kwargs: dict[str, Any], turns: int, episodes: int, reps: int) -> dict[str, float]:
    env = gym.make(env_id, **kwargs)
    rows: dict[str, list[float]] = {"snapshot": [], "restore": [], "pickle": [], "bytes": [], "replay": []}
    seed = 0
    while len(rows["replay"]) < episodes:
        seed += 1
        actions = prefix(env, seed, turns)
        if actions is None:
            continue
        snap = snapshot(env)
        rows["snapshot"].append(median_us(lambda: snapshot(env), reps))
        rows["restore"].append(median_us(lambda: restore(env, snap), reps))  # noqa: B023
        rows["pickle"].append(median_us(lambda: pickle.loads(pickle.dumps(snap)), reps))  # noqa: B023
        rows["bytes"].append(len(pickle.dumps(snap)))

        def replay(actions: list[str] = actions, seed: int = seed) -> None:
            env.reset(seed=seed, options={"task_index": seed})
            for a in actions:
                env.step(a)

        rows["replay"].append(median_us(replay, reps))
    env.close()
    return {k: statistics.median(v) for k, v in rows.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=20, help="mid-episode states per env")
    parser.add_argument("--reps", type=int, default=50, help="timed repetitions per state")
    parser.add_argument("--quick", action="store_true", help="5 states x 10 repetitions")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    episodes, reps = (5, 10) if args.quick else (args.episodes, args.reps)
    rows = []
    for label, env_id, kwargs, turns in ENVS:
        r = bench_env(env_id, kwargs, turns, episodes, reps)
        fork = r["snapshot"] + r["restore"]
        rows.append({"env": label, "turn": turns, "snapshot us": r["snapshot"], "restore us": r["restore"],
                     "pickle round trip us": r["pickle"], "pickled bytes": int(r["bytes"]),
                     "replay from start us": r["replay"], "replay / fork": r["replay"] / fork})  # fmt: skip
        print(f"{label}: fork {fork:.1f} us, replay {r['replay']:.1f} us", flush=True)
    print()
    print(format_table(rows))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
