"""ArCHer (baselines/archer.py): the replay buffer, TD against target copies, the Polyak update, the token actor."""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from agentgym.baselines.archer import (
    ArcherState,
    Features,
    ReplayBuffer,
    Transition,
    TurnCritic,
    actor_advantages,
    archer_train_iteration,
    polyak,
    td_step,
    token_advantages,
    transitions,
)
from agentgym.baselines.config import load_config
from agentgym.baselines.credit import make_tables
from agentgym.baselines.rollout import Rollout
from agentgym.baselines.trainer_methods import MethodState
from agentgym.baselines.update import make_batch, minibatch_loss
from agentgym.rewards.catalogue import collect

# -- a 2-turn deterministic toy: s0 -L/R-> s1L / s1R (reward 0), then one last action (rewards 1, 0 / 0, 0.5) ----------
S0, L, R, OBS = (0,), (1,), (2,), (9,)
S1L, S1R = S0 + L + OBS, S0 + R + OBS
TOY = [
    Transition(S0, L, 0.0, S1L, False),
    Transition(S0, R, 0.0, S1R, False),
    Transition(S1L, L, 1.0, (), True),
    Transition(S1L, L, 1.0, (), True),  # the behaviour data holds this action twice: V(s1L) weighs it 2/3
    Transition(S1L, R, 0.0, (), True),
    Transition(S1R, L, 0.0, (), True),
    Transition(S1R, R, 0.5, (), True),
]


def one_hot_featurize(transitions_: Sequence[Transition]):
    """Tabular features: one coordinate per context and per (context, action) of the toy."""
    keys = sorted({t.context for t in transitions_} | {t.context + t.action for t in transitions_}
                  | {t.next_context for t in transitions_ if not t.done})  # fmt: skip
    index = {k: i for i, k in enumerate(keys)}

    def vec(key: tuple[int, ...] | None) -> torch.Tensor:
        out = torch.zeros(len(keys))
        if key is not None:
            out[index[key]] = 1.0
        return out

    def featurize(critic: TurnCritic, batch: Sequence[Transition]) -> Features:
        return Features(torch.stack([vec(t.context) for t in batch]),
                        torch.stack([vec(t.context + t.action) for t in batch]),
                        torch.stack([vec(None if t.done else t.next_context) for t in batch]))  # fmt: skip

    return featurize, len(keys)


def test_td_from_off_policy_data_reaches_the_known_q():
    """gamma 0.9. Hand-computed fixed point with V's expectation over the buffer's actions:
    Q(s1L, L) = 1, Q(s1L, R) = 0, V(s1L) = (1 + 1 + 0) / 3 = 2/3; Q(s1R, L) = 0, Q(s1R, R) = 0.5, V(s1R) = 0.25;
    Q(s0, L) = 0.9 * 2/3 = 0.6, Q(s0, R) = 0.9 * 0.25 = 0.225, V(s0) = (0.6 + 0.225) / 2 = 0.4125."""
    featurize, size = one_hot_featurize(TOY)
    critic = TurnCritic(size)
    target = TurnCritic(size).requires_grad_(False)
    opt = torch.optim.SGD(critic.parameters(), lr=0.5)
    buffer = ReplayBuffer(16)
    buffer.add(TOY)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3000):
        td_step(critic, target, opt, buffer.sample(len(TOY), gen), featurize, gamma=0.9, tau=0.5)
    f = featurize(critic, TOY)
    with torch.no_grad():
        q, v = critic.q(f.ha).squeeze(-1).tolist(), critic.v(f.h).squeeze(-1).tolist()
    assert q == pytest.approx([0.6, 0.225, 1.0, 1.0, 0.0, 0.0, 0.5], abs=1e-5)
    assert v == pytest.approx([0.4125, 0.4125, 2 / 3, 2 / 3, 2 / 3, 0.25, 0.25], abs=1e-5)
    with torch.no_grad():  # the target copies have converged to the same values
        assert target.q(f.ha).squeeze(-1).tolist() == pytest.approx(q, abs=1e-5)


def test_one_td_step_by_hand():
    """From zero heads: y_Q = r (Vbar = 0), y_V = Qbar = 0; SGD lr 1 on 0.5 * mean (Q - y)^2 over the 7 toy rows
    moves Q(s1L, L)'s table entry by 2/7 (two rows) and the shared bias by mean(r) = 2.5/7."""
    featurize, size = one_hot_featurize(TOY)
    critic, target = TurnCritic(size), TurnCritic(size).requires_grad_(False)
    out = td_step(critic, target, torch.optim.SGD(critic.parameters(), lr=1.0), TOY, featurize, gamma=0.9, tau=1.0)
    assert out["q_loss"] == pytest.approx(0.5 * (1 + 1 + 0.25) / 7)
    assert out["v_loss"] == 0.0
    f = featurize(critic, TOY)
    with torch.no_grad():
        assert float(critic.q(f.ha[2])) == pytest.approx(2 / 7 + 2.5 / 7)
        assert float(critic.q(f.ha[0])) == pytest.approx(2.5 / 7)  # r = 0 row: only the bias moved
    assert all(torch.equal(a, b) for a, b in zip(target.parameters(), critic.parameters(), strict=True))  # tau = 1


def test_polyak_update_moves_the_target_by_tau():
    online, target = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with torch.no_grad():
        online.weight.copy_(torch.tensor([[1.0, 3.0]]))
        online.bias.fill_(2.0)
        target.weight.copy_(torch.tensor([[0.0, -1.0]]))
        target.bias.fill_(10.0)
    polyak(target, online, 0.25)
    assert target.weight.tolist() == [[0.25, 0.0]]  # 0.75 * 0 + 0.25 * 1, 0.75 * -1 + 0.25 * 3
    assert target.bias.tolist() == [8.0]  # 0.75 * 10 + 0.25 * 2
    assert online.weight.tolist() == [[1.0, 3.0]]
    with pytest.raises(ValueError, match="tau"):
        polyak(target, online, 0.0)


def test_buffer_is_bounded_fifo_and_samples_deterministically():
    buf = ReplayBuffer(3)
    items = [Transition((i,), (1,), float(i), (), True) for i in range(5)]
    buf.add(items[:2])
    buf.add(items[2:])
    assert len(buf) == 3 and [t.reward for t in buf.items] == [2.0, 3.0, 4.0]  # the oldest two left first
    a = buf.sample(2, torch.Generator().manual_seed(7))
    b = buf.sample(2, torch.Generator().manual_seed(7))
    assert a == b and len({t.reward for t in a}) == 2  # distinct, the same draws from the same seed
    assert sorted(t.reward for t in buf.sample(10, torch.Generator().manual_seed(1))) == [2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(0)


def two_turn_rollout() -> Rollout:
    """prompt [5, 6]; turn 0 samples [7, 8], the env answers [3]; turn 1 samples [9]."""
    return Rollout(prompt_ids=[5, 6], response_ids=[7, 8, 3, 9], loss_mask=[1, 1, 0, 1],
                   rollout_logprobs=[0.0] * 4, turn_spans=[(0, 2), (3, 4)], turn_rewards=[0.0, 1.0],
                   context_lengths=[2, 5], terminated=True)  # fmt: skip


def test_a_rollout_becomes_turn_transitions():
    t0, t1 = transitions(two_turn_rollout(), [0.0, 1.0])
    assert t0 == Transition((5, 6), (7, 8), 0.0, (5, 6, 7, 8, 3), False)
    assert t1 == Transition((5, 6, 7, 8, 3), (9,), 1.0, (), True)


def test_token_advantages_broadcast_q_minus_v_over_each_turn():
    r = two_turn_rollout()
    (a,) = token_advantages([r], [[(0.5, 0.25), (1.0, 2.0)]])
    assert a.tolist() == [0.25, 0.25, 0.0, -1.0]
    (b,) = token_advantages([r], [[(0.5, 0.25), (1.0, 2.0)]], baseline="mean")
    # minus the token mean (0.25 + 0.25 - 1) / 3 = -1/6 (the env token stays 0)
    assert b.tolist() == pytest.approx([5 / 12, 5 / 12, 0.0, -5 / 6])


@pytest.fixture(scope="module")
def tiny():
    from agentgym.tools.tiny_model import build_tiny_model

    torch.manual_seed(0)
    return build_tiny_model(0)


def actor_grads(model, critic: TurnCritic) -> list[torch.Tensor]:
    """The gradient of the actor's clipped surrogate on the toy rollout with the critic's Q - V."""
    config = load_config("tiny", None, {"algo": "archer"})
    r = two_turn_rollout()
    advs = token_advantages([r], actor_advantages(critic, model, [r], 0))
    batch = make_batch([r], 0, advantages=advs)
    batch["old_logprobs"] = torch.zeros_like(batch["rollout_logprobs"])
    model.zero_grad(set_to_none=True)
    minibatch_loss(model, None, batch, config)["loss"].backward()
    return [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def test_equal_q_and_v_give_zero_advantage_and_no_actor_gradient(tiny):
    model, _ = tiny
    critic = TurnCritic(model.config.hidden_size)
    with torch.no_grad():  # Q = V = 0.7 for every turn
        critic.q.bias.fill_(0.7)
        critic.v.bias.fill_(0.7)
    qv = actor_advantages(critic, model, [two_turn_rollout()], 0)
    assert [q - v for q, v in qv[0]] == [0.0, 0.0]
    assert all(float(g.abs().max()) == 0.0 for g in actor_grads(model, critic))
    with torch.no_grad():  # Q above V: the actor moves
        critic.q.bias.fill_(1.7)
    assert max(float(g.abs().max()) for g in actor_grads(model, critic)) > 0.0


def test_the_heads_read_the_context_and_the_action_ends(tiny):
    """V reads the hidden state at the context's last token, Q the one at the action's last token."""
    model, _ = tiny
    critic = TurnCritic(model.config.hidden_size)
    torch.manual_seed(3)
    with torch.no_grad():
        critic.q.weight.normal_()
        critic.v.weight.copy_(critic.q.weight)  # the same linear map: Q(h, a) = V(h + a)
    r = two_turn_rollout()
    (qv,) = actor_advantages(critic, model, [r], 0)
    with torch.no_grad():
        hid = model.get_decoder()(input_ids=torch.tensor([r.input_ids])).last_hidden_state[0]
        at = critic.q(hid).squeeze(-1).tolist()
    assert [q for q, _ in qv] == pytest.approx([at[3], at[5]], abs=1e-5)  # tokens 8 and 9
    assert [v for _, v in qv] == pytest.approx([at[1], at[4]], abs=1e-5)  # tokens 6 and 3


def run_iterations(n: int, methods: MethodState | None = None, **overrides):
    from agentgym.baselines.trainer import setup

    config = load_config("tiny", None, {"algo": "archer", "env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2},
                                        "batch_tasks": 2, "group_size": 2, "max_turns": 2, "max_new_tokens": 6,
                                        "archer_critic_steps": 3, "archer_batch": 4, "archer_buffer": 10,
                                        **overrides})  # fmt: skip
    state = setup(config)
    methods = methods or MethodState(make_tables(config))
    out = [archer_train_iteration(state, config, it, methods) for it in range(1, n + 1)]
    state.close()
    return out, methods, state


def test_iterations_fill_the_bounded_buffer_and_are_deterministic(one_thread):
    """2 x 2 episodes of 2 turns: 8 transitions an iteration, the buffer keeps the last 10. Chain's rewards are 0
    for the untrained tiny model, so a step cost of 0.5 gives the critic targets to fit."""
    a, ma, _ = run_iterations(2, reward_wrappers=[{"name": "step_cost", "cost": 0.5}])
    b, mb, _ = run_iterations(2, reward_wrappers=[{"name": "step_cost", "cost": 0.5}])
    assert [m["archer_buffer"] for m in a] == [8, 10]
    drop = ("time_rollout", "time_iteration")
    assert [{k: v for k, v in m.items() if k not in drop} for m in a] == [
        {k: v for k, v in m.items() if k not in drop} for m in b]  # fmt: skip
    sa, sb = ma.extra["archer"], mb.extra["archer"]
    assert sa.buffer.items == sb.buffer.items
    assert all(torch.equal(x, y) for x, y in zip(sa.critic.parameters(), sb.critic.parameters(), strict=True))
    assert a[0]["q_loss"] > 0.0 and a[1]["archer_adv_std"] > 0.0  # -0.5 a turn: the heads learned something
    # the held-out check of Q against the return-to-go needs a critic that has trained: from the 2nd iteration on
    assert "archer_q_mae" not in a[0] and a[1]["archer_q_mae"] > 0.0


def test_the_state_survives_a_save_and_load(tmp_path, one_thread):
    _, methods, _ = run_iterations(1, reward_wrappers=[{"name": "step_cost", "cost": 0.5}])
    methods.save(tmp_path / "methods.pt")
    back = MethodState.load(tmp_path / "methods.pt").extra["archer"]
    arch = methods.extra["archer"]
    assert isinstance(back, ArcherState) and back.buffer.items == arch.buffer.items
    assert all(torch.equal(x, y) for x, y in zip(back.target.parameters(), arch.target.parameters(), strict=True))
    assert back.optimizer.state_dict()["state"].keys() == arch.optimizer.state_dict()["state"].keys()
    # the optimizer still steps the loaded critic's own parameters
    assert back.optimizer.param_groups[0]["params"][0] is next(back.critic.parameters())


def test_config_checks_archer_knobs():
    with pytest.raises(ValueError, match="archer_tau"):
        load_config("tiny", None, {"algo": "archer", "archer_tau": 0.0})
    with pytest.raises(ValueError, match="cannot run with estimator"):
        load_config("tiny", None, {"algo": "archer", "estimator": "gtpo"})
    with pytest.raises(ValueError, match=r"cannot run with scorer, dynamic_sampling$"):  # every clash named
        load_config("tiny", None, {"algo": "archer", "scorer": "spa", "dynamic_sampling": True})
    with pytest.raises(ValueError, match="archer_trunk"):
        load_config("tiny", None, {"algo": "archer", "archer_trunk": "other"})


def test_the_card():
    (card,) = collect([importlib.import_module("agentgym.baselines.archer")])
    assert card.name == "archer" and card.kind == "trainer" and card.train["algo"] == "archer"
    assert card.load() is archer_train_iteration


@pytest.mark.slow
def test_agentgym_train_runs_archer(tmp_path, capsys):
    from agentgym.cli import main as cli_main

    sets = ["batch_tasks=1", "group_size=2", "plot=false", "progress=false", "max_turns=2", "max_new_tokens=8",
            'algo="archer"', 'env_id="agentgym/Chain-v0"', 'env_kwargs={"horizon": 2}', "archer_critic_steps=2",
            "archer_batch=4"]  # fmt: skip
    argv = ["train", "--preset", "tiny", "--iterations", "2", "--out-dir", str(tmp_path)]
    assert cli_main([*argv, *(a for s in sets for a in ("--set", s))]) == 0, capsys.readouterr().err
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["archer_buffer"] for r in rows] == [4, 8] and all(np.isfinite(r["loss"]) for r in rows)
    assert (tmp_path / "methods.pt").is_file()


@pytest.mark.parametrize("trunk", ["shared", "separate"])
def test_the_critic_never_moves_the_policy(trunk, one_thread):
    """With the actor held back (archer_warmup = 1), an iteration's TD steps leave the policy's weights as they
    were; a separate trunk is trained by them, and its target copy follows by Polyak."""
    from agentgym.baselines.trainer import setup

    config = load_config("tiny", None, {"algo": "archer", "env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2},
                                        "batch_tasks": 1, "group_size": 2, "max_turns": 2, "max_new_tokens": 6,
                                        "archer_critic_steps": 2, "archer_batch": 4, "archer_warmup": 1,
                                        "archer_trunk": trunk,
                                        "reward_wrappers": [{"name": "step_cost", "cost": 0.5}]})  # fmt: skip
    state = setup(config)
    before = [p.detach().clone() for p in state.model.parameters()]
    methods = MethodState(make_tables(config))
    out = archer_train_iteration(state, config, 1, methods)
    state.close()
    assert "loss" not in out and out["q_loss"] > 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, state.model.parameters(), strict=True))
    arch = methods.extra["archer"]
    if trunk == "separate":
        start = dict(state.model.get_decoder().named_parameters())
        moved = [n for n, p in arch.critic.trunk.named_parameters() if not torch.equal(p, start[n])]
        assert moved  # the TD loss trained the critic's own decoder
        assert not all(torch.equal(a, b) for a, b in zip(arch.target.trunk.parameters(),
                                                          start.values(), strict=True))  # fmt: skip
    else:
        assert arch.critic.trunk is None and arch.target.trunk is None


@pytest.mark.slow
def test_a_resumed_run_continues_exactly(tmp_path, one_thread):
    """2 iterations in one go equal 1 iteration, then a resume for the 2nd: the buffer and critic come back from
    methods.pt."""
    from agentgym.baselines.trainer import train

    base = load_config("tiny", None, {"algo": "archer", "env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2},
                                      "batch_tasks": 1, "group_size": 2, "max_turns": 2, "max_new_tokens": 6,
                                      "archer_critic_steps": 2, "archer_batch": 4, "plot": False, "progress": False,
                                      "reward_wrappers": [{"name": "step_cost", "cost": 0.5}]})  # fmt: skip
    import dataclasses

    whole = train(dataclasses.replace(base, iterations=2, out_dir=str(tmp_path / "a")))["history"]
    train(dataclasses.replace(base, iterations=1, out_dir=str(tmp_path / "b")))
    resumed = train(dataclasses.replace(base, iterations=2, out_dir=str(tmp_path / "b"), resume=True))["history"]
    drop = ("time_rollout", "time_iteration")
    assert {k: v for k, v in whole[-1].items() if k not in drop} == {
        k: v for k, v in resumed[-1].items() if k not in drop}  # fmt: skip
    assert whole[-1]["archer_buffer"] == 8
