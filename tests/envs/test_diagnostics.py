"""Chain-v0, Umbrella-v0, KeyDoor-v0: the checker, oracle and random success against theory, Umbrella's distractor
rewards, KeyDoor's clue, anchors, progress as a potential, invalid actions, seeded tasks, snapshots, throughput."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the built-in envs)
from agentgym.envs.diagnostics.agents import OracleAgent, RandomAgent
from agentgym.envs.diagnostics.base import COLOURS, DiagnosticEnv, _parse_choice, parse_choice
from agentgym.envs.diagnostics.chain import ChainEnv
from agentgym.envs.diagnostics.key_door import DOOR, KeyDoorEnv
from agentgym.envs.diagnostics.umbrella import UmbrellaEnv
from agentgym.rewards.wrappers import PotentialShaping, ProgressReward
from agentgym.running.checker import check
from agentgym.running.replay import replay_file
from agentgym.running.runner import run

ENVS: dict[str, type[DiagnosticEnv]] = {
    "agentgym/Chain-v0": ChainEnv,
    "agentgym/Umbrella-v0": UmbrellaEnv,
    "agentgym/KeyDoor-v0": KeyDoorEnv,
}
CLASSES = list(ENVS.values())
HORIZONS = (1, 2, 4, 8, 16)


@pytest.fixture(scope="module", autouse=True)
def registered():
    """Register the ids (until agentgym.contract.registry lists them) and leave the registry as it was."""
    added = [i for i in ENVS if i not in gym.registry]
    for env_id in added:
        gym.register(env_id, entry_point=f"{ENVS[env_id].__module__}:{ENVS[env_id].__name__}")
    yield
    for env_id in added:
        del gym.registry[env_id]


@dataclass
class Episode:
    actions: list[str] = field(default_factory=list)
    observations: list[list[dict[str, Any]]] = field(default_factory=list)  # the reset's, then one per step
    rewards: list[float] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)  # the reset's, then one per step

    @property
    def gold(self) -> dict[str, Any]:
        return self.infos[0]["gold"]

    def component(self, name: str) -> list[float]:
        return [i["reward_components"].get(name, 0.0) for i in self.infos[1:]]

    @property
    def success(self) -> bool:
        return self.infos[-1]["success"]


def play(env: DiagnosticEnv, agent: Any, seed: int | None, index: int | None = None) -> Episode:
    """One episode: ``agent`` is an ``Agent`` or a callable ``(episode) -> action``. ``seed=None`` continues the env's
    task stream and the agent's random stream (cheaper than seeding both)."""
    ep = Episode()
    if hasattr(agent, "reset") and seed is not None:
        agent.reset(seed=seed)
    obs, info = env.reset(seed=seed, options=None if index is None else {"task_index": index})
    messages = list(obs)
    ep.observations.append(obs)
    ep.infos.append(info)
    done = False
    while not done:
        action = agent.act(messages, info) if hasattr(agent, "act") else agent(ep)
        obs, reward, terminated, truncated, info = env.step(action)
        messages += [{"role": "assistant", "content": action}, *obs]
        ep.actions.append(action)
        ep.observations.append(obs)
        ep.rewards.append(reward)
        ep.infos.append(info)
        done = terminated or truncated
    return ep


def choice_of(action: str) -> str:
    return action.replace("<answer>", "").replace("</answer>", "").strip()


def true_states(env: DiagnosticEnv, ep: Episode) -> list[tuple[str, int, bool]]:
    """(task, stage, mistake made) before the first and after each turn, from the gold and the actions alone."""
    gold, failed = ep.gold, False
    states = [(ep.infos[0]["task_id"], 0, False)]
    for t, action in enumerate(ep.actions):
        failed = failed or (gold["decisive"][t] and choice_of(action) != gold["choices"][t])
        states.append((ep.infos[0]["task_id"], t + 1, failed))
    return states


def decisive_stages(cls: type[DiagnosticEnv], horizon: int) -> int:
    return horizon if cls is ChainEnv else 1


# -- the contract --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", list(ENVS))
def test_checker_passes(env_id):
    report = check(env_id)
    assert report.ok, str(report)
    assert not report.notes, report.notes
    kwargs = {"horizon": 1, "num_options": 4, "noise": 0.3, "anchor_by": "observation", "invalid_action_penalty": 0.1}
    assert check(env_id, env_kwargs=kwargs).ok


@pytest.mark.parametrize("cls", CLASSES)
def test_knobs_are_checked_and_recorded(cls):
    for bad in ({"horizon": 0}, {"num_options": 1}, {"num_options": 9}, {"noise": 1.5}, {"anchor_by": "obs"},
                {"num_tasks": 0}):  # fmt: skip
        with pytest.raises(ValueError):
            cls(**bad)
    env = cls(horizon=3, num_options=4)
    assert env.spec_kwargs()["horizon"] == 3 and env.spec_kwargs()["num_options"] == 4
    assert env.max_turns == 3 and env.num_tasks == 1_000_000
    assert set(env.agents) == {"oracle", "random"} and env.agents["oracle"].privileged


# -- oracle and random ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("horizon", HORIZONS)
def test_oracle_always_succeeds(cls, horizon):
    for k, noise in ((2, 0.0), (5, 0.5)):
        env = cls(horizon=horizon, num_options=k, noise=noise)
        for seed in range(40):
            ep = play(env, OracleAgent(), seed)
            assert ep.success and len(ep.actions) == horizon
            assert ep.component("outcome")[-1] == 1.0 and all(i["action_valid"] for i in ep.infos)
            progress = [i["progress"] for i in ep.infos]
            assert progress[0] == 0.0 and progress[-1] == 1.0 and progress == sorted(progress)
            assert math.isclose(sum(ep.rewards), 1.0 + sum(ep.component("distractor")))


def test_runner_plays_groups_and_records_replayable_episodes(tmp_path):
    for env_id in ENVS:
        path = tmp_path / f"{env_id.split('/')[1]}.jsonl"
        kwargs = {"horizon": 5, "num_options": 3}
        trajs = run(env_id, "random", 8, group_size=4, env_kwargs=kwargs, out=path, progress=False)
        for g in (trajs[:4], trajs[4:]):
            assert len({t.task_id for t in g}) == 1 and len({t.reset_info["anchor"] for t in g}) == 1
        assert all(len(t.turns) == 5 for t in trajs)
        assert all(r.ok for r in replay_file(path))
        assert all(t.success for t in run(env_id, "oracle", 4, env_kwargs=kwargs, progress=False))


def binomial_ok(successes: int, n: int, p: float, z: float = 4.5) -> bool:
    return abs(successes / n - p) <= z * math.sqrt(p * (1 - p) / n) + 1 / n


@pytest.mark.slow
def test_random_success_matches_theory(capsys):
    cases = [(ChainEnv, h, 2, 2000) for h in (1, 2, 4, 8)] + [(ChainEnv, h, 3, 1000) for h in (1, 2, 4)]
    cases += [(ChainEnv, 16, 2, 300)]
    cases += [(cls, h, k, 1000) for cls in (UmbrellaEnv, KeyDoorEnv) for h in (1, 5) for k in (2, 4)]
    lines = []
    for cls, horizon, k, n in cases:
        env = cls(horizon=horizon, num_options=k)
        agent = RandomAgent()
        wins = sum(play(env, agent, None if i else horizon).success for i in range(n))
        p = (1 / k) ** decisive_stages(cls, horizon)
        lines.append(f"{cls.__name__:12s} H={horizon:2d} k={k}: {wins / n:.4f} (theory {p:.4f}, n={n})")
        assert binomial_ok(wins, n, p), lines[-1]
    with capsys.disabled():
        print("\nrandom success vs (1/k)^decisive:\n" + "\n".join(lines))


def test_malformed_random_agent_never_succeeds():
    env = ChainEnv(horizon=3, invalid_action_penalty=0.1)
    for seed in range(20):
        ep = play(env, RandomAgent(malformed=1.0), seed)
        assert not ep.success and not any(i["action_valid"] for i in ep.infos[1:])
        assert ep.component("format") == [-0.1] * 3 and len(ep.actions) == 3


# -- Umbrella ------------------------------------------------------------------------------------------------------
def test_umbrella_distractor_rewards_are_independent_of_the_outcome(capsys):
    env = UmbrellaEnv(horizon=8, distractor_reward=0.5)
    outcomes, sums = [], []
    for seed in range(2000):
        ep = play(env, RandomAgent(), seed)
        outcomes.append(ep.component("outcome")[-1])
        sums.append(sum(ep.component("distractor")))
        assert ep.component("distractor")[0] == 0.0 and set(ep.component("distractor")[1:]) <= {0.5, -0.5}
    o, d = np.array(outcomes), np.array(sums)
    win, lose = d[o == 1.0], d[o == 0.0]
    z = (win.mean() - lose.mean()) / math.sqrt(win.var() / win.size + lose.var() / lose.size)
    corr = float(np.corrcoef(o, d)[0, 1])
    with capsys.disabled():
        print(f"\nUmbrella: distractor sum | success {win.mean():+.3f}, | failure {lose.mean():+.3f} (z={z:+.2f}), "
              f"corr(outcome, sum) {corr:+.3f}, mean {d.mean():+.3f} +- {d.std() / math.sqrt(d.size):.3f}")  # fmt: skip
    assert abs(z) < 4 and abs(corr) < 4 / math.sqrt(o.size)
    assert abs(d.mean()) < 4 * d.std() / math.sqrt(d.size)  # a random policy earns nothing from distractors


def test_umbrella_final_reward_depends_only_on_turn_one():
    env = UmbrellaEnv(horizon=6, num_options=3)
    for index in range(50):
        gold = env.task(index).gold()
        right = gold["choices"][0]
        wrong = next(o for o in env.task(index).stages[0].options if o != right)
        # Same later choices, first choice flipped: same distractor rewards, opposite outcome.
        fixed = [play(env, lambda ep, first=first: first if not ep.actions else last_option(ep), 0, index)
                 for first in (right, wrong)]  # fmt: skip
        assert fixed[0].component("distractor") == fixed[1].component("distractor")
        assert [e.component("outcome")[-1] for e in fixed] == [1.0, 0.0]
        # Same first choice, random later ones: the same outcome.
        rng = np.random.default_rng(index)

        def first_right(ep: Episode, right: str = right, rng: np.random.Generator = rng) -> str:
            return right if not ep.actions else random_option(ep, rng)

        for _ in range(5):
            ep = play(env, first_right, 0, index)
            assert ep.component("outcome")[-1] == 1.0 and [i["progress"] for i in ep.infos[1:]] == [1.0] * 6


def last_option(ep: Episode) -> str:
    return ep.observations[-1][-1]["content"].rstrip(".").split()[-1]


def random_option(ep: Episode, rng: np.random.Generator) -> str:
    options = ep.observations[-1][-1]["content"].rstrip(".").split("Options: ")[1].split()
    return str(rng.choice(options))


# -- KeyDoor -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("horizon", (1, 2, 6))
def test_key_door_clue_is_only_in_the_first_observation(horizon):
    env = KeyDoorEnv(horizon=horizon, num_options=3)
    first_is_right = 0
    n = 600
    for seed in range(n):
        ep = play(env, RandomAgent(), seed)
        key = ep.gold["choices"][-1]
        texts = [m["content"] for obs in ep.observations for m in obs]
        assert texts[0].startswith(f"The door opens with the {key} key. ")
        assert all("opens with" not in t for t in texts[1:])
        door = texts[horizon - 1]  # the door is the last stage (turn H), shown by observation H - 1
        options = door.rsplit("Options: ", 1)[1].rstrip(".").split()
        assert door.endswith(env.stage_text(horizon, sorted(options), label=DOOR)) and key in options
        first_is_right += options[0] == key
        between = texts[1 : horizon - 1]  # the distractor turns: no colour at all
        assert not any(c in t.split() or f"{c}." in t.split() for t in between for c in COLOURS)
    assert binomial_ok(first_is_right, n, 1 / 3)  # the option list does not give the key away


def test_key_door_pays_distractors_for_the_signalled_fruit_only():
    env = KeyDoorEnv(horizon=5, distractor_reward=0.25)
    for seed in range(100):
        ep = play(env, RandomAgent(), seed)
        for t, pay in enumerate(ep.component("distractor")[:4]):
            assert pay == (0.25 if choice_of(ep.actions[t]) == ep.gold["choices"][t] else 0.0)
        assert [i["progress"] for i in ep.infos[:-1]] == [0.0] * 5
        assert ep.infos[-1]["progress"] == ep.component("outcome")[-1]


# -- anchors and progress ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", CLASSES)
def test_anchors_are_equal_exactly_for_identical_states(cls):
    env, fresh = cls(horizon=4, noise=0.3), cls(horizon=4, noise=0.3)
    obs_env = cls(horizon=4, noise=0.3, anchor_by="observation")
    pairs, obs_pairs = set(), set()
    for index in range(8):
        for seed in range(30):  # group members: same task, other seeds and agents, and fresh env objects
            e = env if seed % 2 else fresh
            ep = play(e, RandomAgent(), seed * 7919 + index, index)
            pairs |= set(zip((i["anchor"] for i in ep.infos), true_states(e, ep), strict=True))
            o = play(obs_env, RandomAgent(), seed * 7919 + index, index)
            obs_pairs |= {(i["anchor"], s[:2]) for i, s in zip(o.infos, true_states(obs_env, o), strict=True)}
    anchors, states = {a for a, _ in pairs}, {s for _, s in pairs}
    assert len(pairs) == len(anchors) == len(states)  # anchor <-> state is one to one
    assert len(anchors) <= 8 * 2 * 5  # states repeat across group members: at most 2 per task and stage
    if cls is not KeyDoorEnv:  # (KeyDoor's only decisive stage is the last: no state after a mistake but the end)
        assert any(failed and stage < 4 for _, stage, failed in states)
    assert len(obs_pairs) == len({a for a, _ in obs_pairs}) == len({s for _, s in obs_pairs}) == 8 * 5


@pytest.mark.parametrize("cls", CLASSES)
def test_progress_is_a_verified_potential(cls):
    horizon = 4
    env = cls(horizon=horizon, noise=0.2)
    seen: dict[str, float] = {}
    for seed in range(300):
        ep = play(env, RandomAgent(), seed)
        progress = [i["progress"] for i in ep.infos]
        assert progress[0] == 0.0 and all(0.0 <= p <= 1.0 for p in progress)
        assert progress[-1] == ep.component("outcome")[-1] == float(ep.success)
        for info, p in zip(ep.infos, progress, strict=True):  # a function of the state
            assert seen.setdefault(info["anchor"], p) == p
        for t, (_, stage, failed) in enumerate(true_states(env, ep)):
            decided = stage if cls is ChainEnv else int(stage >= 1) if cls is UmbrellaEnv else int(stage == horizon)
            expected = 0.0 if failed else decided / decisive_stages(cls, horizon)
            assert progress[t] == expected


@pytest.mark.parametrize("cls", CLASSES)
def test_progress_shapers_telescope(cls):
    """ProgressReward sums to exactly the outcome; potential shaping (gamma 1, Phi(terminal) = 0) sums to 0."""
    env = PotentialShaping(ProgressReward(cls(horizon=6)), lambda obs, info: info["progress"], gamma=1.0)
    for seed in range(100):
        ep = play(env, RandomAgent() if seed % 3 else OracleAgent(), seed)
        assert math.isclose(sum(ep.component("progress")), ep.component("outcome")[-1])
        assert math.isclose(sum(ep.component("shaping")), 0.0, abs_tol=1e-12)
        if cls is UmbrellaEnv:  # the outcome's credit lands on turn 1
            assert ep.component("progress")[0] == ep.component("outcome")[-1]


# -- actions -------------------------------------------------------------------------------------------------------
def test_invalid_actions_are_explained_misses():
    env = ChainEnv(horizon=3, invalid_action_penalty=0.1)
    _, info = env.reset(options={"task_index": 0})
    obs, reward, terminated, _, info = env.step("I think it is probably the first one")
    assert not info["action_valid"] and info["parse_error"] and not terminated
    assert obs[0]["content"].startswith(f"Invalid action: {info['parse_error']} This turn counts as a miss.")
    assert obs[0]["content"].endswith(env.task(0).stages[1].text)  # the next stage: the horizon stays exact
    assert reward == -0.1 and info["correct"] is False and info["progress"] == 0.0 and info["anchor"] == "0:1:x"
    umbrella = UmbrellaEnv(horizon=2, distractor_reward=1.0)
    umbrella.reset(options={"task_index": 0})
    umbrella.step(umbrella.task(0).gold()["choices"][0])
    *_, info = umbrella.step("<answer> unicorn </answer>")
    assert info["reward_components"] == {"distractor": 0.0, "outcome": 1.0} and not info["action_valid"]


def test_accepted_action_forms():
    options = ("blue", "red")
    for action in ("red", " Red. ", "RED", "<answer>red</answer>", "<answer> Red </answer> and more text",
                   "<think>blue? no</think> <answer> red </answer>", "<ANSWER> red </ANSWER>",
                   "<answer> red </answer><answer> blue </answer>", "<answer> red"):  # fmt: skip
        assert parse_choice(action, options) == ("red", None), action
    for action in ("", "red blue", "<answer></answer>", "<answer> </answer> red", "red </answer>", "<think>red</think>",
                   "x" * 99):  # fmt: skip
        choice, error = parse_choice(action, options)
        assert choice is None and error and len(error) < 200, action


FRAGMENTS = ("<answer>", "</answer>", "<ANSWER>", "</Answer>", "red", " Red ", "blue.", "<think>", " ", "x", "\u017f",
             "<", "</think>", "\n")  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=8), st.sampled_from([None, 40]))
def test_the_fast_path_agrees_with_the_parser(parts, truncated_at):
    action = "".join(parts)
    assert parse_choice(action, ("blue", "red"), truncated_at) == _parse_choice(action, ("blue", "red"), truncated_at)


# -- tasks, determinism, snapshots ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", CLASSES)
def test_tasks_are_seeded_by_index_and_noise_only_corrupts_signals(cls):
    a, b = cls(horizon=8, num_options=3), cls(horizon=8, num_options=3)
    noisy = cls(horizon=8, num_options=3, noise=0.5)
    assert [a.task(i) for i in (5, 3, 5)] == [b.task(i) for i in (5, 3, 5)]
    assert len({a.task(i) for i in range(200)}) == 200
    misleading = 0
    for i in range(200):
        clean, dirty = a.task(i), noisy.task(i)
        for s, n in zip(clean.stages, dirty.stages, strict=True):
            assert (s.options, s.answer, s.payoffs) == (n.options, n.answer, n.payoffs)
            if not (cls is KeyDoorEnv and s.answer is not None):  # (KeyDoor's door is decided by the intro's clue)
                assert (s.text == n.text) != n.misleading
            misleading += n.misleading
        assert (clean.intro == dirty.intro) != dirty.stages[-1].misleading or cls is not KeyDoorEnv
    assert binomial_ok(misleading, 200 * (8 if cls is ChainEnv else 1 if cls is UmbrellaEnv else 8), 0.5)


def test_same_seed_same_episode_across_env_objects():
    for cls in CLASSES:
        eps = [play(cls(horizon=5, noise=0.3), RandomAgent(), seed=11) for _ in range(2)]
        assert eps[0] == eps[1]


@pytest.mark.parametrize("cls", CLASSES)
def test_snapshot_keeps_the_mistake_flag(cls):
    env = cls(horizon=4)
    _, info = env.reset(options={"task_index": 2})
    gold = info["gold"]
    wrong = [next(o for o in s.options if o != s.best) for s in env.task(2).stages]
    for t in range(3):  # a mistake on the first decisive stage before the door or the end
        env.step(wrong[t] if gold["decisive"][t] else gold["choices"][t])
    snap = env.snapshot()
    fresh = cls(horizon=4)
    fresh.restore(snap)
    assert fresh.anchor() == env.anchor() and fresh.progress() == env.progress()
    assert fresh.step(gold["choices"][3]) == env.step(gold["choices"][3])


# -- speed ---------------------------------------------------------------------------------------------------------
def test_throughput(capsys):
    """Steps per CPU second of this process (best of 3, so other processes on the machine do not count)."""
    lines = []
    for cls in CLASSES:
        env, agent = cls(horizon=8), RandomAgent()
        best_env, best_agent = 0.0, 0.0
        for _ in range(3):
            env.reset(seed=0)
            steps, start = 0, time.process_time()
            while steps < 2000:
                env.reset()
                for _ in range(8):
                    env.step("<answer> red </answer>")
                steps += 8
            best_env = max(best_env, steps / max(time.process_time() - start, 1e-9))
            start = time.process_time()
            steps = sum(len(play(env, agent, seed).actions) for seed in range(125))
            best_agent = max(best_agent, steps / max(time.process_time() - start, 1e-9))
        lines.append(f"{cls.__name__:12s} H=8: env {best_env:,.0f} steps/s, with the random agent {best_agent:,.0f}")
        assert best_env > 10_000, lines[-1]
    with capsys.disabled():
        print("\n" + "\n".join(lines))
