"""Reward wrappers: telescoping of potential shaping (docs/rewards.md, 'Potential-based shaping'), component
bookkeeping, stacking in any order, check_env on the wrapped env, and order-independent novelty bonuses, on scripted
and real SearchQA episodes."""

import itertools
import math
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.agent import Agent
from agentgym.rewards.wrappers import (
    CountTable,
    FormatPenalty,
    NoveltyBonus,
    PotentialShaping,
    ProgressReward,
    StepCost,
    add_component,
)
from agentgym.running.runner import make_agent, run_episode

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
FLOATS = st.floats(-5, 5, allow_nan=False, allow_infinity=False)


class Scripted(gym.Env):
    """A real Gymnasium env that replays a fixed reward sequence; state t is observation t."""

    def __init__(self, rewards, *, terminate=True, valid=None, anchors=None, progress=None, components=True):
        self.rewards = list(rewards)
        self.terminate = terminate
        self.valid = valid or [True] * len(self.rewards)
        self.anchors = anchors
        self.progress = progress
        self.components = components
        self.observation_space = gym.spaces.Discrete(len(self.rewards) + 1)
        self.action_space = gym.spaces.Discrete(2)
        self.last_info = None

    def _info(self, t):
        info = {"action_valid": self.valid[t - 1] if t else True}
        if self.anchors is not None:
            info["anchor"] = self.anchors[t]
        if self.progress is not None:
            info["progress"] = self.progress[t]
        return info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return 0, self._info(0)

    def step(self, action):
        r = self.rewards[self.t]
        self.t += 1
        info = self._info(self.t)
        if self.components:
            info["reward_components"] = {"env": r}
        self.last_info = info
        end = self.t == len(self.rewards)
        return self.t, r, end and self.terminate, end and not self.terminate, info


def play(env, seed=None, actions=None):
    """Step until the end; returns (reset info, [(reward, info)])."""
    _, info0 = env.reset(seed=seed)
    steps, t = [], 0
    while True:
        _, r, term, trunc, info = env.step(actions[t] if actions else 0)
        steps.append((r, info))
        t += 1
        if term or trunc:
            return info0, steps


def discounted(xs, gamma):
    return sum(gamma**t * x for t, x in enumerate(xs))


# ---------------------------------------------------------------- telescoping on random sequences


@SETTINGS
@given(
    data=st.data(),
    n=st.integers(1, 12),
    gamma=st.floats(0.0, 1.0),
    terminate=st.booleans(),
    truncation=st.sampled_from(["terminal", "bootstrap"]),
)
def test_potential_shaping_telescopes(data, n, gamma, terminate, truncation):
    rewards = data.draw(st.lists(FLOATS, min_size=n, max_size=n))
    phis = data.draw(st.lists(FLOATS, min_size=n + 1, max_size=n + 1))
    scripted = Scripted(rewards, terminate=terminate)
    env = PotentialShaping(scripted, lambda obs, info: phis[obs], gamma, truncation=truncation)
    _, steps = play(env)
    shaped = [r for r, _ in steps]
    fix = terminate or truncation == "terminal"
    expected = discounted(rewards, gamma) + (0.0 if fix else gamma**n * phis[n]) - phis[0]
    assert discounted(shaped, gamma) == pytest.approx(expected, abs=1e-9)
    if fix:  # the terminal fix: R - Phi(s_0), whatever the final state
        assert discounted([i["reward_components"]["shaping"] for _, i in steps], gamma) == pytest.approx(
            -phis[0], abs=1e-9
        )


def test_potential_shaping_rejects_bad_arguments():
    with pytest.raises(ValueError, match="gamma"):
        PotentialShaping(Scripted([0.0]), lambda o, i: 0.0, gamma=1.5)
    with pytest.raises(ValueError, match="truncation"):
        PotentialShaping(Scripted([0.0]), lambda o, i: 0.0, truncation="never")
    env = PotentialShaping(Scripted([0.0]), lambda o, i: math.nan)
    with pytest.raises(ValueError, match="finite"):
        env.reset()


# ---------------------------------------------------------------- real SearchQA episodes


@pytest.fixture(scope="module")
def base():
    env = gym.make("agentgym/SearchQA-v0", dataset="tiny")
    yield env
    env.close()


class AlwaysSearch(Agent):
    """Never answers, so every episode is truncated at the turn limit."""

    name = "always_search"

    def act(self, messages, info):
        return f"<search> {info['gold']['oracle_queries'][0]} </search>"


def episodes(env, n=6):
    """Heuristic, random and never-answering rollouts of n tasks through ``env``."""
    agents = [make_agent("heuristic", env), make_agent("random", env), AlwaysSearch()]
    return [run_episode(env, a, seed=i, options={"task_index": i}) for i in range(n) for a in agents]


@pytest.mark.parametrize("gamma", [1.0, 0.9])
@pytest.mark.parametrize("truncation", ["terminal", "bootstrap"])
def test_potential_shaping_telescopes_on_searchqa(base, gamma, truncation):
    potentials = []

    def phi(obs, info):
        potentials.append(info["progress"])
        return 2.0 * info["progress"] - 0.5  # Phi(s_0) = -0.5 != 0, so the -Phi(s_0) term is visible

    env = PotentialShaping(base, phi, gamma=gamma, truncation=truncation)
    trajs = episodes(env)
    assert any(t.turns[-1].truncated for t in trajs) and any(t.turns[-1].terminated for t in trajs)
    for traj in trajs:
        shaped = [t.reward for t in traj.turns]
        raw = [t.reward_components.get("outcome", 0.0) for t in traj.turns]
        last = traj.turns[-1]
        fix = last.terminated or truncation == "terminal"
        phi_T = 0.0 if fix else 2.0 * last.info["progress"] - 0.5
        expected = discounted(raw, gamma) + gamma ** len(shaped) * phi_T - (-0.5)
        assert discounted(shaped, gamma) == pytest.approx(expected, abs=1e-9)


def test_progress_reward_telescopes_to_final_progress(base):
    trajs = episodes(ProgressReward(base, scale=2.0))
    assert any(t.turns[-1].info["progress"] > 0 for t in trajs)
    for traj in trajs:
        total = sum(t.reward_components["progress"] for t in traj.turns)
        assert total == pytest.approx(2.0 * (traj.turns[-1].info["progress"] - traj.reset_info["progress"]))
        assert all(t.reward_components["progress"] >= 0 for t in traj.turns)  # recall never decreases


def test_progress_reward_missing_key():
    with pytest.raises(KeyError, match="progress"):
        ProgressReward(Scripted([1.0])).reset()
    env = ProgressReward(Scripted([0.0, 0.0, 0.0], progress=[0.0, 0.5, 0.5, 1.0]))
    _, steps = play(env)
    assert [i["reward_components"]["progress"] for _, i in steps] == [0.5, 0.0, 0.5]


# ---------------------------------------------------------------- bookkeeping and stacking

WRAPPERS = {
    "format": lambda env, table: FormatPenalty(env, penalty=0.3),
    "step_cost": lambda env, table: StepCost(env, cost=0.02),
    "progress": lambda env, table: ProgressReward(env),
    "shaping": lambda env, table: PotentialShaping(env, lambda obs, info: info["progress"], gamma=0.95),
    "novelty": lambda env, table: NoveltyBonus(env, table, beta=0.2, episodic=0.1),
}


def stack(env, order, table):
    for name in order:
        env = WRAPPERS[name](env, table)
    return env


def component_trace(env, seeds):
    agent = make_agent("random", env)
    out = []
    for seed in seeds:
        traj = run_episode(env, agent, seed=seed)
        for turn in traj.turns:
            comps = turn.reward_components
            assert set(WRAPPERS) <= set(comps)
            assert sum(comps.values()) == pytest.approx(turn.reward, abs=1e-12)
            out.append(comps)
    return out


@SETTINGS
@given(order=st.permutations(list(WRAPPERS)), seed=st.integers(0, 10_000))
def test_wrappers_stack_in_any_order(base, order, seed):
    table = CountTable()
    table.update([f"anchor-{i}" for i in range(3)])
    reference = component_trace(stack(base, list(WRAPPERS), table), [seed, seed + 1])
    permuted = component_trace(stack(base, order, table), [seed, seed + 1])
    assert len(reference) == len(permuted)
    for a, b in zip(reference, permuted, strict=True):
        assert a.keys() == b.keys()
        assert all(a[k] == pytest.approx(b[k], abs=1e-12) for k in a)


def test_each_wrapper_records_its_term():
    rewards, valid = [1.0, 0.0, 2.0], [True, False, True]
    env = StepCost(FormatPenalty(Scripted(rewards, valid=valid), penalty=0.5), cost=0.1)
    _, steps = play(env)
    assert [i["reward_components"] for _, i in steps] == [
        {"env": 1.0, "format": 0.0, "step_cost": -0.1},
        {"env": 0.0, "format": -0.5, "step_cost": -0.1},
        {"env": 2.0, "format": 0.0, "step_cost": -0.1},
    ]
    assert [r for r, _ in steps] == pytest.approx([0.9, -0.6, 1.9])


def test_inner_info_is_not_mutated_and_names_accumulate():
    inner = Scripted([1.0], valid=[False])
    env = FormatPenalty(FormatPenalty(inner, penalty=0.5), penalty=0.25)
    _, [(r, info)] = play(env)
    assert inner.last_info["reward_components"] == {"env": 1.0}
    assert "format" not in inner.last_info["reward_components"]
    assert info["reward_components"] == {"env": 1.0, "format": -0.75} and r == 0.25


def test_env_without_components_starts_from_its_reward():
    _, [(r, info)] = play(StepCost(Scripted([2.0], components=False), cost=0.5))
    assert info["reward_components"] == {"env": 2.0, "step_cost": -0.5} and r == 1.5
    assert add_component(0.0, {}, "x", 1.0) == (1.0, {"reward_components": {"x": 1.0}})


def test_check_env_passes_on_the_wrapped_env(base):
    env = stack(base.unwrapped, list(WRAPPERS), CountTable())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)
    # the spec records the wrappers, so gymnasium can recreate the stack
    assert [w.name for w in env.spec.additional_wrappers] == [
        "FormatPenalty",
        "StepCost",
        "ProgressReward",
        "PotentialShaping",
        "NoveltyBonus",
    ]


def test_format_penalty_on_searchqa(base):
    env = FormatPenalty(base, penalty=0.25)
    env.reset(seed=0)
    _, r, _, _, info = env.step("this is not an action")
    assert info["action_valid"] is False and r == -0.25 and info["reward_components"]["format"] == -0.25
    _, r, _, _, info = env.step("<search> anything </search>")
    assert info["action_valid"] is True and r == 0.0 and info["reward_components"]["format"] == 0.0


# ---------------------------------------------------------------- novelty


def test_count_table_snapshot_is_frozen_and_decays():
    table = CountTable(decay=0.5)
    table.update(["a", "a", "b"])
    snap = table.snapshot()
    assert table.snapshot() is snap  # one shared copy per update
    with pytest.raises(TypeError):
        snap.counts["a"] = 0.0  # type: ignore[index]
    table.update(["b"])
    assert (snap.count("a"), snap.count("b"), snap.updates) == (2.0, 1.0, 1)
    new = table.snapshot()
    assert (new.count("a"), new.count("b"), new.count("c"), new.updates) == (1.0, 1.5, 0.0, 2)
    with pytest.raises(ValueError):
        CountTable(decay=0.0)


def test_novelty_bonus_formula():
    table = CountTable()
    table.update(["s1"] * 3)
    anchors = ["s0", "s1", "s2", "s1", "s0"]
    env = NoveltyBonus(Scripted([0.0] * 4, anchors=anchors), table, beta=0.6, episodic=0.2, beta_decay=0.5)
    _, steps = play(env)
    beta = 0.6 * 0.5  # one table update so far
    expected = [
        beta / math.sqrt(4) + 0.2 / math.sqrt(1),  # s1: 3 batch visits + this one; first visit this episode
        beta / math.sqrt(1) + 0.2 / math.sqrt(1),  # s2: never seen
        beta / math.sqrt(4) + 0.2 / math.sqrt(2),  # s1 again in this episode
        beta / math.sqrt(1) + 0.2 / math.sqrt(2),  # s0: the reset state, visited twice now
    ]
    assert [i["reward_components"]["novelty"] for _, i in steps] == pytest.approx(expected)
    with pytest.raises(KeyError, match="anchor"):
        NoveltyBonus(Scripted([0.0]), table).reset()


def test_novelty_siblings_are_order_independent(base):
    """Sibling rollouts of one task under a frozen snapshot get the same bonuses whatever order they run in."""
    table = CountTable()
    env = NoveltyBonus(base, table, beta=0.3, episodic=0.1)
    siblings = [(make_agent("random", base), seed) for seed in range(4)] + [(make_agent("heuristic", base), 0)]

    def run_all(order):
        trajs = {k: run_episode(env, siblings[k][0], seed=siblings[k][1], options={"task_index": 2}) for k in order}
        return {k: [t.reward_components["novelty"] for t in trajs[k].turns] for k in trajs}, trajs

    first, trajs = run_all(range(len(siblings)))
    second, _ = run_all(reversed(range(len(siblings))))
    assert first == second
    # the trainer updates the table after the batch: revisited states now earn less
    table.update(t.info["anchor"] for traj in trajs.values() for t in traj.turns)
    third, _ = run_all(range(len(siblings)))
    assert all(b <= a for k in first for a, b in zip(first[k], third[k], strict=True))
    assert any(b < a for k in first for a, b in zip(first[k], third[k], strict=True))


def test_novelty_is_deterministic_under_check_env_style_resets(base):
    env = NoveltyBonus(base, CountTable(), beta=0.1, episodic=0.1)
    traces = []
    for _ in range(2):
        _, steps = play(env, seed=5, actions=["<search> a b </search>", "<search> a b </search>", "x"] * 2)
        traces.append([r for r, _ in steps])
    assert traces[0] == traces[1]
    assert len(set(itertools.chain(*traces))) > 1
