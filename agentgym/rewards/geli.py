"""GELI (docs/step-labels.md): turn rewards learned by decomposing a dialogue-level reward, shaped by local signals.

A linear turn reward model ``r_theta(x_t) = theta . x_t`` over features ``x_t`` of each turn is fit on logged
dialogues to the global explicit reward ``R`` (the ``outcome`` component summed over the dialogue) and the local
implicit signals ``l_t`` (``info[local_key]``: the simulated user's per-turn ``satisfaction`` on the user-simulation
envs):

    L(theta) = sum_dialogues (R - sum_t r_theta(x_t))^2 + lam * sum_t (r_theta(x_t) - l_t)^2 + ridge * ||theta||^2

(closed form: least squares on the stacked rows, the minimum-norm solution where it is not unique; a turn without
``l_t`` is in the first term only). ``r_theta`` then gives the turn rewards. :class:`GELIScorer` refits on every call
from the dialogues of the call plus a bounded replay of earlier ones (``replay`` dialogues, the oldest dropped
first); the trainer keeps one scorer per run (``persistent``).

Turn features (``features``, concatenated in order): ``"bias"`` (1), ``"valid"`` (``info["action_valid"]``),
``"final"`` (1 on the last turn), ``"position"`` ((t + 1) / T), ``"length"`` (the action's characters / 1000, at most
1), ``"words"`` (a hashed bag of the action's lower-case words, ``dim`` buckets, normalised to sum 1), ``"local"``
(``l_t`` itself, 0 where absent) and ``"info:KEY"`` (``float(info[KEY])``, 0 where absent).

Worked example: features ``("bias",)`` make every turn's reward the same w. Dialogue 1 has two turns, R = 1,
l = (0, 1); dialogue 2 one turn, R = 0, l = (0,). L(w) = (1 - 2w)^2 + w^2 + lam * (w^2 + (w - 1)^2 + w^2): at
lam = 0, dL/dw = 10w - 4 = 0 gives w = 0.4; at lam = 1, 16w - 6 = 0 gives w = 0.375.

>>> from agentgym.contract.trajectory import Trajectory, Turn
>>> def dialogue(r, local):
...     turns = [Turn("a", [], 0.0, False, False, {"satisfaction": x}) for x in local]
...     turns[-1].info["reward_components"] = {"outcome": r}
...     return Trajectory("e", 0, "t", "x", [], {}, turns)
>>> group = [dialogue(1.0, [0.0, 1.0]), dialogue(0.0, [0.0])]
>>> [round(x, 6) for x in GELIScorer(features=("bias",), lam=0.0, ridge=0.0)(group)[0].rewards]
[0.4, 0.4]
>>> [round(x, 6) for x in GELIScorer(features=("bias",), lam=1.0, ridge=0.0)(group)[1].rewards]
[0.375]
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.base import Replay, TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.process import outcome_of

#: The named turn features (besides ``"info:KEY"``).
FEATURES: tuple[str, ...] = ("bias", "valid", "final", "position", "length", "words", "local")
_WORD = re.compile(r"[a-z0-9]+")


@dataclass
class Dialogue:
    """One logged dialogue for the fit: its turn features ``(T, F)``, global reward and local signals (NaN: none)."""

    x: np.ndarray
    reward: float
    local: np.ndarray


@dataclass
class GELIScorer(TurnScorer):
    """GELI's decomposed turn reward model (see the module docstring). Knobs: ``lam`` (the local term's weight),
    ``local_key`` (the info key of l_t), ``outcome`` (the reward component that is R), ``features``, ``dim`` (hashed
    word buckets), ``ridge`` (L2 weight), ``replay`` (the most dialogues kept for the fit, this call's included).
    ``last_fit`` reports the latest fit: dialogues, turns and the mean squared errors of both terms."""

    persistent: ClassVar[bool] = True

    lam: float = 1.0
    local_key: str = "satisfaction"
    outcome: str = "outcome"
    features: tuple[str, ...] = ("bias", "valid", "final", "position", "length", "words")
    dim: int = 64
    ridge: float = 1e-3
    replay: int = 512
    name: str = "geli"
    theta: np.ndarray | None = field(default=None, init=False, repr=False)
    last_fit: dict[str, float] = field(default_factory=dict, init=False)
    _memory: Replay[Dialogue] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.features = tuple(self.features)
        bad = [f for f in self.features if f not in FEATURES and not (f.startswith("info:") and len(f) > 5)]
        if bad or not self.features:
            raise ValueError(f"unknown features {bad}; known: {', '.join(FEATURES)} and 'info:KEY'")
        if self.lam < 0 or self.ridge < 0 or self.dim < 1 or self.replay < 1:
            raise ValueError("need lam >= 0, ridge >= 0, dim >= 1 and replay >= 1")
        self._memory = Replay(self.replay)

    @property
    def memory(self) -> int:
        """How many dialogues the replay holds (at most ``replay``)."""
        return len(self._memory)

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs (the trainer saves it beside each checkpoint): the replay and the fit."""
        return {"memory": self._memory.state_dict(), "theta": self.theta, "last_fit": dict(self.last_fit)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s replay (the newest ``replay`` dialogues) and fit."""
        self._memory.load_state_dict(state["memory"])
        self.theta, self.last_fit = state["theta"], dict(state.get("last_fit", {}))

    # ------------------------------------------------------------------------------------------- features

    def _words(self, action: str) -> np.ndarray:
        v = np.zeros(self.dim)
        words = _WORD.findall(action.lower())
        for w in words:
            v[zlib.crc32(w.encode()) % self.dim] += 1.0
        return v / len(words) if words else v

    def turn_features(self, traj: Trajectory) -> np.ndarray:
        """``(T, F)``: one feature row per turn of ``traj``."""
        n = len(traj.turns)
        rows = []
        for t, turn in enumerate(traj.turns):
            parts: list[Any] = []
            for f in self.features:
                if f == "bias":
                    parts.append(1.0)
                elif f == "valid":
                    parts.append(float(bool(turn.info.get("action_valid", True))))
                elif f == "final":
                    parts.append(float(t == n - 1))
                elif f == "position":
                    parts.append((t + 1) / n)
                elif f == "length":
                    parts.append(min(len(turn.action) / 1000.0, 1.0))
                elif f == "words":
                    parts.append(self._words(turn.action))
                else:
                    key = self.local_key if f == "local" else f[5:]
                    value = turn.info.get(key)
                    parts.append(0.0 if value is None else float(value))
            rows.append(np.hstack([np.atleast_1d(np.asarray(p, dtype=np.float64)) for p in parts]))
        width = sum(self.dim if f == "words" else 1 for f in self.features)
        return np.vstack(rows) if rows else np.zeros((0, width))

    def local(self, traj: Trajectory) -> np.ndarray:
        """l_t per turn (NaN where the turn's info has no ``local_key``)."""
        vals = [turn.info.get(self.local_key) for turn in traj.turns]
        return np.array([math.nan if v is None else float(v) for v in vals], dtype=np.float64)

    # ------------------------------------------------------------------------------------------- fit

    def fit(self, dialogues: Sequence[Dialogue]) -> np.ndarray:
        """theta minimising the loss of the module docstring over ``dialogues`` (and set ``last_fit``)."""
        width = dialogues[0].x.shape[1]
        rows, targets = [], []
        for d in dialogues:
            rows.append(d.x.sum(axis=0))
            targets.append(d.reward)
        if self.lam > 0:
            s = math.sqrt(self.lam)
            for d in dialogues:
                keep = ~np.isnan(d.local)
                rows.extend(s * d.x[keep])
                targets.extend(s * d.local[keep])
        if self.ridge > 0:
            rows.extend(math.sqrt(self.ridge) * np.eye(width))
            targets.extend([0.0] * width)
        a, b = np.vstack(rows), np.asarray(targets, dtype=np.float64)
        theta = np.linalg.lstsq(a, b, rcond=None)[0]
        sums = np.array([float((d.x @ theta).sum()) for d in dialogues])
        rewards = np.array([d.reward for d in dialogues])
        local = [(d.x @ theta - d.local)[~np.isnan(d.local)] for d in dialogues]
        flat = np.concatenate(local) if local else np.zeros(0)
        self.last_fit = {
            "dialogues": float(len(dialogues)),
            "turns": float(sum(d.x.shape[0] for d in dialogues)),
            "mse_global": float(np.mean((sums - rewards) ** 2)),
            "mse_local": float(np.mean(flat**2)) if flat.size else 0.0,
        }
        return theta

    # ------------------------------------------------------------------------------------------- scoring

    def score_groups(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[TurnScores]]:
        """Add the batch's dialogues to the replay, refit on the replay, then score every trajectory."""
        feats = [[self.turn_features(traj) for traj in group] for group in groups]
        self._memory.extend(Dialogue(x, outcome_of(traj, self.outcome), self.local(traj))
                            for group, xs in zip(groups, feats, strict=True)
                            for traj, x in zip(group, xs, strict=True) if traj.turns)  # fmt: skip
        if self._memory:
            self.theta = self.fit(list(self._memory))
        out = []
        for group, xs in zip(groups, feats, strict=True):
            scores = []
            for traj, x in zip(group, xs, strict=True):
                r = [0.0] * len(traj.turns) if self.theta is None else [float(v) for v in x @ self.theta]
                scores.append(TurnScores(self.name, r, extras={"local": [float(v) for v in self.local(traj)]}))
            out.append(scores)
        return out

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        return self.score_groups([group])[0]


METHODS: tuple[Method, ...] = (
    Method("geli", "GELI", "scorer",
           "a turn reward model fit so its sum matches the dialogue's reward, shaped towards local per-turn signals",
           needs=("learned_model", "outcome", "turn_signal"), paper=cite("GELI"), code=f"{__name__}:GELIScorer",
           choices=("loss (R - sum_t r_theta)^2 + lam * sum_t (r_theta - l_t)^2 + ridge * |theta|^2, lam = 1 "
                    "(knob lam), ridge = 1e-3 (knob ridge)",
                    "r_theta linear over turn features: bias, action validity, last-turn flag, position, action length "
                    "and a 64-bucket hashed bag of the action's words (knobs features, dim); closed-form least squares",
                    "l_t: the simulated user's per-turn info['satisfaction'] (knob local_key): on the last turn the "
                    "outcome, before it the share of the goal the user stated in reply to the turn",
                    "refit every iteration on the batch plus a replay of at most 512 dialogues (knob replay)",
                    "R: the dialogue's 'outcome' component (knob outcome); r_theta is added to the outcome "
                    "(scorer_coef) and read by gtpo"),
           train={"algo": "grpo", "scorer": f"{__name__}:GELIScorer", "estimator": "gtpo",
                  "reward_components": ["outcome"], "env_id": "agentgym/Clarify-v0", "env_kwargs": {}},
           knobs_into="scorer_kwargs"),
)  # fmt: skip
