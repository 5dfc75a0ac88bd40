"""RND (docs/rewards.md, 'RND: random network distillation'): the ridge refit by hand, the normaliser, the spec's
properties (b >= 0; a fitted observation's bonus falls below an unseen one's; deterministic with a seed; independent of
the batch's and the siblings' order), the frozen snapshot (copies, pickles, branches), and check_env on a wrapped
Chain env."""

import copy
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.branching import branch
from agentgym.rewards.rnd import RNDBonus, RNDTable, observations_of
from agentgym.rewards.text_features import HashedNgrams, RunningMoments, observation_text
from agentgym.running.runner import make_agent, run_episode

SETTINGS = settings(max_examples=40, deadline=None)
TEXTS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=60)
KITCHEN, DRAGON = "You are in the kitchen. A fridge is here.", "A dragon appears and breathes fire!"


def chain():
    return gym.make("agentgym/Chain-v0")


def test_ridge_refit_by_hand():
    """One unit-length feature vector x repeated n times: A = n x x^T, B = n x f(x)^T, so the ridge predictor gives
    x^T P = n f(x) / (n + ridge) and the error falls from ||f(x)||^2 by the factor (ridge / (n + ridge))^2."""
    table = RNDTable(seed=3, ridge=2.0)
    before = table.snapshot().error(KITCHEN)  # P = 0: the error is ||f(x)||^2
    x = table.snapshot().features(KITCHEN)
    assert before == pytest.approx(float(table.snapshot().target(x) @ table.snapshot().target(x)))
    table.update([KITCHEN] * 6)
    assert table.snapshot().error(KITCHEN) == pytest.approx(before * (2.0 / (6 + 2.0)) ** 2, rel=1e-9)  # 1/16


def test_sigma_is_the_std_of_the_errors_the_rollouts_saw():
    table = RNDTable(seed=0)
    e1, e2 = table.snapshot().error(KITCHEN), table.snapshot().error(DRAGON)
    assert table.snapshot().sigma == 1.0  # no update yet: nothing to normalise by
    table.update([KITCHEN, DRAGON])
    snap = table.snapshot()
    assert snap.sigma == pytest.approx(abs(e1 - e2) / 2)  # population std of two values
    assert snap.bonus(DRAGON) == pytest.approx(snap.error(DRAGON) / snap.sigma)
    assert RNDTable(seed=0, normalize=False).snapshot().sigma == 1.0
    calibrated = RNDTable(seed=0)
    calibrated.calibrate([KITCHEN, DRAGON])  # the normaliser without a refit
    assert calibrated.snapshot().sigma == pytest.approx(abs(e1 - e2) / 2)
    assert calibrated.snapshot().error(KITCHEN) == e1 and calibrated.updates == 0
    one = RNDTable(seed=0)
    one.update([KITCHEN] * 3)  # equal errors: std 0, so sigma stays 1
    assert one.snapshot().sigma == 1.0


def test_running_moments_merge_equals_the_whole():
    m = RunningMoments()
    m.merge([1.0, 2.0])
    m.merge([])
    m.merge([4.0, 7.0, 1.0])
    assert (m.count, m.mean) == (5, pytest.approx(3.0))
    assert m.std == pytest.approx(float(np.std([1.0, 2.0, 4.0, 7.0, 1.0])))


@SETTINGS
@given(batches=st.lists(st.lists(TEXTS, max_size=5), max_size=3), probe=TEXTS, fit=st.sampled_from(["ridge", "gd"]))
def test_bonus_is_non_negative(batches, probe, fit):
    table = RNDTable(seed=1, dim=64, fit=fit)
    for batch in batches:
        table.update(batch)
        assert table.snapshot().bonus(probe) >= 0.0
        assert np.isfinite(table.snapshot().bonus(probe))


@pytest.mark.parametrize("fit", ["ridge", "gd"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_fitted_observation_falls_below_an_unseen_one(fit, seed):
    table = RNDTable(seed=seed, fit=fit)
    first = table.snapshot()
    table.update([KITCHEN] * 8)
    snap = table.snapshot()
    assert snap.bonus(KITCHEN) < first.bonus(KITCHEN) / 10
    for unseen in (DRAGON, "Nothing happens.", "You win the game with 42 points"):
        assert snap.bonus(KITCHEN) < snap.bonus(unseen)


def test_deterministic_with_a_seed_and_seeds_differ():
    batches = [[KITCHEN, DRAGON, KITCHEN], ["Nothing happens."], []]
    tables = [RNDTable(seed=7), RNDTable(seed=7), RNDTable(seed=8)]
    for table in tables:
        for batch in batches:
            table.update(batch)
    a, b, c = (t.snapshot() for t in tables)
    assert np.array_equal(a.predictor, b.predictor) and a.sigma == b.sigma and a.updates == b.updates == 3
    assert a.bonus("probe") == b.bonus("probe") != c.bonus("probe")


@pytest.mark.parametrize("fit", ["ridge", "gd"])
def test_update_does_not_depend_on_the_batch_order(fit):
    batch = [KITCHEN, DRAGON, "Nothing happens.", KITCHEN, "x"]
    one, other = RNDTable(seed=2, fit=fit), RNDTable(seed=2, fit=fit)
    one.update(batch)
    other.update(list(reversed(batch)))
    assert np.array_equal(one.snapshot().predictor, other.snapshot().predictor)
    assert one.snapshot().sigma == other.snapshot().sigma


def test_empty_update_counts_but_changes_nothing():
    table = RNDTable()
    before = table.snapshot()
    table.update([])
    after = table.snapshot()
    assert after is not before and after.updates == 1 and np.array_equal(after.predictor, before.predictor)


def test_snapshot_is_frozen_shared_by_copies_and_pickles_read_only():
    table = RNDTable(seed=4)
    table.update([KITCHEN])
    snap = table.snapshot()
    assert table.snapshot() is snap and copy.deepcopy(snap) is snap and copy.copy(snap) is snap
    with pytest.raises(ValueError):
        snap.predictor[0, 0] = 1.0
    again = pickle.loads(pickle.dumps(snap))
    assert again.bonus(DRAGON) == snap.bonus(DRAGON) and not again.predictor.flags.writeable
    table.update([DRAGON])
    assert table.snapshot() is not snap and snap.updates == 1  # the old view did not move


def test_features_are_stable_unit_vectors():
    phi = HashedNgrams(dim=32)
    assert np.array_equal(phi("abc"), HashedNgrams(dim=32)("abc"))
    assert float(phi("abc") @ phi("abc")) == pytest.approx(1.0) and not phi("").any() and not phi("a").any()
    assert HashedNgrams(dim=32, ngrams=(1,))("a").any()
    with pytest.raises(ValueError):
        HashedNgrams(dim=0)
    assert observation_text("s") == "s" and observation_text(3) == "3"


def test_rejects_bad_table_arguments():
    for bad in ({"fit": "adam"}, {"ridge": 0.0}, {"decay": 0.0}, {"hidden": 0}):
        with pytest.raises(ValueError):
            RNDTable(**bad)


# ---------------------------------------------------------------- the wrapper


def test_wrapper_records_coef_times_the_snapshot_bonus():
    table = RNDTable(seed=0)
    env = RNDBonus(chain(), table=table, coef=0.5)
    traj = run_episode(env, make_agent("random", env), seed=3)
    texts = observations_of([traj])
    assert len(texts) == len(traj.turns) > 0
    table_errors = [table.snapshot().error(t) for t in texts]
    for turn, text in zip(traj.turns, texts, strict=True):
        assert turn.reward_components["rnd"] == pytest.approx(0.5 * table.snapshot().bonus(text))
        assert turn.reward == pytest.approx(sum(turn.reward_components.values()))
    table.update(texts)  # the trainer's call, once per iteration
    again = run_episode(env, make_agent("random", env), seed=3)
    assert observations_of([again]) == texts
    snap = table.snapshot()  # sigma changed too, so compare the raw errors: every fitted observation's fell
    assert all(snap.error(t) <= 0.5 * first for t, first in zip(texts, table_errors, strict=True))  # "" stays 0


def test_wrapper_table_from_a_mapping_or_its_own_and_key():
    env = RNDBonus(chain(), table={"seed": 5, "dim": 32})
    assert isinstance(env.table, RNDTable) and env.table.seed == 5 and env.table.dim == 32
    assert RNDBonus.table_type is RNDTable and isinstance(RNDBonus(chain()).table, RNDTable)
    keyed = RNDBonus(chain(), key="anchor")
    _, info = keyed.reset(seed=0)
    _, _, _, _, info = keyed.step("<answer> x </answer>")
    assert info["reward_components"]["rnd"] == pytest.approx(0.1 * keyed.table.snapshot().bonus(info["anchor"]))
    with pytest.raises(KeyError, match="nope"):
        missing = RNDBonus(chain(), key="nope")
        missing.reset(seed=0)
        missing.step("<answer> x </answer>")


def test_siblings_are_order_independent():
    table = RNDTable(seed=0)
    table.update([KITCHEN])
    env = RNDBonus(chain(), table=table)
    siblings = [(make_agent("random", env), seed) for seed in range(4)]

    def run_all(order):
        trajs = {k: run_episode(env, siblings[k][0], seed=siblings[k][1], options={"task_index": 1}) for k in order}
        return {k: [t.reward_components["rnd"] for t in trajs[k].turns] for k in trajs}

    assert run_all(range(4)) == run_all(reversed(range(4)))


def test_branches_share_the_frozen_snapshot():
    table = RNDTable(seed=1)
    env = RNDBonus(chain(), table=table)
    env.reset(seed=0)
    left, right = branch(env, 2, make_env=lambda: RNDBonus(chain(), table=table))
    assert left._snapshot is right._snapshot is env._snapshot
    assert left.step("<answer> a </answer>")[1] == right.step("<answer> a </answer>")[1]


def test_check_env_passes_on_the_wrapped_env():
    env = RNDBonus(chain(), table=RNDTable(seed=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)
    assert [w.name for w in env.spec.additional_wrappers] == ["RNDBonus"]
