"""Branch credit (baselines/branches.py): forks from env snapshots + token prefixes, ``vine`` and ``tree``."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Sequence

import gymnasium
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.baselines.branches import (
    BranchSet,
    branch_advantages,
    choose_turns,
    fork_group_advantages,
    resample_stalled,
    returns_to_go,
    run_forks,
    stalled_turn,
    target_value,
    tree_advantages,
    turn_entropy,
    vine_advantages,
)
from agentgym.baselines.config import TrainConfig
from agentgym.baselines.rollout import HFPolicy, Rollout, RolloutConfig, collect_rollouts
from agentgym.baselines.update import make_batch, score_batch

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/baselines/conftest.py

CHAIN = RolloutConfig(max_turns=3, max_new_tokens=8, temperature=1.0, stop=("</answer>",))


@pytest.fixture(scope="module")
def policy(one_thread) -> HFPolicy:
    from agentgym.tools.tiny_model import build_tiny_model

    return HFPolicy(*build_tiny_model(seed=0))


def chain(horizon: int = 3):
    return lambda: gymnasium.make("agentgym/Chain-v0", horizon=horizon)


def hand_rollout(rewards: Sequence[float], group: int, tokens_per_turn: int = 2) -> Rollout:
    """A rollout with ``tokens_per_turn`` sampled tokens per turn and one env token between turns."""
    r = Rollout(prompt_ids=[1, 2], group_id=group)
    for k, x in enumerate(rewards):
        if k:
            r.append_observation([7])
        start = len(r.response_ids)
        r.response_ids += [5] * tokens_per_turn
        r.loss_mask += [1] * tokens_per_turn
        r.rollout_logprobs += [-0.1] * tokens_per_turn
        r.turn_spans.append((start, len(r.response_ids)))
        r.turn_rewards.append(float(x))
        r.context_lengths.append(2 + start)
    return r


def per_turn(advs: list[np.ndarray], rows: list[Rollout]) -> list[list[float]]:
    return [[float(a[s]) for s, _ in r.turn_spans] for a, r in zip(advs, rows, strict=True)]


# ----------------------------------------------------------------------------------------------------------------
# the formulas on hand-made batches


def test_vine_advantages_by_hand():
    """Rollout A: rewards (0, 0, 1), V = (0.5, 0.25, 0.75); rollout B: rewards (0, 1), V(s_0) unknown, V(s_1) = 0.5.

    gamma = 1. A_0 = r_0 + V_1 - V_0 = 0 + 0.25 - 0.5 = -0.25; A_1 = 0 + 0.75 - 0.25 = 0.5; A_2 = 1 + 0 - 0.75 =
    0.25 (V after the last turn is 0). B_0 has no value: the fallback 0.3. B_1 = 1 + 0 - 0.5 = 0.5.
    gamma = 0.5, A with V_1 unknown: A_0 = G_0 - V_0 = (0 + 0.5 * 0 + 0.25 * 1) - 0.5 = -0.25; A_1 = 0.5 * 0 ... V_1
    is None so A_1 = fallback -0.1; A_2 = 1 - 0.75 = 0.25."""
    out = vine_advantages([[0, 0, 1], [0, 1]], [[0.5, 0.25, 0.75], [None, 0.5]], [0.0, 0.3], gamma=1.0)
    assert [a.tolist() for a in out] == [[-0.25, 0.5, 0.25], [0.3, 0.5]]
    out = vine_advantages([[0, 0, 1]], [[0.5, None, 0.75]], [-0.1], gamma=0.5)
    assert out[0].tolist() == [-0.25, -0.1, 0.25]
    assert returns_to_go([0, 0, 1], 0.5).tolist() == [0.25, 0.5, 1.0]
    with pytest.raises(ValueError, match="values"):
        vine_advantages([[0, 1]], [[0.5]], [0.0])


def test_tree_advantages_by_hand():
    """Group (1, 0, 0): mean 1/3, advantages (2/3, -1/3, -1/3). A group of one gets 0."""
    out = tree_advantages([[1.0, 0.0, 0.0], [0.7]])
    assert out[0] == pytest.approx([2 / 3, -1 / 3, -1 / 3], abs=1e-15) and out[1].tolist() == [0.0]
    with pytest.raises(ValueError, match="empty"):
        tree_advantages([[]])


def hand_branches() -> tuple[BranchSet, TrainConfig]:
    """Group 0: main 0 with rewards (0, 1), main 1 with (0, 0). Main 0 forked at turn 1 (K = 2: returns 1, 0),
    main 1 forked at turn 0 (returns 1 and 0: a fork of one turn paying 1... and one of two turns paying 0)."""
    mains = [hand_rollout([0, 1], 0), hand_rollout([0, 0], 0)]
    forks = [hand_rollout([1], 0), hand_rollout([0], 0), hand_rollout([0, 1], 0), hand_rollout([0, 0], 0)]
    origins = [(0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1)]
    config = TrainConfig(env_id="agentgym/Chain-v0", estimator="vine", branch_k=2, reward_components="all")
    return BranchSet(mains, forks, origins), config


def test_branch_set_vine_by_hand():
    """V(main 0, s_1) = (1 + 0) / 2 = 0.5, V(main 1, s_0) = (1 + 0) / 2 = 0.5; the other states were not forked.
    RLOO fallback: outcomes (1, 0) in one group: main 0 gets 1 - 0 = 1, main 1 gets 0 - 1 = -1.
    Main 0: turn 0 not forked -> fallback 1; turn 1: r + V(after last) - V(s_1) = 1 + 0 - 0.5 = 0.5.
    Main 1: turn 0: V(s_1) unknown -> G_0 - V(s_0) = 0 - 0.5 = -0.5; turn 1 not forked -> fallback -1."""
    branches, config = hand_branches()
    assert branches.values(config) == [[None, 0.5], [0.5, None]]
    rows, advs = branch_advantages(branches, config)
    assert rows == branches.mains  # vine trains on the main rollouts only
    assert per_turn(advs, rows) == [[1.0, 0.5], [-0.5, -1.0]]
    assert all((a[np.asarray(r.loss_mask) == 0] == 0).all() for a, r in zip(advs, rows, strict=True))
    m = branches.metrics(config)
    assert (m["branch_rollouts"], m["branch_turns"], m["branch_sampled_tokens"]) == (4, 2, 12)
    assert m["branch_fallback_frac"] == 0.5


def test_branch_set_tree_by_hand():
    """Turn group at (main 0, s_1): returns-to-go (main 1, forks 1, 0): mean 2/3 -> (1/3, 1/3, -2/3).
    Turn group at (main 1, s_0): (main 0, forks 1, 0): mean 1/3 -> (-1/3, 2/3, -1/3).
    Unforked main turns get the RLOO fallback (main 0 turn 0: 1; main 1 turn 1: -1). The forks' first turns are
    trained on, cut after that turn."""
    branches, config = hand_branches()
    config = dataclasses.replace(config, estimator="tree")
    rows, advs = branch_advantages(branches, config)
    assert len(rows) == 6 and [len(r.turn_spans) for r in rows[2:]] == [1, 1, 1, 1]
    assert rows[4].response_ids == branches.forks[2].response_ids[:2]
    got = per_turn(advs, rows)
    third = 1 / 3
    assert got[:2] == [[1.0, pytest.approx(third)], [pytest.approx(-third), -1.0]]
    assert [g[0] for g in got[2:]] == pytest.approx([third, -2 * third, 2 * third, -third])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(-3, 3), min_size=1, max_size=6), min_size=1, max_size=5), st.floats(0.0, 1.0),
       st.randoms(use_true_random=False))  # fmt: skip
def test_vine_telescopes_and_tree_groups_centre(rewards, gamma, rnd):
    """Every state forked: sum_t gamma^t A_t = G_0 - V(s_0) for any values (the TD errors telescope); with the true
    values of a deterministic rollout (V = G) every advantage is 0. A turn group's advantages sum to 0 and
    permuting a group permutes its advantages."""
    values = [[rnd.uniform(-2, 2) for _ in r] for r in rewards]
    for r, v, a in zip(rewards, values, vine_advantages(rewards, values, [0.0] * len(rewards), gamma), strict=True):
        disc = math.fsum(gamma**t * x for t, x in enumerate(a))
        assert disc == pytest.approx(returns_to_go(r, gamma)[0] - v[0], abs=1e-9)
    exact = [returns_to_go(r, gamma).tolist() for r in rewards]
    for a in vine_advantages(rewards, exact, [0.0] * len(rewards), gamma):
        assert np.abs(a).max() < 1e-9
    groups = tree_advantages(rewards)
    for g, a in zip(rewards, groups, strict=True):
        assert abs(math.fsum(a)) < 1e-9
        order = list(range(len(g)))
        rnd.shuffle(order)
        assert tree_advantages([[g[i] for i in order]])[0] == pytest.approx(a[order], abs=1e-12)


def test_choose_turns_uncertain_picks_the_least_likely_tokens():
    """Uncertainty of a turn = the surprisal of its least likely token: main 0's turns (0.1, 2.0), main 1's
    (0.5, 3.0). frac 0.5 of 4 turns -> the two highest: (1, 1) and (0, 1); frac 0.6 -> ceil(2.4) = 3 turns."""
    a, b = hand_rollout([0, 0], 0), hand_rollout([0, 0], 0)
    a.rollout_logprobs = [-0.1, -0.05, 0.0, -2.0, -0.3]
    b.rollout_logprobs = [-0.5, -0.5, 0.0, -0.2, -3.0]
    assert choose_turns([a, b], "all", entropy=None) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert choose_turns([a, b], "uncertain", 0.5, entropy=None) == [(0, 1), (1, 1)]
    assert choose_turns([a, b], "uncertain", 0.6, entropy=None) == [(0, 1), (1, 0), (1, 1)]
    with pytest.raises(ValueError, match="branch_turns"):
        choose_turns([a], "some", entropy=None)


# ----------------------------------------------------------------------------------------------------------------
# real forks on Chain with the tiny model


@pytest.fixture(scope="module")
def chain_mains(policy):
    envs: list = []
    mains = collect_rollouts(policy, chain(), [3, 8], group_size=2, config=CHAIN, sample_seed=5, envs=envs,
                             snapshots=True)  # fmt: skip
    yield mains, envs
    for env in envs:
        env.close()


def fork_all(policy, mains, k, **kw):
    chosen = choose_turns(mains, "all", entropy=None)
    envs = [chain()() for _ in range(len(chosen) * k)]
    try:
        return run_forks(policy, envs, mains, chosen, k=k, sample_seed=11, config=kw.pop("config", CHAIN), **kw)
    finally:
        for env in envs:
            env.close()


def test_snapshots_are_the_states_before_each_turn(chain_mains):
    mains, _ = chain_mains
    for r in mains:
        assert len(r.snapshots) == len(r.turn_spans) >= 1
        env = chain()()
        from agentgym.contract.branching import restore

        for t, snap in enumerate(r.snapshots):
            restore(env, snap)
            _, _, _, _, info = env.step(r.actions[t])  # the same action from the restored state: the same step
            assert info["anchor"] == r.infos[t]["anchor"] and info.get("correct") == r.infos[t].get("correct")
        env.close()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_fork_logprobs_equal_trainer_recomputation(policy, chain_mains, temperature):
    """A fork's sampled log-probs equal ``score_batch``'s recomputation over its full ids (prefix + fork), with the
    tolerance of the ordinary rollout's test; its prompt is exactly the prefix the main rollout's turn saw."""
    mains, _ = chain_mains
    config = dataclasses.replace(CHAIN, temperature=temperature)
    forks, origins = fork_all(policy, mains, 2, config=config)
    assert len(forks) == 2 * sum(len(r.turn_spans) for r in mains)
    for f, (i, t, _) in zip(forks, origins, strict=True):
        assert f.prompt_ids == mains[i].input_ids[: mains[i].context_lengths[t]]
        assert 1 <= len(f.turn_spans) <= CHAIN.max_turns - t
    batch = make_batch(forks, policy.tokenizer.pad_token_id)
    lp, _ = score_batch(policy.model, batch, temperature, minibatch_size=8)
    on = batch["loss_mask"] > 0
    assert int(on.sum()) == sum(f.num_sampled for f in forks) > 0
    assert torch.allclose(lp[on], batch["rollout_logprobs"][on], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_forks_are_reproducible_whatever_the_batching_and_prefill_sharing(policy, chain_mains):
    """The same tokens (byte for byte) in one lockstep batch with one shared prefill per state, in one batch
    without sharing, and one row at a time; the K forks of a state are not copies of each other."""
    mains, _ = chain_mains
    shared, _ = fork_all(policy, mains, 3, share_prefill=True)
    plain, _ = fork_all(policy, mains, 3)
    serial, _ = fork_all(policy, mains, 3, generation_batch=1)

    def tokens(forks):
        return [{k: v for k, v in f.to_dict().items() if k != "rollout_logprobs"} for f in forks]

    assert tokens(shared) == tokens(plain) == tokens(serial)
    for a, b, c in zip(shared, plain, serial, strict=True):  # the floats agree up to batched-kernel rounding
        assert a.rollout_logprobs == pytest.approx(b.rollout_logprobs, abs=1e-5) == c.rollout_logprobs
    assert len({tuple(f.response_ids) for f in shared}) > len(shared) // 3  # the K forks of a state differ


def test_snapshots_need_envs_in_this_process(policy):
    from agentgym.running.pool import make_pool

    with (
        make_pool("thread", "agentgym/Chain-v0", 2, env_kwargs={"horizon": 3}) as pool,
        pytest.raises(ValueError, match="in this process"),
    ):
        collect_rollouts(policy, chain(), [1], group_size=2, config=CHAIN, envs=pool, snapshots=True)


# ----------------------------------------------------------------------------------------------------------------
# branch values converge to the true state values


class FixedSkillPolicy(HFPolicy):
    """A real policy over Chain's text: it reads the last ``Signal: s. Options: a b.`` of its context (as the tiny
    tokenizer decodes it) and answers the signal with probability ``p`` (else the other option), one draw from the
    row's generator per turn. Its state values are known exactly: ``p^(turns left)`` while no choice was wrong,
    else 0."""

    def __init__(self, model, tokenizer, p: float) -> None:
        super().__init__(model, tokenizer)
        self.p = p

    def sample_batch(self, contexts, *, budgets, temperature, stop, generators, share_prefill=False):
        out = []
        for ctx, gen in zip(contexts, generators, strict=True):
            signal, options = re.findall(r"signal : (\w+)\. options : ([\w ]+)\.", self.decode(ctx).lower())[-1]
            right = torch.rand((), generator=gen, dtype=torch.float64).item() < self.p
            choice = signal if right else next(o for o in options.split() if o != signal)
            ids = [*self.encode(f"<answer> {choice} </answer>"), self.end_token_id]
            out.append((ids, [math.log(self.p if right else 1 - self.p)] + [0.0] * (len(ids) - 1), "eos"))
        return out


@pytest.mark.slow
def test_branch_values_converge_to_the_true_values(policy):
    """Chain H=5, per-turn skill p = 0.7: V(s_t) = 0.7^(5 - t) before any mistake, 0 after one. The mean absolute
    error of the K-fork values over the states of 4 episodes falls from K = 4 to 16 to 64 and stays below its
    binomial bound: V_hat is a mean of K Bernoulli(V) returns, so E|V_hat - V| <= sqrt(V (1 - V) / K) (Jensen);
    over N states the mean error exceeds the mean of those by more than 3 sqrt(mean(V (1 - V) / K) / N) with
    probability below 1/9 (Chebyshev; a fixed seed makes the test deterministic)."""
    horizon, p = 5, 0.7
    skill = FixedSkillPolicy(policy.model, policy.tokenizer, p)
    config = dataclasses.replace(CHAIN, max_turns=horizon)
    envs: list = []
    mains = collect_rollouts(skill, chain(horizon), [0, 1], group_size=2, config=config, sample_seed=3, envs=envs,
                             snapshots=True)  # fmt: skip
    train_config = TrainConfig(env_id="agentgym/Chain-v0", estimator="vine", branch_k=1, max_turns=horizon)
    truth = []
    for r in mains:  # the true value of the state before each turn
        for t in range(len(r.turn_spans)):
            ok = all(info.get("correct") for info in r.infos[:t])
            truth.append(p ** (horizon - t) if ok else 0.0)
    truth_arr = np.array(truth)
    errors = []
    for k in (4, 16, 64):
        chosen = choose_turns(mains, "all", entropy=None)
        fork_envs = [chain(horizon)() for _ in range(len(chosen) * k)]
        forks, origins = run_forks(skill, fork_envs, mains, chosen, k=k, sample_seed=k, config=config)
        values = BranchSet(mains, forks, origins).values(train_config)
        est = np.array([v for row in values for v in row], dtype=np.float64)
        mae = float(np.abs(est - truth_arr).mean())
        var = truth_arr * (1 - truth_arr) / k
        bound = float(np.sqrt(var).mean() + 3 * np.sqrt(var.mean() / len(truth)))
        assert mae <= bound, (k, mae, bound)
        errors.append(mae)
        for env in fork_envs:
            env.close()
    assert errors[0] > errors[1] > errors[2], errors
    for env in envs:
        env.close()


# ----------------------------------------------------------------------------------------------------------------
# the trainer's branch mode, the token budget and the config checks


def test_config_checks_the_branch_knobs():
    base = {"env_id": "agentgym/Chain-v0"}
    for bad, match in [({"estimator": "vine"}, "branch_k"), ({"branch_k": 2}, "branch_k"),
                       ({"estimator": "tree", "branch_k": 2, "env_pool": "thread"}, "env_pool"),
                       ({"estimator": "tree", "branch_k": 2, "dynamic_sampling": True}, "dynamic_sampling"),
                       ({"estimator": "vine", "branch_k": 2, "branch_turns": "some"}, "branch_turns"),
                       ({"estimator": "vine", "branch_k": 2, "branch_frac": 0.0}, "branch_frac"),
                       ({"estimator": "vine", "branch_k": -1}, "branch_k"),
                       ({"estimator": "vine", "branch_k": 2, "estimator_kwargs": {"x": 1}}, "takes no"),
                       ({"max_sampled_tokens": 0}, "max_sampled_tokens"),
                       ({"estimator": "vines"}, "known: .*tree.*vine")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            TrainConfig(**base, **bad)
    assert TrainConfig(**base, estimator="tree", branch_k=2, branch_turns="uncertain", branch_frac=0.25).branch_k == 2


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory, one_thread):
    """Chain H=4 after 110 SFT steps on the oracle (valid answers, so returns and advantages are not all 0)."""
    from agentgym.baselines.trainer import train

    out = tmp_path_factory.mktemp("warm")
    train(trainer_config(out, iterations=0, sft_steps=110, sft_lr=3e-3))
    return str(out / "checkpoint.pt")


def trainer_config(out, **kw) -> TrainConfig:
    base = {"env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 4}, "max_turns": 4, "max_new_tokens": 8,
            "stop": ["</answer>"], "batch_tasks": 2, "group_size": 2, "minibatch_size": 4, "lr": 1e-3,
            "temperature": 0.7, "progress_key": "progress", "out_dir": str(out), "plot": False,
            "progress": False}  # fmt: skip
    return TrainConfig(**{**base, **kw})


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["vine", "tree"])
def test_trainer_branch_mode_resumes_exactly(tmp_path, warm_start, estimator):
    """2 iterations with branch_k=2 equal 1 iteration + a resumed second (metrics and weights); every sampled
    token is counted (mains + forks, cumulative), the forks' log-probs match the trainer's, and the policy moves."""
    from agentgym.baselines.trainer import train

    kw = {"estimator": estimator, "branch_k": 2, "init_from": warm_start}
    full = train(trainer_config(tmp_path / "a", iterations=2, **kw))
    train(trainer_config(tmp_path / "b", iterations=1, **kw))
    resumed = train(trainer_config(tmp_path / "b", iterations=2, resume=True, **kw))
    timing = ("time_rollout", "time_update", "rollout_tokens_per_s", "update_tokens_per_s")
    drop = lambda h: {k: v for k, v in h.items() if k not in timing}
    assert drop(resumed["last"]) == drop(full["last"])
    pa, pb = full["state"].model.state_dict(), resumed["state"].model.state_dict()
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    rl = [h for h in full["history"] if h["iteration"] >= 1]
    for h in rl:
        assert h["branch_rollouts"] == 2 * h["branch_turns"] and h["branch_turns"] >= 4
        assert h["sampled_tokens"] > h["branch_sampled_tokens"] > 0
        assert h["rollout_logprob_maxdiff"] < 1e-4
        expected_rows = 4 + (h["branch_rollouts"] if estimator == "tree" else 0)
        assert h["kept_rollouts"] == 4 and expected_rows >= 4
    assert rl[1]["sampled_tokens_total"] == rl[0]["sampled_tokens"] + rl[1]["sampled_tokens"]
    assert any(h["grad_norm"] > 0 for h in rl)  # some advantage was not 0: the policy was updated


@pytest.mark.slow
def test_token_budget_stops_the_run_and_survives_resume(tmp_path):
    """max_sampled_tokens: the run stops at the first iteration whose cumulative count reaches it, says why, and a
    resumed run with the same budget does not go on; a larger budget continues it from the kept count."""
    from agentgym.baselines.trainer import main, train

    out = tmp_path / "run"
    first = train(trainer_config(out, iterations=6, max_sampled_tokens=1, progress_key=None))
    assert first["iterations"] == 1 and first["stopped"].startswith("token budget: ")
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in lines] == [1] and lines[0]["stop_reason"] == first["stopped"]
    assert lines[0]["sampled_tokens_total"] == lines[0]["sampled_tokens"] > 0
    again = train(trainer_config(out, iterations=6, max_sampled_tokens=1, progress_key=None, resume=True))
    assert again["iterations"] == 1 and again["stopped"]
    budget = lines[0]["sampled_tokens_total"] + 1
    more = train(trainer_config(out, iterations=6, max_sampled_tokens=budget, progress_key=None, resume=True))
    assert more["iterations"] == 2
    assert more["last"]["sampled_tokens_total"] == budget - 1 + more["last"]["sampled_tokens"] >= budget
    assert main(["--config", str(out / "config.json"), "--set", "resume=true", "--set", f"max_sampled_tokens={budget}",
                 "--set", "iterations=6"]) == 0  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# BranPO: tail turns, difficulty-aware frequency, redundant-step masking


def with_success(r: Rollout, success: bool) -> Rollout:
    r.success = success
    return r


def test_choose_turns_tail_prefix_by_hand():
    """Rollouts of 3, 1 and 2 turns. tail m=1: each one's last turn -> (0, 2), (1, 0), (2, 1); tail m=2: t >= T - 2
    -> (0, 1), (0, 2), (1, 0), (2, 0), (2, 1); prefix m=1: turn 0 of each; prefix m=2: t < 2."""
    rs = [hand_rollout([0, 0, 0], 0), hand_rollout([0], 0), hand_rollout([0, 0], 1)]
    assert choose_turns(rs, "tail", branch_tail=1, entropy=None) == [(0, 2), (1, 0), (2, 1)]
    assert choose_turns(rs, "tail", branch_tail=2, entropy=None) == [(0, 1), (0, 2), (1, 0), (2, 0), (2, 1)]
    assert choose_turns(rs, "prefix", branch_prefix=1, entropy=None) == [(0, 0), (1, 0), (2, 0)]
    assert choose_turns(rs, "prefix", branch_prefix=2, entropy=None) == [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1)]
    for bad in ({"branch_tail": 0}, {"branch_prefix": 0}):
        with pytest.raises(ValueError, match="branch_tail"):
            choose_turns(rs, "tail", entropy=None, **bad)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=6), st.integers(1, 7))
def test_tail_picks_exactly_the_last_m_turns(lengths, m):
    """tail: a pair (i, t) is chosen iff t >= T_i - m; prefix: iff t < m."""
    rs = [hand_rollout([0] * n, i) for i, n in enumerate(lengths)]
    tail = set(choose_turns(rs, "tail", branch_tail=m, entropy=None))
    prefix = set(choose_turns(rs, "prefix", branch_prefix=m, entropy=None))
    for i, n in enumerate(lengths):
        for t in range(n):
            assert ((i, t) in tail) == (t >= n - m) and ((i, t) in prefix) == (t < m)


def test_difficulty_thins_each_task_by_its_success_rate():
    """Group 0: 1 success of 2 -> p = 1/2, w = 1 - |2 * 1/2 - 1| = 1: its 4 turns all stay. Group 1: 0 of 2 ->
    w = 1 - |0 - 1| = 0: none. Group 2: 1 of 4 -> w = 1 - |1/2 - 1| = 1/2: of its 4 chosen (tail m=1: one per
    rollout) ceil(4 * 1/2) = 2 stay; all tie in tail priority (each is its rollout's last turn, t - T = -1), so
    the earlier pairs (4, 0) and (5, 0) stay. With mode "all" group 0 keeps all; an all-success group keeps none."""
    rs = [with_success(hand_rollout([0, 0], 0), True), hand_rollout([0, 0], 0),
          hand_rollout([0, 0], 1), hand_rollout([0], 1),
          with_success(hand_rollout([0], 2), True), hand_rollout([0], 2), hand_rollout([0], 2),
          hand_rollout([0], 2)]  # fmt: skip
    assert choose_turns(rs, "all", branch_difficulty=True, entropy=None) == [(0, 0), (0, 1), (1, 0), (1, 1),
                                                                            (4, 0), (5, 0)]  # fmt: skip
    assert choose_turns(rs, "tail", branch_difficulty=True, entropy=None) == [(0, 1), (1, 1), (4, 0), (5, 0)]
    won = [with_success(hand_rollout([0, 0], 0), True), with_success(hand_rollout([0], 0), True)]
    assert choose_turns(won, "all", branch_difficulty=True, entropy=None) == []


def tied_branches() -> tuple[BranchSet, TrainConfig]:
    """hand_branches, but main 1's two forks at s_0 both return 1 (rewards (0, 1) and (1,)): a redundant step."""
    branches, config = hand_branches()
    forks = [*branches.forks[:2], hand_rollout([0, 1], 0), hand_rollout([1], 0)]
    return BranchSet(branches.mains, forks, branches.origins), dataclasses.replace(config, branch_mask_ties=True)


def test_masked_steps_get_exactly_zero():
    """vine: main 1 turn 0 (forks tie at 1) gets 0 instead of G_0 - V(s_0) = 0 - 1 = -1; main 0's s_1 forks return
    1 and 0 (no tie): A = 1 + 0 - 0.5 = 0.5 as before. tree: the group at (1, 0) is (0, 1, 1): unmasked
    (-2/3, 1/3, 1/3), masked 0 on the main's turn and on both forks' first turns; (0, 1) keeps (1/3, 1/3, -2/3).
    The forks' sampled tokens are the same with or without masking (masking only zeroes credit)."""
    branches, config = tied_branches()
    for name in ("vine", "tree"):
        cfg = dataclasses.replace(config, estimator=name)
        rows, advs = branch_advantages(branches, cfg)
        got = per_turn(advs, rows)
        assert got[1][0] == 0.0 and got[0][1] == pytest.approx(0.5 if name == "vine" else 1 / 3)
        if name == "tree":
            assert [g[0] for g in got[2:]] == [pytest.approx(1 / 3), pytest.approx(-2 / 3), 0.0, 0.0]
            assert all((advs[k] == 0.0).all() for k in (4, 5))  # every token of a masked fork row is exactly 0
        plain = per_turn(*reversed(branch_advantages(branches, dataclasses.replace(cfg, branch_mask_ties=False))))
        assert plain[1][0] == pytest.approx(-1.0 if name == "vine" else -2 / 3)
        m = branches.metrics(cfg)
        assert m["branch_masked_frac"] == 0.5 and m["branch_sampled_tokens"] == 2 + 2 + 4 + 2


def test_masking_needs_two_forks_and_tree_knobs_need_tree():
    base = {"env_id": "agentgym/Chain-v0"}
    with pytest.raises(ValueError, match="branch_k >= 2"):
        TrainConfig(**base, estimator="tree", branch_k=1, branch_mask_ties=True)
    for knob in ({"tree_target": "immediate"}, {"tree_std": True}, {"tree_blend": 0.5}, {"step_bonus": 0.1}):
        with pytest.raises(ValueError, match="knobs of estimator 'tree'"):
            TrainConfig(**base, estimator="vine", branch_k=2, **knob)
    for bad, match in [({"tree_target": "best"}, "tree_target"), ({"tree_blend": 1.5}, "tree_blend"),
                       ({"branch_tail": 0}, "branch_tail"), ({"branch_resample": -1}, "branch_resample"),
                       ({"branch_turns": "middle"}, "branch_turns"), ({"branch_depth": 0}, "branch_depth"),
                       ({"branch_depth": 2, "tree_std": True}, "branch_depth")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            TrainConfig(**base, estimator="tree", branch_k=2, **bad)


def test_tail_forks_count_their_tokens_as_vines_do(policy, chain_mains):
    """Real forks from the tail turns: every fork starts at one of the last m turns, the forks' sampled tokens are
    exactly the loss-mask tokens of their rows (as for vine's forks), and masking changes no count."""
    mains, _ = chain_mains
    chosen = choose_turns(mains, "tail", branch_tail=1, entropy=None)
    assert chosen == [(i, len(r.turn_spans) - 1) for i, r in enumerate(mains)]
    envs = [chain()() for _ in range(2 * len(chosen))]
    forks, origins = run_forks(policy, envs, mains, chosen, k=2, sample_seed=3, config=CHAIN)
    for env in envs:
        env.close()
    branches = BranchSet(mains, forks, origins)
    batch = make_batch(forks, policy.tokenizer.pad_token_id)
    config = TrainConfig(env_id="agentgym/Chain-v0", estimator="vine", branch_k=2, branch_turns="tail")
    for cfg in (config, dataclasses.replace(config, branch_mask_ties=True)):
        assert branches.metrics(cfg)["branch_sampled_tokens"] == int(batch["loss_mask"].sum()) > 0


# ----------------------------------------------------------------------------------------------------------------
# TL-GRPO: immediate and max-to-go targets, std


def test_tl_grpo_targets_by_hand():
    """Prefix rewards (0.5,), rest (0, 0.2) with gamma 0.5: return = 0 + 0.5 * 0.2 = 0.1; immediate = 0; max_to_go =
    max(0.5, 0, 0.2) = 0.5. No turn played: 0 (return, immediate) or the prefix's best 0.5. std: the group
    (1, 0, 0) has deviations (2/3, -1/3, -1/3) and population std sqrt((4/9 + 1/9 + 1/9) / 3) = sqrt(2)/3, so
    A = (sqrt(2), -1/sqrt(2), -1/sqrt(2)) up to the 1e-6 in the denominator; a tied group gives exactly 0."""
    assert target_value([0.5], [0.0, 0.2], tree_target="return", gamma=0.5) == pytest.approx(0.1)
    assert target_value([0.5], [0.0, 0.2], tree_target="immediate") == 0.0
    assert target_value([0.5], [0.0, 0.2], tree_target="max_to_go") == 0.5
    assert target_value([0.5], [], tree_target="return") == target_value([0.5], [], tree_target="immediate") == 0.0
    assert target_value([0.5], [], tree_target="max_to_go") == 0.5
    assert target_value([], [], tree_target="max_to_go") == 0.0
    with pytest.raises(ValueError, match="tree_target"):
        target_value([], [1.0], tree_target="best")
    r2 = math.sqrt(2)
    assert tree_advantages([[1.0, 0.0, 0.0]], tree_std=True)[0] == pytest.approx([r2, -1 / r2, -1 / r2], rel=1e-5)
    for std in (False, True):
        assert tree_advantages([[0.1, 0.1, 0.1], [3.0]], tree_std=std)[0].tolist() == [0.0] * 3


def test_tree_targets_on_a_branch_set_by_hand():
    """hand_branches with tree_target="immediate": at (main 0, s_1) the main's turn-1 reward 1 and the forks' first
    rewards 1, 0 -> mean 2/3 -> (1/3, 1/3, -2/3); at (main 1, s_0) main 0 and forks 0, 0 -> all tie -> 0 (the
    'return' target gave (-1/3, 2/3, -1/3) there: the fork (0, 1) is no longer credited for its later reward).
    max_to_go at (1, 0): trajectory bests (0, 1, 0) -> (-1/3, 2/3, -1/3); at (0, 1): prefix (0,) then (1 | 1 | 0)
    -> (1/3, 1/3, -2/3)."""
    branches, config = hand_branches()
    imm = dataclasses.replace(config, estimator="tree", tree_target="immediate")
    got = per_turn(*reversed(branch_advantages(branches, imm)))
    third = 1 / 3
    assert got[0][1] == pytest.approx(third) and got[1][0] == 0.0
    assert [g[0] for g in got[2:]] == pytest.approx([third, -2 * third, 0.0, 0.0])
    best = dataclasses.replace(imm, tree_target="max_to_go")
    got = per_turn(*reversed(branch_advantages(branches, best)))
    assert [got[0][1], got[1][0]] == pytest.approx([third, -third])
    assert [g[0] for g in got[2:]] == pytest.approx([third, -2 * third, 2 * third, -third])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-2, 2), max_size=4),
       st.lists(st.lists(st.floats(-2, 2), min_size=1, max_size=5), min_size=1, max_size=5),
       st.randoms(use_true_random=False))  # fmt: skip
def test_immediate_ignores_later_turns_and_max_to_go_needs_a_new_best(prefix, rests, rnd):
    """immediate: shuffling each member's later rewards leaves its value (and the group's advantages) unchanged.
    max_to_go: when the prefix's best is at least every member's best, every member's value is that best and the
    group's advantages are exactly 0; a member's advantage is positive only if its trajectory's best is above the
    group's mean best."""
    imm = [target_value(prefix, r, tree_target="immediate") for r in rests]
    shuffled = [[r[0], *rnd.sample(r[1:], len(r) - 1)] for r in rests]
    assert [target_value(prefix, r, tree_target="immediate") for r in shuffled] == imm
    assert np.array_equal(tree_advantages([imm])[0], tree_advantages([[r[0] for r in shuffled]])[0])
    top = max(x for r in rests for x in r)
    high = [*prefix, top + 1.0]
    vals = [target_value(high, r, tree_target="max_to_go") for r in rests]
    assert tree_advantages([vals])[0].tolist() == [0.0] * len(rests)
    vals = [target_value(prefix, r, tree_target="max_to_go") for r in rests]
    for v, a in zip(vals, tree_advantages([vals])[0], strict=True):
        assert (a > 0) == (v > math.fsum(vals) / len(vals)) or abs(a) < 1e-12


# ----------------------------------------------------------------------------------------------------------------
# PORTool: blend, step bonus, prefix forks


def test_portool_blend_by_hand():
    """hand_branches (tree). RLOO A^traj: main 0 = 1, main 1 = -1 (fallback). Forks' A^traj: their whole episode's
    outcome minus the group's mean main outcome (1 + 0) / 2: forks of (0, 1) with prefix reward 0: 1 - 0.5 = 0.5
    and 0 - 0.5 = -0.5; forks of (1, 0): 1 - 0.5 = 0.5, 0 - 0.5 = -0.5.
    alpha = 0.5, beta = 0: (0, 1): 0.5 * (1/3, 1/3, -2/3) + 0.5 * (1, 0.5, -0.5) = (2/3, 5/12, -7/12);
    (1, 0): 0.5 * (-1/3, 2/3, -1/3) + 0.5 * (-1, 0.5, -0.5) = (-2/3, 7/12, -5/12). Unforked turns keep RLOO.
    alpha = 0: RLOO on every main turn. alpha = 1 (the default): today's tree."""
    branches, config = hand_branches()
    tree = dataclasses.replace(config, estimator="tree")
    got = per_turn(*reversed(branch_advantages(branches, dataclasses.replace(tree, tree_blend=0.5))))
    assert got[0] == pytest.approx([1.0, 2 / 3]) and got[1] == pytest.approx([-2 / 3, -1.0])
    assert [g[0] for g in got[2:]] == pytest.approx([5 / 12, -7 / 12, 7 / 12, -5 / 12])
    rloo_rows = per_turn(*reversed(branch_advantages(branches, dataclasses.replace(tree, tree_blend=0.0))))
    assert rloo_rows[:2] == [[1.0, 1.0], [-1.0, -1.0]]
    assert [g[0] for g in rloo_rows[2:]] == [0.5, -0.5, 0.5, -0.5]
    one = branch_advantages(branches, dataclasses.replace(tree, tree_blend=1.0))
    base = branch_advantages(branches, tree)
    assert all(np.array_equal(a, b) for a, b in zip(one[1], base[1], strict=True))


def test_step_bonus_and_siblings_by_hand():
    """Values (1, 1, 0) with validity (yes, no, yes), beta = 0.5: scored (1.5, 1, 0.5), mean 1 -> (0.5, 0, -0.5).
    Siblings with equal values and equal validity get a zero fork term: alpha A^fork = 0 leaves (1 - alpha) A^traj.
    A singleton group's fork term is 0; std makes a two-member group +-1 (up to 1e-6)."""
    out = fork_group_advantages([1.0, 1.0, 0.0], [0.0] * 3, [True, False, True], step_bonus=0.5)
    assert out.tolist() == [0.5, 0.0, -0.5]
    tied = fork_group_advantages([0.3, 0.3], [0.4, -0.2], [True, True], tree_blend=0.25, step_bonus=2.0)
    assert tied == pytest.approx([0.75 * 0.4, 0.75 * -0.2])
    assert fork_group_advantages([5.0], [0.0], [True]).tolist() == [0.0]
    assert fork_group_advantages([2.0, 0.0], [0.0, 0.0], [True, True], tree_std=True) == pytest.approx([1, -1], 1e-5)
    with pytest.raises(ValueError, match="differ"):
        fork_group_advantages([1.0], [0.0, 1.0], [True])


def test_a_shared_step_is_trained_once(policy, chain_mains):
    """PORTool: a step shared by the main and its forks has one advantage because it is trained in one row: a fork
    row's prompt is the main's prefix (no loss there) and its loss covers its first turn only."""
    mains, _ = chain_mains
    chosen = choose_turns(mains, "prefix", branch_prefix=2, entropy=None)
    assert chosen and all(t < 2 for _, t in chosen)
    envs = [chain()() for _ in range(2 * len(chosen))]
    forks, origins = run_forks(policy, envs, mains, chosen, k=2, sample_seed=3, config=CHAIN)
    for env in envs:
        env.close()
    config = TrainConfig(env_id="agentgym/Chain-v0", estimator="tree", branch_k=2, branch_turns="prefix",
                         branch_prefix=2, tree_blend=0.5, step_bonus=0.1, tree_std=True)  # fmt: skip
    rows, advs = branch_advantages(BranchSet(mains, forks, origins), config)
    for r, (i, t, _) in zip(rows[len(mains) :], [o for o, f in zip(origins, forks, strict=True) if f.turn_spans],
                            strict=True):  # fmt: skip
        assert r.prompt_ids == mains[i].input_ids[: mains[i].context_lengths[t]]
        assert sum(r.loss_mask) == r.turn_spans[0][1] - r.turn_spans[0][0] and len(r.turn_spans) == 1
    assert all(np.isfinite(a).all() for a in advs)


# ----------------------------------------------------------------------------------------------------------------
# AT^2PO: entropy-guided expansion


def test_choose_turns_entropy_by_hand():
    """Entropies (0.2, 1.5 | 0.9, 0.1): frac 0.5 of 4 turns -> the two highest, (0, 1) and (1, 0); frac 0.75 ->
    ceil(3) = 3: plus (0, 0). A missing or misshapen entropy list raises."""
    rs = [hand_rollout([0, 0], 0), hand_rollout([0, 0], 0)]
    ent = [[0.2, 1.5], [0.9, 0.1]]
    assert choose_turns(rs, "entropy", 0.5, entropy=ent) == [(0, 1), (1, 0)]
    assert choose_turns(rs, "entropy", 0.75, entropy=ent) == [(0, 0), (0, 1), (1, 0)]
    for bad in (None, [[0.2], [0.9, 0.1]]):
        with pytest.raises(ValueError, match="entropy"):
            choose_turns(rs, "entropy", 0.5, entropy=bad)


def test_turn_entropy_equals_a_full_forward(policy, chain_mains):
    """turn_entropy: per turn, the mean over its sampled tokens of -sum p log p of softmax(logits / T), checked
    against one plain forward of each rollout alone (no padding, every position's logits)."""
    mains, _ = chain_mains
    got = turn_entropy(policy, mains, 0.7)
    for r, ents in zip(mains, got, strict=True):
        with torch.no_grad():
            logits = policy.model(torch.tensor([r.input_ids])).logits[0].double() / 0.7
        logp = torch.log_softmax(logits, -1)
        h = -(logp.exp() * logp).sum(-1)  # h[j]: the distribution of token j + 1
        p = len(r.prompt_ids)
        want = [float(h[p + s - 1 : p + e - 1].mean()) for s, e in r.turn_spans]
        assert ents == pytest.approx(want, abs=1e-4)
        assert all(0.0 < x <= math.log(logits.shape[-1]) + 1e-9 for x in ents)


# ----------------------------------------------------------------------------------------------------------------
# T^2PO: resampling turns without progress


def test_stalled_turn_by_hand():
    """Anchors before turns ("a", "a", "b") and after them ("a", "b", "b"): turn 0 left the anchor unchanged, so
    did turn 2; from turn 1 on the first stalled one is turn 2, unless it ended the episode (terminated). Without
    anchors, a turn whose observation repeats one seen before is stalled."""
    r = hand_rollout([0, 0, 0], 0)
    r.anchors = ["a", "a", "b"]
    r.infos = [{"anchor": "a"}, {"anchor": "b"}, {"anchor": "b"}]
    r.observations = [[{"content": "x"}], [{"content": "y"}], [{"content": "z"}]]
    assert stalled_turn(r) == 0 and stalled_turn(r, 1) == 2
    r.terminated = True
    assert stalled_turn(r, 1) is None
    r.anchors, r.infos = [None] * 3, [{}] * 3
    r.initial_observation, r.terminated = [{"content": "y"}], False
    assert stalled_turn(r) == 1 and stalled_turn(r, 2) is None


SEARCH = RolloutConfig(max_turns=3, max_new_tokens=8, temperature=1.0, stop=("</search>", "</answer>"))


def search_env():
    return gymnasium.make("agentgym/SearchQA-v0", dataset="tiny")


def test_resample_stalled_on_search_qa(policy):
    """SearchQA with the tiny random model: most actions are invalid and leave the anchor as it was. Resampling
    (r = 2) replays each stalled rollout from the snapshot before its first stalled turn: the new turn starts from
    the same anchor, the prefix is kept token for token, the spliced episode's log-probs equal the trainer's
    recomputation, each rollout is resampled at most r times and the continuations' tokens are counted. r = 0
    changes nothing."""
    envs: list = []
    mains = collect_rollouts(policy, search_env, [0, 1], group_size=2, config=SEARCH, sample_seed=2, envs=envs,
                             snapshots=True)  # fmt: skip
    first = [stalled_turn(r) for r in mains]
    assert any(t is not None for t in first)
    spare = [search_env() for _ in mains]
    try:
        same, tokens, count = resample_stalled(policy, spare, mains, SEARCH, 9, branch_resample=0,
                                               generation_batch=None)  # fmt: skip
        assert same == mains and tokens == count == 0
        out, tokens, count = resample_stalled(policy, spare, mains, SEARCH, 9, branch_resample=2,
                                              generation_batch=None)  # fmt: skip
    finally:
        for env in envs + spare:
            env.close()
    assert 1 <= count <= 2 * sum(t is not None for t in first)
    changed = 0
    for old, new, t in zip(mains, out, first, strict=True):
        if t is None:
            assert new is old
            continue
        changed += new is not old
        assert new.anchors[t] == old.anchors[t] and new.actions[:t] == old.actions[:t]
        cut = old.context_lengths[t]
        assert new.input_ids[:cut] == old.input_ids[:cut] and len(new.snapshots) == len(new.turn_spans)
    assert changed >= 1
    batch = make_batch(out, policy.tokenizer.pad_token_id)
    lp, _ = score_batch(policy.model, batch, SEARCH.temperature, minibatch_size=8)
    on = batch["loss_mask"] > 0
    assert torch.allclose(lp[on], batch["rollout_logprobs"][on], atol=1e-5, rtol=0)
    resampled = sum(
        new.num_sampled - sum(old.loss_mask[: old.context_lengths[t] - len(old.prompt_ids)])
        for old, new, t in zip(mains, out, first, strict=True)
        if t is not None and new is not old
    )
    assert tokens >= resampled > 0  # a rollout resampled twice also counts its discarded first continuation


# ----------------------------------------------------------------------------------------------------------------
# finiteness and the cards


def test_no_forks_singletons_and_one_turn_rollouts_stay_finite():
    """No forked state at all, a group of one, one-turn rollouts, and a state whose forks played no turn: every
    advantage is finite, and an all-masked batch is all 0."""
    lone = hand_rollout([1.0], 7)
    config = TrainConfig(env_id="agentgym/Chain-v0", estimator="tree", branch_k=2, reward_components="all",
                         tree_std=True, tree_blend=0.5, step_bonus=0.1, tree_target="max_to_go")  # fmt: skip
    rows, advs = branch_advantages(BranchSet([lone], [], []), config)
    assert rows == [lone] and advs[0].tolist() == [0.0, 0.0]
    empty = Rollout(prompt_ids=[1], group_id=7)
    rows, advs = branch_advantages(BranchSet([lone], [empty, empty], [(0, 0, 0), (0, 0, 1)]), config)
    assert len(rows) == 1 and all(np.isfinite(a).all() for a in advs)
    masked = dataclasses.replace(config, branch_mask_ties=True)
    rows, advs = branch_advantages(BranchSet([lone], [hand_rollout([1.0], 7)] * 2, [(0, 0, 0), (0, 0, 1)]), masked)
    assert all((a == 0.0).all() for a in advs)
    assert choose_turns([], "tail", entropy=None) == [] and turn_entropy_empty()


def turn_entropy_empty() -> bool:
    return turn_entropy(None, [], 1.0) == []  # type: ignore[arg-type]


def test_cards_train_recipes_are_valid_configs():
    """Every card of the module names its code and gives a TrainConfig that builds on Chain (a branch run)."""
    from agentgym.baselines.branches import METHODS

    assert {c.name for c in METHODS} == {"vine", "tree", "branpo", "tl_grpo", "portool", "at2po", "t2po"}
    for card in METHODS:
        assert card.kind == "branch" and card.load() is not None and card.knobs_into == "config"
        config = TrainConfig(env_id="agentgym/Chain-v0", **card.train)
        assert config.branch_k >= 1
        assert set(card.knobs()) <= {f.name for f in dataclasses.fields(TrainConfig)}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["branpo", "tl_grpo", "portool", "at2po", "t2po"])
def test_every_card_trains_end_to_end(tmp_path, warm_start, name):
    """One iteration of each card's recipe on Chain H=4 from the warm start: forks are sampled and counted, the
    forks' log-probs match the trainer's and every advantage is finite (the loss is)."""
    from agentgym.baselines.branches import METHODS
    from agentgym.baselines.trainer import train

    card = next(c for c in METHODS if c.name == name)
    out = train(trainer_config(tmp_path, iterations=1, init_from=warm_start, **card.train))
    h = out["last"]
    assert h["sampled_tokens"] >= h["branch_sampled_tokens"] and h["rollout_logprob_maxdiff"] < 1e-4
    assert math.isfinite(h["loss"]) and h["kept_rollouts"] == 4


# ----------------------------------------------------------------------------------------------------------------
# AT^2PO: multi-level trees


def test_one_level_tree_equals_tree():
    """With no deeper level every child is a leaf: the level credit gives tree's rows and advantages exactly."""
    from agentgym.baselines.branches import _level_rows

    branches, config = hand_branches()
    config = dataclasses.replace(config, estimator="tree")
    rows, advs = branch_advantages(branches, config)
    lrows, ladvs = _level_rows(branches, config)
    assert [r.response_ids for r in lrows] == [r.response_ids for r in rows]
    assert all(np.array_equal(a, b) for a, b in zip(advs, ladvs, strict=True))


def two_level_branches() -> tuple[BranchSet, TrainConfig]:
    """Main 0 rewards (0, 0, 1), main 1 (0, 0, 0), one group. Level 1: main 0 forked at turn 1 by F1 (0, 1) and
    F2 (0, 0). Level 2: the states after each of those three actions, two forks each: after main 0's turn 1
    (node (0, 2)): S1 (0), S2 (1); after F1's first turn (node (2, 1)): S3 (1), S4 (1); after F2's (node (3, 1)):
    S5 (0), S6 (1)."""
    mains = [hand_rollout([0, 0, 1], 0), hand_rollout([0, 0, 0], 0)]
    forks = [hand_rollout([0, 1], 0), hand_rollout([0, 0], 0)]
    subs = [hand_rollout([x], 0) for x in (0, 1, 1, 1, 0, 1)]
    branches = BranchSet(mains, forks, [(0, 1, 0), (0, 1, 1)], sub_forks=subs,
                         sub_origins=[(0, 2, 0), (0, 2, 1), (2, 1, 0), (2, 1, 1), (3, 1, 0), (3, 1, 1)],
                         levels={(0, 2): 2, (2, 1): 2, (3, 1): 2})  # fmt: skip
    config = TrainConfig(env_id="agentgym/Chain-v0", estimator="tree", branch_k=2, branch_depth=2,
                         reward_components="all")  # fmt: skip
    return branches, config


def test_two_level_tree_by_hand():
    """Level 2 (leaves): node (0, 2): children main 0's turn 2 (return 1), S1 0, S2 1 -> V = 2/3, A = (1/3, -2/3,
    1/3). Node (2, 1): F1's turn 1 (1), S3 1, S4 1 -> V = 1, A = 0. Node (3, 1): F2's turn 1 (0), S5 0, S6 1 ->
    V = 1/3, A = (-1/3, -1/3, 2/3).
    Level 1, node (0, 1): main 0's turn 1: r 0 + V(0, 2) = 2/3; F1's first: 0 + V(2, 1) = 1; F2's: 0 + 1/3 -> V =
    (2/3 + 1 + 1/3) / 3 = 2/3, A = (0, 1/3, -1/3).
    Main turns at no node: the RLOO fallback (outcomes 1 and 0: +1 and -1). F1 and F2 are trained on two turns."""
    branches, config = two_level_branches()
    rows, advs = branch_advantages(branches, config)
    got = per_turn(advs, rows)
    t = 1 / 3
    assert got[0] == pytest.approx([1.0, 0.0, t]) and got[1] == [-1.0, -1.0, -1.0]
    assert got[2] == pytest.approx([t, 0.0]) and got[3] == pytest.approx([-t, -t])
    assert [g[0] for g in got[4:]] == pytest.approx([-2 * t, t, 0.0, 0.0, -t, 2 * t])
    assert branches.metrics(config)["branch_rollouts"] == 8 and branches.sampled_tokens == 2 * (2 + 2 + 6)


@pytest.mark.slow
def test_grow_levels_on_chain(policy, chain_mains):
    """Depth 2 on Chain H=3 from each rollout's first turn: the second level forks the state after every child
    action of the first (main turn 1, each fork's turn 1); a sub-fork starts from its parent's token prefix, plays
    at most max_turns minus its episode turn, its log-probs equal the trainer's, its tokens are counted, and the
    siblings' advantages at every node sum to 0."""
    from agentgym.baselines.branches import grow_branches, level_advantages, tree_nodes

    mains, _ = chain_mains
    config = TrainConfig(
        env_id="agentgym/Chain-v0",
        env_kwargs={"horizon": 3},
        max_turns=3,
        max_new_tokens=8,
        stop=("</answer>",),
        estimator="tree",
        branch_k=2,
        branch_turns="prefix",
        branch_depth=2,
    )
    envs: list = []
    try:
        branches = grow_branches(policy, envs, chain(), list(mains), config, 4)
    finally:
        for env in envs:
            env.close()
    rows, n = branches.rows, len(mains)
    assert branches.chosen == [(i, 0) for i in range(n)] and branches.sub_forks
    assert set(branches.levels) == {(r, 1) for r in range(n + len(branches.forks)) if len(rows[r].turn_spans) > 1}
    for f, (r, t, _) in zip(branches.sub_forks, branches.sub_origins, strict=True):
        assert t == 1 and f.prompt_ids == rows[r].input_ids[: rows[r].context_lengths[1]]
        episode_turn = 1 + (0 if r < n else branches.origins[r - n][1])
        assert 1 <= len(f.turn_spans) <= config.max_turns - episode_turn
    batch = make_batch(branches.sub_forks, policy.tokenizer.pad_token_id)
    lp, _ = score_batch(policy.model, batch, 1.0, minibatch_size=8)
    on = batch["loss_mask"] > 0
    assert torch.allclose(lp[on], batch["rollout_logprobs"][on], atol=1e-5, rtol=0)
    assert branches.sampled_tokens == sum(f.num_sampled for f in branches.forks + branches.sub_forks)
    adv = level_advantages(branches, config)
    for _, kids in tree_nodes(branches)[1].items():
        assert abs(math.fsum(adv[c] for c in kids)) < 1e-12
    rows_out, advs = branch_advantages(branches, config)
    assert len(rows_out) == n + sum(bool(f.turn_spans) for f in branches.forks + branches.sub_forks)
    assert all(np.isfinite(a).all() for a in advs)


# ----------------------------------------------------------------------------------------------------------------
# IPR: forks along the expert path, Monte-Carlo step rewards, step-level DPO (baselines/ipr.py)


def test_step_dpo_loss_by_hand():
    """Policy minus reference: chosen -1 - (-1.5) = 0.5, rejected -2 - (-1.5) = -0.5, difference 1. beta 1:
    -log sigmoid(1) = log(1 + e^-1) = 0.3132617; beta 0.1: log(1 + e^-0.1) = 0.6443967; the reference itself: log 2."""
    from agentgym.baselines.ipr import step_dpo_loss

    c, r, rc, rr = (torch.tensor([x]) for x in (-1.0, -2.0, -1.5, -1.5))
    assert float(step_dpo_loss(c, r, rc, rr, 1.0)) == pytest.approx(0.3132617, abs=1e-6)
    assert float(step_dpo_loss(c, r, rc, rr, 0.1)) == pytest.approx(0.6443967, abs=1e-6)
    assert float(step_dpo_loss(rc, rr, rc, rr, 0.1)) == pytest.approx(math.log(2), abs=1e-7)


def test_ipr_step_values_and_pairs_on_chain(policy):
    """Chain H=4, expert = the oracle, agent = a fixed skill p = 0.7 per turn. On the expert path no choice was wrong,
    so Q(s_t, expert) = p^(H - t - 1) and Q(s_t, agent) = the same if the agent chose right, else 0 (exactly, every
    continuation fails). With k = 32 the estimates' mean error stays within the binomial bound of
    test_branch_values_converge_to_the_true_values; a pair comes exactly from each state where the agent chose wrong
    (a right choice is the expert's own text: no pair), its prompt is the expert's prefix, and the pairs come only
    from expert-path states."""
    from agentgym.baselines.ipr import expert_step_pairs

    horizon, p, k = 4, 0.7, 32
    skill = FixedSkillPolicy(policy.model, policy.tokenizer, p)
    config = dataclasses.replace(CHAIN, max_turns=horizon)
    out = expert_step_pairs(skill, chain(horizon), [0, 1, 2], config, 5, k=k)
    truth, est = [], []
    wrong = set()
    for a, (e, t) in enumerate(out.origins):
        exact = p ** (horizon - t - 1)
        right = out.agent[a].infos[0].get("correct")
        truth += [exact, exact if right else 0.0]
        est += [out.q_expert[e, t], out.q_agent[e, t]]
        if not right:
            wrong.add((e, t))
            assert out.q_agent[e, t] == 0.0
    assert len(out.origins) == 3 * horizon and wrong
    truth_arr, est_arr = np.array(truth), np.array(est)
    var = truth_arr * (1 - truth_arr) / k
    assert np.abs(est_arr - truth_arr).mean() <= np.sqrt(var).mean() + 3 * np.sqrt(var.mean() / len(truth))
    assert {(pair.expert, pair.turn) for pair in out.pairs} == wrong
    for pair in out.pairs:
        expert = out.experts[pair.expert]
        assert pair.prompt_ids == expert.input_ids[: expert.context_lengths[pair.turn]]
        assert pair.q_chosen > pair.q_rejected == 0.0
    assert out.sampled_tokens > 0
    perfect = expert_step_pairs(FixedSkillPolicy(policy.model, policy.tokenizer, 1.0), chain(horizon), [0], config,
                                5, k=2)  # fmt: skip
    assert perfect.pairs == [] and all(q == 1.0 for q in perfect.q_agent.values())


def test_ipr_loss_prefers_the_expert_after_a_step(policy):
    """At the reference the DPO term is log 2; a small SGD step on the loss (no SFT term) lowers it and raises the
    chosen actions' log-probs relative to the rejected ones' (summed over the pairs)."""
    import copy

    from agentgym.baselines.ipr import StepPair, action_logprobs, ipr_loss

    model = copy.deepcopy(policy.model)
    ref = copy.deepcopy(policy.model).requires_grad_(False)
    pad = policy.tokenizer.pad_token_id
    pairs = [StepPair([1, 2, 3], [5, 6], [7, 8, 9], 1.0, 0.0, 0, 0), StepPair([4, 2], [10], [11], 0.5, 0.0, 1, 0)]
    loss = ipr_loss(model, ref, pairs, pad, beta=0.5, sft_coef=0.0)
    assert float(loss.detach()) == pytest.approx(math.log(2), abs=1e-6)
    before = action_logprobs(model, pairs, pad).detach()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss.backward()
    opt.step()
    after = action_logprobs(model, pairs, pad).detach()
    assert float(ipr_loss(model, ref, pairs, pad, beta=0.5, sft_coef=0.0).detach()) < math.log(2)
    assert float((after[0] - after[1]).sum()) > float((before[0] - before[1]).sum())
    with pytest.raises(ValueError, match="no pairs"):
        ipr_loss(model, ref, [], pad)


# ----------------------------------------------------------------------------------------------------------------
# T^2PO: the token-level thinking intervention (baselines/t2po.py)

LONG = dataclasses.replace(CHAIN, max_new_tokens=24)


@pytest.mark.slow
def test_thinking_intervention(policy):
    """Windows of 4 tokens. delta = 0 never intervenes: the episodes are token for token those of the plain policy.
    A huge delta intervenes whenever two windows in a row were sampled and the text still fits: the inserted tokens
    are the text's, sit inside the turns, leave the loss (mask 0) after mask_interventions, and every other token's
    log-prob equals the trainer's recomputation over the whole sequence."""
    from agentgym.baselines.t2po import InterveningPolicy

    plain = collect_rollouts(policy, chain(), [3, 8], group_size=2, config=LONG, sample_seed=5)
    never = InterveningPolicy(policy.model, policy.tokenizer, window=4, delta=0.0)
    same = collect_rollouts(never, chain(), [3, 8], group_size=2, config=LONG, sample_seed=5)
    assert [r.response_ids for r in same] == [r.response_ids for r in plain] and not never.inserted
    for a, b in zip(same, plain, strict=True):
        assert a.rollout_logprobs == pytest.approx(b.rollout_logprobs, abs=1e-5)
    always = InterveningPolicy(policy.model, policy.tokenizer, window=4, delta=1e9, text=" think again")
    rolls = collect_rollouts(always, chain(), [3, 8], group_size=2, config=LONG, sample_seed=5)
    text = always.encode(" think again")
    ranges = sum(len(v) for v in always.inserted.values())
    assert ranges >= 1
    before = [list(r.loss_mask) for r in rolls]
    assert always.mask_interventions(rolls) == ranges * len(text) and not always.inserted
    for r, mask in zip(rolls, before, strict=True):
        off = [j for j, (m0, m1) in enumerate(zip(mask, r.loss_mask, strict=True)) if m0 != m1]
        assert all(r.loss_mask[j] == 0 and r.rollout_logprobs[j] == 0.0 for j in off)
        assert [r.response_ids[j] for j in off] == text * (len(off) // len(text))
    batch = make_batch(rolls, policy.tokenizer.pad_token_id)
    lp, _ = score_batch(policy.model, batch, LONG.temperature, minibatch_size=8)
    on = batch["loss_mask"] > 0
    assert torch.allclose(lp[on], batch["rollout_logprobs"][on], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="window"):
        InterveningPolicy(policy.model, policy.tokenizer, window=0)


# ----------------------------------------------------------------------------------------------------------------
# TL-GRPO: going on from the best candidate


def progress_chain(horizon: int = 4):
    from agentgym.rewards.wrappers import ProgressReward

    return lambda: ProgressReward(gymnasium.make("agentgym/Chain-v0", horizon=horizon), "progress")


def test_best_paths_go_on_from_the_best_candidate(policy):
    """Chain H=4 with progress as the immediate reward (+1/4 for a right choice, back to 0 after a wrong one), a
    fixed skill p = 0.5, K + 1 = 4 candidates per turn. Each path replays its main's task from the reset state; its
    turn t is the candidate with the highest immediate reward (the first of equals), the other 3 are that turn's
    forks, every candidate starts from the path's own context, and the paths' tokens are counted."""
    from agentgym.baselines.branches import best_paths

    skill = FixedSkillPolicy(policy.model, policy.tokenizer, 0.5)
    config = dataclasses.replace(CHAIN, max_turns=4)
    envs: list = []
    mains = collect_rollouts(skill, progress_chain(), [0, 1], group_size=1, config=config, sample_seed=1, envs=envs,
                             snapshots=True)  # fmt: skip
    spare = [progress_chain()() for _ in range(8)]
    try:
        paths, forks, origins, tokens = best_paths(skill, spare, mains, config, 3, k=3, score=lambda c: c.outcome)
    finally:
        for env in envs + spare:
            env.close()
    assert tokens == sum(p.num_sampled for p in paths) > 0
    for i, (path, main) in enumerate(zip(paths, mains, strict=True)):
        assert path.prompt_ids == main.prompt_ids and path.anchors[0] == main.anchors[0]
        assert len(path.turn_spans) == 4 and path.terminated
        for t in range(4):
            group = [f for f, (r, u, _) in zip(forks, origins, strict=True) if (r, u) == (i, t)]
            assert len(group) == 3
            assert all(f.prompt_ids == path.input_ids[: path.context_lengths[t]] for f in group)
            assert path.turn_rewards[t] >= max(f.turn_rewards[0] for f in group)
    # 4 candidates at p = 1/2: all wrong with probability 1/16 per turn, so most searched episodes succeed
    assert sum(p.success for p in paths) >= 1


def test_best_paths_tokens_and_rows_with_the_model(policy):
    """With the tiny model (no skill: the candidates mostly tie, so the first is taken): the paths' and the
    candidates' log-probs equal the trainer's recomputation (the paths' observation tokens are laid out as the
    rollout loop lays them), and tree's rows are the paths plus every candidate's turn, each turn group centred."""
    from agentgym.baselines.branches import best_paths

    envs: list = []
    mains = collect_rollouts(policy, chain(), [3], group_size=2, config=CHAIN, sample_seed=5, envs=envs,
                             snapshots=True)  # fmt: skip
    spare = [chain()() for _ in range(6)]
    try:
        paths, forks, origins, _ = best_paths(policy, spare, mains, CHAIN, 2, k=2, score=lambda c: c.outcome)
    finally:
        for env in envs + spare:
            env.close()
    batch = make_batch([*paths, *forks], policy.tokenizer.pad_token_id)
    lp, _ = score_batch(policy.model, batch, CHAIN.temperature, minibatch_size=8)
    on = batch["loss_mask"] > 0
    assert torch.allclose(lp[on], batch["rollout_logprobs"][on], atol=1e-5, rtol=0)
    config = TrainConfig(env_id="agentgym/Chain-v0", estimator="tree", branch_k=2, tree_target="immediate",
                         tree_continue="best", reward_components="all")  # fmt: skip
    rows, advs = branch_advantages(BranchSet(paths, forks, origins), config)
    assert len(rows) == len(paths) + len(forks) == len(paths) + 2 * sum(len(p.turn_spans) for p in paths)
    assert all(np.isfinite(a).all() for a in advs)
    for bad in ({"tree_continue": "first"}, {"tree_continue": "best", "tree_target": "return"}):
        with pytest.raises(ValueError, match="tree_continue"):
            TrainConfig(**{**dataclasses.asdict(config), **bad})


def test_turn_ratio_is_the_geometric_mean_of_its_tokens():
    """AT^2PO's turn-level ratio. Hand-made rollouts: row 0 has turns of 2 and 2 tokens, row 1 turns of 1 and 1 token
    (prompt of 2, one env token between turns). Token log-ratios (prompt and env positions hold junk 5.0):
    row 0, turn 0: (0.1, 0.3) -> 0.2 each; turn 1: (-0.2, 0.6) -> 0.2 each. Row 1: one-token turns keep their own
    log-ratio (0.7 and -0.4): the turn ratio equals the token ratio. Every other position gets 0, and the gradient
    of a turn's tokens is shared evenly (1/2 each for a 2-token turn)."""
    from agentgym.baselines.branches import turn_ids, turn_mean_log_ratio

    a, b = hand_rollout([0, 0], 0), hand_rollout([0, 0], 0, tokens_per_turn=1)
    ids = turn_ids([a, b])
    assert ids.tolist() == [[-1, -1, 0, 0, -1, 1, 1], [-1, -1, 0, -1, 1, -1, -1]]
    lr = torch.tensor([[5.0, 5.0, 0.1, 0.3, 5.0, -0.2, 0.6], [5.0, 5.0, 0.7, 5.0, -0.4, 5.0, 5.0]], requires_grad=True)
    out = turn_mean_log_ratio(lr, ids)
    want = torch.tensor([[0, 0, 0.2, 0.2, 0, 0.2, 0.2], [0, 0, 0.7, 0, -0.4, 0, 0]])
    assert torch.allclose(out, want, atol=1e-7, rtol=0)
    out[0, 2].backward()
    assert lr.grad[0].tolist() == pytest.approx([0, 0, 0.5, 0.5, 0, 0, 0])
    assert turn_mean_log_ratio(torch.zeros(1, 3), torch.full((1, 3), -1)).tolist() == [[0.0, 0.0, 0.0]]


def test_ipr_iteration_with_the_model(policy):
    """One IPR iteration with the tiny model on Chain H=2: its actions are rarely valid, so at the last expert state
    the expert's action pays 1 and the agent's mostly 0, and a pair forms there; the step lowers the loss on those
    pairs (measured on the same pairs before and after) and the reference does not move."""
    import copy

    from agentgym.baselines.ipr import expert_step_pairs, ipr_iteration, ipr_loss

    model = copy.deepcopy(policy.model)
    ref = copy.deepcopy(policy.model).requires_grad_(False)
    learner = HFPolicy(model, policy.tokenizer)
    config = dataclasses.replace(CHAIN, max_turns=2)
    pad = policy.tokenizer.pad_token_id
    pairs = expert_step_pairs(learner, chain(2), [0, 1, 2], config, 3, k=2).pairs
    assert pairs and all(p.turn == 1 for p in pairs if p.q_chosen == 1.0)
    before = float(ipr_loss(model, ref, pairs, pad).detach())
    ref_before = {n: t.clone() for n, t in ref.state_dict().items()}
    out = ipr_iteration(learner, ref, torch.optim.SGD(model.parameters(), lr=0.05), chain(2), [0, 1, 2], config, 3,
                        k=2)  # fmt: skip
    assert out["ipr_pairs"] == len(pairs) and out["ipr_states"] == 6 and out["ipr_q_gap"] > 0
    assert float(ipr_loss(model, ref, pairs, pad).detach()) < before
    assert all(torch.equal(ref_before[n], t) for n, t in ref.state_dict().items())
