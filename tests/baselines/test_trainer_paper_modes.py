"""The trainer paths of three papers' pieces: AT^2PO's turn-level ratio (``ratio_level``, baselines/update.py),
T^2PO's thinking intervention (``think_intervention``, baselines/t2po.py) and IPR's iterations (``algo="ipr"``,
baselines/ipr.py)."""

from __future__ import annotations

import dataclasses
import math

import gymnasium
import pytest
import torch

import agentgym  # noqa: F401  (registers the envs)
from agentgym.baselines.backends import make_backend
from agentgym.baselines.config import TrainConfig
from agentgym.baselines.rollout import HFPolicy, Rollout, RolloutConfig, collect_rollouts
from agentgym.baselines.t2po import InterveningPolicy, mask_thinking
from agentgym.baselines.update import forward_tokens, make_batch, minibatch_loss

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/baselines/conftest.py


@pytest.fixture(scope="module")
def tiny(one_thread):
    from agentgym.tools.tiny_model import build_tiny_model

    return build_tiny_model(seed=0)


def rollout(turn_lengths: list[int]) -> Rollout:
    """A hand-made rollout: a prompt of 2 tokens, turns of the given numbers of sampled tokens, one env token
    between turns."""
    r = Rollout(prompt_ids=[11, 12])
    for k, n in enumerate(turn_lengths):
        if k:
            r.append_observation([13])
        start = len(r.response_ids)
        r.response_ids += [20 + j for j in range(n)]
        r.loss_mask += [1] * n
        r.rollout_logprobs += [0.0] * n
        r.turn_spans.append((start, len(r.response_ids)))
        r.context_lengths.append(2 + start)
    return r


def loss_batch(model, rows: list[Rollout], advantages: list[list[float]], log_ratios: list[list[float]]):
    """The minibatch of ``rows`` with per-token advantages and old log-probs set so that the loss sees exactly the
    given token log-ratios (``old = lp - log_ratio``, lp the model's own)."""
    import numpy as np

    batch = make_batch(rows, 0, advantages=[np.array(a) for a in advantages], with_turns=True)
    lp, _, _ = forward_tokens(model, batch["input_ids"], batch["attention_mask"], 1.0,
                              token_mask=batch["loss_mask"] > 0)  # fmt: skip
    lr = make_batch([dataclasses.replace(r, rollout_logprobs=x) for r, x in zip(rows, log_ratios, strict=True)],
                    0)["rollout_logprobs"]  # fmt: skip
    batch["old_logprobs"] = (lp - lr).detach()
    return batch


def grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def run_loss(model, batch, config: TrainConfig) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    out = minibatch_loss(model, None, batch, config)
    out["loss"].backward()
    return out, grads(model)


# ----------------------------------------------------------------------------------------------------------------
# AT^2PO: the turn-level ratio


def test_turn_ratio_with_one_token_turns_is_the_token_loss_bit_for_bit(tiny):
    """Every turn one token: the turn's geometric mean is the token's own ratio, so loss and gradient are
    bit-identical to token mode (ratios on both sides of the clip range, advantages of both signs)."""
    model, _ = tiny
    rows = [rollout([1, 1, 1]), rollout([1, 1])]
    batch = loss_batch(model, rows, [[1.0, -0.5, 2.0, 0.0, -1.0], [0.7, 0.0, -2.0]],
                       [[0.4, 0.0, -0.5, 0.0, 0.05], [-0.1, 0.0, 0.3]])  # fmt: skip
    base = TrainConfig(env_id="agentgym/Chain-v0")
    token, g_token = run_loss(model, batch, base)
    turn, g_turn = run_loss(model, batch, dataclasses.replace(base, ratio_level="turn"))
    assert torch.equal(token["loss"], turn["loss"]) and torch.equal(token["clip_frac"], turn["clip_frac"])
    assert all(torch.equal(a, b) for a, b in zip(g_token, g_turn, strict=True))
    assert any(bool(g.abs().sum() > 0) for g in g_turn)


def test_turn_ratio_by_hand(tiny):
    """One rollout: turn 0 of two tokens with log-ratios (0.2, 0.4) and advantage +1, turn 1 of one token with
    log-ratio -0.5 and advantage -1; eps_low 0.2, eps_high 0.28, token-mean, no KL or entropy.

    Turn mode: turn 0's ratio is exp((0.2 + 0.4) / 2) = exp(0.3) = 1.349859 > 1.28, clipped: each token
    max(-1.349859, -1.28) = -1.28. Turn 1: exp(-0.5) = 0.606531 < 0.8, A = -1: max(0.606531, 0.8) = 0.8.
    Loss (-1.28 - 1.28 + 0.8) / 3 = -0.586667; every token clipped (clip_frac 1), so no gradient at all.
    Token mode: exp(0.2) = 1.221403 stays (-1.221403), exp(0.4) = 1.491825 is clipped (-1.28), turn 1 as before:
    (-1.221403 - 1.28 + 0.8) / 3 = -0.567134, clip_frac 2/3, and the first token carries a gradient."""
    model, _ = tiny
    rows = [rollout([2, 1])]
    batch = loss_batch(model, rows, [[1.0, 1.0, 0.0, -1.0]], [[0.2, 0.4, 0.0, -0.5]])
    base = TrainConfig(env_id="agentgym/Chain-v0")
    turn, g_turn = run_loss(model, batch, dataclasses.replace(base, ratio_level="turn"))
    token, g_token = run_loss(model, batch, base)
    assert float(turn["loss"].detach()) == pytest.approx(-0.586667, abs=1e-5)
    assert float(turn["clip_frac"]) == pytest.approx(1.0)
    assert all(float(g.abs().sum()) == 0.0 for g in g_turn)
    assert float(token["loss"].detach()) == pytest.approx(-0.567134, abs=1e-5)
    assert float(token["clip_frac"]) == pytest.approx(2 / 3)
    assert any(float(g.abs().sum()) > 0 for g in g_token)


def test_token_mode_is_the_clipped_surrogate_as_before(tiny):
    """ratio_level="token" (the default) is the loss the trainer always had, written out here: token-mean of
    max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)) with r = exp((lp - old) * mask); equal bit for bit, gradient
    too. A batch that carries turn ids changes nothing in token mode."""
    model, _ = tiny
    rows = [rollout([2, 3]), rollout([1, 2, 2])]
    batch = loss_batch(model, rows, [[1.0, 1.0, 0.0, -0.5, -0.5, -0.5], [2.0, 0.0, 1.0, 1.0, 0.0, -1.0, -1.0]],
                       [[0.3, -0.1, 0.0, 0.5, -0.4, 0.1], [0.2, 0.0, -0.3, 0.35, 0.0, 0.01, -0.6]])  # fmt: skip
    config = TrainConfig(env_id="agentgym/Chain-v0")
    out, g = run_loss(model, batch, config)
    model.zero_grad(set_to_none=True)
    lp, _, _ = forward_tokens(model, batch["input_ids"], batch["attention_mask"], config.temperature,
                              token_mask=batch["loss_mask"] > 0)  # fmt: skip
    mask, adv = batch["loss_mask"], batch["advantages"]
    ratio = torch.exp((lp - batch["old_logprobs"]) * mask)
    pg = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1.0 - config.eps_low, 1.0 + config.eps_high))
    want = (pg * mask).sum() / mask.sum()
    want.backward()
    assert torch.equal(out["loss"], want)
    assert all(torch.equal(a, b) for a, b in zip(g, grads(model), strict=True))
    without = {k: v for k, v in batch.items() if k != "turn_ids"}
    assert torch.equal(run_loss(model, without, config)[0]["loss"], out["loss"])


def test_turn_ratio_ignores_masked_tokens_of_a_turn(tiny):
    """A turn's masked token (T^2PO's inserted text) is no part of its mean: turn 0 = (0.2 live, 5.0 masked) has the
    ratio exp(0.2) of its live token alone, the same loss as the one-token turn (0.2)."""
    model, _ = tiny
    masked = rollout([2])
    masked.loss_mask[1] = 0
    a = loss_batch(model, [masked], [[1.0, 1.0]], [[0.2, 5.0]])
    b = loss_batch(model, [rollout([1])], [[1.0]], [[0.2]])
    config = TrainConfig(env_id="agentgym/Chain-v0", ratio_level="turn")
    assert float(run_loss(model, a, config)[0]["loss"].detach()) == pytest.approx(-math.exp(0.2), abs=1e-6)
    assert float(run_loss(model, b, config)[0]["loss"].detach()) == pytest.approx(-math.exp(0.2), abs=1e-6)
    with pytest.raises(ValueError, match="ratio_level"):
        TrainConfig(env_id="agentgym/Chain-v0", ratio_level="sequence")


# ----------------------------------------------------------------------------------------------------------------
# T^2PO: the thinking intervention under the trainer

LONG = RolloutConfig(max_turns=3, max_new_tokens=24, temperature=1.0, stop=("</answer>",))


def chain(horizon: int = 3):
    return lambda: gymnasium.make("agentgym/Chain-v0", horizon=horizon)


def test_think_intervention_backend_and_delta_zero(tiny):
    """make_backend gives the intervening sampler with think_intervention (its knobs from the config); with
    delta = 0 its rollouts are bit-identical to the plain policy's with the same seed, and nothing is masked."""
    model, tok = tiny
    config = TrainConfig(env_id="agentgym/Chain-v0", think_intervention=True, think_window=4, think_delta=0.0)
    policy = make_backend(model, tok, config)
    assert isinstance(policy, InterveningPolicy) and (policy.window, policy.delta) == (4, 0.0)
    assert type(make_backend(model, tok, dataclasses.replace(config, think_intervention=False))) is HFPolicy
    plain = collect_rollouts(HFPolicy(model, tok), chain(), [3, 8], group_size=2, config=LONG, sample_seed=5)
    same = collect_rollouts(policy, chain(), [3, 8], group_size=2, config=LONG, sample_seed=5)
    for a, b in zip(same, plain, strict=True):
        assert (a.response_ids, a.rollout_logprobs, a.loss_mask) == (b.response_ids, b.rollout_logprobs, b.loss_mask)
    assert mask_thinking(policy, same, forget_rest=True) == 0 and mask_thinking(HFPolicy(model, tok), same) == 0
    with pytest.raises(ValueError, match="think"):
        TrainConfig(env_id="agentgym/Chain-v0", think_delta=-1.0)


def test_mask_thinking_masks_only_the_inserted_tokens(tiny):
    """A huge delta intervenes at every chance: mask_thinking sets loss_mask 0 exactly on the inserted text's tokens
    (log-prob 0), and forget_rest leaves no recorded insertion behind."""
    model, tok = tiny
    config = TrainConfig(env_id="agentgym/Chain-v0", think_intervention=True, think_window=4, think_delta=1e9,
                         think_text=" think again")  # fmt: skip
    policy = make_backend(model, tok, config)
    rolls = collect_rollouts(policy, chain(), [3, 8], group_size=2, config=LONG, sample_seed=5)
    text = policy.encode(" think again")
    before = [list(r.loss_mask) for r in rolls]
    masked = mask_thinking(policy, rolls, forget_rest=True)
    assert masked > 0 and masked % len(text) == 0 and not policy.inserted
    off = [(r, j) for r, m in zip(rolls, before, strict=True) for j in range(len(m)) if m[j] != r.loss_mask[j]]
    assert len(off) == masked
    assert all(r.loss_mask[j] == 0 and r.rollout_logprobs[j] == 0.0 for r, j in off)


@pytest.mark.slow
def test_t2po_card_trains_with_the_intervention(tmp_path):
    """One iteration of the T^2PO card with an intervention at every chance: tokens were inserted and masked in
    mains and forks before the batch (otherwise their rollout log-prob 0 would differ from the trainer's
    recomputation), and the loss is finite."""
    from agentgym.baselines.branches import METHODS
    from agentgym.baselines.trainer import train

    card = next(c for c in METHODS if c.name == "t2po")
    assert card.status == "built" and card.train["think_intervention"] is True
    config = TrainConfig(**{**card.train, "env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 3}, "max_turns": 3,
                            "max_new_tokens": 16, "stop": ("</answer>",), "batch_tasks": 1, "group_size": 2,
                            "think_window": 4, "think_delta": 1e9, "think_text": " think again",
                            "out_dir": str(tmp_path), "plot": False, "progress": False, "iterations": 1})  # fmt: skip
    h = train(config)["last"]
    assert h["think_masked_tokens"] > 0 and h["rollout_logprob_maxdiff"] < 1e-4 and math.isfinite(h["loss"])


# ----------------------------------------------------------------------------------------------------------------
# IPR: the trainer mode


def ipr_config(out, **kw) -> TrainConfig:
    base = {"algo": "ipr", "env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "max_turns": 2,
            "max_new_tokens": 8, "stop": ("</answer>",), "batch_tasks": 3, "ipr_k": 2, "lr": 1e-3,
            "out_dir": str(out), "plot": False, "progress": False, "iterations": 2}  # fmt: skip
    return TrainConfig(**{**base, **kw})


@pytest.mark.slow
def test_ipr_two_iterations_refresh_the_reference(tmp_path):
    """Two IPR iterations with the tiny model on Chain H=2: every forked state is an expert-path state (batch_tasks x
    H of them); iteration 2's reference is exactly the policy after iteration 1 (the iterative scheme), and iteration
    2's step moves the policy away from it. Then ``train`` runs the same two iterations end to end."""
    from agentgym.baselines.trainer import setup, train, train_iteration

    config = ipr_config(tmp_path / "a")
    state = setup(config)
    initial = {n: t.clone() for n, t in state.model.state_dict().items()}
    m1 = train_iteration(state, config, 1)
    after1 = {n: t.clone() for n, t in state.model.state_dict().items()}
    m2 = train_iteration(state, config, 2)
    for m in (m1, m2):
        assert m["ipr_states"] == 3 * 2 and m["sampled_tokens"] > 0
        assert 0.0 <= m["success_rate"] <= 1.0 and 0.0 <= m["valid_action_frac"] <= 1.0
    assert m1["ipr_pairs"] > 0 and m2["ipr_pairs"] > 0 and math.isfinite(m2["loss"])
    assert all(torch.equal(after1[n], t) for n, t in state.ref_model.state_dict().items())
    assert not all(torch.equal(initial[n], after1[n]) for n in initial)
    assert not all(torch.equal(after1[n], t) for n, t in state.model.state_dict().items())
    state.close()
    summary = train(ipr_config(tmp_path / "b"))
    assert [h["iteration"] for h in summary["history"]] == [1, 2]
    assert summary["history"][0]["ipr_pairs"] == m1["ipr_pairs"]


def test_ipr_config_checks(tmp_path):
    with pytest.raises(ValueError, match="ipr"):
        ipr_config(tmp_path, estimator="grpo")
    with pytest.raises(ValueError, match="ipr"):
        ipr_config(tmp_path, ipr_k=0)
    with pytest.raises(ValueError, match="ipr"):
        ipr_config(tmp_path, rollout_backend="remote")
    from agentgym.baselines.ipr import METHODS

    (card,) = METHODS
    assert card.status == "built" and card.knobs_into == "config" and card.train["algo"] == "ipr"
    assert set(card.knobs()) <= {f.name for f in dataclasses.fields(TrainConfig)}
    assert TrainConfig(**card.train).env_id == "agentgym/Chain-v0"  # an env with an expert
