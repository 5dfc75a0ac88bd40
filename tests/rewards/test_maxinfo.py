"""MaxInfoRL (docs/rewards.md, 'MaxInfoRL: ensemble disagreement'): the disagreement by hand, the ridge refit towards
each member's prior by hand, the spec's properties (identical members give 0; >= 0; it grows off the data),
determinism and batch-order independence, transitions from trajectories, and check_env on a wrapped Chain env."""

import copy
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.rewards.maxinfo import DisagreementBonus, DisagreementTable, disagreement, transitions_of
from agentgym.running.runner import make_agent, run_episode

SETTINGS = settings(max_examples=30, deadline=None)
TEXTS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
DOOR = ("You see a closed door.", "open door", "The door is open.")
OTHERS = [("You see a closed door.", "eat door"), ("A dragon appears!", "fight"), ("Nothing happens.", "look")]


def chain():
    return gym.make("agentgym/Chain-v0")


def test_disagreement_by_hand():
    # members predict (1, 0) and (3, 2): mean (2, 1); variances ((1-2)^2 + (3-2)^2) / 2 = 1 per feature; sum 2
    assert disagreement(np.array([[1.0, 0.0], [3.0, 2.0]])) == 2.0
    # three members, one feature: 0, 0, 3 -> mean 1, variance (1 + 1 + 4) / 3 = 2
    assert disagreement(np.array([[0.0], [0.0], [3.0]])) == pytest.approx(2.0)
    assert disagreement(np.array([[5.0, -1.0]])) == 0.0  # one member
    assert disagreement(np.ones((4, 3))) == 0.0  # identical members


def test_refit_shrinks_the_prior_disagreement_by_hand():
    """n copies of one transition, x = [phi(o), phi(a)] with ||x||^2 = 2, no bootstrap: W_k = (n x x^T + l I)^-1
    (n x y^T + l W0_k), so x^T W_k = (2n y + l x^T W0_k) / (2n + l) and the disagreement at x is the prior's times
    (l / (2n + l))^2: with n = 3 and l = 2, (2 / 8)^2 = 1/16."""
    table = DisagreementTable(seed=5, ridge=2.0, bootstrap=False)
    prior = table.snapshot().disagreement(DOOR[0], DOOR[1])
    table.update([DOOR] * 3)
    assert table.snapshot().disagreement(DOOR[0], DOOR[1]) == pytest.approx(prior / 16, rel=1e-9)


@pytest.mark.parametrize("kwargs", [{"members": 1}, {"prior_scale": 0.0, "bootstrap": False}])
def test_identical_members_give_zero(kwargs):
    table = DisagreementTable(seed=0, **kwargs)
    for _ in range(2):
        snap = table.snapshot()
        assert all(snap.disagreement(o, a) == 0.0 for o, a in [DOOR[:2], *OTHERS])
        table.update([DOOR, (*OTHERS[1], "It bites.")])


@SETTINGS
@given(batches=st.lists(st.lists(st.tuples(TEXTS, TEXTS, TEXTS), max_size=4), max_size=3), o=TEXTS, a=TEXTS)
def test_bonus_is_non_negative_and_finite(batches, o, a):
    table = DisagreementTable(seed=2, dim=32, members=3)
    for batch in batches:
        table.update(batch)
        b = table.snapshot().bonus(o, a)
        assert b >= 0.0 and np.isfinite(b)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_it_grows_off_the_data(seed):
    table = DisagreementTable(seed=seed)
    before = table.snapshot().disagreement(DOOR[0], DOOR[1])
    table.update([DOOR] * 10)
    snap = table.snapshot()
    seen = snap.disagreement(DOOR[0], DOOR[1])
    assert seen < before / 10
    for o, a in OTHERS:  # a new action in the seen state, or new states: the members fall back to their priors
        assert snap.disagreement(o, a) > 5 * seen


def test_deterministic_with_a_seed_and_order_free():
    batch = [DOOR, (*OTHERS[1], "It bites."), (*OTHERS[2], "Nothing happens."), DOOR]
    one, same, other_seed = DisagreementTable(seed=3), DisagreementTable(seed=3), DisagreementTable(seed=4)
    one.update(batch)
    same.update(list(reversed(batch)))  # the bootstrap weights follow the sorted batch, not its order
    other_seed.update(batch)
    a, b, c = one.snapshot(), same.snapshot(), other_seed.snapshot()
    assert np.array_equal(a.weights, b.weights) and a.sigma == b.sigma
    assert a.bonus("probe", "x") == b.bonus("probe", "x") != c.bonus("probe", "x")


def test_sigma_and_empty_update():
    table = DisagreementTable(seed=0, normalize=True)
    first = table.snapshot()
    d = [first.disagreement(o, a) for o, a in [DOOR[:2], OTHERS[1]]]
    table.update([DOOR, (*OTHERS[1], "It bites.")])
    assert table.snapshot().sigma == pytest.approx(abs(d[0] - d[1]) / 2)  # population std of the two it saw
    weights = table.snapshot().weights
    table.update([])
    assert table.snapshot().updates == 2 and np.array_equal(table.snapshot().weights, weights)
    raw = DisagreementTable(seed=0)
    raw.update([DOOR, (*OTHERS[1], "It bites.")])
    assert raw.snapshot().sigma == 1.0  # not normalised by default


def test_snapshot_is_frozen_and_shared_by_copies():
    snap = DisagreementTable(seed=1).snapshot()
    assert copy.deepcopy(snap) is snap
    with pytest.raises(ValueError):
        snap.weights[0, 0, 0] = 1.0
    again = pickle.loads(pickle.dumps(snap))
    assert again.bonus("a b", "c") == snap.bonus("a b", "c") and not again.weights.flags.writeable


def test_rejects_bad_table_arguments():
    for bad in ({"members": 0}, {"ridge": 0.0}, {"prior_scale": -1.0}, {"decay": 1.5}):
        with pytest.raises(ValueError):
            DisagreementTable(**bad)


# ---------------------------------------------------------------- the wrapper


def test_wrapper_scores_each_transition_from_the_snapshot():
    table = DisagreementTable(seed=0)
    env = DisagreementBonus(chain(), table=table, coef=0.5)
    traj = run_episode(env, make_agent("random", env), seed=2)
    transitions = transitions_of([traj])
    assert len(transitions) == len(traj.turns) > 1
    assert transitions[1][0] == transitions[0][2]  # o_{t+1} of one turn is o_t of the next
    for turn, (o, a, _) in zip(traj.turns, transitions, strict=True):
        assert turn.reward_components["disagreement"] == pytest.approx(0.5 * table.snapshot().bonus(o, a))
        assert turn.reward == pytest.approx(sum(turn.reward_components.values()))
    raw = [table.snapshot().disagreement(o, a) for o, a, _ in transitions]
    table.update(transitions)  # the trainer's call, once per iteration
    assert all(table.snapshot().disagreement(o, a) < r for (o, a, _), r in zip(transitions, raw, strict=True))


def test_wrapper_table_from_a_mapping_and_key():
    env = DisagreementBonus(chain(), table={"seed": 9, "members": 2, "dim": 16})
    assert env.table.members == 2 and DisagreementBonus.table_type is DisagreementTable
    keyed = DisagreementBonus(chain(), key="anchor")
    _, info0 = keyed.reset(seed=0)
    _, _, _, _, info = keyed.step("<answer> x </answer>")
    expected = 0.1 * keyed.table.snapshot().bonus(info0["anchor"], "<answer> x </answer>")
    assert info["reward_components"]["disagreement"] == pytest.approx(expected)
    with pytest.raises(KeyError, match="nope"):
        DisagreementBonus(chain(), key="nope").reset(seed=0)


def test_siblings_are_order_independent():
    table = DisagreementTable(seed=0)
    table.update([DOOR])
    env = DisagreementBonus(chain(), table=table)
    siblings = [(make_agent("random", env), seed) for seed in range(4)]

    def run_all(order):
        trajs = {k: run_episode(env, siblings[k][0], seed=siblings[k][1], options={"task_index": 1}) for k in order}
        return {k: [t.reward_components["disagreement"] for t in trajs[k].turns] for k in trajs}

    assert run_all(range(4)) == run_all(reversed(range(4)))


def test_check_env_passes_on_the_wrapped_env():
    env = DisagreementBonus(chain(), table=DisagreementTable(seed=0, dim=32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)
    assert [w.name for w in env.spec.additional_wrappers] == ["DisagreementBonus"]
