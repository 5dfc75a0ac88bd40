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
    returns_to_go,
    run_forks,
    tree_advantages,
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
    assert choose_turns([a, b], "all") == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert choose_turns([a, b], "uncertain", 0.5) == [(0, 1), (1, 1)]
    assert choose_turns([a, b], "uncertain", 0.6) == [(0, 1), (1, 0), (1, 1)]
    with pytest.raises(ValueError, match="branch_turns"):
        choose_turns([a], "some")


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
    chosen = choose_turns(mains, "all")
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
        chosen = choose_turns(mains, "all")
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
