"""PPO's critic (issue 35, "a critic that learns"): the value targets on a hand-computed 2-turn toy, PPO's clipped
value loss by hand, a critic with a trunk of its own (``critic_trunk="separate"``) that reads the same tokens as
the shared head, starts from the policy's weights and never moves them, the critic's own epochs
(``value_epochs``), and the bench's ceiling on the explained variance any critic can reach."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch

from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import compute_advantages, training_rollouts
from agentgym.baselines.rollout import Rollout
from agentgym.baselines.trainer import critic_epochs, setup
from agentgym.baselines.update import (
    TrunkValueHead,
    clipped_value_loss,
    critic_values,
    forward_tokens,
    make_batch,
    minibatch_loss,
    score_batch,
    sync_critic_trunk,
)
from agentgym.baselines.warmup import critic_warmup, mc_returns

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/baselines/conftest.py

LENGTH_ID = "agentgym_test/CriticLength-v0"


class LengthEnv(gymnasium.Env):
    """Two turns; each pays len(action) / 20, so even an untrained policy's returns vary (the critic has a target)."""

    observation_space = gymnasium.spaces.Text(64)
    action_space = gymnasium.spaces.Text(4096)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.turn = 0
        return [{"role": "user", "content": f"write {seed}"}], {}

    def step(self, action: str):
        self.turn += 1
        done = self.turn >= 2
        info: dict[str, Any] = {"success": False} if done else {}
        return ([] if done else [{"role": "user", "content": "more"}]), len(action) / 20, done, False, info


if LENGTH_ID not in gymnasium.registry:
    gymnasium.register(id=LENGTH_ID, entry_point=LengthEnv, disable_env_checker=True)


def chain(tmp_path: Path, **kw: Any) -> TrainConfig:
    base: dict[str, Any] = {"model": "tiny", "env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2},
                            "max_turns": 2, "max_new_tokens": 6, "stop": ["</answer>"], "batch_tasks": 1,
                            "group_size": 2, "minibatch_size": 2, "lr": 1e-3, "kl_coef": 0.0, "plot": False,
                            "progress": False, "algo": "ppo", "estimator": "turn_ppo",
                            "out_dir": str(tmp_path / "run")}  # fmt: skip
    base.update(kw)
    return TrainConfig.from_dict(base)


def toy() -> Rollout:
    """Two turns of 2 sampled tokens each, one env token between: rewards 0.5 then 1.0."""
    return Rollout(prompt_ids=[1, 2], response_ids=[10, 11, 5, 12, 13], loss_mask=[1, 1, 0, 1, 1],
                   rollout_logprobs=[0.0] * 5, turn_spans=[(0, 2), (3, 5)], turn_rewards=[0.5, 1.0],
                   reward_components=[{"outcome": 0.5}, {"outcome": 1.0}], terminated=True)  # fmt: skip


@pytest.mark.parametrize(("gamma", "lam", "expected"), [
    # Monte-Carlo (lam = 1): turn 1's return 0.5 + 1.0, turn 2's 1.0, whatever V is
    (1.0, 1.0, [1.5, 1.5, 0.0, 1.0, 1.0]),
    # discounted: 0.5 + 0.9 * 1.0
    (0.9, 1.0, [1.4, 1.4, 0.0, 1.0, 1.0]),
    # TD(0) with V = (0.2, 0.4) at the turns' first tokens: r_1 + V_2 = 0.9, turn 2 (terminal) r_2 = 1.0
    (1.0, 0.0, [0.9, 0.9, 0.0, 1.0, 1.0]),
    # lam = 0.5: turn 1's lam-return r_1 + gamma * ((1 - lam) V_2 + lam G_2) = 0.5 + 0.5 * 0.4 + 0.5 * 1.0 = 1.2
    (1.0, 0.5, [1.2, 1.2, 0.0, 1.0, 1.0]),
])  # fmt: skip
def test_turn_critic_targets_on_a_two_turn_toy(tmp_path, gamma, lam, expected):
    """The turn-level critic's targets (``returns``) by hand: the value at each turn's first token is the turn's V,
    every sampled token of a turn gets the turn's return, env tokens 0; ``mc_returns`` is the lam = 1 case."""
    config = chain(tmp_path, gamma=gamma, lam=lam)
    values = [np.array([0.2, 0.7, 0.0, 0.4, 0.9])]  # only each turn's first token's value counts (0.2 and 0.4)
    _, rets = compute_advantages([toy()], config, values)
    assert rets is not None
    np.testing.assert_allclose(rets[0], expected, atol=1e-12)
    mc = mc_returns([toy()], config, values)[0].numpy()
    np.testing.assert_allclose(mc, [0.0, 0.0, *([1.5, 1.5, 0.0, 1.0, 1.0] if gamma == 1.0 else
                                                [1.4, 1.4, 0.0, 1.0, 1.0])], atol=1e-6)  # fmt: skip


def test_clipped_value_loss_by_hand():
    """0.5 * max((V - R)^2, (V_old + clip(V - V_old) - R)^2), token-mean over loss tokens: V 0.5, V_old 0, R 1,
    clip 0.2 -> max(0.25, 0.64) / 2 = 0.32; V 0.1 -> inside the clip, 0.5 * 0.81 = 0.405; a masked token counts not."""
    mb = {"old_values": torch.zeros(1, 3), "returns": torch.tensor([[1.0, 1.0, 5.0]]),
          "loss_mask": torch.tensor([[1.0, 1.0, 0.0]])}  # fmt: skip
    loss = clipped_value_loss(torch.tensor([[0.5, 0.1, 0.0]]), mb, 0.2)
    assert float(loss) == pytest.approx((0.32 + 0.405) / 2)


def test_separate_critic_reads_its_own_copy_of_the_trunk(tmp_path):
    """A separate critic starts as a zero head on a copy of the policy's decoder: V = 0; with the same head weights
    its values equal the shared head's (same tokens, same hidden states) until it trains; ``sync_critic_trunk``
    copies the policy's decoder again."""
    shared, separate = setup(chain(tmp_path)), setup(chain(tmp_path, critic_trunk="separate"))
    assert isinstance(separate.value_head, TrunkValueHead) and not isinstance(shared.value_head, TrunkValueHead)
    config = chain(tmp_path)
    rollouts = training_rollouts(shared, config, [3], 7, 0)
    batch = make_batch(rollouts, shared.tokenizer.pad_token_id)
    _, v0 = score_batch(separate.model, batch, 1.0, 2, separate.value_head)
    assert v0 is not None and float(v0.abs().max()) == 0.0
    with torch.no_grad():
        for head in (shared.value_head, separate.value_head):
            head.weight.copy_(torch.linspace(-1, 1, head.weight.numel()).view_as(head.weight))
            head.bias.fill_(0.3)
    _, v_shared = score_batch(shared.model, batch, 1.0, 2, shared.value_head)
    _, v_sep = score_batch(separate.model, batch, 1.0, 2, separate.value_head)
    assert v_shared is not None and v_sep is not None
    torch.testing.assert_close(v_sep, v_shared)
    mask = batch["loss_mask"] > 0
    direct = critic_values(separate.model, separate.value_head, batch["input_ids"], batch["attention_mask"], mask)
    torch.testing.assert_close(direct, v_sep)
    assert float(v_sep[~mask].abs().max()) == 0.0 and float(v_sep[mask].abs().min()) > 0.0
    with torch.no_grad():  # the policy moves on; the critic's copy does not follow until synced
        next(separate.model.get_decoder().parameters()).add_(0.5)
    _, moved = score_batch(separate.model, batch, 1.0, 2, separate.value_head)
    torch.testing.assert_close(moved, v_sep)
    assert sync_critic_trunk(separate.model, separate.value_head)
    _, synced = score_batch(separate.model, batch, 1.0, 2, separate.value_head)
    assert not torch.allclose(synced, v_sep)
    assert not sync_critic_trunk(shared.model, shared.value_head)  # a shared head has nothing to sync


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_separate_critic_warmup_and_epochs_never_move_the_policy(tmp_path):
    """Warm-up steps and the critic's own epochs train the critic's trunk and head; the policy's weights stay bit
    for bit the same (and the policy's minibatch loss then carries no value loss)."""
    config = chain(tmp_path, env_id=LENGTH_ID, env_kwargs={}, stop=[], critic_trunk="separate", critic_warmup_steps=1,
                   value_epochs=2, value_lr=1e-3)  # fmt: skip
    state = setup(config)
    policy, critic = snapshot(state.model), snapshot(state.value_head)
    warm = critic_warmup(state, config)
    assert math.isfinite(warm["critic_warmup_value_loss"])
    after = snapshot(state.value_head)
    assert any(not torch.equal(critic[k], after[k]) for k in critic if k.startswith("trunk."))
    assert not torch.equal(critic["weight"], after["weight"])
    assert all(torch.equal(policy[k], v) for k, v in snapshot(state.model).items())
    rollouts = training_rollouts(state, config, [5], 9, 0)
    _, old_v = score_batch(state.model, make_batch(rollouts, 0), 1.0, 2, state.value_head)
    assert old_v is not None
    values = [old_v[i, len(r.prompt_ids) : len(r.input_ids)].double().numpy() for i, r in enumerate(rollouts)]
    advs, rets = compute_advantages(rollouts, config, values)
    batch = make_batch(rollouts, state.tokenizer.pad_token_id, advantages=advs, returns=rets)
    batch["old_values"], batch["old_logprobs"] = old_v, batch["rollout_logprobs"].clone()
    assert "value_loss" not in minibatch_loss(state.model, state.value_head, batch, config)
    out = critic_epochs(state, config, 1, batch, rollouts)
    assert out["value_loss"] >= 0.0 and out["value_grad_norm"] > 0.0
    assert not torch.equal(after["weight"], state.value_head.weight.detach())
    assert all(torch.equal(policy[k], v) for k, v in snapshot(state.model).items())


def test_critic_trunk_and_value_epochs_are_checked(tmp_path):
    with pytest.raises(ValueError, match="critic_trunk must be one of"):
        chain(tmp_path, critic_trunk="own")
    with pytest.raises(ValueError, match="value_epochs must be >= 1"):
        chain(tmp_path, value_epochs=0)
    with pytest.raises(ValueError, match="need a critic"):
        chain(tmp_path, algo="grpo", estimator=None, critic_trunk="separate")
    with pytest.raises(ValueError, match="need a critic"):
        chain(tmp_path, algo="grpo", estimator=None, value_epochs=2)


def test_forward_tokens_values_unchanged_for_a_shared_head(tmp_path):
    """The shared head's values through ``forward_tokens`` and ``critic_values`` are the same numbers."""
    state = setup(chain(tmp_path))
    with torch.no_grad():
        state.value_head.weight.fill_(0.05)
    rollouts = training_rollouts(state, chain(tmp_path), [2], 3, 0)
    b = make_batch(rollouts, state.tokenizer.pad_token_id)
    mask = b["loss_mask"] > 0
    _, _, v = forward_tokens(state.model, b["input_ids"], b["attention_mask"], 1.0, state.value_head, token_mask=mask)
    assert v is not None
    torch.testing.assert_close(critic_values(state.model, state.value_head, b["input_ids"], b["attention_mask"], mask),
                               v)  # fmt: skip


def load_bench() -> Any:
    path = Path(__file__).resolve().parents[2] / "bench" / "critic_ev.py"
    spec = importlib.util.spec_from_file_location("critic_ev", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ev_ceiling_by_hand():
    """Chain at H = 1, outcome only: the return is S ~ Bernoulli(p); the exact value is p before the first two
    tokens and S before the third, so 2 of 3 tokens keep the variance p(1 - p): the ceiling is 1/3 whatever p.
    Umbrella at H = 2 with progress: turn 1's return 2S (V = 2p, then 2S), turn 2's S, known: 1 - (2/6) * 4p(1-p)
    / Var(target) with Var over the tokens' targets (2S on 3 tokens, S on 3)."""
    bench = load_bench()
    for p in (0.3, 0.7):
        assert bench.ev_ceiling("Chain", p, 1, ("outcome",), episodes=200_000) == pytest.approx(1 / 3, abs=0.01)
    p = 0.6
    mean = (2 * p + p) / 2
    var = (4 * p + p) / 2 - mean**2  # E[target^2] - E[target]^2 over the six tokens (S^2 = S)
    expected = 1 - (2 / 6) * 4 * p * (1 - p) / var
    got = bench.ev_ceiling("Umbrella", p, 2, ("outcome", "progress"), episodes=200_000)
    assert got == pytest.approx(expected, abs=0.01)


@pytest.mark.slow
def test_bench_runs_end_to_end(tmp_path):
    """bench/critic_ev.py with its own (3-step) SFT warm start, one RL iteration of two arms at H = 2: every run
    keeps its per-iteration explained variance and the final critic's probe, and the report lists each run."""
    script = Path(__file__).resolve().parents[2] / "bench" / "critic_ev.py"
    args = [sys.executable, str(script), "--envs", "Umbrella", "--arms", "sweep", "separate", "--iterations", "1",
            "--horizon", "2", "--sft-steps", '{"Umbrella": 3}', "--probe-episodes", "16",
            "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = [json.loads(x) for x in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [(r["env"], r["arm"]) for r in runs] == [("Umbrella", "sweep"), ("Umbrella", "separate")]
    for r in runs:
        assert [h["iteration"] for h in r["history"]] == [0, 1] and "explained_variance_mc" in r["history"][1]
        assert r["final"]["episodes"] == 16 and set(r["final"]) >= {"ev_mc", "ev_exact", "ev_exact_mc"}
    report = (tmp_path / "results.md").read_text()
    assert "| Umbrella | `sweep` |" in report and "| Umbrella | `separate` |" in report
    assert (tmp_path / "critic_ev.png").is_file()
