"""Issue 21's methods: ``mt_grpo`` (multi-turn GRPO over a verified per-turn signal), GiGPO over observation anchors
(``gigpo_obs``) beside the env's state anchors, and the verified signal each env reports (``TURN_SIGNALS``). Worked
examples with the derivation written out, hypothesis properties, and batches played on the real diagnostics."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the built-in envs)
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.envs.diagnostics.chain import ChainEnv
from agentgym.rewards.advantages import (
    TURN_SIGNALS,
    TurnBatch,
    TurnSignal,
    get_estimator,
    gigpo,
    grpo,
    mt_grpo,
    observation_anchors,
    observation_key,
)
from agentgym.running.runner import make_agent

FAST = settings(max_examples=60, deadline=None, derandomize=True)
R2, R3 = math.sqrt(2.0), math.sqrt(3.0)


# -- mt_grpo: worked examples ----------------------------------------------------------------------------------------


def test_mt_grpo_worked_example_with_a_shorter_rollout_and_a_singleton_group():
    # group q: A plays 3 turns (signals 1 1 1, R = 1), B 3 turns (1 0 1, R = 0), C only 2 turns (0 1, R = 0);
    # group p: D alone (1, None; R = 1). turn_coef 1, outcome_coef (lambda) 0.5, eps 0.
    outcomes = [1.0, 0.0, 0.0, 1.0]
    signals = [[1, 1, 1], [1, 0, 1], [0, 1], [True, None]]
    groups = ["q", "q", "q", "p"]
    a = mt_grpo(outcomes, signals, groups, turn_coef=1.0, outcome_coef=0.5, eps=0.0)
    # A^O in q: R = (1, 0, 0), mean 1/3, population std sqrt(2)/3 -> (sqrt2, -1/sqrt2, -1/sqrt2); p: singleton -> 0.
    # final_turn="outcome": final turns are in no cell and get A^O alone.
    # cell (q, turn 1): A, B, C (C's turn 1 is not its final turn): (1, 1, 0) -> (1/sqrt2, 1/sqrt2, -sqrt2)
    # cell (q, turn 2): A and B only (it is C's final turn): (1, 0) -> (1, -1)
    # cell (p, turn 1): D alone -> 0
    assert np.allclose(a[0], [1 / R2 + 0.5 * R2, 1 + 0.5 * R2, R2])
    assert np.allclose(a[1], [1 / R2 - 0.5 / R2, -1 - 0.5 / R2, -1 / R2])
    assert np.allclose(a[2], [-R2 - 0.5 / R2, -1 / R2])
    assert a[3].tolist() == [0.0, 0.0]
    # final_turn="both": final turns join their cells like the others
    # cell (q, turn 2): A, B, C: (1, 0, 1) -> (1/sqrt2, -sqrt2, 1/sqrt2); cell (q, turn 3): A, B (1, 1) tie -> 0
    b = mt_grpo(outcomes, signals, groups, turn_coef=1.0, outcome_coef=0.5, final_turn="both", eps=0.0)
    assert np.allclose(b[0], [1 / R2 + 0.5 * R2, 1 / R2 + 0.5 * R2, 0.5 * R2])
    assert np.allclose(b[1], [1 / R2 - 0.5 / R2, -R2 - 0.5 / R2, -0.5 / R2])
    assert np.allclose(b[2], [-R2 - 0.5 / R2, 1 / R2 - 0.5 / R2])
    assert b[3].tolist() == [0.0, 0.0]


def test_mt_grpo_is_informative_when_every_outcome_ties():
    # Chain-like: all four fail (R = 0), but two were right at turn 1: GRPO is silent, the turn term is not
    a = mt_grpo([0.0] * 4, [[1, 0], [1, 0], [0, 0], [0, 1]], [0] * 4, eps=0.0)
    assert [x.tolist() for x in a] == [[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]]
    assert all(np.all(x == 0) for x in get_estimator("grpo")(TurnBatch([[0.0, 0.0]] * 4, [0] * 4)))


def test_mt_grpo_checks_its_inputs():
    with pytest.raises(ValueError, match="final_turn"):
        mt_grpo([1.0], [[1.0]], [0], final_turn="last")
    with pytest.raises(ValueError, match="never NaN"):
        mt_grpo([1.0], [[float("nan")]], [0])
    with pytest.raises(ValueError, match="a number, a bool or None"):
        mt_grpo([1.0], [["yes"]], [0])
    with pytest.raises(ValueError, match="signal rows"):
        mt_grpo([1.0, 0.0], [[1.0]], [0, 0])
    with pytest.raises(ValueError, match="finite"):
        mt_grpo([1.0], [[1.0]], [0], turn_coef=math.inf)
    with pytest.raises(ValueError, match="turn_signals"):
        get_estimator("mt_grpo")(TurnBatch([[0.0]], [0]))
    with pytest.raises(ValueError, match="one entry per turn"):
        TurnBatch([[0.0, 1.0]], [0], turn_signals=[[1.0]])


# -- mt_grpo: properties ------------------------------------------------------------------------------------------


@st.composite
def signal_batches(draw, max_n=8, max_t=5):
    """Outcomes, ragged signals (small integers, so ties are frequent; None = no signal) and group ids."""
    n = draw(st.integers(0, max_n))
    lengths = draw(st.lists(st.integers(0, max_t), min_size=n, max_size=n))
    value = st.one_of(st.none(), st.integers(-3, 3).map(float))
    signals = [draw(st.lists(value, min_size=t, max_size=t)) for t in lengths]
    outcomes = draw(st.lists(st.integers(-2, 2).map(float), min_size=n, max_size=n))
    return outcomes, signals, draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))


@FAST
@given(signal_batches(), st.sampled_from(["outcome", "both"]), st.floats(0.1, 3), st.floats(0, 3))
def test_mt_grpo_shape_and_finite(batch, final_turn, turn_coef, outcome_coef):
    outcomes, signals, groups = batch
    a = mt_grpo(outcomes, signals, groups, turn_coef, outcome_coef, final_turn)
    assert [x.size for x in a] == [len(s) for s in signals] and all(np.isfinite(x).all() for x in a)


@FAST
@given(signal_batches(), st.sampled_from(["outcome", "both"]), st.floats(0.1, 10), st.floats(-10, 10),
       st.floats(0.1, 10), st.floats(-10, 10))  # fmt: skip
def test_mt_grpo_invariant_to_shifting_and_scaling_signals_and_outcomes(batch, final_turn, a, b, c, d):
    outcomes, signals, groups = batch
    moved = [[None if x is None else a * x + b for x in row] for row in signals]
    want = mt_grpo(outcomes, signals, groups, final_turn=final_turn, eps=0.0)
    got = mt_grpo([c * r + d for r in outcomes], moved, groups, final_turn=final_turn, eps=0.0)
    assert all(np.allclose(x, y, atol=1e-9) for x, y in zip(got, want, strict=True))


@FAST
@given(signal_batches(), st.sampled_from(["outcome", "both"]), st.data())
def test_mt_grpo_gives_zero_to_an_all_tied_group(batch, final_turn, data):
    outcomes, signals, groups = batch
    tied = data.draw(st.integers(0, 2))  # this group's outcomes tie, and so does every signal it reports
    level = data.draw(st.integers(-3, 3).map(float))
    outcomes = [1.0 if g == tied else r for r, g in zip(outcomes, groups, strict=True)]
    signals = [[None if x is None or g != tied else level for x in row] if g == tied else row
               for row, g in zip(signals, groups, strict=True)]  # fmt: skip
    a = mt_grpo(outcomes, signals, groups, final_turn=final_turn)
    assert all(np.all(x == 0) for x, g in zip(a, groups, strict=True) if g == tied)


@FAST
@given(signal_batches(), st.sampled_from(["outcome", "both"]))
def test_mt_grpo_turn_coef_zero_is_grpo_and_the_turn_term_is_z_per_cell(batch, final_turn):
    outcomes, signals, groups = batch
    plain = grpo(outcomes, groups)
    zero = mt_grpo(outcomes, signals, groups, turn_coef=0.0, final_turn=final_turn)
    assert all(np.array_equal(x, np.full(x.size, p)) for x, p in zip(zero, plain, strict=True))
    # outcomes all 0 (no outcome term): what is left is the turn term, z-scored over each (group, turn) cell of the
    # used signals (the final turn's only with "both")
    turn = mt_grpo([0.0] * len(outcomes), signals, groups, final_turn=final_turn, eps=0.0)
    cells: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for row, x, g in zip(signals, turn, groups, strict=True):
        for t, s in enumerate(row):
            used = s is not None and (final_turn == "both" or t < len(row) - 1)
            if used:
                cells.setdefault((g, t), []).append((s, x[t]))
            else:
                assert x[t] == 0.0
    for pairs in cells.values():
        s, z = np.array(pairs).T
        if np.all(s == s[0]):
            assert np.all(z == 0)
        else:
            assert np.allclose(z, (s - s.mean()) / s.std())


# -- the verified signal each env reports -------------------------------------------------------------------------


def test_turn_signal_read_value_and_delta():
    infos = [{"k": 0.5, "c": True}, {"c": None}, {"k": 1.0, "c": False}]
    assert TurnSignal("c").read({}, infos) == [1.0, None, 0.0]
    assert TurnSignal("k", "delta").read({"k": 0.25}, infos) == [0.25, None, 0.5]  # a step without it: no signal
    assert TurnSignal("k", "delta").read({}, infos) == [None, None, 0.5]  # no state before the first step: none
    with pytest.raises(ValueError, match="finite number"):
        TurnSignal("k").read({}, [{"k": "high"}])
    with pytest.raises(ValueError, match="finite number"):
        TurnSignal("k").read({}, [{"k": math.nan}])
    with pytest.raises(ValueError, match="mode"):
        TurnSignal("k", "sum")


ENV_KWARGS = {
    "agentgym/Chain-v0": {"horizon": 3},
    "agentgym/Umbrella-v0": {"horizon": 3},
    "agentgym/KeyDoor-v0": {"horizon": 3},
    "agentgym/SearchQA-v0": {"dataset": "tiny"},
    "agentgym/Household-v0": {"split": "train", "expert_plan": True},
    "agentgym/ToolUse-v0": {},  # action_valid: the oracle's tool calls are valid (1.0)
    "agentgym/BFCL-v0": {},
    "agentgym/CodeExec-v0": {},
    "agentgym/Sokoban-v0": {},  # boxes_on_target: 1 once the oracle pushes the box home
    "agentgym/SQL-v0": {},  # exploration_reward: the share of the gold's schema the oracle has read, rising
    "agentgym/Shop-v0": {"catalogue": "tiny"},  # best_purchase_value: up as the oracle opens and configures
}


@pytest.mark.parametrize("env_id", sorted(TURN_SIGNALS))
def test_every_listed_env_reports_its_signal(env_id):
    """The oracle's episode carries the signal on the turns it is documented for, and a positive one where it
    makes progress: each env's entry in TURN_SIGNALS names a key the env really reports."""
    env = gym.make(env_id, **ENV_KWARGS[env_id])
    obs, reset_info = env.reset(seed=0)
    agent = make_agent("oracle", env.unwrapped)
    agent.reset(seed=0)
    messages, info, infos = list(obs), reset_info, []
    for _ in range(60):
        action = agent.act(messages, info)
        obs, _, terminated, truncated, info = env.step(action)
        messages += [{"role": "assistant", "content": action}, *obs]
        infos.append(info)
        if terminated or truncated:
            break
    signals = TURN_SIGNALS[env_id].read(reset_info, infos)
    assert len(signals) == len(infos) and any(s is not None and s > 0 for s in signals)
    if env_id.endswith(("Chain-v0", "Umbrella-v0", "KeyDoor-v0")):  # right choices on decisive stages only
        decisive = reset_info["gold"]["decisive"]
        assert signals == [1.0 if d else None for d in decisive]
    env.close()


# -- GiGPO: observation anchors beside the env's state anchors, on the real Chain --------------------------------


def play(env: ChainEnv, words: list[str], group: str) -> Trajectory:
    obs, info = env.reset(options={"task_index": 0})
    traj = Trajectory("agentgym/Chain-v0", 0, info["task_id"], "scripted", list(obs), dict(info), group_id=group)
    for word in words:
        obs, reward, terminated, truncated, info = env.step(f"<answer> {word} </answer>")
        traj.turns.append(Turn(word, list(obs), reward, terminated, truncated, dict(info)))
    return traj


def chain_group() -> list[Trajectory]:
    """Chain H=2, task 0, four rollouts: right-right, right-wrong, wrong-right, wrong-wrong."""
    env = ChainEnv(horizon=2)
    _, info = env.reset(options={"task_index": 0})
    right = info["gold"]["choices"]
    wrong = [next(o for o in ChainEnv(horizon=2).task(0).stages[t].options if o != right[t]) for t in range(2)]
    plays = [[right[0], right[1]], [right[0], wrong[1]], [wrong[0], right[1]], [wrong[0], wrong[1]]]
    return [play(env, p, "g") for p in plays]


def test_gigpo_observation_anchors_differ_from_state_anchors_where_the_hidden_flag_splits_them():
    batch = TurnBatch.from_trajectories(chain_group(), signal="correct")
    # the state anchors carry the hidden mistake flag; what the agent saw at turn 2 is the same for all four
    assert [a[1] for a in batch.anchors] == ["0:1:ok", "0:1:ok", "0:1:x", "0:1:x"]
    assert len({o[0] for o in batch.observations}) == 1 and len({o[1] for o in batch.observations}) == 1
    assert batch.observations[0][1] == observation_key([{"role": "user", "content": "Turn 2/2. Signal: yellow. "
                                                         "Options: purple yellow."}])  # fmt: skip
    # Chain pays the outcome on turn 2 only: rewards (0, R) with R = (1, 0, 0, 0); gamma 0.95, omega 1, eps 0.
    # A^E = z(R) = (sqrt3, -1/sqrt3, -1/sqrt3, -1/sqrt3). Step returns G_1 = 0.95 R, G_2 = R.
    # Turn 1, one anchor for all (state "0:0:ok" = the first observation): z(G_1) = z(R).
    # Turn 2, state anchors: "ok" = {A, B}: z(1, 0) = (1, -1); "x" = {C, D}: (0, 0) tie -> 0.
    # Turn 2, observation anchors: all four: z(1, 0, 0, 0) = (sqrt3, -1/sqrt3, -1/sqrt3, -1/sqrt3).
    state = gigpo(batch.outcome_array, batch.turn_rewards, batch.anchors, batch.group_ids, eps=0.0)
    obs = get_estimator("gigpo_obs")(batch, eps=0.0)
    assert np.allclose(
        np.array(state), [[2 * R3, R3 + 1], [-2 / R3, -1 / R3 - 1], [-2 / R3, -1 / R3], [-2 / R3, -1 / R3]]
    )
    assert np.allclose(np.array(obs), [[2 * R3, 2 * R3], [-2 / R3] * 2, [-2 / R3] * 2, [-2 / R3] * 2])
    # the same through the registry's anchor argument; the two modes agree on turn 1 and differ on turn 2
    assert all(np.array_equal(x, y) for x, y in zip(get_estimator("gigpo")(batch, eps=0.0, anchor="observation"),
                                                     obs, strict=True))  # fmt: skip
    assert all(np.array_equal(x, y) for x, y in zip(get_estimator("gigpo")(batch, eps=0.0), state, strict=True))
    # the env's own anchor_by="observation" keys group these turns as the observations do
    obs_env = ChainEnv(horizon=2, anchor_by="observation")
    env_obs = TurnBatch.from_trajectories([play(obs_env, [t.action for t in tr.turns], "g") for tr in chain_group()])
    assert all(np.allclose(x, y) for x, y in zip(get_estimator("gigpo")(env_obs, eps=0.0), obs, strict=True))
    # mt_grpo on the same batch, signals from info["correct"]: turn 1 (1, 1, 0, 0), turn 2 final -> A^O alone
    # z(1, 1, 0, 0) = (1, 1, -1, -1); A = turn term + 1 * A^O on turn 1, A^O on turn 2
    mt = get_estimator("mt_grpo")(batch, eps=0.0)
    assert [s.count(None) for s in batch.turn_signals] == [0] * 4
    assert np.allclose(
        np.array(mt), [[1 + R3, R3], [1 - 1 / R3, -1 / R3], [-1 - 1 / R3, -1 / R3], [-1 - 1 / R3, -1 / R3]]
    )
    with pytest.raises(ValueError, match="anchor must be"):
        get_estimator("gigpo")(batch, anchor="history")


def test_observation_anchors_are_what_the_agent_saw():
    group = chain_group()
    first = group[0]
    keys = observation_anchors(first.initial_observation, [t.observation for t in first.turns])
    assert keys == [observation_key(first.initial_observation), observation_key(first.turns[0].observation)]
    # an invalid action is explained in the next observation: the agent saw something else, so another anchor
    env = ChainEnv(horizon=2)
    bad = play(env, ["maybe"], "g")
    assert bad.turns[0].observation[0]["content"].startswith("Invalid action")
    assert observation_key(bad.turns[0].observation) != observation_key(first.turns[0].observation)
    assert observation_anchors([], []) == []
    with pytest.raises(ValueError, match="observations"):
        get_estimator("gigpo_obs")(TurnBatch([[1.0]], [0], anchors=[["s"]]))


def test_flip_signals_flips_binary_values_at_the_stated_rate():
    from agentgym.rewards.advantages import flip_signals

    rows = [[1.0, None, 0.0], [0.0]]
    assert flip_signals(rows, 0.0, np.random.default_rng(1)) == rows
    assert flip_signals(rows, 1.0, np.random.default_rng(1)) == [[0.0, None, 1.0], [1.0]]
    ones = [[1.0] * 20_000]
    flipped = flip_signals(ones, 0.3, np.random.default_rng(5))[0].count(0.0)
    assert abs(flipped / 20_000 - 0.3) < 0.01  # binomial sd 0.0032: more than 3 sd away would be a bug
    assert flip_signals(ones, 0.3, np.random.default_rng(5)) == flip_signals(ones, 0.3, np.random.default_rng(5))
    with pytest.raises(ValueError, match="not a binary signal"):
        flip_signals([[0.5]], 0.1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="probability"):
        flip_signals([[1.0]], 1.5, np.random.default_rng(0))


def test_the_trainer_flips_each_rollouts_signal_from_its_own_stream():
    """turn_signal_flip=1 flips every reported value; at 0.5 two rollouts of one group (one task seed) draw different
    flips, and the same batch read twice draws the same."""
    from agentgym.baselines.config import TrainConfig
    from agentgym.baselines.credit import turn_signals
    from agentgym.baselines.rollout import Rollout

    def rollout(correct: list[bool | None]) -> Rollout:
        r = Rollout(prompt_ids=[1], group_id="g", seed=11)
        r.infos = [{"correct": c} for c in correct]
        return r

    base = {"env_id": "agentgym/Chain-v0", "estimator": "mt_grpo"}
    batch = [rollout([True, None, False, True]), rollout([False, False, True, True])]
    assert turn_signals(batch, TrainConfig(**base)) == [[1.0, None, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0]]
    assert turn_signals(batch, TrainConfig(**base, turn_signal_flip=1.0)) == [[0.0, None, 1.0, 0.0],
                                                                              [1.0, 1.0, 0.0, 0.0]]  # fmt: skip
    long = [rollout([True] * 64), rollout([True] * 64)]
    half = TrainConfig(**base, turn_signal_flip=0.5)
    a, b = turn_signals(long, half)
    assert a != b and turn_signals(long, half) == [a, b]
    with pytest.raises(ValueError, match="turn_signal_flip"):
        TrainConfig(**base, turn_signal_flip=-0.1)
