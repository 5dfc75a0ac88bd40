"""How well SPA's learned progress estimator (``agentgym.rewards.learned.ProgressEstimator``) recovers the verified
per-turn correctness of the diagnostics, from outcomes alone.

For each env (Chain-v0, Umbrella-v0) and horizon H, a seeded agent of per-turn accuracy p (``NoisyAgent``: the right
option with probability p, else a uniformly drawn wrong option; with probability ``invalid`` a malformed reply) plays
N episodes; the estimator is fitted on them (one batch) and its contributions c_t are compared with the env's
verified ``info["correct"]`` on the decisive turns (distractor turns have none):

* ``corr``: Pearson correlation of c_t with 1[correct];
* ``auc``: the probability that a random correct turn gets a higher c_t than a random wrong one (ties count 1/2);
* ``distractor_mass``: mean |c_t| on distractor turns over mean |c_t| on decisive turns (Umbrella: 0 is perfect
  credit, 1 is no better than spreading it evenly);

against the naive baseline of the same episodes: the outcome R broadcast to every turn. Episode seeds, agent seeds
and the estimator's seed are fixed, so a run is reproducible.

    nice -n 10 python bench/learned_signal_quality.py --models linear --out bench/results/learned_signal_quality
    nice -n 10 python bench/learned_signal_quality.py --models mlp --seeds 0 --append \
        --out bench/results/learned_signal_quality
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.agent import GoldAgent, Message
from agentgym.contract.trajectory import Trajectory
from agentgym.envs.diagnostics.agents import OPTIONS_MARK
from agentgym.rewards.learned import ProgressEstimator
from agentgym.running.episode import run_episode


class NoisyAgent(GoldAgent):
    """Right with probability ``p`` per turn (reads the gold), else a uniformly drawn wrong option of the latest
    observation; with probability ``invalid`` a malformed reply instead (drawn first)."""

    name = "noisy"

    def __init__(self, p: float = 0.75, invalid: float = 0.0) -> None:
        super().__init__()
        self.p, self.invalid = float(p), float(invalid)

    def play(self, turn: int, messages: list[Message]) -> str:
        if self.invalid and self.np_random.random() < self.invalid:
            return "<answer> none </answer>"
        right = self.gold["choices"][turn]
        if self.np_random.random() < self.p:
            return f"<answer> {right} </answer>"
        text = str(messages[-1].get("content") or "")
        options = text[text.rfind(OPTIONS_MARK) + len(OPTIONS_MARK) :].rstrip(".").split()
        wrong = [o for o in options if o != right]
        return f"<answer> {wrong[int(self.np_random.integers(len(wrong)))]} </answer>"


def play(
    env_id: str, horizon: int, episodes: int, *, p: float, invalid: float = 0.0, seed: int = 0
) -> list[Trajectory]:
    """``episodes`` episodes of ``NoisyAgent(p, invalid)`` on ``env_id`` at ``horizon``, seeds ``seed, seed+1, ...``."""
    env = gym.make(env_id, horizon=horizon)
    agent = NoisyAgent(p, invalid)
    try:
        return [run_episode(env, agent, seed=seed + i, env_id=env_id) for i in range(episodes)]
    finally:
        env.close()


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """P(score of a random positive > score of a random negative), ties 1/2 (Mann-Whitney); NaN without both kinds.

    >>> auc([0.9, 0.1, 0.5], [True, False, False]), auc([1.0, 1.0], [True, False])
    (1.0, 0.5)
    """
    pos = np.array([s for s, y in zip(scores, labels, strict=True) if y])
    neg = np.array([s for s, y in zip(scores, labels, strict=True) if not y])
    if not len(pos) or not len(neg):
        return math.nan
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def corr(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation; NaN where either side is constant."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(a) < 2 or a.std() == 0 or b.std() == 0:
        return math.nan
    return float(np.corrcoef(a, b)[0, 1])


def quality(trajs: Sequence[Trajectory], per_turn: Sequence[Sequence[float]]) -> dict[str, float]:
    """corr, auc (decisive turns, against ``info["correct"]``) and distractor_mass of per-turn scores."""
    scores, labels, distractor, decisive = [], [], [], []
    for traj, values in zip(trajs, per_turn, strict=True):
        for turn, v in zip(traj.turns, values, strict=True):
            correct = turn.info.get("correct")
            if correct is None:
                distractor.append(abs(v))
            else:
                scores.append(v)
                labels.append(bool(correct))
                decisive.append(abs(v))
    mass = float(np.mean(distractor) / np.mean(decisive)) if distractor and np.mean(decisive) > 0 else math.nan
    return {"corr": corr(scores, [float(y) for y in labels]), "auc": auc(scores, labels), "distractor_mass": mass}


def measure(env_id: str, horizon: int, episodes: int, *, p: float, seed: int = 0, **knobs: Any) -> dict[str, Any]:
    """Fit the estimator on one batch of episodes and compare its c_t, and the broadcast outcome, with the truth."""
    trajs = play(env_id, horizon, episodes, p=p, seed=seed)
    spa = ProgressEstimator(**knobs)
    scores = spa.score_groups([trajs])[0]
    progress = [s.extras["progress"] for s in scores]
    broadcast = [[float(traj.success)] * len(traj.turns) for traj in trajs]
    fit = spa.last_fit
    assert fit is not None
    return {
        "env": env_id, "horizon": horizon, "episodes": episodes, "p": p, "seed": seed, "knobs": knobs,
        "success_rate": float(np.mean([t.success for t in trajs])),
        "mse_before": fit.mse_before, "mse_after": fit.mse_after,
        "spa": quality(trajs, progress), "broadcast": quality(trajs, broadcast),
    }  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", nargs="+", default=["agentgym/Chain-v0", "agentgym/Umbrella-v0"])
    ap.add_argument("--horizons", nargs="+", type=int, default=[4, 8, 16])
    ap.add_argument("--episodes", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--p", type=float, default=0.75)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--models", nargs="+", default=["linear", "mlp"])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--append", action="store_true", help="add to the rows already in --out (the table shows all)")
    args = ap.parse_args(argv)
    rows = []
    if args.append and args.out is not None and (args.out / "results.jsonl").exists():
        rows = [json.loads(line) for line in (args.out / "results.jsonl").read_text().splitlines() if line]
    for env_id in args.envs:
        for h in args.horizons:
            for n in args.episodes:
                for model in args.models:
                    for seed in args.seeds:
                        start = time.perf_counter()
                        row = measure(env_id, h, n, p=args.p, seed=1000 * seed, model=model)
                        row["seconds"] = round(time.perf_counter() - start, 2)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    table = summary(rows)
    print(table)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (args.out / "summary.md").write_text(table)
    return 0


def summary(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table: mean (min..max over seeds) of each metric per env, H, N and model."""
    keys: dict[tuple[str, int, int, str], list[dict[str, Any]]] = {}
    for r in rows:
        keys.setdefault((r["env"], r["horizon"], r["episodes"], r["knobs"].get("model", "linear")), []).append(r)

    def cell(values: list[float]) -> str:
        v = [x for x in values if not math.isnan(x)]
        return "n/a" if not v else f"{np.mean(v):.2f} ({min(v):.2f}..{max(v):.2f})"

    lines = ["| env | H | N | model | success | corr SPA | corr broadcast | AUC SPA | AUC broadcast "
             "| distractor mass SPA | distractor mass broadcast |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for (env, h, n, model), rs in keys.items():
        m = [cell([r[a][b] for r in rs]) for b in ("corr", "auc", "distractor_mass") for a in ("spa", "broadcast")]
        lines.append(f"| {env.split('/')[-1]} | {h} | {n} | {model} | {np.mean([r['success_rate'] for r in rs]):.2f} "
                     f"| {' | '.join(m)} |")  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
