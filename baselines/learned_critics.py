"""Learned turn rewards that train a second language model during RL: OPRL and SWEET-RL (docs/learned-critics.md).

Both are persistent turn scorers (``persistent = True``: the trainer builds one per run and reuses it every
iteration, saving its ``state_dict`` beside the checkpoints). Each iteration, ``score_groups`` sees the whole batch:
it draws preference pairs inside each group (a higher over a lower outcome), takes ``steps`` optimiser steps on them,
then scores every turn with the updated model. A turn's value is a log-ratio of its action tokens between a
trainable model and a frozen reference, both over the same text:

- OPRL (:class:`OPRLScorer`): an implicit process reward model. ``pi_phi`` is a copy of the policy at the start of
  the run, ``pi_ref`` a frozen copy; ``r_t = beta * sum_{tokens of a_t} log(pi_phi / pi_ref)``, trained by
  trajectory-level DPO, ``L = -log sigmoid(sum_t r_t(tau+) - sum_t r_t(tau-))``.
- SWEET-RL (:class:`SweetRLScorer`): a critic that reads the training-time information the policy never sees
  (the env's ``reset_info["gold"]``, rendered into a system message before the conversation).
  ``A_t = beta * mean_{tokens of a_t} log(pi_critic / pi_ref)`` given that message, trained by Bradley-Terry on
  summed turn advantages, ``P(tau+ > tau-) = sigmoid(sum_t A_t(tau+) - sum_t A_t(tau-))``.

The texts are re-rendered from the trajectories with the scorer's tokenizer (``render_trajectory``: the chat
template, message by message); a turn's tokens are its action's text (``TurnSpans.action_content``), so the template's
role header and end marker are not part of ``a_t``. The gradient of the pair loss is taken in two passes (the
sequence totals without a graph, then each micro-batch's ``sum_i dL/dR_i * R_i`` backwards), so a step never holds
more than one micro-batch's graph.

>>> turn_values(torch.tensor([0.2, -0.1, 0.3]), [2, 1], "sum").tolist()  # two turns: 0.2 - 0.1, then 0.3
[0.10000000149011612, 0.30000001192092896]
>>> round(float(pair_loss(torch.tensor([0.4]), torch.tensor([-0.2]))), 4)  # -log sigmoid(0.6)
0.4375
"""

from __future__ import annotations

import copy
import inspect
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.answer_scoring import render_trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

__all__ = ["GOLD_HEADER", "METHODS", "OPRLScorer", "SweetRLScorer", "gold_message", "pair_loss", "preference_pairs",
           "trajectory_outcome", "turn_values", "with_gold"]  # fmt: skip

Reduce = Literal["sum", "mean"]
#: The first words of the message that carries the training-time information to SWEET-RL's critic.
GOLD_HEADER = "Training-time information (never shown to the policy):"


# ------------------------------------------------------------------------------------------------ pure parts


def trajectory_outcome(traj: Trajectory, component: str = "outcome") -> float:
    """The outcome pairs are ranked by: the sum of the turns' reward component ``component`` where any turn reports
    it, else the trajectory's total reward."""
    comps = [t.info.get("reward_components", {}) for t in traj.turns]
    if any(component in c for c in comps):
        return math.fsum(float(c.get(component, 0.0)) for c in comps)
    return traj.total_reward


def preference_pairs(outcomes: Sequence[float], per_group: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Every ``(i, j)`` of one group with ``outcomes[i] > outcomes[j]`` (higher first), or ``per_group`` of them drawn
    without replacement by ``rng`` (``per_group=0``: all), in index order.

    >>> preference_pairs([1.0, 0.0, 1.0, 0.5], 0, np.random.default_rng(0))
    [(0, 1), (0, 3), (2, 1), (2, 3), (3, 1)]
    """
    pairs = [(i, j) for i, a in enumerate(outcomes) for j, b in enumerate(outcomes) if a > b]
    if per_group > 0 and len(pairs) > per_group:
        keep = rng.choice(len(pairs), size=per_group, replace=False)
        pairs = [pairs[k] for k in sorted(keep.tolist())]
    return pairs


def turn_values(token_values: torch.Tensor, lengths: Sequence[int], reduce: Reduce) -> torch.Tensor:
    """Per turn, the sum (or mean; 0 for a turn of no tokens) of its consecutive entries of ``token_values``
    (``lengths[t]`` tokens for turn t, in order)."""
    if sum(lengths) != token_values.numel():
        raise ValueError(f"{token_values.numel()} token values for turns of {list(lengths)} tokens")
    if not lengths:
        return token_values.new_zeros(0)
    parts = torch.split(token_values, list(lengths))
    return torch.stack([p.sum() if reduce == "sum" or p.numel() == 0 else p.mean() for p in parts])


def pair_loss(plus: torch.Tensor, minus: torch.Tensor) -> torch.Tensor:
    """``mean -log sigmoid(plus - minus)`` over the pairs: trajectory DPO (OPRL) or Bradley-Terry (SWEET-RL) on the
    summed turn values of the preferred and the other trajectory."""
    return -torch.nn.functional.logsigmoid(plus - minus).mean()


def _pair_numbers(d: torch.Tensor) -> tuple[float, float]:
    """The pair loss ``mean -log sigmoid(d)`` and the share of pairs ranked right (``d > 0``; a tie counts half)."""
    d = d.double()
    return float(-torch.nn.functional.logsigmoid(d).mean()), float(((d > 0).double() + 0.5 * (d == 0).double()).mean())


def gold_message(gold: Any) -> str:
    """The training-time information as SWEET-RL's critic reads it: ``GOLD_HEADER`` and the value as JSON (keys
    sorted).

    >>> gold_message({"choices": ["red", "blue"]})
    'Training-time information (never shown to the policy): {"choices": ["red", "blue"]}'
    """
    return f"{GOLD_HEADER} {json.dumps(gold, sort_keys=True, ensure_ascii=False, default=str)}"


def with_gold(traj: Trajectory, text: str) -> Trajectory:
    """A copy of ``traj`` whose conversation starts with ``text``: appended to its system message, or as a system
    message of its own before the first message (``traj`` itself is left as it is)."""
    first = traj.initial_observation[0] if traj.initial_observation else None
    if first is not None and first.get("role") == "system" and isinstance(first.get("content"), str):
        head = [{**first, "content": f"{first['content']}\n\n{text}"}]
        rest = list(traj.initial_observation[1:])
    else:
        head, rest = [{"role": "system", "content": text}], list(traj.initial_observation)
    return replace(traj, initial_observation=[*head, *rest])


# ------------------------------------------------------------------------------------------------ models


@dataclass(frozen=True)
class _Encoded:
    """A rendered trajectory: its token ids and, per turn, the ``[start, end)`` of its action's tokens."""

    ids: tuple[int, ...]
    spans: tuple[tuple[int, int], ...]

    @property
    def lengths(self) -> list[int]:
        return [e - s for s, e in self.spans]

    @property
    def positions(self) -> list[int]:
        return [p for s, e in self.spans for p in range(s, e)]


class _RatioModel:
    """A trainable causal LM and its frozen reference over one tokenizer: the log-ratio of every action token."""

    def __init__(self, model: Any, tokenizer: Any, *, lr: float, batch_size: int, max_grad_norm: float) -> None:
        if lr <= 0 or batch_size < 1 or max_grad_norm <= 0:
            raise ValueError(f"lr and max_grad_norm must be > 0 and batch_size >= 1, got {lr}, {max_grad_norm}, "
                             f"{batch_size}")  # fmt: skip
        self.model = model.eval()  # eval: no dropout, so the two passes of a step see the same function
        self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        for p in self.model.parameters():
            p.grad = None
        self.tokenizer = tokenizer
        self.batch_size = int(batch_size)
        self.max_grad_norm = float(max_grad_norm)
        self.params = [p for p in self.model.parameters() if p.requires_grad]  # the policy's trainable layers
        if not self.params:
            raise ValueError("the model to train has no parameter that requires grad")
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=0.0)
        self._keep = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad if pad is not None else 0)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode(self, traj: Trajectory) -> _Encoded:
        r = render_trajectory(traj, self.tokenizer)
        return _Encoded(tuple(r.ids), tuple(t.action_content for t in r.turns))

    def _logprobs(self, model: Any, encs: Sequence[_Encoded]) -> list[torch.Tensor]:
        """Per sequence, the log-probs of its action tokens (turn after turn) under ``model``, float32."""
        out: list[torch.Tensor] = []
        dev = self.device
        for at in range(0, len(encs), self.batch_size):
            chunk = encs[at : at + self.batch_size]
            wanted = [e.positions for e in chunk]
            rows = sorted({p - 1 for w in wanted for p in w})
            if not rows:
                out += [torch.zeros(0, device=dev) for _ in chunk]
                continue
            width = max(len(e.ids) for e in chunk)
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long, device=dev)
            mask = torch.zeros((len(chunk), width), dtype=torch.long, device=dev)
            for b, e in enumerate(chunk):
                ids[b, : len(e.ids)] = torch.tensor(e.ids, dtype=torch.long, device=dev)
                mask[b, : len(e.ids)] = 1
            keep = torch.tensor(rows, dtype=torch.long, device=dev)
            if self._keep:
                logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=keep).logits
            else:
                logits = model(input_ids=ids, attention_mask=mask).logits[:, keep]
            logp = torch.log_softmax(logits.float(), dim=-1)
            index = {r: k for k, r in enumerate(rows)}
            for b, w in enumerate(wanted):
                k = torch.tensor([index[p - 1] for p in w], dtype=torch.long, device=dev)
                t = torch.tensor([chunk[b].ids[p] for p in w], dtype=torch.long, device=dev)
                out.append(logp[b, k, t])
        return out

    def reference_logprobs(self, encs: Sequence[_Encoded]) -> list[torch.Tensor]:
        with torch.no_grad():
            return self._logprobs(self.reference, encs)

    def ratios(self, encs: Sequence[_Encoded], ref: Sequence[torch.Tensor], *, grad: bool) -> list[torch.Tensor]:
        """Per sequence, ``log pi(token) - log pi_ref(token)`` of its action tokens."""
        with torch.set_grad_enabled(grad):
            return [lp - r for lp, r in zip(self._logprobs(self.model, encs), ref, strict=True)]

    def step(self, encs: Sequence[_Encoded], ref: Sequence[torch.Tensor], weights: Sequence[float],
             value: Any) -> float:  # fmt: skip
        """One optimiser step on ``sum_i weights[i] * value(ratios_i)`` (micro-batch by micro-batch); the gradient
        norm before clipping."""
        self.optimizer.zero_grad(set_to_none=True)
        with torch.enable_grad():
            for at in range(0, len(encs), self.batch_size):
                part = range(at, min(at + self.batch_size, len(encs)))
                ratios = self.ratios([encs[i] for i in part], [ref[i] for i in part], grad=True)
                total = sum((weights[i] * value(encs[i], x) for i, x in zip(part, ratios, strict=True)),
                            start=torch.zeros((), device=self.device))  # fmt: skip
                if total.requires_grad:
                    total.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "reference": self.reference.state_dict(),
                "optimizer": self.optimizer.state_dict()}  # fmt: skip

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.reference.load_state_dict(state["reference"])
        self.optimizer.load_state_dict(state["optimizer"])


# ------------------------------------------------------------------------------------------------ scorers


class _PairwiseScorer(TurnScorer):
    """Fit on the batch's preference pairs, then score every turn (see the module docstring). Subclasses set
    ``name``, ``reduce`` and ``beta`` and build ``self.lm``; they may render the text differently (``text_of``)."""

    persistent: ClassVar[bool] = True
    reduce: Reduce = "sum"
    beta: float = 1.0
    lm: _RatioModel

    def _setup(self, *, steps: int, pairs_per_group: int, outcome_component: str, seed: int) -> None:
        if steps < 0 or pairs_per_group < 0:
            raise ValueError(f"steps and pairs_per_group must be >= 0, got {steps}, {pairs_per_group}")
        self.steps = int(steps)
        self.pairs_per_group = int(pairs_per_group)
        self.outcome_component = outcome_component
        self.seed = int(seed)
        self.fits = 0  # how many batches it has fitted on (its pair draws follow from (seed, fits))
        #: the last fit's numbers: pairs, the pair loss and accuracy before and after its steps, the gradient norms
        self.last_fit: dict[str, float] = {}

    def text_of(self, traj: Trajectory) -> Trajectory:
        return traj

    def _values(self, enc: _Encoded, ratios: torch.Tensor) -> torch.Tensor:
        return self.beta * turn_values(ratios, enc.lengths, self.reduce)

    def _total(self, enc: _Encoded, ratios: torch.Tensor) -> torch.Tensor:
        return self._values(enc, ratios).sum()

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        return self.score_groups([list(group)])[0]

    def score_groups(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[TurnScores]]:
        """Fit on the batch's pairs (``steps`` steps), then score every turn of every group with the fitted model."""
        flat = [t for g in groups for t in g]
        encs = [self.lm.encode(self.text_of(t)) for t in flat]
        ref = self.lm.reference_logprobs(encs)
        rng = np.random.default_rng([self.seed, self.fits])
        pairs: list[tuple[int, int]] = []
        at = 0
        for g in groups:
            outcomes = [trajectory_outcome(t, self.outcome_component) for t in g]
            pairs += [(at + i, at + j) for i, j in preference_pairs(outcomes, self.pairs_per_group, rng)]
            at += len(g)
        self.fits += 1
        fit = self.fit(encs, ref, pairs)
        with torch.no_grad():
            values = [self._values(e, x) for e, x in zip(encs, self.lm.ratios(encs, ref, grad=False), strict=True)]
        if pairs:
            loss, accuracy = _pair_numbers(torch.stack([values[i].sum() - values[j].sum() for i, j in pairs]))
            fit.update(loss_after=loss, accuracy_after=accuracy)
        self.last_fit = fit
        out: list[list[TurnScores]] = []
        at = 0
        for g in groups:
            out.append([TurnScores(self.name, values[at + k].double().tolist()) for k in range(len(g))])
            at += len(g)
        return out

    def evaluate(self, groups: Sequence[Sequence[Trajectory]]) -> dict[str, float]:
        """The pair loss and accuracy of the current model on every (higher, lower) pair of ``groups``, without
        training (a tie counts half right)."""
        flat = [t for g in groups for t in g]
        encs = [self.lm.encode(self.text_of(t)) for t in flat]
        with torch.no_grad():
            ratios = self.lm.ratios(encs, self.lm.reference_logprobs(encs), grad=False)
            totals = [float(self._total(e, x)) for e, x in zip(encs, ratios, strict=True)]
        d: list[float] = []
        at = 0
        for g in groups:
            outcomes = [trajectory_outcome(t, self.outcome_component) for t in g]
            d += [totals[at + i] - totals[at + j] for i, j in preference_pairs(outcomes, 0, np.random.default_rng())]
            at += len(g)
        if not d:
            return {"pairs": 0.0}
        loss, accuracy = _pair_numbers(torch.tensor(d, dtype=torch.float64))
        return {"pairs": float(len(d)), "loss": loss, "accuracy": accuracy}

    def fit(self, encs: Sequence[_Encoded], ref: Sequence[torch.Tensor],
            pairs: Sequence[tuple[int, int]]) -> dict[str, float]:  # fmt: skip
        """``steps`` optimiser steps on ``pair_loss`` over ``pairs`` (indices into ``encs``); their numbers."""
        fit: dict[str, float] = {"pairs": float(len(pairs))}
        if not pairs:
            return fit
        used = sorted({i for p in pairs for i in p})
        sub = [encs[i] for i in used]
        sub_ref = [ref[i] for i in used]
        where = {i: k for k, i in enumerate(used)}
        norms = []
        for step in range(self.steps):
            with torch.no_grad():  # pass 1: the totals, and dL/dR_i of each trajectory
                ratios = self.lm.ratios(sub, sub_ref, grad=False)
                totals = torch.stack([self._total(e, x) for e, x in zip(sub, ratios, strict=True)]).double()
            d = torch.stack([totals[where[i]] - totals[where[j]] for i, j in pairs])
            if step == 0:
                fit["loss_before"], fit["accuracy_before"] = _pair_numbers(d)
            g = torch.sigmoid(-d) / len(pairs)  # dL/dd = -sigmoid(-d) / n: R+ gets -g, R- gets +g
            weights = [0.0] * len(used)
            for (i, j), gk in zip(pairs, g.tolist(), strict=True):
                weights[where[i]] -= gk
                weights[where[j]] += gk
            norms.append(self.lm.step(sub, sub_ref, weights, self._total))  # pass 2: backward, micro-batch by one
        if norms:
            fit["grad_norm"] = float(np.mean(norms))
        return fit

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs: the trained and the reference weights, the optimiser, the fit count."""
        return {**self.lm.state_dict(), "fits": self.fits}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.lm.load_state_dict(state)
        self.fits = int(state["fits"])


def _copy(model: Any) -> Any:
    out = copy.deepcopy(model)
    for p in out.parameters():
        p.grad = None
    return out


class OPRLScorer(_PairwiseScorer):
    """OPRL's implicit process reward: ``r_t = beta * sum_{tokens of a_t} log(pi_phi / pi_ref)``, ``pi_phi`` (a
    copy of the policy when the scorer is built, training the policy's trainable parameters) fitted each iteration
    by ``steps`` steps of trajectory DPO on the batch's pairs; ``pi_ref`` a frozen copy. Before any step every
    ``r_t`` is 0, and ``sum_t r_t`` is the trajectory's log-ratio of all its action tokens.

    Args:
        policy: the policy model (filled by the trainer); copied, never trained here.
        tokenizer: its tokenizer (filled by the trainer).
        beta: the DPO temperature of the implicit reward.
        lr: AdamW's learning rate for ``pi_phi``.
        steps: optimiser steps per iteration (each over all the iteration's pairs).
        pairs_per_group: pairs drawn per group (0: all higher-over-lower pairs).
        outcome_component: the reward component trajectories are ranked by (``trajectory_outcome``).
        batch_size: sequences per forward pass.
        max_grad_norm: gradient clipping.
        seed: the pair draws' seed.
    """

    name = "oprl"
    reduce: Reduce = "sum"

    def __init__(self, policy: Any, tokenizer: Any, *, beta: float = 0.1, lr: float = 1e-5, steps: int = 4,
                 pairs_per_group: int = 8, outcome_component: str = "outcome", batch_size: int = 4,
                 max_grad_norm: float = 1.0, seed: int = 0) -> None:  # fmt: skip
        if beta <= 0:
            raise ValueError(f"beta must be > 0, got {beta}")
        self.beta = float(beta)
        self.lm = _RatioModel(_copy(policy), tokenizer, lr=lr, batch_size=batch_size, max_grad_norm=max_grad_norm)
        self._setup(steps=steps, pairs_per_group=pairs_per_group, outcome_component=outcome_component, seed=seed)


class SweetRLScorer(_PairwiseScorer):
    """SWEET-RL's privileged critic: ``A_t = beta * mean_{tokens of a_t} log(pi_critic / pi_ref)`` where both read
    the conversation after a system message holding the env's training-time information (``gold_message`` of
    ``reset_info[gold_key]``), fitted each iteration by ``steps`` steps of Bradley-Terry on summed turn advantages;
    the policy's own prompts never contain that message (the scorer renders its own copy of each trajectory).

    Args:
        policy: the policy model (filled by the trainer); copied when ``critic="policy"``, never trained here.
        tokenizer: the policy's tokenizer (filled by the trainer).
        critic: ``"policy"`` (a copy of the policy and its tokenizer) or ``"tiny"`` (the suite's tiny random model,
            ``build_tiny_model(seed)``, with its own tokenizer).
        beta: the scale of ``A_t`` (the Bradley-Terry temperature).
        reduce: ``"mean"`` (SWEET-RL: the mean log-ratio of the turn's tokens) or ``"sum"``.
        show_gold: False renders no training-time information (an ablation: the same critic without privilege).
        gold_key: the reset-info key holding the training-time information.
        lr, steps, pairs_per_group, outcome_component, batch_size, max_grad_norm, seed: as ``OPRLScorer``'s
            (``seed`` also seeds the tiny critic's weights).
    """

    name = "sweet_rl"

    def __init__(self, policy: Any, tokenizer: Any, *, critic: str = "policy", beta: float = 0.1,
                 reduce: str = "mean", show_gold: bool = True, gold_key: str = "gold", lr: float = 1e-5,
                 steps: int = 4, pairs_per_group: int = 8, outcome_component: str = "outcome", batch_size: int = 4,
                 max_grad_norm: float = 1.0, seed: int = 0) -> None:  # fmt: skip
        if critic not in ("policy", "tiny"):
            raise ValueError(f"critic must be 'policy' or 'tiny', got {critic!r}")
        if reduce not in ("mean", "sum"):
            raise ValueError(f"reduce must be 'mean' or 'sum', got {reduce!r}")
        if beta <= 0:
            raise ValueError(f"beta must be > 0, got {beta}")
        self.beta = float(beta)
        self.reduce = reduce  # type: ignore[assignment]
        self.show_gold = bool(show_gold)
        self.gold_key = gold_key
        if critic == "tiny":
            from agentgym.tools.tiny_model import build_tiny_model

            model, tok = build_tiny_model(seed)
            model = model.to(next(policy.parameters()).device)
        else:
            model, tok = _copy(policy), tokenizer
        self.lm = _RatioModel(model, tok, lr=lr, batch_size=batch_size, max_grad_norm=max_grad_norm)
        self._setup(steps=steps, pairs_per_group=pairs_per_group, outcome_component=outcome_component, seed=seed)

    def text_of(self, traj: Trajectory) -> Trajectory:
        """The critic's copy of ``traj``: with the training-time information first (``show_gold``)."""
        if not self.show_gold:
            return traj
        if self.gold_key not in traj.reset_info:
            raise ValueError(f"sweet_rl: the trajectory of task {traj.task_id!r} has no reset_info[{self.gold_key!r}] "
                             "(the env's training-time information the critic reads)")  # fmt: skip
        return with_gold(traj, gold_message(traj.reset_info[self.gold_key]))


_STEP = "the per-turn rewards reach the policy as mt_grpo's turn signal (turn_signal_source='scorer', not added to "
_COMBINE = (
    "A_{i,t} = outcome_coef * z_group(R_i) + turn_coef * z_{(group,t)}(r_{i,t}) (mt_grpo, final_turn='both': "
    "the last turn too), i.e. A = A_ep + omega * z(r_t) with omega = turn_coef = 1 and the normalisation "
    "population the group's rollouts at the same turn index; the estimator and its knobs can be changed"
)
_SHARED = ("pairs: every (higher, lower) outcome pair inside a group (the outcome component 'outcome', else the "
           "total reward), at most pairs_per_group = 8 drawn per group by a seeded generator; no pair between groups",
           "a turn's tokens: its action text as the scorer's tokenizer renders the conversation (render_trajectory, "
           "TurnSpans.action_content), not the template's role header or end marker",
           "optimiser: AdamW (no weight decay), lr = 1e-5, steps = 4 full-batch steps per iteration on all of the "
           "iteration's pairs, gradient norm clipped at 1.0; the models run in eval mode (no dropout)")  # fmt: skip

METHODS: tuple[Method, ...] = (
    Method("oprl", "OPRL", "scorer",
           "implicit process reward model (a policy copy) trained online by trajectory DPO on outcome preferences",
           needs=("learned_model", "outcome", "group"), paper=cite("OPRL"),
           code="agentgym.baselines.learned_critics:OPRLScorer",
           choices=("pi_phi and pi_ref: copies of the policy when the run starts (pi_phi trains the policy's "
                    "trainable parameters); beta = 0.1",
                    *_SHARED,
                    f"{_STEP}the outcome): {_COMBINE}"),
           train={"scorer": "oprl", "estimator": "mt_grpo", "turn_signal_source": "scorer",
                  "estimator_kwargs": {"final_turn": "both"}},
           knobs_into="scorer_kwargs"),
    Method("sweet_rl", "SWEET-RL", "scorer",
           "critic that reads the env's training-time information, trained by Bradley-Terry on summed turn advantages",
           needs=("learned_model", "outcome", "group", "reference"), paper=cite("SWEET-RL"),
           code="agentgym.baselines.learned_critics:SweetRLScorer",
           choices=("the critic: a copy of the policy (knob critic; 'tiny': the suite's tiny model) and a frozen "
                    "copy as reference; A_t = beta * the mean log-ratio of the turn's tokens (SWEET-RL's "
                    "parametrisation; knob reduce='sum'; no scalar head), beta = 0.1",
                    "the training-time information: reset_info['gold'] as sorted-key JSON in a system message before "
                    "the conversation (appended to the first message when that is a system message); the policy's "
                    "prompts never hold it",
                    *_SHARED,
                    f"the policy update: A_t as the per-turn advantage in GRPO; {_STEP}the outcome): {_COMBINE}; "
                    "turn-level DPO over sampled candidates is not built"),
           train={"scorer": "sweet_rl", "estimator": "mt_grpo", "turn_signal_source": "scorer",
                  "estimator_kwargs": {"final_turn": "both"}},
           knobs_into="scorer_kwargs"),
)  # fmt: skip
