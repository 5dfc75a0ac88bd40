"""HINT-SD: targeted hindsight self-distillation. On each failed rollout a selector picks the turn t* where it went
wrong; the policy itself, shown a feedback text about that turn, is the teacher; the student (the policy without the
feedback) is pulled towards the teacher's token distribution on t*'s action tokens only, beside the RL loss.

- Selector (``TrainConfig.self_distill``): ``"rule"`` (:func:`bad_turn`): the first turn whose verified turn signal
  (``TrainConfig.turn_signal``, the env's ``TURN_SIGNALS`` entry: the diagnostics' ``correct``, Household's plan
  ``progress`` increase, the tool envs' ``action_valid``) is bad: a value <= 0 (``"value"`` signals) or a drop
  (< 0, ``"delta"`` signals). ``"judge"`` (:func:`judge_questions`): one yes/no question per turn of the failed
  episode, "is turn k the turn where it went wrong?", asked of ``distill_judge`` (the rule judge answers from the
  rule selector; an LLM judge reads the whole episode and the task's gold); t* is the first yes, and an episode
  with a verdict missing before its first yes has no target (never a guess).
- Feedback (:func:`hindsight_feedback`): the action, the env's parse error, and the gold where the env has one per
  turn (the diagnostics' ``gold["choices"]``: "The right option here was 'red'."), else the env's reply to the turn.
- Teacher context (:func:`teacher_context`): the student's context before t* with the feedback appended to the
  last observation message (a user message of its own when that one is not a user's), tokenised as the rollout
  tokenised it. The feedback lives only there: the rollout's tokens, the batch and the student never hold it.
- Distillation term (:func:`distill_term`, in ``update.py`` beside the loss it joins): on the targeted tokens
  (``distill_mask``: t*'s action span, inside the loss mask), with ``d = log pi_T(a) - log pi_S(a)`` for the
  sampled token ``a``:
  ``"forward"``: ``exp(d) - d - 1``, whose gradient on the student's own samples is an unbiased estimate of the
  gradient of KL(teacher || student); ``"reverse"``: ``stopgrad(-d) * log pi_S(a)``, the gradient of
  KL(student || teacher). Token-mean over the minibatch's targeted tokens, weighted by ``distill_coef``.

The teacher's log-probs are computed once per iteration (after the rollouts, no gradient), from the policy the
iteration starts from, like the behaviour log-probs. A batch without targets carries no distillation keys, and a
minibatch without targeted tokens adds nothing to the loss, so the update is then bit-identical to the baseline's.

>>> bad_turn([1.0, None, 0.0, 0.0], "value"), bad_turn([0.2, 0.0, -0.1], "delta"), bad_turn([1.0, 1.0], "value")
(2, 2, None)
>>> with_feedback([{"role": "user", "content": "Turn 2/2."}], "Hint.")[0]["content"]
'Turn 2/2.\\n\\nHint.'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agentgym.baselines.backends import amp_dtype
from agentgym.baselines.config import DISTILL_ESTIMATORS, SELF_DISTILL_SELECTORS as SELECTORS, TrainConfig
from agentgym.baselines.rollout import HFPolicy, Rollout
from agentgym.baselines.update import distill_term, forward_tokens, pad_rows
from agentgym.rewards.advantages.signals import SignalMode, TurnSignal
from agentgym.rewards.catalogue import Method
from agentgym.rewards.judge import GOLD_PROMPT, conversation_until, render_conversation, render_gold
from agentgym.rewards.papers import cite
from agentgym.rewards.verdicts import Judge, Question

__all__ = [
    "DISTILL_ESTIMATORS",
    "METHODS",
    "SELECTORS",
    "DistillTarget",
    "Selection",
    "add_distill_targets",
    "bad_turn",
    "distill_term",
    "hindsight_feedback",
    "judge_questions",
    "probe_teacher",
    "rule_turn",
    "select_turns",
    "student_context",
    "targets_batch",
    "teacher_context",
    "teacher_logprobs",
    "with_feedback",
]

FEEDBACK_HEAD = "Hindsight feedback:"

JUDGE_PROMPT = """Below is an episode between a user (the environment) and an AI agent. The agent failed the task.
{gold}
Conversation:

{conversation}

---
Question: Is the agent's turn {turn} (its reply number {turn}, quoted below) the turn where the episode went wrong, \
i.e. the first turn whose mistake made the task fail? Answer yes or no.

Turn {turn}: {action}"""


def bad_turn(signals: Sequence[float | None], mode: SignalMode) -> int | None:
    """The first turn whose signal is bad: <= 0 for a ``"value"`` signal (a wrong or invalid step), < 0 for a
    ``"delta"`` signal (the verified state got worse); turns without a signal (None) are skipped; None if none is."""
    for t, x in enumerate(signals):
        if x is not None and (x <= 0.0 if mode == "value" else x < 0.0):
            return t
    return None


def rule_turn(rollout: Rollout, signal: TurnSignal | None) -> int | None:
    """The rule selector's t* of ``rollout`` (:func:`bad_turn` of its verified signal); ``ValueError`` when the env
    reports no signal."""
    if signal is None:
        raise ValueError("the rule selector needs a verified turn signal (TURN_SIGNALS or turn_signal_key)")
    return bad_turn(signal.read(rollout.reset_info, rollout.infos), signal.mode)


@dataclass(frozen=True)
class Selection:
    """A rollout's t* (None: no target) and whether the selection could be made (``valid`` False: a judge gave no
    verdict before its first yes; ``error`` says why)."""

    turn: int | None
    valid: bool = True
    error: str | None = None


def judge_questions(rollout: Rollout, signal: TurnSignal | None, env_id: str = "", show_gold: bool = True
                    ) -> list[Question]:  # fmt: skip
    """One yes/no question per turn of a failed episode: "is turn k where it went wrong?", over the whole episode
    (and the task's gold, for the judge only). Each question's rule is ``k == rule_turn(rollout)``, so the rule
    judge reproduces the rule selector (and fails, as an invalid verdict, where the env has no signal)."""
    traj = rollout.to_trajectory(env_id)
    gold = ""
    if show_gold and "gold" in traj.reset_info:
        gold = GOLD_PROMPT.format(gold=render_gold(traj.reset_info["gold"]))
    conversation = render_conversation(conversation_until(traj, len(traj.turns) - 1))

    def rule(k: int) -> Any:
        return lambda: k == rule_turn(rollout, signal)

    return [Question("yesno", JUDGE_PROMPT.format(gold=gold, conversation=conversation, turn=k + 1, action=action),
                     rule=rule(k)) for k, action in enumerate(rollout.actions)]  # fmt: skip


def select_turns(rollouts: Sequence[Rollout], selector: str, signal: TurnSignal | None, *, judge: Judge | None = None,
                 env_id: str = "") -> list[Selection]:  # fmt: skip
    """Each rollout's :class:`Selection`: successful rollouts have none; a failed one gets the rule's t* or the
    judge's first yes (all the judge's questions are asked in one batch)."""
    if selector not in SELECTORS:
        raise ValueError(f"self_distill selector must be one of {SELECTORS}, got {selector!r}")
    failed = [i for i, r in enumerate(rollouts) if not r.success and r.actions]
    out = [Selection(None) for _ in rollouts]
    if selector == "rule":
        for i in failed:
            out[i] = Selection(rule_turn(rollouts[i], signal))
        return out
    if judge is None:
        raise ValueError("the judge selector needs a judge")
    asked = {i: judge_questions(rollouts[i], signal, env_id) for i in failed}
    verdicts = iter(judge.ask([q for i in failed for q in asked[i]]))
    for i in failed:
        vs = [next(verdicts) for _ in asked[i]]
        for k, v in enumerate(vs):
            if v.value is None:
                out[i] = Selection(None, valid=False, error=f"turn {k}: {v.error}")
                break
            if v.value == 1.0:
                out[i] = Selection(k)
                break
    return out


def hindsight_feedback(rollout: Rollout, turn: int, quote_action: bool = False) -> str:
    """What went wrong at ``turn``, for the teacher: that the reply was wrong, the env's parse error, and the gold
    option where the env gives one per turn (the diagnostics' ``reset_info["gold"]``: ``choices``, one per stage,
    beside ``decisive``), else the env's reply. ``quote_action``: also quote the failed reply (off: a small policy
    shown its failed reply as the teacher copies it, which raises the failed action's probability instead).

    >>> r = Rollout([], actions=["<answer> blue </answer>"], infos=[{"correct": False}],
    ...             observations=[[{"role": "user", "content": "Turn 2/2."}]],
    ...             reset_info={"gold": {"choices": ["red", "pink"], "decisive": [True, True]}})
    >>> hindsight_feedback(r, 0)
    "Hindsight feedback: your reply at this turn was wrong. The right option here was 'red'."
    >>> hindsight_feedback(r, 0, quote_action=True).split(". ")[0]
    "Hindsight feedback: your reply '<answer> blue </answer>' at this turn was wrong"
    """
    info = rollout.infos[turn]
    quoted = f" {rollout.actions[turn].strip()!r}" if quote_action else ""
    parts = [f"{FEEDBACK_HEAD} your reply{quoted} at this turn was wrong."]
    if info.get("parse_error"):
        parts.append(f"It was invalid: {info['parse_error']}")
    gold = rollout.reset_info.get("gold")
    choices = gold.get("choices") if isinstance(gold, dict) and "decisive" in gold else None  # one per stage
    if isinstance(choices, (list, tuple)) and turn < len(choices) and choices[turn] is not None:
        parts.append(f"The right option here was {str(choices[turn])!r}.")
    else:
        reply = " ".join(str(m.get("content") or "") for m in rollout.observations[turn]).strip()
        if reply:
            parts.append(f"The environment answered: {reply}")
    return " ".join(parts)


def with_feedback(messages: Sequence[dict[str, Any]], feedback: str) -> list[dict[str, Any]]:
    """``messages`` with ``feedback`` appended to the last one's content when it is a user message, else as a user
    message of its own (templates that insist on alternating roles keep working)."""
    out = [dict(m) for m in messages]
    if out and out[-1].get("role") == "user":
        out[-1]["content"] = f"{out[-1].get('content') or ''}\n\n{feedback}"
    else:
        out.append({"role": "user", "content": feedback})
    return out


def student_context(rollout: Rollout, turn: int) -> list[int]:
    """The tokens the policy saw before sampling ``turn`` (its rollout context, h_t*)."""
    return rollout.input_ids[: len(rollout.prompt_ids) + rollout.turn_spans[turn][0]]


def teacher_context(policy: HFPolicy, rollout: Rollout, turn: int, feedback: str | None) -> list[int]:
    """h_t* with ``feedback`` in its last observation (:func:`with_feedback`), tokenised as the rollout tokenised the
    original (``feedback`` None: exactly :func:`student_context`, for a rollout of the HF loop)."""
    if turn == 0:
        msgs = rollout.initial_observation
        return policy.prompt_ids(msgs if feedback is None else with_feedback(msgs, feedback))
    end = rollout.turn_spans[turn - 1][1]
    msgs = rollout.observations[turn - 1]
    obs = policy.observation_ids(msgs if feedback is None else with_feedback(msgs, feedback),
                                 last_token=rollout.response_ids[end - 1])  # fmt: skip
    return rollout.input_ids[: len(rollout.prompt_ids) + end] + obs


@dataclass(frozen=True)
class DistillTarget:
    """One targeted span: rollout ``row``'s turn ``turn``, response positions ``span = (a, b)`` (t*'s action span),
    the teacher's context and its log-probs of the sampled tokens ``a..b-1``."""

    row: int
    turn: int
    span: tuple[int, int]
    context: list[int]
    teacher_logprobs: list[float]


@torch.no_grad()
def teacher_logprobs(model: Any, contexts: Sequence[list[int]], continuations: Sequence[list[int]],
                     temperature: float, pad_id: int, minibatch_size: int = 8, amp: torch.dtype | None = None
                     ) -> list[list[float]]:  # fmt: skip
    """log pi(c_j | context, c_<j) of each continuation token under ``log_softmax(logits / temperature)``, as the
    trainer scores the student's tokens."""
    device = next(model.parameters()).device
    out: list[list[float]] = []
    for lo in range(0, len(contexts), minibatch_size):
        ctx, cont = contexts[lo : lo + minibatch_size], continuations[lo : lo + minibatch_size]
        rows = [c + k for c, k in zip(ctx, cont, strict=True)]
        length = max(len(r) for r in rows)
        ids = pad_rows(rows, length, pad_id, torch.long).to(device)
        attn = pad_rows([[1] * len(r) for r in rows], length, 0, torch.long).to(device)
        mask = pad_rows([[0] * len(c) + [1] * len(k) for c, k in zip(ctx, cont, strict=True)], length, 0, torch.long)
        lp, _, _ = forward_tokens(model, ids, attn, temperature, token_mask=mask.to(device), amp=amp)
        out += [lp[j, len(c) : len(c) + len(k)].cpu().tolist() for j, (c, k) in enumerate(zip(ctx, cont, strict=True))]
    return out


def targets_batch(batch: dict[str, torch.Tensor], rollouts: Sequence[Rollout], targets: Sequence[DistillTarget]
                  ) -> None:  # fmt: skip
    """Add ``teacher_logprobs`` and ``distill_mask`` ``(B, L)`` to ``batch`` (``make_batch``'s sequence coordinates):
    the mask is 1 on each target's span where the loss mask is 1, 0 everywhere else."""
    teacher = torch.zeros_like(batch["loss_mask"])
    mask = torch.zeros_like(batch["loss_mask"])
    for t in targets:
        p, (a, b) = len(rollouts[t.row].prompt_ids), t.span
        teacher[t.row, p + a : p + b] = torch.tensor(t.teacher_logprobs, dtype=teacher.dtype)
        mask[t.row, p + a : p + b] = 1.0
    batch["distill_mask"] = mask * (batch["loss_mask"] > 0)
    batch["teacher_logprobs"] = teacher


def add_distill_targets(policy: HFPolicy, model: Any, config: TrainConfig, rollouts: Sequence[Rollout],
                        batch: dict[str, torch.Tensor], judge: Judge | None = None) -> dict[str, float]:  # fmt: skip
    """The trainer's HINT-SD step, after the batch is built: select t* on the failed rollouts, build the feedback and
    the teacher contexts, score the teacher's log-probs of t*'s action tokens and add them to ``batch``
    (:func:`targets_batch`; nothing is added when there is no target). Returns the iteration's metrics."""
    assert config.self_distill is not None
    picks = select_turns(rollouts, config.self_distill, config.turn_signal, judge=judge, env_id=config.env_id)
    chosen = [(i, s.turn) for i, s in enumerate(picks) if s.turn is not None]
    failed = sum(not r.success and bool(r.actions) for r in rollouts)
    metrics = {"distill_failed": float(failed), "distill_targets": float(len(chosen)),
               "distill_invalid": float(sum(not s.valid for s in picks))}  # fmt: skip
    if not chosen:
        return metrics
    contexts = [teacher_context(policy, rollouts[i], t, hindsight_feedback(rollouts[i], t)) for i, t in chosen]
    turns = [rollouts[i].response_ids[slice(*rollouts[i].turn_spans[t])] for i, t in chosen]
    model.eval()
    lps = teacher_logprobs(model, contexts, turns, config.temperature, policy.tokenizer.pad_token_id,
                           config.minibatch_size, amp_dtype(config))  # fmt: skip
    targets = []
    for (i, t), ctx, lp in zip(chosen, contexts, lps, strict=True):
        (s, _), (a, b) = rollouts[i].turn_spans[t], rollouts[i].action_spans[t]
        targets.append(DistillTarget(i, t, (a, b), ctx, lp[a - s : b - s]))
    targets_batch(batch, rollouts, targets)
    on = batch["distill_mask"] > 0
    gap = (batch["teacher_logprobs"] - batch["old_logprobs"])[on] if "old_logprobs" in batch else torch.zeros(0)
    metrics.update(distill_tokens=float(on.sum()), distill_turn_mean=float(np.mean([t for _, t in chosen])))
    if gap.numel():  # < 0: the feedback makes the teacher less sure of the failed action than the student was
        metrics["distill_teacher_gap"] = float(gap.mean())
    return metrics


def probe_teacher(policy: HFPolicy, model: Any, rollouts: Sequence[Rollout], signal: TurnSignal | None,
                  temperature: float = 1.0, quote_action: bool = False) -> dict[str, float]:  # fmt: skip
    """Is the policy shown the feedback a better teacher than itself? On the failed ``rollouts`` whose t* (the rule's)
    has a gold option (the diagnostics), the mean log-probability of ``<answer> gold </answer>`` and of the sampled
    action of t*, after the student's context and after the teacher's; ``failures`` counts the rollouts probed.
    HINT-SD helps only where ``teacher_gold`` > ``student_gold`` (docs/self-distill.md, 'What it does on Chain-v0
    with small models')."""
    rows = []
    for r in rollouts:
        t = None if r.success or not r.actions else rule_turn(r, signal)
        gold = r.reset_info.get("gold")
        choices = gold.get("choices") if isinstance(gold, dict) else None
        if t is None or not isinstance(choices, (list, tuple)) or t >= len(choices) or choices[t] is None:
            continue
        gold_ids = policy.encode(f"<answer> {choices[t]} </answer>")
        sampled = r.response_ids[slice(*r.turn_spans[t])]
        ctx = [student_context(r, t), teacher_context(policy, r, t, hindsight_feedback(r, t, quote_action))]
        lps = teacher_logprobs(model, ctx * 2, [gold_ids, gold_ids, sampled, sampled], temperature,
                               policy.tokenizer.pad_token_id)  # fmt: skip
        rows.append([sum(x) for x in lps])
    keys = ("student_gold", "teacher_gold", "student_failed", "teacher_failed")
    means = np.mean(np.array(rows), axis=0) if rows else [float("nan")] * 4
    return {"failures": float(len(rows)), **{k: float(v) for k, v in zip(keys, means, strict=True)}}


METHODS: tuple[Method, ...] = (
    Method("hint_sd", "HINT-SD", "trainer",
           "hindsight self-distillation: on failed rollouts the policy shown feedback on the failure turn t* is the "
           "teacher, distilled into the policy on t*'s action tokens only, beside the RL loss",
           needs=("outcome", "turn_signal"), paper=cite("HINT-SD"),
           code="agentgym.baselines.self_distill:add_distill_targets",
           choices=("t*: the first turn whose verified turn signal is bad (a value <= 0, or a drop of a delta "
                    "signal; self_distill='rule'), or the first turn a judge answers yes to 'is this the turn where "
                    "it went wrong?' over the whole failed episode (self_distill='judge', distill_judge: 'rule' or "
                    "an endpoint); a missing verdict before the first yes leaves the episode without a target",
                    "feedback: 'your reply at this turn was wrong', the env's parse error, and the gold option "
                    "where the env gives one per turn (the diagnostics), else the env's reply; appended to the last "
                    "observation before t* in the teacher's context only; the failed reply is not quoted (a small "
                    "teacher copies it)",
                    "teacher: the policy the iteration starts from (no gradient), scored once after the rollouts",
                    "loss: distill_coef x token-mean over t*'s action tokens of exp(d) - d - 1, d = log pi_T - "
                    "log pi_S of the sampled token (gradient: KL(teacher || student)); distill_estimator='reverse': "
                    "stopgrad(-d) log pi_S (KL(student || teacher)); distill_coef = 0.1",
                    "no SFT on teacher samples: the teacher scores the student's own tokens, so nothing is sampled "
                    "from a context that holds the gold"),
           train={"algo": "grpo", "env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "stop": ["</answer>"],
                  "self_distill": "rule", "distill_coef": 0.1},
           knobs_into="config"),
)  # fmt: skip
