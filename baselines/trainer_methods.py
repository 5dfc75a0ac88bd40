"""The trainer-side methods: what a run keeps between iterations for them (:class:`MethodState`) and their catalogue
cards (``METHODS``).

- A^2TGPO's adaptive clip (``adaptive_clip_beta``): a per-token clip scale in the training batch
  (``credit.clip_scales`` -> ``update.clip_bounds``).
- S2D (``shaping_schedule``): the weight c(k) of a potential-based shaping component over iterations
  (``TrainConfig.shaping_scale`` -> ``credit.scale_components``). With ``PotentialShaping`` (Phi(terminal) = 0,
  ``gamma`` equal to the trainer's) every episode's shaped return is ``R - c * Phi(s_0)``; a GRPO group shares its
  task's ``s_0``, so GRPO's (and RLOO's) advantages are the same for every c: the schedule changes only the
  turn-level estimators (gtpo, a2tgpo, ...) and the critic's.
- EPO (``entropy_kappa``, ``ent_coef_final``): an entropy band penalty around the EMA of past iterations'
  entropies, and a phase schedule of ``ent_coef`` (``update.entropy_band_penalty``, ``TrainConfig.ent_coef_at``).
- AIRS (``airs_arms``): which bonus component counts each iteration, by UCB1 (baselines/airs.py).

The state (the reward wrappers' tables, the entropy EMA, the AIRS controller) is saved beside the checkpoint
(``methods.pt``), so a resumed run continues with it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

__all__ = ["METHODS", "MethodState"]


@dataclass
class MethodState:
    """What the trainer-side methods carry from one iteration to the next."""

    tables: tuple[Any, ...] = ()  # one per reward_wrappers entry (None: it keeps no table)
    entropy_ema: float | None = None  # EPO: EMA of the iterations' mean entropies (None before the first)
    extra: dict[str, Any] = field(default_factory=dict)  # other controllers' state (AIRS)
    # a persistent turn scorer (class attribute ``persistent = True``: a learned signal that fits across iterations),
    # built at its first iteration and kept; its ``state_dict()``, where it has one, is saved with the checkpoint and
    # given to the scorer built after a resume (``load_state_dict``)
    scorer: Any = None

    def turn_scorer(self, build: Callable[[], Any]) -> Any:
        """The run's turn scorer: the kept one, else ``build()`` (kept if persistent, restored from a resumed
        checkpoint's state)."""
        if self.scorer is not None:
            return self.scorer
        scorer = build()
        if getattr(scorer, "persistent", False):
            state = self.extra.pop("scorer_state", None)
            if state is not None and hasattr(scorer, "load_state_dict"):
                scorer.load_state_dict(state)
            self.scorer = scorer
        return scorer

    def observe_entropy(self, entropy: float, decay: float) -> float:
        """Fold an iteration's mean entropy into the EMA (the first iteration's entropy starts it)."""
        self.entropy_ema = entropy if self.entropy_ema is None else decay * self.entropy_ema + (1 - decay) * entropy
        return self.entropy_ema

    def save(self, path: Path) -> None:
        """Atomic write (temp file + rename), as the checkpoint."""
        tmp = path.with_suffix(".tmp")
        extra = dict(self.extra)
        if self.scorer is not None and hasattr(self.scorer, "state_dict"):
            extra["scorer_state"] = self.scorer.state_dict()
        torch.save({"tables": self.tables, "entropy_ema": self.entropy_ema, "extra": extra}, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> MethodState:
        payload = torch.load(path, weights_only=False)  # written by this run (tables are plain Python objects)
        return cls(tuple(payload["tables"]), payload["entropy_ema"], dict(payload.get("extra", {})))


METHODS: tuple[Method, ...] = (
    Method("a2tgpo_clip", "A^2TGPO", "trainer",
           "A^2TGPO with its adaptive per-turn clip range eps * (1 + beta * tanh(r~/2)) applied in the PPO-clip loss",
           needs=("group", "scoring_model"), paper=cite("A^2TGPO"), code="agentgym.baselines.credit:clip_scales",
           choices=("r~: the training turn rewards z-scored per (group, turn index), as the a2tgpo estimator does; "
                    "beta = 0.3 (knob adaptive_clip_beta); both eps_low and eps_high scale",),
           train={"algo": "grpo", "scorer": "info_gain", "estimator": "a2tgpo", "adaptive_clip_beta": 0.3},
           knobs_into="config"),
    Method("s2d", "S2D", "trainer",
           "sparse-to-dense: a potential-based shaping whose weight c(k) switches on at iteration k_switch",
           needs=("turn_signal",), paper=cite("S2D"), code="agentgym.baselines.config:TrainConfig.shaping_scale",
           choices=("c(k): 0 before start, then a step to final (ramp 0) or a linear ramp over ramp iterations "
                    "(shaping_schedule keys start, ramp, final)",
                    "applied to the recorded shaping component after the rollouts, not inside the envs, so env "
                    "pools need no message per iteration",
                    "GRPO's advantages do not change with c when Phi(s_0) is shared by the group: use a turn-level "
                    "estimator (gtpo) or a critic"),
           train={"algo": "grpo", "estimator": "gtpo",
                  "reward_wrappers": [{"name": "potential_shaping", "potential": "progress"}],
                  "shaping_schedule": {"component": "shaping", "start": 5, "ramp": 0}},
           knobs_into="config"),
    Method("epo", "EPO", "trainer",
           "entropy smoothing band kappa*max(0, |H - EMA(H)| - delta) plus a phase schedule of the entropy bonus",
           paper=cite("EPO"), code="agentgym.baselines.update:entropy_band_penalty",
           choices=("H: the minibatch's token-mean entropy; EMA over iterations' mean entropies, decay entropy_ema "
                    "= 0.9; no penalty in the first iteration (no history yet)",
                    "kappa = entropy_kappa, delta = entropy_delta = 0.1",
                    "phases: ent_coef for the first ent_coef_phase = 0.5 of the iterations, then linear to "
                    "ent_coef_final"),
           train={"algo": "grpo", "ent_coef": 0.01, "ent_coef_final": 0.0, "ent_coef_phase": 0.5,
                  "entropy_kappa": 0.1, "entropy_delta": 0.1, "entropy_ema": 0.9},
           knobs_into="config"),
    Method("airs", "AIRS", "trainer",
           "each iteration one intrinsic bonus counts, chosen by UCB1 over the extrinsic-return gain it brought",
           needs=("outcome",), paper=cite("AIRS"), code="agentgym.baselines.airs:AIRSController.of",
           choices=("arm score: mean of the arm's last airs_window = 10 gains + airs_c * sqrt(2 ln N / n_a), "
                    "airs_c = 0.1",
                    "the gain E_k - E_{k-1} of the mean extrinsic return (each episode's return without any arm's "
                    "component) is credited to the arm of iteration k - 1, whose update lies between the batches",
                    "the arms not chosen have their components zeroed in the batch before the advantages; every "
                    "arm is tried once first"),
           train={"algo": "grpo", "reward_components": "all",
                  "reward_wrappers": [{"name": "novelty", "beta": 0.1},
                                      {"name": "novelty", "beta": 0.0, "episodic": 0.1, "component": "episodic"}],
                  "airs_arms": ["novelty", "episodic"]},
           knobs_into="config"),
)  # fmt: skip
