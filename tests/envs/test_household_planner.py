"""Household expert plans: optimal (against exhaustive search on small worlds), executable, and the oracle
solves 1,000 seeded tasks of every type and split within the step limit."""

import random

import pytest

from agentgym.envs.household import catalog as C
from agentgym.envs.household.engine import Engine
from agentgym.envs.household.planner import AbstractProblem, PlanKeyer, exhaustive_plan_length, expert_plan
from agentgym.envs.household.world import SPLITS, GenConfig, generate_task
from agentgym.running.runner import run

SMALL = (
    GenConfig(max_receptacles=5, distractors=(0, 2), target_instances=(1, 3), closed_prob=0.7),
    GenConfig(max_receptacles=4, distractors=(1, 3), target_instances=(2, 3), closed_prob=1.0),
    GenConfig(max_receptacles=3, distractors=(0, 3), target_instances=(1, 3), closed_prob=0.5),
)


def random_states(eng, rng, walks=3, max_len=12):
    """The start state and a few states reached by random walks (holding things, opened containers...)."""
    for w in range(walks):
        eng.reset()
        for _ in range(rng.randint(1, max_len) if w else 0):
            eng.step(rng.choice(eng.admissible()))
            if eng.won:
                break
        if not eng.won:
            yield eng


@pytest.mark.parametrize("cfg", SMALL, ids=["5rec", "4rec-closed", "3rec"])
def test_plans_are_optimal_against_exhaustive_search(cfg):
    """A* over the abstract state == breadth-first search over the full engine state with every command."""
    rng = random.Random(0)
    checked = 0
    for split in ("train", "valid_unseen"):
        for i in range(18):
            eng = Engine(generate_task(split, i, cfg))
            for state in random_states(eng, rng):
                assert len(expert_plan(state)) == exhaustive_plan_length(state), (state.task.task_id, state.loc)
                checked += 1
    assert checked > 80


def test_astar_equals_bfs_and_heuristic_is_admissible():
    rng = random.Random(1)
    for i in range(60):
        eng = Engine(generate_task("train", i))
        for state in random_states(eng, rng, walks=2, max_len=20):
            problem = AbstractProblem(state)
            astar = problem.solve()
            assert astar is not None and len(astar) == len(problem.solve(use_heuristic=False))
            assert problem.heuristic(problem.start) <= len(astar)


def test_plans_execute_step_by_step():
    for split in SPLITS:
        for i in range(60):
            eng = Engine(generate_task(split, i))
            plan = expert_plan(eng)
            assert 1 <= len(plan) <= 20
            for k, cmd in enumerate(plan):
                assert cmd in eng.admissible()
                assert eng.step(cmd)[1]
                assert eng.won == (k == len(plan) - 1)
            assert expert_plan(eng) == []


def test_plan_keyer_groups_states_with_equal_plans():
    rng = random.Random(2)
    for i in range(60):
        eng = Engine(generate_task("valid_seen", i))
        keyer = PlanKeyer(eng)
        lengths: dict[bytes, int] = {}
        for _ in range(50):
            eng.step(rng.choice(eng.admissible()))
            if eng.won:
                break
            n = len(expert_plan(eng))
            assert lengths.setdefault(keyer.key(), n) == n


@pytest.mark.slow
def test_oracle_solves_1000_tasks_optimally():
    """1,002 distinct tasks (334 per split, all six types), played through the env by the oracle agent."""
    per_split = 334
    by_type: dict[str, int] = {}
    for split in SPLITS:
        kwargs = {"split": split, "num_tasks": 100_000}
        trajs = run("agentgym/Household-v0", "oracle", per_split, env_kwargs=kwargs, progress=False)
        for i, traj in enumerate(trajs):
            assert traj.success and len(traj.turns) <= 50, traj.task_id
            optimal = len(expert_plan(Engine(generate_task(split, i))))
            assert len(traj.turns) == optimal, traj.task_id
            by_type[traj.reset_info["task_type"]] = by_type.get(traj.reset_info["task_type"], 0) + 1
    assert set(by_type) == set(C.TASK_TYPES) and sum(by_type.values()) == 3 * per_split


def test_oracle_follows_info_expert_plan_with_the_verl_prompt():
    kwargs = {"split": "valid_unseen", "expert_plan": True, "prompt": "verl"}
    trajs = run("agentgym/Household-v0", "oracle", 12, env_kwargs=kwargs, progress=False)
    assert all(t.success for t in trajs)
    assert all(t.turns[0].action.startswith("<think>") and "<action>" in t.turns[0].action for t in trajs)
    assert all(t.turns[-1].info["plan_length"] == 0 and t.turns[-1].info["progress"] == 1.0 for t in trajs)
