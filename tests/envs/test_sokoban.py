"""Sokoban-v0: the level sets, the exact solver, the env's contract and signals, and its agents."""

from __future__ import annotations

import subprocess
import sys
from collections import deque

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.sokoban.env import SokobanEnv
from agentgym.envs.sokoban.levels import PRESETS, build_level_set, generate_room
from agentgym.envs.sokoban.rooms import parse_level, read_levels
from agentgym.envs.sokoban.solver import ACTIONS, plan, solve_table, step_state
from agentgym.running.checker import check
from agentgym.running.runner import run


def exhaustive_moves(room) -> int | None:
    """Fewest moves by plain BFS over every state, without any pruning (the reference for the solver)."""
    start, seen, queue = room.start, {room.start}, deque([(room.start, 0)])
    while queue:
        state, d = queue.popleft()
        if room.targets.issuperset(state[1]):
            return d
        for a in range(4):
            nxt = step_state(room, state, a)
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                queue.append((nxt, d + 1))
    del start
    return None


@pytest.mark.parametrize("size", ["6x6-1", "8x8-2"])
def test_solver_optimum_equals_exhaustive_bfs(size):
    h, w, b = PRESETS[size]
    for i in range(15):
        room, table = generate_room(h, w, b, 3, i)
        assert table.optimum == exhaustive_moves(room)


def test_solver_on_hand_built_rooms():
    room = parse_level(["#######", "#@ $ .#", "#######"])
    table = solve_table(room)
    assert table is not None and table.optimum == 3  # walk 1, push 2
    assert [ACTIONS[a] for a in plan(room, table)] == ["Right", "Right", "Right"]
    stuck = parse_level(["#####", "#@ $#", "#.  #", "#####"])  # the box already in a corner
    assert solve_table(stuck).optimum is None
    assert exhaustive_moves(stuck) is None


def test_deadlock_flag_on_hand_built_room(tmp_path):
    path = tmp_path / "levels.txt"
    path.write_text("; 0\n######\n#    #\n# $@ #\n#  . #\n######\n", encoding="utf-8")
    env = SokobanEnv(level_file=str(path))
    _, info = env.reset(options={"task_index": 0})
    assert info["deadlock"] is False and info["distance_to_go"] is not None
    _, _, _, _, info = env.step("<answer>Left</answer>")  # box pushed against the left wall: no target there
    assert info["deadlock"] is True and info["distance_to_go"] is None and info["progress"] is None
    _, _, _, _, info = env.step("<answer>Right</answer>")  # already unsolvable: this move did not make it so
    assert info["deadlock"] is False and info["distance_to_go"] is None
    _, info = env.reset(options={"task_index": 0})
    _, _, _, _, info = env.step("<answer>Down</answer>")  # a walk: still solvable
    assert info["deadlock"] is False and info["distance_to_go"] is not None


def test_boxoban_reader_reads_every_symbol(tmp_path):
    path = tmp_path / "b.txt"
    path.write_text("; 0\n#####\n#+*$#\n#  .#\n#####\n\n; 1\n#####\n#@$.#\n#####\n", encoding="utf-8")
    rooms = read_levels(path)
    assert len(rooms) == 2
    # 5 columns: the player on target 6, boxes at 7 (on a target) and 8, targets 6, 7 and 13
    assert (rooms[0].player, rooms[0].boxes, rooms[0].targets) == (6, (7, 8), frozenset({6, 7, 13}))
    assert rooms[1].to_xsb() == "#####\n#@$.#\n#####"
    with pytest.raises(ValueError, match="one player"):
        parse_level(["####", "#$.#", "####"])


def test_every_cached_room_is_solved_by_the_oracle_in_the_optimal_length():
    env = SokobanEnv(num_levels=100)
    for i in range(env.num_tasks):
        _, info = env.reset(options={"task_index": i})
        n = info["gold"]["optimal_moves"]
        assert n == len(info["gold"]["plan"]) and n == env.levels.tables[i].optimum
        for turn, move in enumerate(info["gold"]["plan"]):
            _, reward, terminated, _, info = env.step(f"<answer>{move}</answer>")
            assert info["distance_to_go"] == n - turn - 1
            assert terminated == (turn == n - 1)
        assert reward == 1.0 and info["success"] and info["boxes_on_target"] == info["num_boxes"]


def test_level_sets_are_built_once_and_extend_deterministically():
    cache: dict = {}
    a = build_level_set(6, 6, 1, 5, 7, cache=cache)
    assert build_level_set(6, 6, 1, 5, 7, cache=cache) is a
    b = build_level_set(6, 6, 1, 8, 7, cache={})
    assert b.rooms[:5] == a.rooms


def test_on_disk_cache_round_trips(tmp_path):
    a = build_level_set(6, 6, 1, 4, 1, cache={}, cache_dir=str(tmp_path))
    assert list(tmp_path.glob("*.pkl"))
    b = build_level_set(6, 6, 1, 4, 1, cache={}, cache_dir=str(tmp_path))
    assert b.rooms == a.rooms and [t.optimum for t in b.tables] == [t.optimum for t in a.tables]


def test_check_env_and_cli_check():
    assert check("agentgym/Sokoban-v0").ok
    proc = subprocess.run([sys.executable, "-m", "agentgym.cli", "check", "agentgym/Sokoban-v0"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and "OK" in proc.stdout


def test_same_seed_same_trajectory():
    a = run("agentgym/Sokoban-v0", "random", episodes=4, seed=11, progress=False)
    b = run("agentgym/Sokoban-v0", "random", episodes=4, seed=11, progress=False)
    assert [[t.action for t in x.turns] for x in a] == [[t.action for t in x.turns] for x in b]
    assert [x.task_id for x in a] == [x.task_id for x in b]


@pytest.mark.parametrize("action", ["", " ", "x" * 100_000, "<answer>Jump</answer>", "<answer></answer>", "上",
                                    "\ud800", "<answer>Up", "{'a': 1}", "<answer>Up</answer><answer>Down</answer>",
                                    "\x00Up"])  # fmt: skip
def test_hostile_actions_never_raise(action):
    env = gym.make("agentgym/Sokoban-v0")
    env.reset(seed=0)
    _, _, _, _, info = env.step(action)
    assert isinstance(info["action_valid"], bool)
    if not info["action_valid"]:
        assert info["parse_error"]


def test_non_string_actions_are_invalid_not_exceptions():
    env = gym.make("agentgym/Sokoban-v0")
    env.reset(seed=0)
    for action in ({"move": "Up"}, 3, None, ["Up"]):
        try:
            _, _, _, _, info = env.step(action)
        except TypeError:  # the base class's own check of the action's type, not the env's
            continue
        assert info["action_valid"] is False


def test_bare_words_and_tags_parse():
    env = SokobanEnv()
    env.reset(options={"task_index": 0})
    for action in ("<answer>Left</answer>", "left", " Down. "):
        _, _, _, _, info = env.step(action)
        assert info["action_valid"], action


def test_snapshot_restore_round_trip():
    env = SokobanEnv()
    _, info = env.reset(options={"task_index": 2})
    env.step(f"<answer>{info['gold']['plan'][0]}</answer>")
    snap = env.snapshot()
    rest = [env.step(f"<answer>{m}</answer>")[4]["anchor"] for m in info["gold"]["plan"][1:]]
    env.restore(snap)
    assert [env.step(f"<answer>{m}</answer>")[4]["anchor"] for m in info["gold"]["plan"][1:]] == rest


def test_shaped_reward_is_gym_sokobans():
    env = SokobanEnv(reward="shaped")
    _, info = env.reset(options={"task_index": 0})
    rewards = [env.step(f"<answer>{m}</answer>")[1] for m in info["gold"]["plan"]]
    # one box: every move -0.1, the last one +1 (box on target) and +10 (solved)
    assert rewards[:-1] == pytest.approx([-0.1] * (len(rewards) - 1))
    assert rewards[-1] == pytest.approx(-0.1 + 1 + 10)


def test_anchor_is_the_canonical_state():
    env = SokobanEnv()
    env.reset(options={"task_index": 0})
    a0 = env.unwrapped.anchor()
    env.step("<answer>Up</answer>")
    env.step("<answer>Down</answer>")
    moved = env.unwrapped.anchor()
    assert (moved == a0) == (env.unwrapped._ep.state == env.unwrapped._ep.room.start)


def test_heuristic_beats_random():
    h = run("agentgym/Sokoban-v0", "heuristic", episodes=30, progress=False)
    r = run("agentgym/Sokoban-v0", "random", episodes=30, progress=False)
    assert sum(t.success for t in h) > sum(t.success for t in r)


def test_public_args_refuse_files_and_expensive_sizes():
    from agentgym.contract.trust import UntrustedArgumentError, checked_kwargs

    assert checked_kwargs("agentgym/Sokoban-v0", {"size": "8x8-2", "reward": "shaped"}) == {
        "size": "8x8-2",
        "reward": "shaped",
    }
    for kwargs in ({"level_file": "/etc/passwd"}, {"cache_dir": "/tmp"}, {"size": "10x10-4"}, {"num_levels": 10**6}):
        with pytest.raises(UntrustedArgumentError):
            checked_kwargs("agentgym/Sokoban-v0", kwargs)
    assert checked_kwargs("agentgym/Sokoban-v0", {"size": "10x10-4"}, allow={"size": ["10x10-4"]})
