"""Env pools: ``n`` env slots behind one interface, run in-process (``SerialPool``), on threads (``ThreadPool``) or
on Ray actors (``RayPool``), for a trainer's rollout loop and for the runner.

Each slot owns one env for the pool's lifetime (in ``RayPool``, one actor: a process), so an episode stays where it
started (sticky) and its env state never travels. A pool is driven in one of two ways:

* **batch**: ``reset(seeds, options)`` and ``step({slot: action})`` return one ``Outcome`` per slot, in slot order:
  a lockstep rollout steps only its unfinished envs; ``reset_groups`` resets ``k`` slots per task seed (GRPO groups);
* **asynchronous**: ``submit_reset`` / ``submit_step`` start a call on a slot and ``collect(timeout)`` returns the
  outcomes that have finished (``ray.wait`` semantics), so a slow env never holds back the others. ``play`` runs
  whole episodes of a text policy this way and yields the same ``Trajectory`` records as
  ``agentgym.running.runner.run``.

Failures are values, not exceptions: a call that raises, that runs past ``step_timeout`` seconds (``ThreadPool``,
``RayPool``; resets included) or whose actor died returns an ``Outcome`` with ``error`` set (``"env.step:
TimeoutError: ..."``, in the runner's format), and the slot gets a fresh env (a timed-out or dead worker: a fresh
thread or actor too), which must be reset before it steps again. Same seeds and actions give byte-identical
observations in every pool.

>>> import agentgym
>>> pool = SerialPool("agentgym/Household-v0", 4)
>>> first = pool.reset_groups([7, 8], group_size=2)  # slots 0, 1 play task seed 7; slots 2, 3 task seed 8
>>> [o.info["task_id"] for o in first] == [first[0].info["task_id"]] * 2 + [first[2].info["task_id"]] * 2
True
>>> outs = pool.step({0: "inventory", 3: "look"})  # only the slots that act
>>> [(o.slot, o.kind, o.error) for o in outs], outs[0].observation[0]["content"]
([(0, 'step', None), (3, 'step', None)], 'You are not carrying anything.')
>>> pool.close()
"""

from __future__ import annotations

import abc
import concurrent.futures as cf
import contextlib
import copy
import os
import queue
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import gymnasium as gym

from agentgym.contract.agent import Agent, Message
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.running.episode import Policy, RunAborted, RunSpec, error_kind, make_agent

__all__ = [
    "EnvFactory",
    "EnvHost",
    "EnvInfo",
    "EnvPool",
    "Outcome",
    "RayPool",
    "SerialPool",
    "ThreadPool",
    "WorkerInfo",
    "as_pool",
    "make_pool",
]

RAY_MISSING = "RayPool needs Ray: pip install 'agentgym-suite[ray]' (ray==2.60.0)"


@dataclass
class Outcome:
    """What one call on a slot gave: a reset (``kind="reset"``: ``observation`` and ``info``) or a step (the
    Gymnasium 5-tuple's fields). ``error`` is set when the call failed; the slot then holds a fresh env.

    ``seconds`` is the time the env took where it ran; ``pid`` the process that ran it (one per ``RayPool`` actor).
    """

    slot: int
    kind: str
    observation: list[Message] = field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0
    pid: int = 0

    @property
    def done(self) -> bool:
        """The episode is over: terminated, truncated or failed."""
        return self.terminated or self.truncated or self.error is not None


@dataclass(frozen=True)
class WorkerInfo:
    """Where a slot's env lives: process id and node (the Ray node id in a Ray actor, else the host name)."""

    slot: int
    pid: int
    node: str


@dataclass(frozen=True)
class EnvInfo:
    """What the pool's env is: its id, the constructor kwargs that recreate it (``spec_kwargs``), its task count."""

    env_id: str
    env_kwargs: dict[str, Any]
    num_tasks: int | None


@dataclass(frozen=True)
class EnvFactory:
    """Builds a slot's env where the slot lives: ``make_env()`` when given, else ``gymnasium.make(env_id,
    **env_kwargs)``.

    ``spec`` is the driver's registration of ``env_id``: a worker process that lacks it (an env registered with
    ``gymnasium.register`` in the driver, not by ``import agentgym``) registers it first, so the entry point only has
    to be importable there. ``make_env`` must be picklable for ``RayPool`` (closures are, through cloudpickle).
    """

    env_id: str | None = None
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    make_env: Callable[[], gym.Env] | None = None
    spec: Any = None

    @classmethod
    def of(
        cls, env_id: str | None, env_kwargs: Mapping[str, Any] | None, make_env: Callable[[], gym.Env] | None
    ) -> EnvFactory:
        if env_id is None and make_env is None:
            raise ValueError("give env_id or make_env")
        spec = gym.spec(env_id) if env_id is not None and make_env is None else None
        return cls(env_id, dict(env_kwargs or {}), make_env, spec)

    def __call__(self) -> gym.Env:
        if self.make_env is not None:
            return self.make_env()
        if self.env_id is None:
            raise ValueError("an EnvFactory needs env_id or make_env")
        if self.env_id not in gym.registry and self.spec is not None:
            gym.registry[self.env_id] = self.spec
        return gym.make(self.env_id, **self.env_kwargs)


class EnvHost:
    """One slot's env where it runs (this process, a thread, or a Ray actor).

    ``reset`` and ``step`` return an ``Outcome``; an exception becomes an errored outcome, after which the host
    builds a fresh env (when it has a factory; a host around a given env keeps it).
    """

    def __init__(self, slot: int, factory: EnvFactory | None, env: gym.Env | None = None):
        self.slot = slot
        self.factory = factory
        self.env: gym.Env | None = env if env is not None else factory() if factory is not None else None
        if self.env is None:
            raise ValueError("EnvHost needs a factory or an env")

    def describe(self) -> tuple[WorkerInfo, EnvInfo]:
        env = self._env()
        unwrapped = env.unwrapped
        env_id = env.spec.id if env.spec is not None else type(unwrapped).__name__
        own = unwrapped.spec_kwargs() if hasattr(unwrapped, "spec_kwargs") else {}
        given = dict(self.factory.env_kwargs) if self.factory is not None else {}
        num_tasks = getattr(unwrapped, "num_tasks", None)
        return WorkerInfo(self.slot, os.getpid(), _node_name()), EnvInfo(env_id, {**own, **given}, num_tasks)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Outcome:
        start = time.perf_counter()
        try:
            obs, info = self._env().reset(seed=seed, options=options)
        except Exception as e:
            return self._failed("reset", e, start)
        return Outcome(self.slot, "reset", list(obs), info=info, seconds=time.perf_counter() - start, pid=os.getpid())

    def step(self, action: Any) -> Outcome:
        start = time.perf_counter()
        try:
            obs, reward, terminated, truncated, info = self._env().step(action)
        except Exception as e:
            return self._failed("step", e, start)
        return Outcome(self.slot, "step", list(obs), float(reward), bool(terminated), bool(truncated), info,
                       seconds=time.perf_counter() - start, pid=os.getpid())  # fmt: skip

    def close(self) -> None:
        if self.env is not None:
            self.env.close()

    def _env(self) -> gym.Env:
        if self.env is None:  # an earlier rebuild failed: try again
            assert self.factory is not None
            self.env = self.factory()
        return self.env

    def _failed(self, kind: str, error: Exception, start: float) -> Outcome:
        message = f"env.{kind}: {type(error).__name__}: {error}"
        if self.factory is not None:
            try:
                if self.env is not None:
                    self.env.close()
            except Exception:
                pass
            self.env = None
            try:
                self.env = self.factory()
                message += " (the slot got a fresh env)"
            except Exception as e:
                message += f" (building a fresh env failed too: {type(e).__name__}: {e})"
        return Outcome(self.slot, kind, error=message, seconds=time.perf_counter() - start, pid=os.getpid())


def _node_name() -> str:
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return ray.get_runtime_context().get_node_id()
    return socket.gethostname()


@dataclass
class _Call:
    slot: int
    kind: str
    handle: Any
    deadline: float | None
    result: Outcome | None = None


@dataclass
class _Episode:
    index: int
    traj: Trajectory
    agent: Agent
    agent_seed: int
    messages: list[Message] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    action: Any = None


class EnvPool(abc.ABC):
    """``n`` env slots behind one interface (see the module docstring). Use as a context manager or ``close()``.

    Args:
        env_id: a registered env id (built with ``gymnasium.make(env_id, **env_kwargs)`` in each slot).
        n: number of slots.
        env_kwargs: constructor kwargs.
        make_env: builds an env instead of ``gymnasium.make`` (picklable for ``RayPool``).
        step_timeout: seconds a reset or step may take before it is an errored outcome and the slot's worker is
            replaced (None: no limit). A plain attribute: it may change between calls.
        start_timeout: extra seconds the first call on a replaced worker may take (the worker starts first).
        factory: an ``EnvFactory``, in place of ``env_id``, ``env_kwargs`` and ``make_env``.
    """

    #: whether the pool can abandon a call that runs too long (``step_timeout``)
    interrupts: ClassVar[bool] = True

    def __init__(
        self,
        env_id: str | None = None,
        n: int = 1,
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        make_env: Callable[[], gym.Env] | None = None,
        step_timeout: float | None = None,
        start_timeout: float = 120.0,
        factory: EnvFactory | None = None,
    ):
        if step_timeout is not None and not self.interrupts:
            raise ValueError(f"{type(self).__name__} cannot interrupt a call: it takes no step_timeout")
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.factory = factory if factory is not None else EnvFactory.of(env_id, env_kwargs, make_env)
        self.size = n
        self.step_timeout = step_timeout
        self.start_timeout = start_timeout
        #: how many workers (threads, actors) were replaced after a timeout or a death
        self.restarts = 0
        self._calls: dict[int, _Call] = {}
        self._fresh: set[int] = set()
        self._closed = False
        self.env_info: EnvInfo = EnvInfo(self.factory.env_id or "", dict(self.factory.env_kwargs), None)

    # -- to implement ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def _start(self, slot: int, kind: str, args: tuple[Any, ...]) -> Any:
        """Start ``kind`` (``"reset"`` / ``"step"``) on the slot's host; return a handle."""

    @abc.abstractmethod
    def _wait(self, calls: list[_Call], timeout: float | None) -> list[_Call]:
        """The calls that have finished, waiting up to ``timeout`` seconds (None: forever) for at least one."""

    @abc.abstractmethod
    def _outcome(self, call: _Call) -> Outcome:
        """The finished call's outcome (a dead worker: an errored outcome, after replacing it)."""

    def _replace(self, slot: int) -> None:
        """Give the slot a fresh worker and env (after a timeout)."""
        raise NotImplementedError(f"{type(self).__name__} cannot replace a worker")

    @abc.abstractmethod
    def _shutdown(self, busy: set[int]) -> None:
        """Close every env and stop every worker; ``busy`` slots still had a call in flight."""

    @abc.abstractmethod
    def workers(self) -> list[WorkerInfo]:
        """Where each slot's env lives (call it while no call is in flight)."""

    def _probe_env(self) -> tuple[gym.Env, bool]:
        """A local env to resolve built-in agent names with, and whether to close it after."""
        return self.factory(), True

    # -- asynchronous API -------------------------------------------------------------------------------
    def submit_reset(self, slot: int, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start ``env.reset(seed=seed, options=options)`` on ``slot``; ``collect`` returns its outcome."""
        self._submit(slot, "reset", (seed, options))

    def submit_step(self, slot: int, action: Any) -> None:
        """Start ``env.step(action)`` on ``slot``; ``collect`` returns its outcome."""
        self._submit(slot, "step", (action,))

    @property
    def in_flight(self) -> list[int]:
        """The slots with a call in flight."""
        return sorted(self._calls)

    def collect(self, timeout: float | None = None) -> list[Outcome]:
        """Wait until at least one call in flight has finished, failed or timed out (at most ``timeout`` seconds;
        None: as long as that takes) and return the outcomes of every finished call, in slot order. Returns ``[]``
        when nothing is in flight or ``timeout`` passed first."""
        end = None if timeout is None else time.monotonic() + timeout
        while self._calls:
            now = time.monotonic()
            out = [self._expire(c) for c in list(self._calls.values()) if c.deadline is not None and c.deadline <= now]
            limits = [c.deadline - now for c in self._calls.values() if c.deadline is not None]
            if end is not None:
                limits.append(end - now)
            wait = 0.0 if out else max(min(limits), 0.0) if limits else None
            for call in self._wait(list(self._calls.values()), wait) if self._calls else []:
                del self._calls[call.slot]
                out.append(self._outcome(call))
            if out or (end is not None and time.monotonic() >= end):
                return sorted(out, key=lambda o: o.slot)
        return []

    # -- batch API ------------------------------------------------------------------------------------
    def reset(
        self,
        seeds: Sequence[int | None],
        options: Sequence[dict[str, Any] | None] | None = None,
        *,
        slots: Sequence[int] | None = None,
    ) -> list[Outcome]:
        """Reset ``slots`` (default: the first ``len(seeds)``) with ``seeds[i]`` and ``options[i]``, all at once;
        returns their outcomes in the order of ``slots``."""
        slots = list(range(len(seeds))) if slots is None else list(slots)
        options = [None] * len(slots) if options is None else list(options)
        if not len(slots) == len(seeds) == len(options):
            raise ValueError(f"{len(slots)} slots, {len(seeds)} seeds and {len(options)} options differ in length")
        self._check_idle("reset")
        for slot, seed, opts in zip(slots, seeds, options, strict=True):
            self.submit_reset(slot, None if seed is None else int(seed), opts)
        return self._gather(slots)

    def reset_groups(
        self, task_seeds: Sequence[int], group_size: int, options: Sequence[dict[str, Any] | None] | None = None
    ) -> list[Outcome]:
        """Reset slots ``g*k .. g*k+k-1`` (``k = group_size``) with ``task_seeds[g]`` and ``options[g]``: the k
        members of a group get the same first observation (``reset(runner.group_seeds(s, G, k))`` is
        ``reset_groups(range(s, s + G), k)``)."""
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        per_group = [None] * len(task_seeds) if options is None else list(options)
        if len(per_group) != len(task_seeds):
            raise ValueError(f"{len(task_seeds)} task seeds but {len(per_group)} options")
        seeds = [s for s in task_seeds for _ in range(group_size)]
        return self.reset(seeds, [o for o in per_group for _ in range(group_size)])

    def step(self, actions: Mapping[int, Any] | Sequence[Any]) -> list[Outcome]:
        """Step the slots in ``actions`` (``{slot: action}``, or a list: slot ``i`` gets ``actions[i]``), all at
        once; returns their outcomes in that order."""
        items = list(actions.items()) if isinstance(actions, Mapping) else list(enumerate(actions))
        self._check_idle("step")
        for slot, action in items:
            self.submit_step(slot, action)
        return self._gather([slot for slot, _ in items])

    # -- episodes -------------------------------------------------------------------------------------
    def play(
        self,
        policy: Policy,
        episodes: int,
        *,
        seed: int = 0,
        tasks: str = "sequential",
        group_size: int = 1,
        agent_kwargs: dict[str, Any] | None = None,
        start: int = 0,
        max_errors: int | None = 5,
    ) -> Iterator[Trajectory]:
        """Play episodes ``start .. episodes - 1`` of a text policy on the pool's slots and yield their records in
        episode order: the same records as ``agentgym.running.runner.iter_episodes`` with these arguments (episode ``i``
        reset with ``seed + i // group_size``, its agent with ``seed + i``).

        Every slot plays one episode at a time and its steps run as soon as its action is known (``collect``), so
        the wall time is that of the slowest episodes, not the sum. The policy runs here, between ``collect``
        calls: one ``Agent`` copy per slot (``copy.deepcopy`` of an ``Agent`` object; a plain callable is shared).
        A failed reset, step (error, timeout, dead actor) or agent ends its episode with ``Trajectory.error``;
        ``max_errors`` stops the run (``RunAborted``) as in ``iter_episodes``.
        """
        spec = RunSpec(self.env_info.env_id, episodes, seed, dict(self.factory.env_kwargs), tasks, group_size)
        if not 0 <= start <= episodes:
            raise ValueError(f"start must be in 0..{episodes}, got {start}")
        self._check_idle("play")
        agents = self._agents(policy, agent_kwargs or {})
        running: dict[int, _Episode] = {}
        finished: dict[int, Trajectory] = {}
        free = deque(range(self.size))
        recent: deque[str | None] = deque(maxlen=4 * max_errors if max_errors else 1)
        nxt = start
        try:
            for i in range(start, episodes):
                while i not in finished:
                    while free and nxt < episodes and nxt < i + 2 * self.size:
                        slot = free.popleft()
                        running[slot] = self._begin(spec, nxt, slot, agents[slot])
                        nxt += 1
                    for out in self.collect():
                        episode = running[out.slot]
                        if self._advance(episode, out):
                            finished[episode.index] = episode.traj
                            del running[out.slot]
                            free.append(out.slot)
                traj = finished.pop(i)
                yield traj
                recent.append(None if traj.error is None else error_kind(traj.error))
                if max_errors and traj.error is not None and recent.count(recent[-1]) >= max_errors:
                    raise RunAborted(
                        f"stopped: {recent.count(recent[-1])} of the last {len(recent)} episodes failed with the "
                        f"same kind of error; the last (episode {i}): {traj.error}"
                    )
        finally:
            while self._calls:  # an abandoned run: let the calls in flight finish so the pool stays usable
                self.collect()
            for agent in {id(a): a for a in agents}.values():
                if agent is not policy:
                    agent.close()

    def _agents(self, policy: Policy, agent_kwargs: dict[str, Any]) -> list[Agent]:
        if isinstance(policy, Agent):
            return [policy] if self.size == 1 else [copy.deepcopy(policy) for _ in range(self.size)]
        if isinstance(policy, str):
            env, close = self._probe_env()
            try:
                return [make_agent(policy, env, **agent_kwargs) for _ in range(self.size)]
            finally:
                if close:
                    env.close()
        return [make_agent(policy, None, **agent_kwargs) for _ in range(self.size)]  # type: ignore[arg-type]

    def _begin(self, spec: RunSpec, i: int, slot: int, agent: Agent) -> _Episode:
        options = spec.options(i, self.env_info.num_tasks)
        traj = Trajectory(env_id=spec.env_id, seed=spec.env_seed(i), task_id="", agent=agent.name,
                          initial_observation=[], reset_info={}, env_kwargs=dict(self.env_info.env_kwargs),
                          options=dict(options), group_id=spec.group_id(i))  # fmt: skip
        self.submit_reset(slot, spec.env_seed(i), options)
        return _Episode(i, traj, agent, spec.seed + i)

    def _advance(self, ep: _Episode, out: Outcome) -> bool:
        """Record ``out`` in the episode and submit its next step; True when the episode is over."""
        traj = ep.traj
        if out.error is not None:
            traj.error = out.error
            return True
        if out.kind == "reset":
            ep.agent.reset(seed=ep.agent_seed)
            traj.task_id = str(out.info.get("task_id", ""))
            traj.initial_observation, traj.reset_info = out.observation, out.info
            ep.messages, ep.info = list(out.observation), out.info
        else:
            traj.turns.append(Turn(ep.action, out.observation, out.reward, out.terminated, out.truncated, out.info))
            if out.terminated or out.truncated:
                return True
            ep.messages.append({"role": "assistant", "content": ep.action})
            ep.messages.extend(out.observation)
            ep.info = out.info
        try:
            ep.action = ep.agent.act(ep.messages, ep.info)
        except Exception as e:  # as in runner.run_episode: an agent failure ends its episode
            traj.error = f"{type(e).__name__}: {e}"
            return True
        self.submit_step(out.slot, ep.action)
        return False

    # -- plumbing -------------------------------------------------------------------------------------
    def _submit(self, slot: int, kind: str, args: tuple[Any, ...]) -> None:
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")
        if not 0 <= slot < self.size:
            raise IndexError(f"slot {slot} is out of range: this pool has slots 0..{self.size - 1}")
        if slot in self._calls:
            raise RuntimeError(f"slot {slot} already has a {self._calls[slot].kind} in flight: collect() it first")
        deadline = None
        if self.step_timeout is not None and self.interrupts:
            deadline = time.monotonic() + self.step_timeout + (self.start_timeout if slot in self._fresh else 0.0)
        self._fresh.discard(slot)
        self._calls[slot] = _Call(slot, kind, self._start(slot, kind, args), deadline)

    def _expire(self, call: _Call) -> Outcome:
        del self._calls[call.slot]
        self._replace(call.slot)
        return Outcome(call.slot, call.kind, error=f"env.{call.kind}: TimeoutError: no result within step_timeout="
                       f"{self.step_timeout} s (slot {call.slot} got a fresh worker and env)")  # fmt: skip

    def _check_idle(self, what: str) -> None:
        if self._calls:
            raise RuntimeError(f"{what}() needs an idle pool, but slots {self.in_flight} have calls in flight")

    def _gather(self, slots: list[int]) -> list[Outcome]:
        got: dict[int, Outcome] = {}
        while self._calls:
            got.update((o.slot, o) for o in self.collect())
        return [got[slot] for slot in slots]

    def close(self) -> None:
        """Close every env and stop the workers; calls in flight are dropped. Idempotent."""
        if not self._closed:
            self._closed = True
            busy = set(self._calls)
            self._calls.clear()
            self._shutdown(busy)

    def __len__(self) -> int:
        return self.size

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_info.env_id!r}, n={self.size})"


class SerialPool(EnvPool):
    """Every slot's env in this process; ``collect`` runs the calls in flight one after another.

    ``SerialPool(envs=[...])`` wraps env objects you already have (no copies: a failed call leaves the env as it
    is, to be reset). It cannot interrupt a call, so it takes no ``step_timeout``.
    """

    interrupts = False

    def __init__(
        self,
        env_id: str | None = None,
        n: int = 1,
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        make_env: Callable[[], gym.Env] | None = None,
        envs: Sequence[gym.Env] | None = None,
        step_timeout: float | None = None,
    ):
        if envs is None:
            super().__init__(env_id, n, env_kwargs=env_kwargs, make_env=make_env, step_timeout=step_timeout)
            self._hosts = [EnvHost(slot, self.factory) for slot in range(n)]
        else:
            given = list(envs)
            if not given:
                raise ValueError("envs is empty")
            # a factory only when one is named: it then rebuilds an env after a failed call
            named = EnvFactory.of(env_id, env_kwargs, make_env) if env_id is not None or make_env is not None else None
            super().__init__(n=len(given), factory=named or EnvFactory(), step_timeout=step_timeout)
            self._hosts = [EnvHost(slot, named, env) for slot, env in enumerate(given)]
        self.env_info = self._hosts[0].describe()[1]

    @classmethod
    def of_envs(cls, envs: Sequence[gym.Env]) -> SerialPool:
        """A pool over env objects you already have (the trainer's ``envs`` list)."""
        return cls(envs=envs)

    @property
    def envs(self) -> list[gym.Env]:
        """The slots' env objects."""
        return [host._env() for host in self._hosts]

    def _start(self, slot: int, kind: str, args: tuple[Any, ...]) -> Any:
        return args

    def _wait(self, calls: list[_Call], timeout: float | None) -> list[_Call]:
        for call in calls:  # in submission order
            call.result = getattr(self._hosts[call.slot], call.kind)(*call.handle)
        return calls

    def _outcome(self, call: _Call) -> Outcome:
        assert call.result is not None
        return call.result

    def _shutdown(self, busy: set[int]) -> None:
        for host in self._hosts:
            host.close()

    def workers(self) -> list[WorkerInfo]:
        return [WorkerInfo(slot, os.getpid(), _node_name()) for slot in range(self.size)]

    def _probe_env(self) -> tuple[gym.Env, bool]:
        return self._hosts[0]._env(), False


class _SlotThread:
    """A daemon thread that runs one slot's calls in order. Python cannot kill a thread: a timed-out call is
    abandoned and finishes in the background (daemon threads never hold up interpreter exit)."""

    def __init__(self, slot: int, factory: EnvFactory):
        self.jobs: queue.SimpleQueue[tuple[cf.Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self.host: EnvHost | None = None
        self.slot, self.factory = slot, factory
        self.thread = threading.Thread(target=self._run, name=f"envpool-slot-{slot}", daemon=True)
        self.thread.start()
        self.built = self.submit(self._build)

    def submit(self, fn: Callable[..., Any], *args: Any) -> cf.Future[Any]:
        future: cf.Future[Any] = cf.Future()
        self.jobs.put((future, fn, args))
        return future

    def call(self, kind: str, args: tuple[Any, ...]) -> cf.Future[Any]:
        return self.submit(self._call, kind, args)

    def stop(self) -> None:
        """Close the env once the current call (if any) returns, then end the thread."""
        self.submit(self._close)
        self.jobs.put(None)

    def _build(self) -> None:
        self.host = EnvHost(self.slot, self.factory)

    def _call(self, kind: str, args: tuple[Any, ...]) -> Outcome:
        if self.host is None:  # building the env failed: try again (an exception is this call's error)
            self._build()
        assert self.host is not None
        return getattr(self.host, kind)(*args)

    def _close(self) -> None:
        if self.host is not None:
            self.host.close()

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            future, fn, args = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as e:
                    future.set_exception(e)


class ThreadPool(EnvPool):
    """Every slot's env on its own thread of this process (built there, stepped only there).

    Envs that release the GIL (I/O, subprocesses, sleeping, numba/numpy kernels) overlap; pure-Python envs do
    not. With ``step_timeout`` a call that runs too long is abandoned: its slot gets a new thread and a fresh env.
    """

    def __init__(
        self,
        env_id: str | None = None,
        n: int = 1,
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        make_env: Callable[[], gym.Env] | None = None,
        step_timeout: float | None = None,
        start_timeout: float = 120.0,
    ):
        super().__init__(env_id, n, env_kwargs=env_kwargs, make_env=make_env, step_timeout=step_timeout,
                         start_timeout=start_timeout)  # fmt: skip
        self._threads = [_SlotThread(slot, self.factory) for slot in range(n)]
        try:
            for t in self._threads:
                t.built.result()
        except BaseException:
            self._shutdown(set())
            raise
        host = self._threads[0].host
        assert host is not None
        self.env_info = host.describe()[1]

    def _start(self, slot: int, kind: str, args: tuple[Any, ...]) -> Any:
        return self._threads[slot].call(kind, args)

    def _wait(self, calls: list[_Call], timeout: float | None) -> list[_Call]:
        by_future = {call.handle: call for call in calls}
        done, _ = cf.wait(by_future, timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return [by_future[f] for f in done]

    def _outcome(self, call: _Call) -> Outcome:
        try:
            return call.handle.result()
        except Exception as e:  # the slot's env could not be built
            return Outcome(call.slot, call.kind, error=f"env.{call.kind}: {type(e).__name__}: {e}")

    def _replace(self, slot: int) -> None:
        self._threads[slot].stop()
        self._threads[slot] = _SlotThread(slot, self.factory)
        self._fresh.add(slot)
        self.restarts += 1

    def _shutdown(self, busy: set[int]) -> None:
        for t in self._threads:
            t.stop()
        deadline = time.monotonic() + 5.0
        for t in self._threads:
            t.thread.join(timeout=max(deadline - time.monotonic(), 0.0))

    def workers(self) -> list[WorkerInfo]:
        return [WorkerInfo(slot, os.getpid(), _node_name()) for slot in range(self.size)]

    def _probe_env(self) -> tuple[gym.Env, bool]:
        host = self._threads[0].host
        return (host._env(), False) if host is not None else (self.factory(), True)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ImportError(RAY_MISSING) from e
    return ray


class RayPool(EnvPool):
    """Every slot's env in its own Ray actor (one process each), placed by Ray's scheduler across the cluster.

    Ray is imported here only (``pip install 'agentgym-suite[ray]'``). If Ray is not initialised yet the pool calls
    ``ray.init(address=address, **init_kwargs)``: ``address=None`` joins the cluster named by ``RAY_ADDRESS`` or
    starts a local one, ``"auto"`` or ``"ray://host:10001"`` joins an existing one (a trainer's); a Ray it started
    is shut down by ``close()``. Calls in flight are awaited with ``ray.wait``, so a slow actor never holds up the
    others; a call past ``step_timeout`` kills its actor (``ray.kill``), and an actor that died (its process was
    killed, its node was lost) is replaced: either way the slot's call is an errored outcome and the slot gets a
    new actor with a fresh env.

    Args (besides ``EnvPool``'s):
        num_cpus: CPUs each actor reserves; fractions pack several envs per core (``0.25``: four per core).
        resources: custom resources each actor requests, e.g. ``{"envs": 1}`` to place envs only on nodes started
            with ``ray start --resources='{"envs": 32}'``.
        scheduling_strategy: Ray's actor placement; ``"SPREAD"`` (default) spreads the actors over the nodes.
        runtime_env: Ray runtime env of the actors (``{"env_vars": ..., "py_modules": ...}``).
        address, init_kwargs: for ``ray.init`` when Ray is not initialised yet.
    """

    def __init__(
        self,
        env_id: str | None = None,
        n: int = 1,
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        make_env: Callable[[], gym.Env] | None = None,
        step_timeout: float | None = None,
        start_timeout: float = 120.0,
        num_cpus: float = 1.0,
        resources: Mapping[str, float] | None = None,
        scheduling_strategy: Any = "SPREAD",
        runtime_env: Mapping[str, Any] | None = None,
        address: str | None = None,
        init_kwargs: Mapping[str, Any] | None = None,
    ):
        ray = _import_ray()
        super().__init__(env_id, n, env_kwargs=env_kwargs, make_env=make_env, step_timeout=step_timeout,
                         start_timeout=start_timeout)  # fmt: skip
        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=address, **dict(init_kwargs or {}))
        options: dict[str, Any] = {"num_cpus": num_cpus, "max_restarts": 0, "max_concurrency": 1,
                                   "scheduling_strategy": scheduling_strategy}  # fmt: skip
        if resources:
            options["resources"] = dict(resources)
        if runtime_env:
            options["runtime_env"] = dict(runtime_env)
        self._actor_class = ray.remote(EnvHost).options(**options)
        self._actors = [self._actor_class.remote(slot, self.factory) for slot in range(n)]
        try:
            described = ray.get([a.describe.remote() for a in self._actors], timeout=start_timeout)
        except ray.exceptions.GetTimeoutError:
            free = ray.available_resources()
            self.close()
            raise RuntimeError(
                f"{n} env actors did not start within {start_timeout} s: each asks for {num_cpus} CPU(s)"
                f"{f' and {dict(resources)}' if resources else ''}; the cluster has {free} free"
            ) from None
        except ray.exceptions.RayError as e:
            self.close()
            raise RuntimeError(f"an env actor failed to start: {e}") from e
        self.env_info = described[0][1]

    def _start(self, slot: int, kind: str, args: tuple[Any, ...]) -> Any:
        return getattr(self._actors[slot], kind).remote(*args)

    def _wait(self, calls: list[_Call], timeout: float | None) -> list[_Call]:
        by_ref = {call.handle: call for call in calls}
        ready, rest = self._ray.wait(list(by_ref), num_returns=1, timeout=timeout)
        if ready and rest:
            more, _ = self._ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        return [by_ref[ref] for ref in ready]

    def _outcome(self, call: _Call) -> Outcome:
        try:
            return self._ray.get(call.handle)
        except self._ray.exceptions.RayError as e:
            self._replace(call.slot)
            what = "died" if isinstance(e, self._ray.exceptions.RayActorError) else "failed"  # killed, OOM, node lost
            reason = (str(e).strip().splitlines() or [""])[0]
            return Outcome(call.slot, call.kind, error=f"env.{call.kind}: {type(e).__name__}: the actor of slot "
                           f"{call.slot} {what} ({reason}); the slot got a fresh actor")  # fmt: skip

    def _replace(self, slot: int) -> None:
        with contextlib.suppress(Exception):  # it may be dead already
            self._ray.kill(self._actors[slot], no_restart=True)
        self._actors[slot] = self._actor_class.remote(slot, self.factory)
        self._fresh.add(slot)
        self.restarts += 1

    def _shutdown(self, busy: set[int]) -> None:
        ray = self._ray
        actors = getattr(self, "_actors", [])
        if actors and ray.is_initialized():
            idle = [a for slot, a in enumerate(actors) if slot not in busy]
            if idle:  # let the idle envs close (they may own subprocesses), then end every actor
                with contextlib.suppress(Exception):
                    ray.wait([a.close.remote() for a in idle], num_returns=len(idle), timeout=10.0)
            for actor in actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()

    def workers(self) -> list[WorkerInfo]:
        return [info for info, _ in self._ray.get([a.describe.remote() for a in self._actors])]

    @property
    def actors(self) -> list[Any]:
        """The slots' actor handles (slot ``i`` is ``actors[i]`` until it is replaced)."""
        return list(self._actors)


POOLS: dict[str, type[EnvPool]] = {"serial": SerialPool, "thread": ThreadPool, "ray": RayPool}


def make_pool(kind: str, env_id: str | None = None, n: int = 1, **kwargs: Any) -> EnvPool:
    """A pool by name: ``"serial"``, ``"thread"`` or ``"ray"`` (kwargs: the class's).

    >>> import agentgym
    >>> with make_pool("thread", "agentgym/Household-v0", 2) as pool:
    ...     [o.info["turn"] for o in pool.reset([0, 0])]
    [0, 0]
    """
    if kind not in POOLS:
        raise ValueError(f"unknown pool {kind!r}; choose from {sorted(POOLS)}")
    return POOLS[kind](env_id, n, **kwargs)


def as_pool(envs: EnvPool | Iterable[gym.Env]) -> EnvPool:
    """``envs`` itself when it is a pool, else a ``SerialPool`` over those env objects (what lets the reference
    rollout take either)."""
    return envs if isinstance(envs, EnvPool) else SerialPool(envs=list(envs))
