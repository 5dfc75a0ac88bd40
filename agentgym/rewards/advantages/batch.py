"""``TurnBatch``: the ragged batch every registered estimator reads (``fn(batch, **params)``)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agentgym.rewards.advantages.base import ArrayLike, _keys, _ragged, _vec
from agentgym.rewards.advantages.signals import TurnSignal, _signal_rows, observation_anchors

if TYPE_CHECKING:
    from agentgym.contract.trajectory import Trajectory, Turn

#: The per-turn phases of ``TurnBatch.phases`` (TRUST-SQL's dual track: schema probing, then the final answer).
PHASES: tuple[str, ...] = ("exploration", "execution")


@dataclass
class TurnBatch:
    """A batch of trajectories for the turn-level estimators: per-trajectory arrays of per-turn rewards and the
    group ids, plus what some estimators need: ``outcomes`` (per trajectory; default the sum of the turn
    rewards), ``anchors`` (GiGPO, per turn: the env's state anchor, hashable or None), ``values`` (turn-PPO critic,
    ``T`` or ``T + 1`` per trajectory), ``turn_lengths`` (policy tokens per turn, UserRL's weighting),
    ``observations`` (``gigpo_obs``, per turn: a hashable key of what the agent observed, see
    :func:`observation_anchors`), ``turn_signals`` (``mt_grpo``, per turn: a verified signal or None),
    ``seq_logprobs`` (``lampo``, per trajectory: the mean log-prob of its sampled tokens), ``criticality`` (``serl``,
    per turn: a score in [0, 1]), ``segments`` (``hiper``, per turn: the index of its subgoal segment, nondecreasing
    from 0), ``phases`` (``dual_track``, per turn: ``"exploration"`` or ``"execution"``), ``exploration_rewards``
    (``dual_track``, per trajectory), ``reference_scores`` (``lampo``'s reference term, per trajectory: e.g. the
    ROUGE-L of its final answer against the gold) and ``subgoal_achieved`` (``hiper``, per turn: 1 on the last turn
    of a segment whose subgoal the env verified achieved, else 0)."""

    turn_rewards: Sequence[ArrayLike]
    group_ids: ArrayLike
    outcomes: ArrayLike | None = None
    anchors: Sequence[Sequence[Hashable | None]] | None = None
    values: Sequence[ArrayLike] | None = None
    turn_lengths: Sequence[ArrayLike] | None = None
    observations: Sequence[Sequence[Hashable]] | None = None
    turn_signals: Sequence[Sequence[float | bool | None]] | None = None
    seq_logprobs: ArrayLike | None = None
    criticality: Sequence[ArrayLike] | None = None
    segments: Sequence[ArrayLike] | None = None
    phases: Sequence[Sequence[str]] | None = None
    exploration_rewards: ArrayLike | None = None
    reference_scores: ArrayLike | None = None
    subgoal_achieved: Sequence[ArrayLike] | None = None

    def __post_init__(self) -> None:
        self.turn_rewards = _ragged(self.turn_rewards, "turn_rewards")
        n = len(self.turn_rewards)
        self.group_ids = _keys(self.group_ids, n)
        if self.outcomes is not None:
            self.outcomes = _vec(self.outcomes, "outcomes")
            if self.outcomes.size != n:
                raise ValueError(f"{self.outcomes.size} outcomes for {n} trajectories")
        if self.anchors is not None:
            self.anchors = [list(a) for a in self.anchors]
            if [len(a) for a in self.anchors] != self.lengths:
                raise ValueError("anchors must have one entry per turn")
        if self.values is not None:
            self.values = _ragged(self.values, "values")
            if len(self.values) != n:
                raise ValueError(f"{len(self.values)} value rows for {n} trajectories")
        if self.turn_lengths is not None:
            self.turn_lengths = _ragged(self.turn_lengths, "turn_lengths")
            if [t.size for t in self.turn_lengths] != self.lengths:
                raise ValueError("turn_lengths must have one entry per turn")
        if self.observations is not None:
            self.observations = [list(o) for o in self.observations]
            if [len(o) for o in self.observations] != self.lengths:
                raise ValueError("observations must have one entry per turn")
        if self.turn_signals is not None:
            self.turn_signals = _signal_rows(self.turn_signals, "turn_signals")
            if [len(s) for s in self.turn_signals] != self.lengths:
                raise ValueError("turn_signals must have one entry per turn")
        self._check_optional(n)

    def _check_optional(self, n: int) -> None:
        """Validate the fields of ``lampo``, ``serl``, ``hiper`` and ``dual_track`` (each None unless given)."""
        for name in ("seq_logprobs", "exploration_rewards", "reference_scores"):
            if getattr(self, name) is not None:
                v = _vec(getattr(self, name), name)
                if v.size != n:
                    raise ValueError(f"{name}: {v.size} values for {n} trajectories")
                setattr(self, name, v)
        if self.criticality is not None:
            self.criticality = _ragged(self.criticality, "criticality")
            if [c.size for c in self.criticality] != self.lengths:
                raise ValueError("criticality must have one entry per turn")
            if any(((c < 0) | (c > 1)).any() for c in self.criticality):
                raise ValueError("criticality must lie in [0, 1]")
        if self.subgoal_achieved is not None:
            self.subgoal_achieved = _ragged(self.subgoal_achieved, "subgoal_achieved")
            if [c.size for c in self.subgoal_achieved] != self.lengths:
                raise ValueError("subgoal_achieved must have one entry per turn")
        if self.segments is not None:
            rows = _ragged(self.segments, "segments")
            if [r.size for r in rows] != self.lengths:
                raise ValueError("segments must have one entry per turn")
            for i, r in enumerate(rows):
                if (r != np.floor(r)).any() or (r < 0).any() or (np.diff(r) < 0).any():
                    raise ValueError(f"segments[{i}]: segment indices are integers >= 0, nondecreasing, got {r}")
            self.segments = [r.astype(np.int64) for r in rows]
        if self.phases is not None:
            self.phases = [list(p) for p in self.phases]
            if [len(p) for p in self.phases] != self.lengths:
                raise ValueError("phases must have one entry per turn")
            bad = {x for p in self.phases for x in p} - set(PHASES)
            if bad:
                raise ValueError(f"phases: unknown phase(s) {sorted(map(repr, bad))}; known: {', '.join(PHASES)}")

    @property
    def lengths(self) -> list[int]:
        return [r.size for r in self.turn_rewards]

    @property
    def outcome_array(self) -> np.ndarray:
        """``outcomes``, or the sum of each trajectory's turn rewards when not given."""
        if self.outcomes is not None:
            return self.outcomes
        return np.array([math.fsum(r) for r in self.turn_rewards], dtype=np.float64)

    def permuted(self, order: Sequence[int]) -> TurnBatch:
        """The same batch with trajectories reordered (``new[j] = old[order[j]]``)."""

        def pick(x: Any) -> Any:
            return None if x is None else [x[i] for i in order]

        return TurnBatch(
            pick(self.turn_rewards),
            pick(self.group_ids),
            None if self.outcomes is None else np.asarray(self.outcomes)[list(order)],
            pick(self.anchors),
            pick(self.values),
            pick(self.turn_lengths),
            pick(self.observations),
            pick(self.turn_signals),
            None if self.seq_logprobs is None else np.asarray(self.seq_logprobs)[list(order)],
            pick(self.criticality),
            pick(self.segments),
            pick(self.phases),
            None if self.exploration_rewards is None else np.asarray(self.exploration_rewards)[list(order)],
            reference_scores=None if self.reference_scores is None else np.asarray(self.reference_scores)[list(order)],
            subgoal_achieved=pick(self.subgoal_achieved),
        )

    @classmethod
    def from_trajectories(
        cls,
        trajectories: Sequence[Trajectory],
        *,
        reward_component: str | None = None,
        outcome_component: str | None = None,
        signal: TurnSignal | str | None = None,
    ) -> TurnBatch:
        """Build from ``agentgym.contract.trajectory.Trajectory`` records. Turn rewards are ``turn.reward`` or one named
        entry of ``info["reward_components"]`` (absent = 0); ``outcomes`` the sum of ``outcome_component`` over
        the turns (None: the sum of the turn rewards). Group id: ``group_id``, else (env_id, task_id, seed).
        Anchors are the states the actions were taken in (the reset's ``info["anchor"]`` for the first turn, the
        previous step's after that; None where absent), observations the keys of what the agent saw before each
        action (:func:`observation_anchors`); turn lengths from ``token_spans`` when every turn has them;
        ``turn_signals`` read by ``signal`` (a :class:`TurnSignal`, or an info key read as it is) when given."""

        def rew(turn: Turn, name: str | None) -> float:
            return turn.reward if name is None else float(turn.info.get("reward_components", {}).get(name, 0.0))

        rewards = [[rew(t, reward_component) for t in tr.turns] for tr in trajectories]
        gids = [tr.group_id if tr.group_id is not None else (tr.env_id, tr.task_id, tr.seed) for tr in trajectories]
        outcomes = None
        if outcome_component is not None:
            outcomes = [math.fsum(rew(t, outcome_component) for t in tr.turns) for tr in trajectories]
        # a turn's anchor is the state its action was taken in: the reset's for the first turn, else the last step's
        anchors = [[(tr.turns[k - 1].info if k else tr.reset_info).get("anchor") for k in range(len(tr.turns))]
                   for tr in trajectories]  # fmt: skip
        lengths = None
        if all(t.token_spans is not None for tr in trajectories for t in tr.turns):
            lengths = [[sum(e - s for s, e in t.token_spans or ()) for t in tr.turns] for tr in trajectories]
        observations = [observation_anchors(tr.initial_observation, [t.observation for t in tr.turns])
                        for tr in trajectories]  # fmt: skip
        signals = None
        if signal is not None:
            src = TurnSignal(signal) if isinstance(signal, str) else signal
            signals = [src.read(tr.reset_info, [t.info for t in tr.turns]) for tr in trajectories]
        return cls(rewards, gids, outcomes, anchors, None, lengths, observations, signals)
