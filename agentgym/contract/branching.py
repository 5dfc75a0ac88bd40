"""Branching: fork an episode at any turn into independent continuations.

Turn-level group sampling, tree search over turns and fork-relative step rewards all sample several
continuations from one intermediate state. ``snapshot(env)`` captures that state (the env's episode and the
state of every wrapper around it) as a picklable ``Snapshot``; ``restore(env, snap)`` puts any env made the same
way, in this process or another, back in it; ``branch(env, k)`` returns k independent envs at the current state.
A pickled snapshot is a pickle: unpickle only snapshots you made.

Wrappers take part through a class attribute ``snapshot_attrs``, the names of the attributes that hold their
episode state (``()`` for a stateless wrapper); agentgym's reward wrappers declare it, as does this module for
Gymnasium's ``OrderEnforcing``, ``PassiveEnvChecker`` and ``TimeLimit``. A wrapper that declares nothing cannot be
snapshotted (copying or sharing its state silently would make the branches wrong), and says so.

>>> import agentgym, gymnasium as gym
>>> env = gym.make("agentgym/Household-v0", split="train")
>>> _ = env.reset(seed=0, options={"task_index": 3})
>>> _ = env.step("go to cabinet 10")
>>> left, right = branch(env, 2)
>>> left.step("open cabinet 10")[0] == right.step("open cabinet 10")[0]
True
>>> left.unwrapped.turn, env.unwrapped.turn
(2, 1)
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace

import gymnasium as gym
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, TimeLimit

from agentgym.contract.env import AgentEnv, Snapshot, SnapshotError

#: Episode-state attributes of Gymnasium's wrappers that ``gymnasium.make`` adds.
GYMNASIUM_WRAPPER_STATE: dict[type, tuple[str, ...]] = {
    OrderEnforcing: ("_has_reset",),
    PassiveEnvChecker: ("checked_reset", "checked_step", "checked_data_reuse", "_previous_data"),
    TimeLimit: ("_elapsed_steps",),
}


def _chain(env: gym.Env) -> list[gym.Env]:
    """The wrappers from the outermost in, then the base env."""
    chain = [env]
    while isinstance(chain[-1], gym.Wrapper):
        chain.append(chain[-1].env)
    return chain


def _state_attrs(wrapper: gym.Env) -> tuple[str, ...]:
    declared = getattr(type(wrapper), "snapshot_attrs", None)
    if declared is not None:
        return tuple(declared)
    for cls, attrs in GYMNASIUM_WRAPPER_STATE.items():
        if type(wrapper) is cls:
            return attrs
    raise SnapshotError(
        f"wrapper {type(wrapper).__name__} does not declare its episode state: give it a class attribute "
        "`snapshot_attrs` (the attribute names that hold it, () if none) to branch or snapshot through it"
    )


def _base(env: gym.Env) -> AgentEnv:
    base = env.unwrapped
    if not isinstance(base, AgentEnv):
        raise SnapshotError(f"{type(base).__name__} is not an AgentEnv: it has no snapshot()")
    return base


def snapshot(env: gym.Env) -> Snapshot:
    """The state of ``env`` and of every wrapper around it (picklable; see the module docstring)."""
    wrappers = tuple(
        (type(w).__qualname__, {a: copy.deepcopy(getattr(w, a)) for a in _state_attrs(w)}) for w in _chain(env)[:-1]
    )
    return replace(_base(env).snapshot(), wrappers=wrappers)


def restore(env: gym.Env, snap: Snapshot) -> None:
    """Put ``env`` (wrapped as when ``snap`` was taken) in the state of ``snap``."""
    chain = _chain(env)[:-1]
    names = tuple(type(w).__qualname__ for w in chain)
    if snap.wrappers and tuple(n for n, _ in snap.wrappers) != names:
        raise ValueError(
            f"snapshot was taken through wrappers {[n for n, _ in snap.wrappers]}, not {list(names)} "
            "(pass make_env= that builds the same wrapper stack)"
        )
    _base(env).restore(snap)
    for wrapper, (_, state) in zip(chain, snap.wrappers, strict=False):
        for attr, value in state.items():
            setattr(wrapper, attr, copy.deepcopy(value))


def branch(env: gym.Env, k: int, make_env: Callable[[], gym.Env] | None = None) -> list[gym.Env]:
    """``k`` independent envs in the current state of ``env`` (which is left as it is).

    New envs come from ``make_env`` (default: ``gymnasium.make`` with the env's id and constructor arguments,
    so the same wrappers as ``gymnasium.make`` adds). To branch at every turn without building envs each time,
    keep a pool and call ``restore(pool_env, snapshot(env))`` instead.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    snap = snapshot(env)
    factory = make_env or _remake(env)
    out = []
    for _ in range(k):
        child = factory()
        restore(child, snap)
        out.append(child)
    return out


def _remake(env: gym.Env) -> Callable[[], gym.Env]:
    """Builds envs as ``gymnasium.make`` built this one (its id, arguments and checker wrappers), else by the
    constructor. Other wrappers are the caller's to add (through ``make_env``)."""
    made_by_gym = [e for e in _chain(env) if type(e) in GYMNASIUM_WRAPPER_STATE or not isinstance(e, gym.Wrapper)]
    spec = made_by_gym[0].spec
    if spec is None:
        base = _base(env)
        args, kwargs = base._init_call
        return lambda: type(base)(*args, **kwargs)
    return lambda: gym.make(spec)


__all__ = ["GYMNASIUM_WRAPPER_STATE", "Snapshot", "SnapshotError", "branch", "restore", "snapshot"]
