"""A run's state and what it leaves on disk: ``TrainState``, atomic checkpoints, the metrics log and its plot.

``out_dir/checkpoint.pt`` holds the policy, value head, optimizer, reference model, iteration and config (written to
a temp file and renamed, so a kill never leaves half a checkpoint); ``out_dir/metrics.jsonl`` gets one JSON line per
iteration, appended and flushed; :func:`read_history` skips a line cut by a crash and what lies past the checkpoint.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentgym.baselines.config import TrainConfig

__all__ = ["TrainState", "append_metrics", "jsonable", "load_checkpoint", "load_weights", "plot_metrics",
           "read_history", "save_checkpoint"]  # fmt: skip


@dataclass
class TrainState:
    """What a run holds between iterations."""

    model: Any
    tokenizer: Any
    ref_model: Any
    value_head: torch.nn.Linear | None
    optimizer: torch.optim.Optimizer
    policy: Any  # the rollout back-end (agentgym.baselines.backends)
    iteration: int = 0  # iterations completed
    envs: Any = field(default_factory=list)  # rollout envs (a list, or an agentgym.running.pool.EnvPool), reused
    eval_envs: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for env in [*(self.envs if isinstance(self.envs, list) else [self.envs]), *self.eval_envs]:
            env.close()
        self.envs, self.eval_envs = [], []
        if hasattr(self.policy, "close"):
            self.policy.close()


def save_checkpoint(state: TrainState, config: TrainConfig, path: Path) -> None:
    """Atomic write (temp file + rename) of the policy, value head, optimizer, iteration and config."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": state.model.state_dict(),
        "value_head": None if state.value_head is None else state.value_head.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "ref_model": None if state.ref_model is None else state.ref_model.state_dict(),
        "iteration": state.iteration,
        "config": asdict(config),
    }
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(state: TrainState, path: Path) -> None:
    payload = torch.load(path, map_location=next(state.model.parameters()).device, weights_only=False)
    state.model.load_state_dict(payload["model"])
    if state.value_head is not None and payload["value_head"] is not None:
        state.value_head.load_state_dict(payload["value_head"])
    state.optimizer.load_state_dict(payload["optimizer"])
    if state.ref_model is not None and payload.get("ref_model") is not None:
        state.ref_model.load_state_dict(payload["ref_model"])
    state.iteration = int(payload["iteration"])


def load_weights(state: TrainState, path: str | os.PathLike[str]) -> None:
    """Start from the policy weights of a checkpoint (policy and reference; optimizer and iteration stay fresh)."""
    payload = torch.load(path, map_location=next(state.model.parameters()).device, weights_only=False)
    for model in (state.model, state.ref_model):
        if model is not None:
            model.load_state_dict(payload["model"])


def read_history(path: Path, upto: int) -> list[dict[str, Any]]:
    """The metrics records of iterations ``<= upto`` (a line cut by a crash is skipped)."""
    history = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("iteration", 0) <= upto:
            history.append(rec)
    return history


def jsonable(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with non-finite floats as None (JSON has no NaN)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def append_metrics(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, flushed at once."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(jsonable(record)) + "\n")


def plot_metrics(history: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """A grid of the main curves (PNG); None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    keys = [
        "reward_mean",
        "success_rate",
        "eval_success_rate",
        "loss",
        "approx_kl",
        "kl_ref",
        "clip_frac",
        "entropy",
        "zero_std_group_frac",
        "explained_variance",
        "grad_norm",
        "rollout_tokens_per_s",
    ]
    fig, axes = plt.subplots(3, 4, figsize=(16, 9))
    for ax, key in zip(axes.flat, keys, strict=True):
        points = [(h["iteration"], h[key]) for h in history if h.get(key) is not None]
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o")
        ax.set_title(key)
        ax.set_xlabel("iteration")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
