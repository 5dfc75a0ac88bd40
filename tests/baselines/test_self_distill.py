"""HINT-SD (baselines/self_distill.py): the rule and judge selectors of the failure turn, the feedback only in the
teacher's context, the distillation mask only on the targeted action spans, the hand-computed loss and gradients,
an update without targets bit-identical to the baseline's, the card and a trainer run."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence

import pytest
import torch

from agentgym.baselines import self_distill as sd
from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import EnvMaker
from agentgym.baselines.methods import get_method
from agentgym.baselines.rollout import Rollout, collect_rollouts
from agentgym.baselines.self_distill import (
    Selection,
    add_distill_targets,
    bad_turn,
    distill_term,
    hindsight_feedback,
    judge_questions,
    rule_turn,
    select_turns,
    student_context,
    targets_batch,
    teacher_context,
)
from agentgym.baselines.trainer import setup, train_iteration
from agentgym.baselines.update import make_batch, minibatch_loss
from agentgym.cli import main as cli_main
from agentgym.rewards.advantages import TURN_SIGNALS
from agentgym.rewards.catalogue import collect
from agentgym.rewards.papers import cite
from agentgym.rewards.verdicts import Question, RuleJudge, Verdict

CHAIN = {"env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "max_turns": 2, "max_new_tokens": 6,
         "stop": ["</answer>"], "batch_tasks": 2, "group_size": 2, "kl_coef": 0.0, "plot": False,
         "progress": False, "minibatch_size": 4, "lr": 1e-3}  # fmt: skip
GOLD = {"choices": ["red", "blue", "pink"], "decisive": [True, True, True], "misleading": [False, False, False]}


def _episode(infos: list[dict], *, success: bool = False, reset_info: dict | None = None) -> Rollout:
    """A hand-built episode: turn k holds 3 sampled tokens (the last two its action), 2 env tokens follow it."""
    r = Rollout(prompt_ids=[1, 2], success=success, reset_info={"gold": GOLD} if reset_info is None else reset_info)
    r.initial_observation = [{"role": "user", "content": "Turn 1/3."}]
    for k, info in enumerate(infos):
        start = len(r.response_ids)
        r.response_ids += [10 + k, 20 + k, 30 + k, 5, 6]
        r.loss_mask += [1, 1, 1, 0, 0]
        r.rollout_logprobs += [-1.0] * 3 + [0.0] * 2
        r.turn_spans.append((start, start + 3))
        r.action_spans.append((start + 1, start + 3))
        r.actions.append(f"<answer> a{k} </answer>")
        r.infos.append(info)
        r.observations.append([{"role": "user", "content": f"Turn {k + 2}/3."}])
        r.turn_rewards.append(0.0)
    return r


def test_rule_selector_picks_the_first_bad_turn():
    chain = TURN_SIGNALS["agentgym/Chain-v0"]
    assert rule_turn(_episode([{"correct": True}, {"correct": False}, {"correct": False}]), chain) == 1
    assert rule_turn(_episode([{"correct": False}, {"correct": True}]), chain) == 0
    assert rule_turn(_episode([{"correct": True}, {"correct": None}, {"correct": False}]), chain) == 2  # a distractor
    assert rule_turn(_episode([{"correct": True}, {"correct": True}]), chain) is None
    household = TURN_SIGNALS["agentgym/Household-v0"]  # progress is a delta: the first drop (a detour) is bad
    ep = _episode([{"progress": 0.25}, {"progress": 0.25}, {"progress": 0.125}], reset_info={"progress": 0.0})
    assert rule_turn(ep, household) == 2
    tool = TURN_SIGNALS["agentgym/ToolUse-v0"]
    assert rule_turn(_episode([{"action_valid": True}, {"action_valid": False}]), tool) == 1
    assert bad_turn([0.5, 0.0, -1.0], "value") == 1 and bad_turn([0.5, 0.0, -1.0], "delta") == 2
    with pytest.raises(ValueError, match="verified turn signal"):
        rule_turn(_episode([{"correct": False}]), None)
    # successful episodes get no target
    eps = [_episode([{"correct": True}, {"correct": False}]), _episode([{"correct": True}] * 2, success=True)]
    assert select_turns(eps, "rule", chain) == [Selection(1), Selection(None)]


class _ConstantJudge:
    """A judge that answers every question the same (``None``: no verdict)."""

    name = "constant"

    def __init__(self, value: float | None) -> None:
        self.value, self.asked = value, 0

    def ask(self, questions: Sequence[Question]) -> list[Verdict]:
        self.asked += len(questions)
        return [Verdict(self.value, error=None if self.value is not None else "no reply") for _ in questions]


def test_judge_selector_rule_judge_reduces_to_the_rule():
    chain = TURN_SIGNALS["agentgym/Chain-v0"]
    eps = [_episode([{"correct": True}, {"correct": True}, {"correct": False}]),
           _episode([{"correct": False}, {"correct": False}]),
           _episode([{"correct": True}] * 2, success=True)]  # fmt: skip
    by_rule = select_turns(eps, "rule", chain)
    assert by_rule == [Selection(2), Selection(0), Selection(None)]
    assert select_turns(eps, "judge", chain, judge=RuleJudge()) == by_rule
    yes = _ConstantJudge(1.0)  # an all-yes judge: the first turn of each failed episode
    assert [s.turn for s in select_turns(eps, "judge", chain, judge=yes)] == [0, 0, None]
    assert yes.asked == 3 + 2  # one question per turn of the failed episodes only
    assert [s.turn for s in select_turns(eps, "judge", chain, judge=_ConstantJudge(0.0))] == [None, None, None]
    missing = select_turns(eps, "judge", chain, judge=_ConstantJudge(None))
    assert [(s.turn, s.valid) for s in missing] == [(None, False), (None, False), (None, True)]
    # the judge reads the whole failed episode and the gold (the policy never reads this prompt)
    qs = judge_questions(eps[0], chain)
    assert len(qs) == 3 and "turn 2" in qs[1].prompt and '"choices": ["red", "blue", "pink"]' in qs[1].prompt
    assert "<answer> a2 </answer>" in qs[0].prompt  # every turn's action is in every question
    no_signal = RuleJudge().ask(judge_questions(eps[0], None))
    assert all(v.value is None and "verified turn signal" in v.error for v in no_signal)


def test_feedback_names_the_gold_or_the_env_reply():
    ep = _episode([{"correct": True}, {"correct": False, "parse_error": "'x' is not one of the options."}])
    assert hindsight_feedback(ep, 1) == ("Hindsight feedback: your reply at this turn was wrong. It was invalid: 'x' "
                                         "is not one of the options. The right option here was 'blue'.")  # fmt: skip
    assert hindsight_feedback(ep, 1, quote_action=True).startswith(
        "Hindsight feedback: your reply '<answer> a1 </answer>' at this turn was wrong. It was invalid: "
    )
    no_gold = _episode([{"action_valid": False}], reset_info={})
    no_gold.observations[0] = [{"role": "tool", "content": "Error: unknown function 'fly'."}]
    assert hindsight_feedback(no_gold, 0).endswith("The environment answered: Error: unknown function 'fly'.")


def test_targets_only_on_the_targeted_action_span():
    eps = [_episode([{"correct": True}, {"correct": False}]), _episode([{"correct": False}, {"correct": True}]),
           _episode([{"correct": True}] * 2, success=True)]  # fmt: skip
    batch = make_batch(eps, 0)
    targets = [
        sd.DistillTarget(0, 1, eps[0].action_spans[1], [], [-0.5, -0.25]),
        sd.DistillTarget(1, 0, eps[1].action_spans[0], [], [-2.0, -3.0]),
    ]
    targets_batch(batch, eps, targets)
    # row 0: prompt 2 + turn 1's action span (6, 8) -> positions 8, 9; row 1: turn 0's action (1, 3) -> 3, 4
    expected = torch.zeros_like(batch["loss_mask"])
    expected[0, [8, 9]] = 1.0
    expected[1, [3, 4]] = 1.0
    assert torch.equal(batch["distill_mask"], expected)
    assert batch["teacher_logprobs"][0, 8:10].tolist() == [-0.5, -0.25]
    assert batch["teacher_logprobs"][1, 3:5].tolist() == [-2.0, -3.0]
    assert float(batch["teacher_logprobs"][batch["distill_mask"] == 0].abs().sum()) == 0.0
    assert bool((batch["loss_mask"][batch["distill_mask"] > 0] == 1).all())  # inside the loss mask
    # the gradient of the term reaches the student's log-probs only there
    lp = torch.full(batch["loss_mask"].shape, -1.0, requires_grad=True)
    distill_term(lp, batch).backward()
    assert torch.equal(lp.grad != 0, expected > 0)


def test_worked_example_loss_and_gradients():
    """Two targeted tokens: student 0.5 / 0.2, teacher 0.25 / 0.4; a third token is outside the mask."""
    lp = torch.log(torch.tensor([[0.5, 0.2, 0.9]])).requires_grad_(True)
    mb = {"teacher_logprobs": torch.log(torch.tensor([[0.25, 0.4, 0.1]])), "distill_mask": torch.tensor([[1.0, 1, 0]])}
    # forward: d = log 0.5 = -0.693 -> 0.5 + 0.693 - 1 = 0.193; d = log 2 -> 2 - 0.693 - 1 = 0.307; mean 0.25
    loss = distill_term(lp, mb, "forward")
    assert math.isclose(float(loss.detach()), 0.25, abs_tol=1e-6)
    loss.backward()  # d/d lp: (1 - exp(d)) / 2 = 0.25 (push the too-likely token down), -0.5 (pull up), 0
    assert torch.allclose(lp.grad, torch.tensor([[0.25, -0.5, 0.0]]), atol=1e-6)
    lp.grad = None
    loss = distill_term(lp, mb, "reverse")  # stopgrad(s - t) * s: value (ln2 ln0.5 - ln2 ln0.2) / 2
    expected = (math.log(2) * math.log(0.5) - math.log(2) * math.log(0.2)) / 2
    assert math.isclose(float(loss.detach()), expected, rel_tol=1e-6)
    loss.backward()  # (s - t) / 2 = +-ln2 / 2
    assert torch.allclose(lp.grad, torch.tensor([[math.log(2) / 2, -math.log(2) / 2, 0.0]]), atol=1e-6)
    assert distill_term(lp, {**mb, "distill_mask": torch.zeros(1, 3)}) is None  # no targeted token: no term


@pytest.fixture(scope="module")
def chain_rollouts(one_thread):
    config = TrainConfig(**CHAIN, self_distill="rule")
    state = setup(config)
    rollouts = collect_rollouts(state.policy, EnvMaker.of(config), [3, 4, 5], group_size=2,
                                config=config.rollout_config, sample_seed=7)  # fmt: skip
    return config, state, rollouts


def test_feedback_is_only_in_the_teacher_context(chain_rollouts):
    config, state, rollouts = chain_rollouts
    policy = state.policy
    failed = [r for r in rollouts if not r.success]
    assert failed
    for r in failed:
        for t in range(len(r.turn_spans)):  # without feedback, the teacher's context is the student's, token for token
            assert teacher_context(policy, r, t, None) == student_context(r, t)
    before = [list(r.input_ids) for r in rollouts]
    batch = make_batch(rollouts, policy.tokenizer.pad_token_id)
    batch["old_logprobs"] = batch["rollout_logprobs"].clone()
    ids_before = batch["input_ids"].clone()
    metrics = add_distill_targets(policy, state.model, config, rollouts, batch)
    assert metrics["distill_targets"] == len(failed) == metrics["distill_failed"]
    for i, r in enumerate(rollouts):
        pick = rule_turn(r, config.turn_signal)
        if r.success or pick is None:
            continue
        feedback = hindsight_feedback(r, pick)
        gold = r.reset_info["gold"]["choices"][pick]
        assert f"The right option here was {gold!r}." in feedback
        teacher = policy.decode(teacher_context(policy, r, pick, feedback)).lower()
        student = policy.decode(student_context(r, pick)).lower()
        assert "hindsight feedback" in teacher and "the right option here was" in teacher
        assert "hindsight feedback" not in student and "right option" not in student
        # the student context is what the policy saw: the rollout's own tokens, and they hold no feedback
        assert student_context(r, pick) == r.input_ids[: len(r.prompt_ids) + r.turn_spans[pick][0]]
        assert "hindsight" not in policy.decode(r.input_ids).lower()
        (a, b), p = r.action_spans[pick], len(r.prompt_ids)
        assert batch["distill_mask"][i].nonzero().flatten().tolist() == list(range(p + a, p + b))
    assert [list(r.input_ids) for r in rollouts] == before  # the rollouts and the batch tokens are untouched
    assert torch.equal(batch["input_ids"], ids_before)


def test_probe_teacher(chain_rollouts):
    config, state, rollouts = chain_rollouts
    out = sd.probe_teacher(state.policy, state.model, rollouts, config.turn_signal, config.temperature)
    assert out["failures"] == sum(not r.success for r in rollouts) > 0
    assert all(math.isfinite(out[k]) and out[k] < 0 for k in ("student_gold", "teacher_gold", "student_failed"))
    # the student's side is the rollout's own log-probs of t*'s tokens
    r = next(r for r in rollouts if not r.success)
    t = rule_turn(r, config.turn_signal)
    mine = sd.probe_teacher(state.policy, state.model, [r], config.turn_signal, config.temperature)
    assert math.isclose(mine["student_failed"], sum(r.rollout_logprobs[slice(*r.turn_spans[t])]), abs_tol=1e-3)


def _params(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_no_targets_update_is_bit_identical(chain_rollouts):
    config, state, rollouts = chain_rollouts
    tok = state.policy.tokenizer
    batch = make_batch(rollouts, tok.pad_token_id, advantages=[[0.5] * len(r.response_ids) for r in rollouts])
    batch["old_logprobs"] = batch["rollout_logprobs"].clone()
    grads = []
    for extra in ({}, {"distill_mask": torch.zeros_like(batch["loss_mask"]),
                       "teacher_logprobs": torch.zeros_like(batch["loss_mask"])}):  # fmt: skip
        state.model.zero_grad(set_to_none=True)
        out = minibatch_loss(state.model, None, {**batch, **extra}, config)
        out["loss"].backward()
        assert "distill_loss" not in out
        grads.append([p.grad.clone() for p in state.model.parameters() if p.grad is not None])
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))
    state.model.zero_grad(set_to_none=True)
    # all-success rollouts: no selection, no keys in the batch
    won = [dataclasses.replace(r, success=True) for r in rollouts]
    plain = make_batch(won, tok.pad_token_id)
    metrics = add_distill_targets(state.policy, state.model, config, won, plain)
    assert metrics["distill_targets"] == 0 and "distill_mask" not in plain


def test_trainer_iteration_with_zero_coef_is_the_baseline(one_thread):
    runs = {}
    for name, over in {"off": {}, "zero": {"self_distill": "rule", "distill_coef": 0.0},
                       "on": {"self_distill": "rule", "distill_coef": 1.0}}.items():  # fmt: skip
        config = TrainConfig(**CHAIN, **over)
        state = setup(config)
        metrics = train_iteration(state, config, 1)
        runs[name] = (_params(state.model), metrics)
    off, zero, on = runs["off"][0], runs["zero"][0], runs["on"][0]
    assert all(torch.equal(a, b) for a, b in zip(off, zero, strict=True))
    assert runs["on"][1]["distill_targets"] > 0 and "distill_loss" in runs["on"][1]
    assert not all(torch.equal(a, b) for a, b in zip(off, on, strict=True))  # the term moves the weights


def test_config_checks():
    with pytest.raises(ValueError, match="self_distill must be one of"):
        TrainConfig(**CHAIN, self_distill="llm")
    with pytest.raises(ValueError, match="distill_coef must be >= 0"):
        TrainConfig(**CHAIN, self_distill="rule", distill_coef=-1.0)
    with pytest.raises(ValueError, match=r"self_distill .*cannot run with reward_conditioning"):
        TrainConfig(**CHAIN, self_distill="rule", reward_conditioning=True)
    with pytest.raises(ValueError, match="distill_judge: "):
        TrainConfig(**CHAIN, self_distill="judge", distill_judge="maybe")


def test_card():
    (card,) = collect([sd])
    assert card.name == "hint_sd" and card.kind == "trainer" and card.paper == cite("HINT-SD")
    assert card.status == "built" and get_method("hint_sd") == card
    config = TrainConfig(**{**card.train, "plot": False})
    assert config.self_distill == "rule" and config.turn_signal == TURN_SIGNALS["agentgym/Chain-v0"]


@pytest.mark.slow
@pytest.mark.parametrize("selector", ["rule", "judge"])
def test_train_cli_smoke(selector, tmp_path, capsys):
    sets = ["batch_tasks=1", "group_size=2", "plot=false", "progress=false", "max_turns=2", "max_new_tokens=8",
            f"self_distill={json.dumps(selector)}"]  # fmt: skip
    argv = ["train", "--preset", "tiny", "--method", "hint_sd", "--iterations", "1", "--out-dir", str(tmp_path)]
    assert cli_main([*argv, *(a for s in sets for a in ("--set", s))]) == 0, capsys.readouterr().err
    line = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert line["distill_targets"] <= line["distill_failed"] == 2 * (1 - line["success_rate"])
    assert line["distill_invalid"] == 0


def test_judge_selector_over_http():
    """An LLM judge on a loopback endpoint (it answers yes for the second turn only, and fails on one episode's
    questions): the first yes is t*, a failed request leaves its episode without a target, and only the judge's
    prompts hold the gold."""
    from rule_judge import serve_rule_judge

    from agentgym.baselines.components import make_judge

    def reply(system: str, user: str) -> str | None:
        if "<answer> x0 </answer>" in user:
            return None
        return "Answer: yes" if "Is the agent's turn 2 " in user else "Answer: no"

    chain = TURN_SIGNALS["agentgym/Chain-v0"]
    eps = [_episode([{"correct": True}, {"correct": False}, {"correct": False}]),
           _episode([{"correct": False}, {"correct": False}]), _episode([{"correct": False}])]  # fmt: skip
    eps[2].actions[0] = "<answer> x0 </answer>"
    with serve_rule_judge(reply) as server:
        judge = make_judge({"base_url": server.url, "api_key_env": None, "max_retries": 0})
        picks = select_turns(eps, "judge", chain, judge=judge)
    assert [(s.turn, s.valid) for s in picks] == [(1, True), (1, True), (None, False)]
    assert all('"choices": ["red", "blue", "pink"]' in q for q in server.requests)
