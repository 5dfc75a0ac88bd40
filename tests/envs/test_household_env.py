"""Household-v0: the env contract, prompts, rewards, expert-plan info, determinism, bad input, agents."""

import itertools
import json
import os
import subprocess
import sys

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import agentgym
from agentgym.envs.household import catalog as C
from agentgym.envs.household.engine import CLEAN, COOL, HOT
from agentgym.envs.household.env import HouseholdEnv
from agentgym.envs.household.prompts import render_admissible
from agentgym.rewards.wrappers import ProgressReward
from agentgym.running.checker import check
from agentgym.running.replay import replay_file
from agentgym.running.runner import run, summarize

ENV_ID = "agentgym/Household-v0"


def test_registered_and_made_by_gymnasium():
    assert ENV_ID in agentgym.list_envs()
    env = gym.make(ENV_ID)
    obs, info = env.reset(seed=0)
    assert obs[0]["role"] == "user" and "Your task is to: " in obs[0]["content"]
    assert "-= Welcome to TextWorld, ALFRED! =-" in obs[0]["content"]
    assert info["turn"] == 0 and info["task_type"] in C.TASK_TYPES and info["won"] is False
    assert info["gold"]["task_type"] == info["task_type"] and info["gold"]["spec"]["split"] == "valid_seen"
    assert info["admissible_commands"] == sorted(info["admissible_commands"]) and "look" in info["admissible_commands"]
    assert set(HouseholdEnv.agents) == {"oracle", "heuristic", "random"}


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"prompt": "verl"}, {"expert_plan": True, "put_style": "move", "invalid_action_penalty": 0.1,
                              "difficulty": "easy", "split": "valid_unseen"}],
    ids=["plain", "verl", "expert-move-easy"],
)  # fmt: skip
def test_agentgym_checker_passes(kwargs):
    report = check(ENV_ID, env_kwargs=kwargs)
    assert report.ok, str(report)


def test_step_info_and_feedback():
    env = HouseholdEnv(split="train")
    _, info = env.reset(seed=0, options={"task_index": 0})
    anchor0 = info["anchor"]
    obs, reward, terminated, truncated, info = env.step(info["admissible_commands"][0])
    assert obs[0]["content"].startswith("You arrive at ") and info["action_valid"] and info["parse_error"] is None
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert set(info) >= {"task_id", "anchor", "admissible_commands", "won", "task_type", "turn"}
    assert "gold" not in info and info["anchor"] != anchor0
    obs, reward, *_, info = env.step("take the moon")
    assert obs == [{"role": "user", "content": "Nothing happens."}]
    assert not info["action_valid"] and "not a valid command" in info["parse_error"]
    json.dumps(info)


def test_success_reward_and_invalid_penalty():
    env = HouseholdEnv(success_reward=10.0, invalid_action_penalty=0.1, expert_plan=True)
    _, info = env.reset(seed=3)
    _, penalty, *_, info = env.step("dance")
    assert penalty == pytest.approx(-0.1) and info["reward_components"] == {"format": -0.1}
    while True:
        _, reward, terminated, truncated, info = env.step(info["expert_plan"][0])
        if terminated or truncated:
            break
    assert terminated and info["success"] and info["won"] and reward == 10.0
    assert info["reward_components"] == {"outcome": 10.0}


def test_episode_is_truncated_at_50_turns():
    env = gym.make(ENV_ID)
    env.reset(seed=1)
    for turn in range(1, 51):
        _, _, terminated, truncated, info = env.step("look")
        assert not terminated and truncated == (turn == 50)
    assert info["success"] is False and info["turn"] == 50


def test_expert_plan_info_and_progress_reward():
    env = HouseholdEnv(expert_plan=True)
    _, info = env.reset(seed=5)
    n0 = info["plan_length"]
    assert n0 == len(info["expert_plan"]) >= 2 and info["progress"] == 0.0
    _, _, _, _, info = env.step(info["expert_plan"][0])
    assert info["plan_length"] == n0 - 1 and info["progress"] == pytest.approx(1 / n0)
    _, _, _, _, info = env.step("look")  # no state change, same plan
    assert info["plan_length"] == n0 - 1
    wrapped = ProgressReward(HouseholdEnv(expert_plan=True))
    _, info = wrapped.reset(seed=5)
    total = 0.0
    for cmd in list(info["expert_plan"]):
        _, _, terminated, _, info = wrapped.step(cmd)
        total += info["reward_components"]["progress"]
    assert terminated and total == pytest.approx(1.0)


def test_verl_prompt():
    env = HouseholdEnv(prompt="verl")
    obs, info = env.reset(seed=2)
    first = obs[0]["content"]
    assert first.startswith("You are an expert agent operating in the ALFRED Embodied Environment.")
    assert f"[{render_admissible(info['admissible_commands'])}]" in first and "'help'" not in first
    assert "<think> </think>" in first and "<action> </action>" in first
    cmd = info["admissible_commands"][0]
    obs, _, _, _, info = env.step(f"<think>let me move</think>\n<action>{cmd}</action>")
    assert (
        info["action_valid"]
        and "You are now at step 2 and your current observation is: You arrive at" in (obs[0]["content"])
    )
    obs, _, _, _, info = env.step(cmd)  # no tags: a format error, not a command
    assert not info["action_valid"] and "<action>" in info["parse_error"]
    assert "Nothing happens." in obs[0]["content"]


def test_plain_prompt_accepts_action_tags_and_task_options():
    env = HouseholdEnv(split="train")
    _, info = env.reset(options={"task_index": 3})
    task_id = info["task_id"]
    _, _, _, _, info2 = env.step(f"<action>{info['admissible_commands'][0]}</action>")
    assert info2["action_valid"]
    _, again = env.reset(options={"task_id": task_id})
    assert again["task_id"] == task_id and again["anchor"] == info["anchor"]
    with pytest.raises(ValueError, match="not a task of split"):
        env.reset(options={"task_id": "valid_seen:3:x"})
    assert env.spec_kwargs()["split"] == "train"
    assert HouseholdEnv(**env.spec_kwargs()).spec_kwargs() == env.spec_kwargs()


def test_same_seed_byte_identical_trajectories_and_replay(tmp_path):
    paths = [tmp_path / f"{n}.jsonl" for n in "abc"]
    kw = {"split": "train", "expert_plan": True}
    run(ENV_ID, "random", 8, seed=3, env_kwargs=kw, out=paths[0], progress=False)
    run(ENV_ID, "random", 8, seed=3, env_kwargs=kw, out=paths[1], progress=False)
    run(ENV_ID, "random", 8, seed=3, env_kwargs=kw, out=paths[2], progress=False, workers=2)
    data = [p.read_bytes() for p in paths]
    assert data[0] == data[1] == data[2] and len(data[0]) > 10_000
    assert all(r.ok for r in replay_file(paths[0]))
    other = tmp_path / "d.jsonl"
    run(ENV_ID, "random", 8, seed=4, env_kwargs=kw, out=other, progress=False)
    assert other.read_bytes() != data[0]


@pytest.mark.slow
def test_identical_across_processes_and_hash_seeds(tmp_path):
    """No dependence on Python's per-process hash randomisation: two interpreters write the same bytes."""
    code = (
        "import sys; from agentgym.running.runner import run;"
        "run('agentgym/Household-v0', sys.argv[2], 6, seed=11, env_kwargs={'split': 'valid_unseen', 'prompt': 'verl',"
        " 'expert_plan': True}, out=sys.argv[1], progress=False)"
    )
    outputs = []
    for hash_seed in ("1", "2"):
        for agent in ("random", "heuristic"):
            path = tmp_path / f"{agent}{hash_seed}.jsonl"
            env = {**os.environ, "PYTHONHASHSEED": hash_seed}
            subprocess.run([sys.executable, "-c", code, str(path), agent], check=True, env=env, timeout=300)
            outputs.append(path.read_bytes())
    assert outputs[0] == outputs[2] and outputs[1] == outputs[3]


def test_seeded_resets_draw_tasks():
    env = HouseholdEnv()
    ids = {env.reset(seed=s)[1]["task_id"] for s in range(30)}
    assert len(ids) > 20
    assert env.reset(seed=7)[1]["anchor"] == HouseholdEnv().reset(seed=7)[1]["anchor"]


def test_agents_by_task_type():
    rows = {r["category"]: r for r in summarize(run(ENV_ID, "heuristic", 60, progress=False))}
    assert set(rows) == {"all", *C.TASK_TYPES} and rows["all"]["success"] >= 0.9
    rows = {r["category"]: r for r in summarize(run(ENV_ID, "random", 24, progress=False))}
    assert rows["all"]["success"] < 0.5 and rows["all"]["invalid_rate"] == 0.0


# -- bad input -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fuzz_env():
    return HouseholdEnv(invalid_action_penalty=0.5)


def _assert_invalid(env, action):
    before = env.engine.state_key()
    obs, reward, _, _, info = env.step(action)
    assert obs[0]["content"].startswith("Nothing happens.")
    assert info["action_valid"] is False and info["parse_error"] and reward == -0.5
    assert env.engine.state_key() == before


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(text=st.text(max_size=300))
def test_fuzz_arbitrary_unicode_never_raises(fuzz_env, text):
    _, info = fuzz_env.reset(seed=0)
    admissible = set(info["admissible_commands"]) | {"i"}
    obs, reward, terminated, _, info = fuzz_env.step(text)
    assert fuzz_env.observation_space.contains(obs) and not terminated
    if "<" not in text:  # (tagged actions are unwrapped first)
        assert info["action_valid"] == (" ".join(text.lower().split()) in admissible)
    if not info["action_valid"]:
        assert obs[0]["content"].startswith("Nothing happens.") and info["parse_error"] and reward == -0.5


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    verb=st.sampled_from(
        ["take", "put", "move", "go to", "open", "close", "examine", "use", "heat", "cool", "clean", "slice"]
    ),
    thing=st.sampled_from(["unicorn", "apple", "fridge", "laser", "desklamp"]),
    number=st.integers(min_value=7, max_value=10**6),
    tail=st.sampled_from(["", " from countertop 1", " in/on sofa 1", " to fridge 1", " with microwave 1"]),
)
def test_fuzz_commands_naming_absent_things(fuzz_env, verb, thing, number, tail):
    fuzz_env.reset(seed=0)
    _assert_invalid(fuzz_env, f"{verb} {thing} {number}{tail}")


@pytest.mark.parametrize(
    "action",
    ["x" * (1 << 20), "go to " + "🙂" * 100_000, "\ud800go to fridge 1", "\x00" * 1000, "<action></action>",
     "<action>", "</action>go to fridge 1", "go to fridge 1\x00"],
)  # fmt: skip
def test_huge_and_broken_actions(fuzz_env, action):
    fuzz_env.reset(seed=0)
    _assert_invalid(fuzz_env, action)


# -- reset options and task ids ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("str", r"options must be a dict, got str"),
        ({"task_index": "3"}, r"task_index must be an int, got str '3'"),
        ({"task_index": 1.9}, r"task_index must be an int, got float 1\.9"),
        ({"task_index": True}, r"task_index must be an int, got bool True"),
        ({"task_index": "abc"}, r"task_index must be an int, got str 'abc'"),
        ({"task_index": None}, r"task_index must be an int, got NoneType None"),
        ({"task_index": float("nan")}, r"task_index must be an int, got float nan"),
        ({"task_index": 140}, r"task_index 140 is out of range: this env has tasks 0\.\.139"),
        ({"task_index": -1}, r"task_index -1 is out of range"),
    ],
)
def test_bad_reset_options_raise_clear_value_errors(options, message):
    with pytest.raises(ValueError, match=message):
        HouseholdEnv().reset(seed=0, options=options)


def test_task_id_must_be_the_id_of_a_task_of_this_env():
    env = HouseholdEnv()
    real = env.reset(options={"task_index": 3})[1]["task_id"]
    assert real.startswith("valid_seen:3:") and env.task_index_of(real) == 3
    assert env.reset(options={"task_id": real})[1]["task_id"] == real
    bad = {
        "valid_seen:" + "9" * 40 + ":x": r"names task 9{40}, out of range: this env has tasks 0\.\.139",
        "valid_seen:3:x": r"unknown task_id 'valid_seen:3:x': task 3 of this env is 'valid_seen:3:pick_heat",
        real.replace(":3:", ":03:"): r"unknown task_id",
        real + "@ffff": r"unknown task_id",
        real.replace(":3:", ":4:"): r"unknown task_id .*task 4 of this env is 'valid_seen:4:",
        "valid_seen:\u00b2:x": r"is not a task of split 'valid_seen'",  # a digit to isdigit(), not to int()
        "valid_seen:-1:x": r"is not a task of split 'valid_seen'",
    }
    for task_id, message in bad.items():
        with pytest.raises(ValueError, match=message):
            env.task_index_of(task_id)
        with pytest.raises(ValueError, match=message):
            env.reset(options={"task_id": task_id})
    few = HouseholdEnv(num_tasks=5)
    beyond = HouseholdEnv(num_tasks=10).reset(options={"task_index": 7})[1]["task_id"]
    with pytest.raises(ValueError, match=r"names task 7, out of range: this env has tasks 0\.\.4"):
        few.reset(options={"task_id": beyond})
    easy = HouseholdEnv(difficulty="easy").reset(options={"task_index": 3})[1]["task_id"]
    with pytest.raises(ValueError, match="unknown task_id"):  # another generator config, another task
        env.reset(options={"task_id": easy})


# -- truncated and invisible actions -----------------------------------------------------------------------------
def test_an_action_tag_cut_by_the_length_limit_is_not_played():
    env = HouseholdEnv(prompt="verl")
    env.reset(seed=0)
    tail = "<action>look</action>"
    pad = env.max_action_chars - len("<action>look") - len("<think></think>")
    before = env.engine.state_key()
    obs, _, _, _, info = env.step(f"<think>{'x' * pad}</think>{tail}")
    assert info["action_truncated"] and not info["action_valid"] and env.engine.state_key() == before
    assert "cut at 16384 characters, inside the <action> tag" in info["parse_error"]
    assert info["parse_error"] in obs[0]["content"]
    _, _, _, _, info = env.step(f"<think>{'x' * 20_000}</think>{tail}")
    assert not info["action_valid"] and "not read" in info["parse_error"]


@pytest.mark.parametrize("content", ["\u200b", "\x00\x00", "\ufeff \u2060"])
def test_an_action_tag_of_only_invisible_characters_is_empty(content):
    env = HouseholdEnv(prompt="verl")
    env.reset(seed=0)
    _, _, _, _, info = env.step(f"<action>{content}</action>")
    assert not info["action_valid"] and "The <action> tag is empty" in info["parse_error"]


# -- object state bits, pinned to ALFWorld's rules ---------------------------------------------------------------
APPLIANCE = {"heat": "microwave 1", "cool": "fridge 1", "clean": "sinkbasin 1"}
GOAL_OP = {C.HEAT: "heat", C.COOL: "cool", C.CLEAN: "clean"}


def _expected_state(ops):
    """ALFWorld's rules: heating makes an object hot and not cool, cooling makes it cool and not hot, cleaning
    makes it clean (and leaves the temperature alone)."""
    hot = cool = clean = False
    for op in ops:
        if op == "heat":
            hot, cool = True, False
        elif op == "cool":
            hot, cool = False, True
        else:
            clean = True
    return hot, cool, clean


EXAMINE = {
    (False, False, False): "There's nothing special about {}.",
    (True, False, False): "This is a hot {}.",
    (False, True, False): "This is a cold {}.",
    (False, False, True): "This is a clean {}.",
    (True, False, True): "This is a hot and clean {}.",
    (False, True, True): "This is a cool and clean {}.",
}


def _state_task(env, task_type):
    """The first task of ``task_type`` whose object can be heated, cooled and cleaned, in a room with all three
    appliances; returns its gold."""
    both = C.HEATABLE & C.COOLABLE & C.CLEANABLE
    for index in range(env.num_tasks):
        _, info = env.reset(options={"task_index": index})
        gold = info["gold"]
        appliances = all(f"go to {a}" in info["admissible_commands"] for a in APPLIANCE.values())
        if gold["task_type"] == task_type and gold["object"] in both and appliances:
            return index
    raise AssertionError(f"no {task_type} task with a heatable, coolable, cleanable object")


class _Player:
    """Plays commands that must be valid, keeping the latest ``info``."""

    def __init__(self, env, info):
        self.env, self.info = env, info

    def do(self, command):
        obs, _, terminated, _, self.info = self.env.step(command)
        assert self.info["action_valid"], (command, obs)
        return obs[0]["content"], terminated

    def go(self, place, *, open_it=True):
        """Go to ``place`` (unless there already) and open it if it is closed (and ``open_it``)."""
        for command in (f"go to {place}", f"open {place}")[: 2 if open_it else 1]:
            if command in self.info["admissible_commands"]:
                self.do(command)


@pytest.mark.parametrize("task_type", [C.HEAT, C.COOL, C.CLEAN])
def test_heat_cool_clean_transitions_follow_alfworld(task_type):
    """Every sequence of up to three heat/cool/clean actions leaves the object in the state ALFWorld's rules give:
    seen through ``examine``, the engine's state bits, the anchor (equal states, equal anchors) and the goal."""
    env = HouseholdEnv()
    index = _state_task(env, task_type)
    anchors: dict[tuple, set[str]] = {}
    for n in range(4):
        for ops in itertools.product(("heat", "cool", "clean"), repeat=n):
            _, info = env.reset(options={"task_index": index})
            task, eng, gold, player = env.task, env.engine, info["gold"], _Player(env, info)
            k = task.obj_types.index(gold["object"])
            obj, source = task.obj_names[k], task.layout.names[task.obj_start[k]]
            player.go(source)
            player.do(f"take {obj} from {source}")
            for op in ops:
                player.go(APPLIANCE[op], open_it=False)  # (appliances work closed; opening would change the state)
                feedback, _ = player.do(f"{op} {obj} with {APPLIANCE[op]}")
                assert feedback == f"You {op} the {obj} using the {APPLIANCE[op]}."
            hot, cool, clean = _expected_state(ops)
            assert player.do(f"examine {obj}")[0] == EXAMINE[hot, cool, clean].format(obj), ops
            bits = eng.bits[k]
            assert (bool(bits & HOT), bool(bits & COOL), bool(bits & CLEAN)) == (hot, cool, clean), ops
            where = APPLIANCE[ops[-1]] if ops else source
            anchors.setdefault((where, hot, cool, clean), set()).add(player.info["anchor"])
            dest = task.layout.names[task.layout.by_type[gold["receptacle"]][0]]
            player.go(dest)
            _, terminated = player.do(f"put {obj} in/on {dest}")
            wants = {"heat": hot, "cool": cool, "clean": clean}[GOAL_OP[task_type]]
            assert player.info["won"] == terminated == wants, (ops, player.info["won"])
    assert all(len(a) == 1 for a in anchors.values()), anchors  # the same state, whatever the path: one anchor
    assert len({a for s in anchors.values() for a in s}) == len(anchors)  # different states: different anchors


def test_verl_messages_list_the_admissible_commands_of_the_current_state():
    """Every verl message lists exactly the admissible commands of the state it describes (they are cached per
    location: moving, opening and taking must refresh them)."""
    env = HouseholdEnv(prompt="verl", expert_plan=True)
    _, info = env.reset(seed=0, options={"task_index": 3})
    plan, seen = list(info["expert_plan"]), set()
    for command in [*plan[:2], "look", f"close {plan[0].removeprefix('go to ')}", *plan[1:-1]]:
        obs, _, _, _, info = env.step(f"<action>{command}</action>")
        listed = obs[0]["content"].split("Your admissible actions of the current situation are: [", 1)[1]
        assert listed.startswith(render_admissible(info["admissible_commands"]) + "].")
        seen.add(tuple(info["admissible_commands"]))
    assert len(seen) >= 4
