"""Household world generator: determinism, knobs, layouts, and split disjointness."""

import pytest

from agentgym.envs.household import catalog as C
from agentgym.envs.household.engine import Engine
from agentgym.envs.household.world import (
    DIFFICULTIES,
    SPLIT_SIZES,
    GenConfig,
    generate_task,
    get_layout,
    is_unseen_goal,
    is_unseen_layout,
)


def signature(task):
    return (task.layout.layout_id, task.task_type, task.target, task.dest, task.obj_names, task.obj_start,
            task.start_closed)  # fmt: skip


def test_generation_is_a_pure_function():
    a, b = generate_task("train", 42), generate_task("train", 42)
    assert a is not b and signature(a) == signature(b) and a.task_id == b.task_id and a.description == b.description
    assert signature(generate_task("train", 43)) != signature(a)
    assert signature(generate_task("valid_seen", 42)) != signature(a)


def test_layouts_are_shared_and_capped():
    assert get_layout(3) is get_layout(3)
    assert generate_task("train", 0).layout is get_layout(generate_task("train", 0).layout.layout_id)
    for lid in range(0, 120, 7):
        lay = get_layout(lid, 6)
        assert len(lay.names) <= 6 and len(set(lay.names)) == len(lay.names)
        for t, idx in lay.by_type.items():  # numbered 1..n per type
            assert sorted(int(lay.names[i].split()[1]) for i in idx) == list(range(1, len(idx) + 1))
            assert all(lay.types[i] == t for i in idx)
    with pytest.raises(ValueError):
        get_layout(120)


def test_task_types_cycle_and_tasks_start_unsolved():
    for i in range(120):
        task = generate_task("train", i)
        assert task.task_type == C.TASK_TYPES[i % 6]
        eng = Engine(task)
        assert not eng.won and not eng.goal_satisfied()
        appliance = C.APPLIANCE.get(task.task_type)
        if appliance:
            assert appliance in task.layout.by_type
        if task.task_type == C.LIGHT:
            assert task.dest is None and C.LAMP in task.obj_types
        else:
            assert task.dest in task.layout.by_type and task.target in C.ACCEPTS[task.dest]
        assert sum(t == task.target for t in task.obj_types) >= (2 if task.task_type == C.TWO else 1)


def test_knobs():
    cfg = GenConfig(max_receptacles=6, distractors=(3, 3), closed_prob=0.0, target_instances=(2, 2),
                    task_types=(C.HEAT, C.COOL))  # fmt: skip
    for i in range(40):
        task = generate_task("train", i, cfg)
        assert len(task.layout.names) <= 6
        assert task.task_type in (C.HEAT, C.COOL)
        assert not any(task.start_closed)
        assert sum(t == task.target for t in task.obj_types) == 2
        assert sum(t != task.target and t != C.LAMP for t in task.obj_types) == 3
        assert task.task_id.endswith("@" + cfg.key)
    closed = generate_task("train", 1, GenConfig(closed_prob=1.0))
    assert closed.start_closed == closed.layout.openable
    assert set(DIFFICULTIES) == {"easy", "default", "hard"}
    for bad in ({"max_receptacles": 2}, {"distractors": (5, 1)}, {"closed_prob": 1.5}, {"task_types": ("x",)},
                {"target_instances": (0, 1)}, {"distractors": (0, 500)}):  # fmt: skip
        with pytest.raises(ValueError):
            GenConfig(**bad)
    assert GenConfig(**GenConfig(distractors=(1, 2)).to_dict()) == GenConfig(distractors=(1, 2))


def test_splits_are_disjoint():
    """valid_unseen's layouts and goal combinations are never generated for train; valid_seen reuses train's
    layouts and goal combinations but never one of its tasks."""
    train = [generate_task("train", i) for i in range(SPLIT_SIZES["train"])]
    seen = [generate_task("valid_seen", i) for i in range(SPLIT_SIZES["valid_seen"])]
    unseen = [generate_task("valid_unseen", i) for i in range(SPLIT_SIZES["valid_unseen"])]
    combos = lambda tasks: {(t.task_type, t.target, t.dest) for t in tasks}
    layouts = lambda tasks: {t.layout.layout_id for t in tasks}
    assert not layouts(train) & layouts(unseen) and not combos(train) & combos(unseen)
    assert all(is_unseen_layout(t.layout.layout_id) and is_unseen_goal(t.task_type, t.target, t.dest) for t in unseen)
    assert not any(is_unseen_layout(t.layout.layout_id) or is_unseen_goal(t.task_type, t.target, t.dest)
                   for t in train + seen)  # fmt: skip
    assert layouts(seen) <= layouts(train) and len(combos(seen) & combos(train)) > len(combos(seen)) // 2
    assert not {signature(t) for t in seen} & {signature(t) for t in train}
    assert len({signature(t) for t in train}) == len(train)  # no duplicate tasks within train
    for tasks in (train, seen, unseen):  # every split covers every task type
        assert {t.task_type for t in tasks} == set(C.TASK_TYPES)
