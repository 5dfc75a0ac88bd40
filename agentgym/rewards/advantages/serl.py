"""SERL, selective environment-reweighted learning (docs/rewards.md, 'SERL'): the outcome's group advantage sets
each turn's sign, the env's per-turn feedback (a criticality score) sets how much of it each turn gets."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agentgym.rewards.advantages.base import DEFAULT_EPS, ArrayLike, EstimatorSpec, _keys, _ragged
from agentgym.rewards.advantages.batch import TurnBatch
from agentgym.rewards.advantages.group import grpo
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

#: The feedback features :func:`serl_criticality` reads by default, by name.
SERL_FEATURES: tuple[str, ...] = ("invalid", "no_effect", "anchor_change", "progress")
#: Every feature it knows: the defaults plus ``off_reference`` (needs the actions and a reference action per turn).
KNOWN_FEATURES: tuple[str, ...] = (*SERL_FEATURES, "off_reference")
#: Where the weights go: every sampled token of a turn, or the turn's action tokens only (the paper's two insertion
#: granularities).
GRANULARITIES: tuple[str, ...] = ("turn", "token")
NOTHING_HAPPENS = "Nothing happens."


def _text(obs: Any) -> str:
    """An observation's text: a string, or the ``content`` of a list of chat messages."""
    if isinstance(obs, str):
        return obs
    if isinstance(obs, Mapping):
        return str(obs.get("content", ""))
    if isinstance(obs, Sequence):
        return "\n".join(_text(m) for m in obs)
    return ""


def _number(x: Any) -> float | None:
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x)):
        return float(x)
    return None


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).rstrip(".")


_BLOCK = re.compile(r"<(\w+)>(.*?)</\1>", re.DOTALL)


def agrees(action: str, reference: str) -> bool:
    """Whether the turn's ``action`` is the ``reference`` action, compared after lower-casing, collapsing whitespace
    and dropping a final period. A reference that is one ``<tag>...</tag>`` block (SearchQA's ``<search> q
    </search>``) agrees with an action holding a block of the same tag and content, whatever else the turn holds
    (a ``<think>`` block); a plain reference (Household's ``go to desk 1``) with the whole turn, the turn without its
    tag blocks (a ``<subgoal>`` block before the command), or the content of one of its blocks (``<action>``).

    >>> agrees("<subgoal>get the key</subgoal> Go to  drawer 1", "go to drawer 1")
    True
    >>> agrees("<think>who?</think> <search>Paris  mayor</search>", "<search> paris mayor </search>")
    True
    """
    blocks = [(m.group(1).lower(), _norm(m.group(2))) for m in _BLOCK.finditer(action)]
    ref = _BLOCK.fullmatch(reference.strip())
    if ref is not None:
        return (ref.group(1).lower(), _norm(ref.group(2))) in blocks
    want = _norm(reference)
    rest = _norm(_BLOCK.sub(" ", action))
    return want in (_norm(action), rest) or any(c == want for _, c in blocks)


def expert_references(
    reset_info: Mapping[str, Any], infos: Sequence[Mapping[str, Any]], key: str = "expert_plan"
) -> list[str | None]:
    """The oracle's action at each turn, from the state the turn was played in: the first command of
    ``info[key]`` of the state before it (the reset's for the first turn; Household with ``expert_plan=True``,
    whose ``oracle`` demonstration agent plays exactly that command); None where the state has no plan.

    >>> expert_references({"expert_plan": ["go to desk 1", "open drawer 1"]}, [{"expert_plan": []}, {}])
    ['go to desk 1', None]
    """
    out: list[str | None] = []
    for t in range(len(infos)):
        plan = (infos[t - 1] if t else reset_info).get(key)
        out.append(str(plan[0]) if isinstance(plan, (list, tuple)) and plan else None)
    return out


def serl_criticality(
    infos: Sequence[Mapping[str, Any]],
    observations: Sequence[Any] | None = None,
    reset_info: Mapping[str, Any] | None = None,
    features: Sequence[str] = SERL_FEATURES,
    actions: Sequence[str] | None = None,
    references: Sequence[str | None] | None = None,
) -> list[float]:
    """One criticality score in [0, 1] per step: the mean of the chosen feedback features of the step, each in
    [0, 1] (choice: an unweighted mean; the feature set is the ``features`` argument):

    * ``invalid``: 1 when the step's info has a truthy ``parse_error`` or ``action_valid`` is False;
    * ``no_effect``: 1 when the step's observation text contains "Nothing happens." (needs ``observations``);
    * ``anchor_change``: 1 when ``info["anchor"]`` differs from the state before the step (the reset's anchor for
      the first step), 0 where neither has one;
    * ``progress``: ``|progress_t - progress_{t-1}|`` clipped to 1 (``info["progress"]``; the reset's, else 0,
      before the first step; a step without the key keeps the last value);
    * ``off_reference`` (not a default): 1 when the step's action departs from the reference action of the same
      turn (``references``: the env's demonstration or oracle action, :func:`expert_references`; compared by
      :func:`agrees`), 0 when it agrees or the turn has no reference (needs ``actions`` and ``references``).

    >>> serl_criticality([{"anchor": "a"}, {"anchor": "a", "parse_error": True}], reset_info={"anchor": "s"},
    ...                  features=("invalid", "anchor_change"))
    [0.5, 0.5]
    """
    unknown = sorted(set(features) - set(KNOWN_FEATURES))
    if unknown or not features:
        raise ValueError(f"features must be a non-empty subset of {KNOWN_FEATURES}, got {tuple(features)}")
    if "off_reference" in features:
        if actions is None or references is None:
            raise ValueError("the 'off_reference' feature needs the step actions and the reference actions")
        if len(actions) != len(infos) or len(references) != len(infos):
            raise ValueError(f"{len(infos)} infos but {len(actions)} actions and {len(references)} references")
    if observations is not None and len(observations) != len(infos):
        raise ValueError(f"{len(infos)} infos but {len(observations)} observations")
    if "no_effect" in features and observations is None:
        raise ValueError("the 'no_effect' feature needs the step observations")
    before: Mapping[str, Any] = reset_info or {}
    progress = _number(before.get("progress")) or 0.0
    out = []
    for t, info in enumerate(infos):
        score = {}
        score["invalid"] = float(bool(info.get("parse_error")) or info.get("action_valid") is False)
        score["no_effect"] = float(observations is not None and NOTHING_HAPPENS in _text(observations[t]))
        prev, now = before.get("anchor"), info.get("anchor")
        score["anchor_change"] = float(not (prev is None and now is None) and prev != now)
        p = _number(info.get("progress"))
        score["progress"] = 0.0 if p is None else min(abs(p - progress), 1.0)
        progress = progress if p is None else p
        # choice: a departure from the demonstration is the critical event (the paper's teacher weighs tokens by
        # how far the hindsight teacher disagrees with the student); no reference: 0
        ref = None if references is None else references[t]
        score["off_reference"] = float(ref is not None and actions is not None and not agrees(actions[t], ref))
        before = info
        out.append(math.fsum(score[f] for f in features) / len(features))
    return out


def serl_advantages(
    outcomes: ArrayLike,
    criticality: Sequence[ArrayLike],
    group_ids: ArrayLike,
    kappa: float = 1.0,
    eps: float = DEFAULT_EPS,
) -> list[np.ndarray]:
    """SERL: ``A_{i,t} = A^GRPO_i * w_{i,t}`` with ``w_{i,t} = (1 + kappa * c_{i,t}) / mean_t (1 + kappa * c_{i,t})``
    (``c`` in [0, 1]: the turn's criticality). The weights are positive and average 1 over a trajectory's turns,
    so every turn keeps the sign of ``A^GRPO_i`` and ``mean_t A_{i,t} = A^GRPO_i``; ``kappa=0`` is GRPO.

    >>> [a.tolist() for a in serl_advantages([1.0, 0.0], [[1.0, 0.0], [0.0, 0.0]], [0, 0], kappa=1.0, eps=0.0)]
    [[1.3333333333333333, 0.6666666666666666], [-1.0, -1.0]]
    """
    a = grpo(outcomes, group_ids, eps)
    c = _ragged(criticality, "criticality")
    _keys(group_ids, len(c))
    if len(c) != a.size:
        raise ValueError(f"{a.size} outcomes but {len(c)} criticality rows")
    if not (math.isfinite(kappa) and kappa >= 0):
        raise ValueError(f"kappa must be a finite number >= 0, got {kappa}")
    out = []
    for ai, ci in zip(a, c, strict=True):
        if ((ci < 0) | (ci > 1)).any():
            raise ValueError("criticality must lie in [0, 1]")
        w = 1.0 + kappa * ci  # choice: w = 1 + kappa*c renormalised to mean 1 per trajectory (the spec's; knob kappa)
        out.append(ai * (w / (math.fsum(w) / w.size)) + 0.0 if w.size else np.zeros(0))
    return out


def _est_serl(
    b: TurnBatch,
    kappa: float = 1.0,
    eps: float = DEFAULT_EPS,
    features: tuple[str, ...] = SERL_FEATURES,
    granularity: str = "turn",
) -> list[np.ndarray]:
    """``serl_advantages`` of the batch's criticality. ``features`` is read where the criticality is computed (the
    trainer's ``baselines.credit.estimator_fields`` passes it to :func:`serl_criticality`) and ``granularity`` where
    the advantages reach tokens (``baselines.credit.compute_advantages``: ``"turn"``, every sampled token of turn t
    gets ``A_{i,t}``; ``"token"``, only the turn's action tokens do and its other tokens keep ``A^GRPO_i``,
    ``agentgym.rewards.advantages.tokens.broadcast_to_action_tokens``); here both are only checked."""
    if not features or set(features) - set(KNOWN_FEATURES):
        raise ValueError(f"features must be a non-empty subset of {KNOWN_FEATURES}, got {features}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if b.criticality is None:
        raise ValueError("serl needs TurnBatch.criticality (per-turn scores in [0, 1], see serl_criticality)")
    return serl_advantages(b.outcome_array, b.criticality, b.group_ids, kappa, eps)


REGISTERED: tuple[EstimatorSpec, ...] = (EstimatorSpec("serl", _est_serl, outcome_only=True),)

METHODS: tuple[Method, ...] = (
    Method("serl", "SERL", "estimator",
           "GRPO's outcome advantage reweighted across turns by the env's per-turn feedback (criticality)",
           needs=("outcome", "group", "turn_signal"), paper=cite("SERL"), code=f"{__name__}:_est_serl",
           choices=("w = 1 + kappa*c renormalised to mean 1 over each trajectory's turns; knob kappa (0 is GRPO)",
                    "criticality c = the unweighted mean of the chosen feedback features: parse error / invalid "
                    "action, 'Nothing happens.', anchor change and |progress delta| by default; knob features adds "
                    "'off_reference' (the action departs from the env's oracle action of the same turn: Household's "
                    "expert_plan[0] of the state before it, else the demonstration agent's action at that turn "
                    "index) or picks a subset",
                    "granularity: knob granularity, 'turn' (every sampled token of a turn gets A^GRPO*w) or "
                    "'token' (the turn's action tokens get A^GRPO*w, its other tokens, the reasoning, keep A^GRPO); "
                    "the action is the part of the turn the env parses (agentgym.contract.parsing's rules: an "
                    "OpenAI message, the <tool_call> blocks, the leftmost <search>/<answer>/<action> block, else "
                    "the text after the last closing tag; a turn with none is its action whole), found in the "
                    "decoded text at rollout time and mapped to tokens by decoded prefix lengths "
                    "(Rollout.action_spans; a token straddling the edge is an action token)",
                    "the weights come from the env's feedback directly; the paper's released code instead has a "
                    "teacher copy of the policy score the action tokens under hindsight feedback contexts and turns "
                    "the teacher-student probability gaps into bounded weights (that needs a second forward pass "
                    "per rollout and is not built)"),
           train={"algo": "grpo", "estimator": "serl"}, knobs_into="estimator_kwargs",
           status="built",
           missing="the teacher-scored hindsight weights of the paper's code (a teacher copy of the policy scoring "
                   "the action tokens under hindsight feedback contexts)"),
)  # fmt: skip
