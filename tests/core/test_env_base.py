"""``AgentEnv`` on its own, through the example env (envs/example.py): the shared work the base class does."""

import pickle
import re
from typing import ClassVar

import gymnasium as gym
import pytest
from hypothesis import example, given, settings, strategies as st

from agentgym.contract.env import AgentEnv, EnvUnavailableError, StepResult
from agentgym.contract.registry import list_envs
from agentgym.envs.example import BisectAgent, GuessNumberEnv
from agentgym.running.checker import check
from agentgym.running.runner import make_agent, run, run_episode

ENV_ID = "example/GuessNumber-v0"


class NoSnapshots(AgentEnv):
    num_tasks = 1

    def __init__(self):
        super().__init__(max_turns=3)

    def _reset(self, task_index, options):
        return [{"role": "user", "content": "say anything"}], {"gold": {}}

    def _step(self, action):
        return StepResult([{"role": "user", "content": "ok"}])


class Forgetful(GuessNumberEnv):  # counts guesses in its own state but leaves the count out of its snapshot
    def _reset(self, task_index, options):
        self.count = 0
        return super()._reset(task_index, options)

    def _step(self, action):
        self.count += 1
        result = super()._step(action)
        result.info["count"] = self.count
        return result


@pytest.fixture(scope="module", autouse=True)
def registered():
    gym.register(ENV_ID, entry_point="agentgym.envs.example:GuessNumberEnv")
    yield
    del gym.registry[ENV_ID]


def test_the_example_env_passes_the_checker_and_is_listed():
    report = check(ENV_ID)
    assert report.ok, str(report)
    assert "snapshot/restore and pickle continue an episode identically" in report.passed
    assert ENV_ID in list_envs()  # an AgentEnv registered outside the agentgym namespace


def test_the_example_env_runs_and_the_honest_agent_solves_every_task():
    trajs = run(ENV_ID, "bisect", 100, env_kwargs={"high": 100}, progress=False)
    assert [t.task_id for t in trajs] == [str(i) for i in range(100)]
    assert all(t.success and len(t.turns) <= 7 for t in trajs)  # ceil(log2(101)) = 7 guesses


def test_info_keys_are_added_by_the_base_class_on_every_step():
    env = GuessNumberEnv(high=10, max_turns=3)
    _, info = env.reset(seed=0, options={"task_index": 6})
    assert {k: info[k] for k in ("turn", "task_id", "action_valid", "parse_error", "reward_components")} == {
        "turn": 0, "task_id": "6", "action_valid": True, "parse_error": None, "reward_components": {}
    }  # fmt: skip
    assert info["gold"] == {"secret": 7} and info["anchor"].startswith("6#")
    _, _, _, _, info = env.step("<guess>3</guess>")
    assert info["task_id"] == "6" and info["anchor"].startswith("6#") and info["turn"] == 1
    _, _, _, _, again = env.step("<guess>3</guess>")
    assert again["anchor"] != info["anchor"]  # a different history is a different state by default
    _, reward, terminated, truncated, last = env.step("<guess>7</guess>")
    assert (reward, terminated, truncated, last["success"]) == (1.0, True, False, True)


def test_invalid_actions_get_the_penalty_as_a_format_component():
    env = GuessNumberEnv(high=10, invalid_action_penalty=0.25)
    env.reset(seed=0)
    obs, reward, _, _, info = env.step("seven")
    assert (reward, info["reward_components"], info["action_valid"]) == (-0.25, {"format": -0.25}, False)
    assert info["parse_error"] and obs[0]["content"] == info["parse_error"]
    _, reward, _, _, info = env.step(None)  # not even text: the base class explains and penalises
    assert reward == -0.25 and "must be text" in info["parse_error"]
    _, reward, _, _, info = env.step("<guess>1</guess>")
    assert "format" not in info["reward_components"]


def test_the_turn_limit_truncates_and_adds_the_envs_end_of_episode_info():
    class Scored(GuessNumberEnv):
        def _truncated_info(self):
            return {"metrics": {"guessed": 0.0}}

    env = Scored(high=10, max_turns=2)
    env.reset(seed=0, options={"task_index": 0})
    assert "metrics" not in env.step("<guess>5</guess>")[4]
    _, _, terminated, truncated, info = env.step("<guess>5</guess>")
    assert (terminated, truncated, info["success"], info["metrics"]) == (False, True, False, {"guessed": 0.0})
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("<guess>1</guess>")


def test_an_env_may_truncate_on_its_own_terms_without_the_turn_limit_info():
    """``StepResult(truncated=True)`` (a simulated user that failed) ends the episode as truncated, with the env's
    own info, not the turn limit's."""

    class Flaky(GuessNumberEnv):
        def _step(self, action):
            return StepResult([{"role": "user", "content": "(the simulator failed)"}], truncated=True,
                              info={"metrics": {"simulator_failure": 1.0}})  # fmt: skip

        def _truncated_info(self):
            return {"metrics": {"turn_limit": 1.0}}

    env = Flaky(high=10, max_turns=5)
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step("<guess>5</guess>")
    assert (reward, terminated, truncated, info["success"]) == (0.0, False, True, False)
    assert info["metrics"] == {"simulator_failure": 1.0}
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("<guess>1</guess>")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"task": 0},
            r"unknown reset option\(s\) \['task'\] for GuessNumberEnv; accepted: \['task_index', 'task_id'\]",
        ),
        ({"task_index": 10}, r"task_index 10 is out of range: this env has tasks 0\.\.9"),
        ({"task_index": -1}, r"out of range"),
        ({"task_index": "3"}, r"task_index must be an int, got str"),
        ({"task_index": True}, r"task_index must be an int, got bool"),
        ({"task_index": 1, "task_id": "1"}, r"not both"),
        ({"task_id": "seven"}, r"unknown task_id 'seven'"),
        ({"task_id": "12"}, r"task_index 12 is out of range"),
        ({"task_id": 3}, r"task_id must be a str, got int"),
    ],
)
def test_bad_options_raise_a_value_error_that_says_what_is_accepted(options, message):
    with pytest.raises(ValueError, match=message):
        GuessNumberEnv(high=10).reset(seed=0, options=options)


def test_task_options_and_env_specific_options():
    class WithHint(GuessNumberEnv):
        reset_options = ("hint",)

        def _reset(self, task_index, options):
            obs, extra = super()._reset(task_index, options)
            return obs, {**extra, "hint": options.get("hint")}

    env = WithHint(high=10)
    assert (
        env.reset(seed=0, options={"task_id": "4", "hint": "low"})[1].items() >= {"task_id": "4", "hint": "low"}.items()
    )
    with pytest.raises(ValueError, match=r"accepted: \['task_index', 'task_id', 'hint'\]"):
        env.reset(options={"hints": 1})


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), lengths=st.lists(st.integers(0, 5), min_size=1, max_size=6))
@example(seed=736, lengths=[0, 0, 0, 0, 2])  # draws task 0, whose secret is 1: a guess of 1 ended the episode
def test_the_nth_reset_after_a_seed_plays_the_same_task_whatever_happened_between(seed, lengths):
    """The task stream: k envs reset with one seed stay a group across automatic resets. The busy env's guesses
    (0, never a secret) leave its episodes running, whatever task it plays."""
    quiet, busy = GuessNumberEnv(high=1000), GuessNumberEnv(high=1000, max_turns=10)
    quiet.reset(seed=seed)
    busy.reset(seed=seed)
    tasks_quiet, tasks_busy = [quiet.task_index], [busy.task_index]
    for n in lengths:
        for _ in range(n):
            busy.step("<guess>0</guess>")
        quiet.reset()
        busy.reset()
        tasks_quiet.append(quiet.task_index)
        tasks_busy.append(busy.task_index)
    assert tasks_busy == tasks_quiet and len(set(tasks_quiet)) > len(lengths) // 2


def test_spec_kwargs_record_every_argument_and_recreate_the_env():
    env = GuessNumberEnv(high=50)
    assert env.spec_kwargs() == {"high": 50, "max_turns": 8, "invalid_action_penalty": 0.0}
    assert GuessNumberEnv(**env.spec_kwargs()).spec_kwargs() == env.spec_kwargs()
    made = gym.make(ENV_ID, high=20)
    traj = run_episode(made, BisectAgent(), seed=0, options={"task_index": 3})
    assert traj.env_kwargs == {"high": 20, "max_turns": 8, "invalid_action_penalty": 0.0}


def test_built_in_agent_factories_are_called_with_the_agent_kwargs():
    class Named(BisectAgent):
        def __init__(self, label: str = "bisect"):
            super().__init__()
            self.name = label

    class Env(GuessNumberEnv):
        agents: ClassVar = {"named": Named}

    assert make_agent("named", Env(), label="mine").name == "mine"


def test_envs_pickle_before_during_and_after_an_episode():
    env = gym.make(ENV_ID, high=64)
    assert pickle.loads(pickle.dumps(env)).unwrapped.spec_kwargs() == env.unwrapped.spec_kwargs()
    env.reset(seed=3, options={"task_index": 40})
    env.step("<guess>32</guess>")
    clone = pickle.loads(pickle.dumps(env))
    assert clone.unwrapped.transcript == env.unwrapped.transcript and clone.unwrapped.turn == 1
    assert clone.step("<guess>41</guess>") == env.step("<guess>41</guess>")
    assert clone.reset()[1]["task_id"] == env.reset()[1]["task_id"]  # the task stream travels too


def test_an_unavailable_env_constructs_but_reset_says_why():
    class Missing(GuessNumberEnv):
        unavailable_reason = "Missing needs the `nothing` package: pip install nothing"

    env = Missing()
    with pytest.raises(EnvUnavailableError, match="pip install nothing") as err:
        env.reset(seed=0)
    assert err.value.env_unavailable


def test_an_env_without_snapshot_support_says_so_and_refuses_to_pickle_mid_episode():
    env = NoSnapshots()
    pickle.dumps(env)  # between episodes it pickles as its constructor arguments
    env.reset(seed=0)
    with pytest.raises(TypeError, match="does not support snapshots"):
        env.snapshot()
    with pytest.raises(TypeError, match="cannot pickle NoSnapshots mid-episode"):
        pickle.dumps(env)
    report = check("NoSnapshots", make_env=NoSnapshots)
    assert report.ok and any("does not support snapshots" in n for n in report.notes)


def test_the_checker_catches_a_snapshot_that_misses_state():
    report = check("Forgetful", make_env=lambda: Forgetful(high=1000))
    assert any("restore into the same env: the continuation differs" in f for f in report.failed), str(report)


def test_the_example_env_through_the_command_line(tmp_path, capsys):
    from agentgym.cli import main

    assert main(["check", ENV_ID, "--env-arg", "high=30"]) == 0
    assert "check example/GuessNumber-v0: OK" in capsys.readouterr().out
    out = tmp_path / "run"
    assert main(["run", ENV_ID, "--agent", "bisect", "--episodes", "30", "--out", str(out), "--quiet"]) == 0
    assert re.search(r"\| all +\| +30 \| +1\.000 \|", capsys.readouterr().out)


def test_truncated_at_tells_the_env_whether_this_action_was_cut():
    seen = []

    class Spy(GuessNumberEnv):
        def _step(self, action):
            seen.append(self.truncated_at)
            return super()._step(action)

    env = Spy(high=10)
    env.reset(seed=0)
    env.step("x" * env.max_action_chars)  # exactly the limit: not cut
    env.step("x" * (env.max_action_chars + 1))
    assert seen == [None, env.max_action_chars]
