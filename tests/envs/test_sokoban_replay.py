"""Sokoban-v0's step, pinned: a fixed mix of actions on several sizes, reward modes and limits gives exactly the
observations, rewards, flags and ``info`` (values, types and key order) it gave before the step was optimised, and
each step's grid is ``render`` of the env's state. The fast path of ``step`` returns what ``AgentEnv.step`` returns,
and the env's graph of the states it has shown holds the solver's moves and the rendered grids."""

from __future__ import annotations

import hashlib
import json
import pickle
import random
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

import agentgym.envs.sokoban.env as env_module
from agentgym.contract.env import AgentEnv
from agentgym.contract.parsing import _tag_pattern
from agentgym.envs.sokoban.env import _ANSWER_TAG, FAST_ACTIONS, SokobanEnv, render
from agentgym.envs.sokoban.rooms import parse_level
from agentgym.envs.sokoban.solver import ACTIONS, step_state

#: sha256 of the trajectories' JSON lines (``_trajectories``), recorded with the step as it was before the fast path.
PINNED = "44d9cca894d217b47a6aa10ba799a3768dea8758808d7dba57bc47ed0af121b2"

LEVEL = """\
#######
#  .  #
# $$  #
#@ .  #
#######
"""

#: (env arguments, episodes): sizes, both rewards, an invalid-action penalty, a short turn limit, a level file.
CONFIGS: tuple[tuple[dict[str, Any], int], ...] = (
    ({"size": "6x6-1", "num_levels": 8}, 8),
    ({"size": "6x6-2", "num_levels": 6, "reward": "shaped", "invalid_action_penalty": 0.5, "max_turns": 30}, 6),
    ({"size": "7x7-3", "num_levels": 4, "reward": "shaped", "level_seed": 3}, 4),
    ({"size": "8x8-2", "num_levels": 5, "invalid_action_penalty": 1.0, "max_turns": 12}, 5),
    ({"level_file": "LEVEL", "reward": "shaped", "max_turns": 40}, 3),
)

#: Actions other than the plain ``<answer>Word</answer>`` that parse (and move).
VARIANTS = ("<answer> up </answer>", "<answer>LEFT.</answer>", "<ANSWER>Down</ANSWER>", "Right", " down! ", "up.",
            "<think>push it</think><answer>Right</answer>", "<answer>Up</answer><answer>Down</answer>",
            "<answer>Up</answer>!", b"<answer>Left</answer>", "<answer>Right</answer>" + " " * 30,
            "<answer>Down</answer>" + "x" * 17_000)  # fmt: skip
#: Invalid actions of every kind (the room does not change).
INVALID: tuple[Any, ...] = (
    "<answer>Up", "<answer>Jump</answer>", "", "   ", "x" * 50, "<answer></answer>", "\x00Up", "\ud800", "上",
    {"role": "assistant", "content": "Up"}, 3, None, "<answer>\u200b</answer>", "Up Down", "</answer>",
    "<answer>Upward</answer>", "x" * 16_370 + "<answer>Left</answer>",
)  # fmt: skip


def _jsonable(x: Any) -> Any:
    """Types kept apart in the JSON (a float 1.0 is not an int 1)."""
    if isinstance(x, dict):
        return {"__dict__": [[k, _jsonable(v)] for k, v in x.items()]}
    if isinstance(x, list | tuple):
        return [type(x).__name__, [_jsonable(v) for v in x]]
    if isinstance(x, float):
        return ["float", repr(x)]
    return x


def _trajectories(lines: list[str], tmp_dir: str) -> None:
    """Play every config's episodes: the gold plan (even episodes) or random moves, with the odd actions between."""
    rng = random.Random(1234)
    for kwargs, episodes in CONFIGS:
        if kwargs.get("level_file") == "LEVEL":
            path = f"{tmp_dir}/level.txt"
            with open(path, "w", encoding="utf-8") as f:
                f.write("; 0\n" + LEVEL + "\n; 1\n" + LEVEL.replace("@ .", " @.") + "\n")
            kwargs = {**kwargs, "level_file": path}
        env = SokobanEnv(**kwargs)
        for e in range(episodes):
            obs, info = env.reset(options={"task_index": e % env.num_tasks})
            lines.append(json.dumps(["reset", _jsonable(obs), _jsonable(info), env.anchor()], ensure_ascii=False))
            plan = list(info["gold"]["plan"]) if e % 2 == 0 else []
            snap, done, turns = None, False, 0
            while not done and turns < 150:
                u = rng.random()
                if plan:  # the plan with invalid actions between its moves: it solves the room
                    action: Any = f"<answer>{plan.pop(0)}</answer>" if u < 0.8 else rng.choice(INVALID)
                elif u < 0.15:
                    action = rng.choice(VARIANTS)
                elif u < 0.3:
                    action = rng.choice(INVALID)
                else:
                    action = f"<answer>{rng.choice(ACTIONS)}</answer>"
                obs, reward, terminated, truncated, info = env.step(action)
                turns += 1
                lines.append(json.dumps(["step", _jsonable(obs), _jsonable(reward), terminated, truncated,
                                         _jsonable(info)], ensure_ascii=False))  # fmt: skip
                ep = env._ep
                assert ep is not None
                grid = render(ep.room, ep.state)
                text_action = isinstance(action, str | bytes | dict)  # else the base class refuses it, without a grid
                assert obs[0]["content"].endswith(grid) == text_action and env.anchor() == info["anchor"]
                done = terminated or truncated
                if not done and turns == 3 and e % 2 == 1:
                    snap = env.snapshot()
                if not done and turns == 9 and snap is not None:  # rewind to turn 3 and go on from there
                    env.restore(snap)
                    lines.append(json.dumps(["restore", env.anchor(), env.turn], ensure_ascii=False))
            lines.append(json.dumps(["transcript", _jsonable(env.transcript)], ensure_ascii=False))


def test_step_trajectories_are_pinned(tmp_path):
    lines: list[str] = []
    _trajectories(lines, str(tmp_path))
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    (tmp_path / "trajectories.jsonl").write_text("\n".join(lines), encoding="utf-8")
    assert len(lines) > 500
    assert digest == PINNED, f"trajectories changed: {tmp_path / 'trajectories.jsonl'}"


def test_move_into_wall_and_push_on_target_by_hand(tmp_path):
    """A hand-played room: the grid, the note and the signals after a blocked move, a walk and the solving push."""
    room = parse_level(["#####", "#@$.#", "#####"])
    assert step_state(room, room.start, 0) is None  # Up: a wall
    path = tmp_path / "one.txt"
    path.write_text("; 0\n#####\n#@$.#\n#####\n", encoding="utf-8")
    env = SokobanEnv(level_file=str(path), reward="shaped")
    obs, info = env.reset(options={"task_index": 0})
    assert obs[0]["content"].endswith("#####\n#PXO#\n#####")
    assert (info["distance_to_go"], info["optimal_moves"], info["progress"]) == (1, 1, 0.0)
    obs, reward, terminated, truncated, info = env.step("<answer>Up</answer>")
    assert obs == [{"role": "user", "content": "You cannot move there.\n\n#####\n#PXO#\n#####"}]
    assert (reward, terminated, truncated, info["anchor"], info["distance_to_go"]) == (
        -0.1,
        False,
        False,
        "file/0:6:7",
        1,
    )
    obs, reward, terminated, truncated, info = env.step("<answer>Right</answer>")
    assert obs == [{"role": "user", "content": "Solved!\n\n#####\n#_P√#\n#####"}]
    assert reward == -0.1 + 1.0 + 10.0 and terminated and not truncated and info["success"]
    assert info["boxes_on_target"] == 1
    assert (info["distance_to_go"], info["progress"], info["anchor"]) == (0, 1.0, "file/0:7:8")


#: Turns with text before the answer (the fast path reads some of them; the parser decides the others).
REASONING = ("<think>Left is a wall.</think>\n<answer>Down</answer>\n", "<answer>Up</answer> or <answer>Down</answer>",
             "<Answer>left</Answer><answer>Right</answer>", "</answer><answer>Right</answer>",
             "I'd go <answer>UP</answer>", "é <answer>Left</answer>", "\ud800 <answer>Left</answer>",
             "<think>" + "x" * 16_380 + "</think><answer>Up</answer>")  # fmt: skip


def _play(env: SokobanEnv, step: Any, seed: int, episodes: int) -> list[Any]:
    """Seeded random play through ``step(env, action)``: every output, with ``info``'s key order and the types."""
    rng, out = random.Random(seed), []
    for e in range(episodes):
        out.append(_jsonable(env.reset(options={"task_index": e % env.num_tasks})))
        for _ in range(60):
            u = rng.random()
            action = (
                rng.choice(VARIANTS + INVALID + REASONING) if u < 0.3 else f"<answer>{rng.choice(ACTIONS)}</answer>"
            )
            obs, reward, terminated, truncated, info = step(env, action)
            out.append([_jsonable(obs), _jsonable(reward), terminated, truncated, _jsonable(info), env.anchor()])
            if terminated or truncated:
                break
        out.append(_jsonable(env.transcript))
    return out


@pytest.mark.parametrize(
    "kwargs",
    [{"size": "6x6-1", "num_levels": 6},
     {"size": "7x7-2", "num_levels": 4, "reward": "shaped", "invalid_action_penalty": 0.25, "max_turns": 20}],
)  # fmt: skip
def test_fast_path_returns_what_the_base_class_step_returns(kwargs):
    fast, general = SokobanEnv(**kwargs), SokobanEnv(**kwargs)
    assert fast._fast == FAST_ACTIONS  # the fast path is on
    got = _play(fast, SokobanEnv.step, 5, 12)
    want = _play(general, AgentEnv.step, 5, 12)  # parses every action and assembles info in AgentEnv.step
    assert got == want


def test_fast_actions_are_what_the_parser_reads():
    env = SokobanEnv()
    env.reset(options={"task_index": 0})
    assert len(FAST_ACTIONS) == 24 and FAST_ACTIONS["<answer>Left</answer>"] == 2 and FAST_ACTIONS["DOWN"] == 1
    for form, a in FAST_ACTIONS.items():
        assert env._parse(form) == a, form


FRAGMENTS = ("<answer>", "</answer>", "<ANSWER>", "</Answer>", "<answer", "answer>", "<think>", "</think>", "Up",
             "down", "LEFT", "Right", "right.", "Jump", " ", "\n", "x", "\t", "é", "\x00")  # fmt: skip


TAILS = (*(k for k in FAST_ACTIONS if k.startswith("<")), "<answer>Jump</answer>", "<answer> Up</answer>", "Up")


@settings(max_examples=400)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=10), st.sampled_from(TAILS), st.sampled_from(("", " \n", "x")))
def test_answers_after_text_are_what_the_parser_reads(head, tail, end):
    env = SokobanEnv()
    env.reset(options={"task_index": 0})
    text = "".join(head) + tail + end
    a = env._answer_after_text(text)
    if a is not None:  # taken without the parser: the parser reads the same move
        assert env._parse(text) == a


def test_answers_after_reasoning_take_the_fast_path():
    parser_pattern = _tag_pattern(("answer",), True)  # what parse_tag_action looks for
    assert (_ANSWER_TAG.pattern, _ANSWER_TAG.flags) == (parser_pattern.pattern, parser_pattern.flags)
    env = SokobanEnv()
    env.reset(options={"task_index": 0})
    for text, a in [("<think>the box is left of me</think><answer>Left</answer>", 2), ("<answer>down</answer>\n", 1),
                    ("Push it: <answer>RIGHT</answer>  ", 3)]:  # fmt: skip
        assert env._answer_after_text(text) == a == env._parse(text)
    for text in ("<answer>Up</answer><answer>Down</answer>", "<ANSWER>Up</ANSWER>", "é <answer>Up</answer>",
                 "<answer>Up</answer> x", "</answer><answer>Up</answer>"):  # fmt: skip
        assert env._answer_after_text(text) is None  # the parser decides


def test_subclass_that_overrides_the_anchor_gets_no_fast_path():
    class Mine(SokobanEnv):
        def anchor(self) -> str:
            return "mine"

    env = Mine()
    assert env._fast == {}
    env.reset(options={"task_index": 0})
    assert env.step("<answer>Up</answer>")[4]["anchor"] == "mine"


def test_graph_nodes_are_the_solver_moves_and_the_rendered_grids():
    env = SokobanEnv(size="7x7-3", num_levels=3)
    _play(env, SokobanEnv.step, 9, 9)
    checked = 0
    for graph in env._graphs.values():
        for state, node in graph.nodes.items():
            assert node.state == state and node.grid == render(graph.room, state)
            assert node.dist == graph.table.dist.get(state) and node.solved == graph.room.targets.issuperset(state[1])
            for a, nxt in enumerate(node.next):
                if nxt is not None:
                    after = step_state(graph.room, state, a)
                    assert (nxt is node) if after is None else (nxt.state == after)
                    checked += 1
    assert checked > 100


def test_dropping_the_graphs_changes_nothing(monkeypatch):
    kwargs = {"size": "6x6-2", "num_levels": 5, "reward": "shaped"}
    want = _play(SokobanEnv(**kwargs), SokobanEnv.step, 3, 10)
    monkeypatch.setattr(env_module, "MAX_NODES", 8)
    env = SokobanEnv(**kwargs)
    assert _play(env, SokobanEnv.step, 3, 10) == want
    assert sum(len(g.nodes) for g in env._graphs.values()) <= 8 + 60  # dropped at the last reset, then one episode


def test_pickled_env_goes_on_as_the_original():
    env = SokobanEnv(size="6x6-2", num_levels=4)
    env.reset(options={"task_index": 1})
    for move in ("Up", "Left", "Down"):
        env.step(f"<answer>{move}</answer>")
    twin = pickle.loads(pickle.dumps(env))
    assert sum(len(g.nodes) for g in twin._graphs.values()) == 1  # a graph of its own, from the restored state
    for move in ("Right", "Right", "Down", "Left", "Up", "Up"):
        a, b = env.step(f"<answer>{move}</answer>"), twin.step(f"<answer>{move}</answer>")
        assert _jsonable(a) == _jsonable(b)
    assert env.transcript == twin.transcript
