"""Adapters: TextWorld-v0 on a game made offline with tw-make, ALFWorld-v0's availability checks."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import gymnasium as gym
import pytest

import agentgym
from agentgym.contract.env import EnvUnavailableError
from agentgym.envs.household.adapters import meta_command, sendable
from agentgym.envs.household.alfworld_adapter import ALFWorldEnv, find_alfworld_games, task_type_of_path
from agentgym.running.checker import check
from agentgym.running.runner import builtin_agents, run

HAS_TEXTWORLD = importlib.util.find_spec("textworld") is not None
HAS_ALFWORLD = importlib.util.find_spec("alfworld") is not None
TW_MAKE = shutil.which("tw-make", path=os.path.dirname(sys.executable)) or shutil.which("tw-make")
needs_textworld = pytest.mark.skipif(
    not HAS_TEXTWORLD or TW_MAKE is None, reason="textworld is not installed (pip install textworld) or has no tw-make"
)


def test_adapters_are_registered():
    assert {"agentgym/TextWorld-v0", "agentgym/ALFWorld-v0"} <= set(agentgym.list_envs())
    assert sendable("go to fridge 1") and not sendable("") and not sendable("x" * 201) and not sendable("é")


@pytest.fixture(scope="module")
def tw_game(tmp_path_factory):
    if not HAS_TEXTWORLD or TW_MAKE is None:
        pytest.skip("textworld is not installed (pip install textworld) or has no tw-make")
    path = str(tmp_path_factory.mktemp("tw") / "g.z8")
    cmd = [TW_MAKE, "custom", "--world-size", "3", "--nb-objects", "6", "--quest-length", "3", "--seed", "7",
           "--output", path, "--silent"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0 or not os.path.exists(path):
        pytest.skip(f"tw-make could not build a game here: {out.stderr[-500:]}")
    return path


@pytest.mark.slow
@needs_textworld
def test_textworld_adapter_plays_a_tw_make_game(tw_game):
    report = check("agentgym/TextWorld-v0", env_kwargs={"game_file": tw_game})
    assert report.ok, str(report)
    env = gym.make("agentgym/TextWorld-v0", game_file=tw_game)
    obs, info = env.reset(seed=0)
    assert info["admissible_commands"] and info["expert_plan"] and info["task_id"] == "g"
    assert info["gold"]["game_file"] == tw_game and info["progress"] == 0.0
    obs, _, _, _, info2 = env.step("dance wildly")
    assert not info2["action_valid"] and info2["parse_error"]
    obs, _, _, _, info3 = env.step("é" * 10)
    assert obs[0]["content"] == "Nothing happens." and not info3["action_valid"]
    env.close()
    trajs = run("agentgym/TextWorld-v0", "oracle", 2, env_kwargs={"game_file": tw_game}, progress=False)
    assert all(t.success for t in trajs) and trajs[0].turns[-1].info["progress"] == 1.0
    trajs = run("agentgym/TextWorld-v0", "random", 2, env_kwargs={"game_file": os.path.dirname(tw_game),
                                                                   "prompt": "verl", "expert_plan": False},
                progress=False)  # fmt: skip
    assert all(t.turns for t in trajs) and all("<action>" in t.turns[0].action for t in trajs)


def test_textworld_adapter_says_what_is_missing(tmp_path):
    """Constructs (so list/bench can probe it) with no agents; reset raises the reason."""
    env = gym.make("agentgym/TextWorld-v0")
    expected = r"needs game_file=.*tw-make" if HAS_TEXTWORLD else "pip install textworld"
    assert env.unwrapped.agents == {} and builtin_agents(env) == []
    with pytest.raises(EnvUnavailableError, match=expected):
        env.reset(seed=0)
    if HAS_TEXTWORLD:
        with pytest.raises(EnvUnavailableError, match="does not exist"):
            gym.make("agentgym/TextWorld-v0", game_file=str(tmp_path / "nope.z8"))


def test_alfworld_adapter_explains_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    env = gym.make("agentgym/ALFWorld-v0")
    assert builtin_agents(env) == []
    with pytest.raises(EnvUnavailableError) as err:
        env.reset(seed=0)
    message = str(err.value)
    assert message == env.unwrapped.unavailable_reason and err.value.env_unavailable
    assert "ALFWORLD_DATA" in message and "alfworld-download" in message and "Household-v0" in message
    if not HAS_ALFWORLD:
        assert "pip install alfworld" in message
    assert "json_2.1.1" in ALFWorldEnv(data_dir=str(tmp_path)).unavailable_reason


def test_bench_probes_adapters_without_failing(tmp_path):
    """``agentgym bench`` builds every registered env: unavailable adapters construct and contribute no rows."""
    from agentgym.running.bench import bench

    result = bench(episodes=1, envs=["agentgym/ALFWorld-v0", "agentgym/TextWorld-v0"], out=tmp_path, progress=False)
    assert result.rows == []


def test_alfworld_game_discovery_on_a_fake_data_folder(tmp_path):
    root = tmp_path / "json_2.1.1" / "valid_seen"
    trials = ["pick_cool_then_place_in_recep-Pan-None-DiningTable-7/trial_1",
              "look_at_obj_in_light-Book-None-DeskLamp-308/trial_2",
              "pick_and_place_with_movable_recep-Apple-Pan-Fridge-1/trial_3",
              "pick_heat_then_place_in_recep-AppleSliced-None-Fridge-2/trial_4"]  # fmt: skip
    for t in trials:
        (root / t).mkdir(parents=True)
        (root / t / "traj_data.json").write_text("{}")
        (root / t / "game.tw-pddl").write_text(json.dumps({"solvable": True}))
    games = find_alfworld_games(str(tmp_path), "valid_seen")
    assert [task_type_of_path(g) for g in games] == ["look_at_obj_in_light", "pick_cool_then_place_in_recep"]
    assert find_alfworld_games(str(tmp_path), "valid_seen", ["pick_cool_then_place_in_recep"]) == games[1:]
    assert find_alfworld_games(str(tmp_path), "train") == []


@pytest.mark.skipif(
    not (HAS_ALFWORLD and os.environ.get("ALFWORLD_DATA")),
    reason="ALFWorld is not available here: needs `pip install alfworld` and its data (`alfworld-download`, then "
    "set $ALFWORLD_DATA); Household-v0 is the offline stand-in",
)
def test_alfworld_adapter_on_real_data():  # pragma: no cover - needs the ALFWorld download
    env = gym.make("agentgym/ALFWorld-v0", split="valid_unseen")
    obs, info = env.reset(seed=0)
    assert "Your task is to: " in obs[0]["content"] and info["admissible_commands"]
    obs, *_ = env.step(info["admissible_commands"][0])
    assert obs[0]["content"]


META = ["save", "SAVE", "  save.", "restore", "restart", "undo", "quit", "q", "die", "again", "g", "oops teacup",
        "o refrigerator", "script", "script off", "transcript", "transcripts", "unscript", "noscript", "look. save",
        "look,script", "look then restore", "inventory. restart", "tw-print max_score", "tw-extra-infos score",
        "print_state", "enable print state option", "restrict commands", "<action>save</action>"]  # fmt: skip


@needs_textworld
def test_textworld_adapter_refuses_interpreter_meta_commands(tw_game, tmp_path, monkeypatch):
    """save/script write files into the working directory, restore/restart/undo/quit/again roll the game back or
    end it behind the adapter's back: they are invalid actions that explain why, and never reach the game."""
    monkeypatch.chdir(tmp_path)
    env = gym.make("agentgym/TextWorld-v0", game_file=tw_game, max_turns=200).unwrapped
    _, info = env.reset(seed=0)
    plan = list(info["expert_plan"])
    sent = []
    step = env._game.step
    monkeypatch.setattr(env._game, "step", lambda command: (sent.append(command), step(command))[1])
    for command in [None, *plan[:-1]]:
        if command is not None:
            _, _, _, _, info = env.step(command)
            assert info["action_valid"]
        before = {k: info[k] for k in ("progress", "expert_plan", "admissible_commands", "won", "anchor")}
        assert not [c for c in info["admissible_commands"] if meta_command(c)]  # game commands still go through
        for meta in META:
            obs, _, terminated, truncated, info = env.step(meta)
            assert not info["action_valid"] and not terminated and not truncated, meta
            assert "is an interpreter command" in info["parse_error"] and info["parse_error"] in obs[0]["content"]
            assert {k: info[k] for k in before} == before, meta
            assert sorted(os.listdir(tmp_path)) == [], meta
    assert sent == plan[:-1]  # only the game commands reached the game
    _, reward, terminated, _, info = env.step(plan[-1])
    assert terminated and info["won"] and info["progress"] == 1.0 and reward == 1.0
    env.close()


@pytest.mark.parametrize("command", META[:-1])
def test_meta_commands_are_recognised_in_any_clause(command):
    assert meta_command(command) is not None


@pytest.mark.parametrize(
    "command",
    ["look", "go west", "take teacup from refrigerator", "put teacup on chair", "examine goal", "inventory",
     "open box", "scripture", "save!", "restrict", "go to sinkbasin 1", "take egg 1 from countertop 1", "quitting"],
)  # fmt: skip
def test_game_commands_are_not_meta_commands(command):
    assert meta_command(command) is None
