"""Where OPRL's and SWEET-RL's turn signals put their reward during a credit-signal run: the mean signal of the valid
turns the env verified right, of the valid turns it verified wrong, and of the invalid turns, iteration by iteration.

    python bench/learned_critic_displacement.py --arm oprl --seed 4 --iterations 12
    python bench/learned_critic_displacement.py --arm sweet --seed 4 --iterations 12

It reruns the first iterations of one run of the sweep (bench/credit_signals.py, Chain H = 16) from its committed
config and local warm start (``bench/results/credit_signals/chain``: run the sweep's warm starts first), watching the
turn scorer's values as the trainer computes them. Output: one table row per iteration.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import agentgym.baselines.trainer as trainer
from agentgym.baselines.config import TrainConfig

RUNS = Path(__file__).resolve().parent / "results" / "credit_signals" / "chain" / "rl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", choices=["oprl", "sweet", "spa"], default="oprl")
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=12)
    args = parser.parse_args()
    settings = json.loads((RUNS / f"Chain-H16-s{args.seed}-mt_grpo@{args.arm}" / "config.json").read_text())
    if not Path(settings["init_from"]).is_file():
        raise SystemExit(f"no warm start at {settings['init_from']}: run bench/credit_signals.py's warm starts first")
    out = tempfile.mkdtemp(prefix="displacement_")
    settings.update(iterations=args.iterations, out_dir=out, eval_every=0, checkpoint_every=0, progress=False)
    score_turns = trainer.score_turns
    rows: list[dict[str, Any]] = []

    def watched(rollouts: Any, config: Any, model: Any, tok: Any, scorer: Any = None) -> dict[str, float]:
        metrics = score_turns(rollouts, config, model, tok, scorer)
        kinds: dict[str, list[float]] = {"valid, right": [], "valid, wrong": [], "invalid": []}
        for r in rollouts:
            for info, x in zip(r.infos, r.scored_rewards, strict=True):
                if not info.get("action_valid", True):
                    kinds["invalid"].append(x)
                elif isinstance(info.get("correct"), bool):
                    kinds["valid, right" if info["correct"] else "valid, wrong"].append(x)
        rows.append({k: (len(v), float(np.mean(v)) if v else float("nan")) for k, v in kinds.items()})
        return metrics

    trainer.score_turns = watched
    try:
        trainer.train(TrainConfig.from_dict(settings))
    finally:
        trainer.score_turns = score_turns
    print(f"mt_grpo@{args.arm}, Chain H = 16, seed {args.seed}: turns and mean signal per iteration\n")
    print("| iteration | valid, right | valid, wrong | invalid |\n|---:|---:|---:|---:|")
    for it, row in enumerate(rows, 1):
        cells = " | ".join(f"{n}: {m:+.2e}" for n, m in row.values())
        print(f"| {it} | {cells} |")


if __name__ == "__main__":
    main()
