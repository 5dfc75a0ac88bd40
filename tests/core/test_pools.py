"""Env pools (agentgym/running/pool.py): SerialPool, ThreadPool and RayPool give the runner's trajectories and
byte-identical observations, reset groups alike, keep episodes on one worker, turn failures (exceptions, timeouts,
killed actors) into errored outcomes with a fresh worker, and overlap slow envs.

Nothing here depends on how fast the machine is (a loaded CI machine must pass): where a test needs one call to be
under way, or one episode to have got ahead of another, ``SlowEnv`` leaves marker files that the test (or another
env) waits for; step timeouts are seconds long and the hangs they cut short last minutes; every wait has a
generous hang guard.

The Ray tests run on one local cluster (``ray.init(num_cpus=2)``) for the whole module and skip when Ray is not
installed. ``SlowEnv``, defined here, reaches the actors through its entry point (this module, by name): the
cluster's workers get this folder on ``PYTHONPATH`` (a job-level ``runtime_env``), and ``RayPool`` registers the
driver's ``EnvSpec`` in each actor.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the built-in envs)
from agentgym.contract.env import AgentEnv, StepResult
from agentgym.running.pool import EnvPool, Outcome, RayPool, SerialPool, ThreadPool, as_pool, make_pool
from agentgym.running.runner import RunAborted, group_seeds, run

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="Ray is not installed (pip install 'agentgym-suite[ray]')")

SEARCH = ("agentgym/SearchQA-v0", {"dataset": "tiny"}, "random")
HOUSEHOLD = ("agentgym/Household-v0", {"split": "train", "difficulty": "easy"}, "heuristic")
#: SlowEnv's per-task step delays: tasks 0-2 each have one slow turn (at a different turn), task 3 is quick.
DELAYS = [[0.6, 0.05, 0.05], [0.05, 0.6, 0.05], [0.05, 0.05, 0.6], [0.05], [1.0]]
SLOW = "pooltest/Slow-v0"
#: How long ``"hang"`` sleeps: far longer than any step timeout or hang guard here.
HANG = 300.0
#: Hang guard of every wait for a marker file (it appears at once unless something is broken).
GUARD = 120.0
#: How long Ray actors may take to start (``RayPool``'s ``start_timeout``): a worker process that imports agentgym
#: took over 120 s, the default, on a 2-core machine at load 20.
START = 400.0


def wait_for(path: Path, guard: float = GUARD) -> None:
    """Return once ``path`` exists; TimeoutError after ``guard`` seconds."""
    deadline = time.monotonic() + guard
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path.name} did not appear within {guard} s")
        time.sleep(0.01)


def clear(marks: Path) -> None:
    """Remove the markers earlier tests left."""
    for f in marks.iterdir():
        f.unlink()


class SlowEnv(AgentEnv):
    """Sleeps ``delays[task][turn - 1]`` seconds per step (the last delay repeats), then echoes the action;
    ``"raise"`` raises, ``"hang"`` sleeps ``HANG`` seconds, ``"wait:NAME"`` waits for the marker NAME. Three turns.
    With ``marks`` (a folder) each step touches ``started-{task}-{turn}`` there when it begins and
    ``ended-{task}-{turn}`` when it returns."""

    def __init__(self, *, delays: list[list[float]] = DELAYS, max_turns: int = 3, marks: str | None = None):
        super().__init__(max_turns=max_turns)
        self.delays = [[float(x) for x in d] for d in delays]
        self.marks = marks

    @property
    def num_tasks(self) -> int:
        return len(self.delays)

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return [{"role": "user", "content": f"task {task_index}"}], {"gold": {}}

    def _mark(self, event: str) -> None:
        if self.marks is not None:
            (Path(self.marks) / f"{event}-{self.task_index}-{self.turn}").touch()

    def _step(self, action: str) -> StepResult:
        self._mark("started")
        delays = self.delays[self.task_index]
        time.sleep(delays[min(self.turn - 1, len(delays) - 1)])
        if action == "raise":
            raise ValueError("boom")
        if action == "hang":
            time.sleep(HANG)
        if action.startswith("wait:") and self.marks is not None:
            wait_for(Path(self.marks) / action.removeprefix("wait:"))
        self._mark("ended")
        return StepResult([{"role": "user", "content": f"turn {self.turn}: {action}"}], {"outcome": 0.0})


if SLOW not in gym.registry:
    gym.register(SLOW, entry_point=f"{__name__}:SlowEnv")


def echo(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
    return "ok"


def records(pool: EnvPool, policy: Any, episodes: int, **kwargs: Any) -> list[dict[str, Any]]:
    return [t.to_dict() for t in pool.play(policy, episodes, **kwargs)]


def scripted(pool: EnvPool, actions: list[str]) -> str:
    """Reset two groups of two, then step every slot with the same scripted actions (finished slots drop out);
    the JSON of every outcome (worker-dependent fields left out)."""
    out = pool.reset_groups([3, 4], group_size=2)
    lines = [[o.slot, o.observation, o.info] for o in out]
    running = [o.slot for o in out]
    for action in actions:
        outs = pool.step({slot: action for slot in running})
        lines += [[o.slot, o.observation, o.reward, o.terminated, o.truncated, o.info, o.error] for o in outs]
        running = [o.slot for o in outs if not o.done]
    return json.dumps(lines, sort_keys=True)


HOUSEHOLD_ACTIONS = ["look", "inventory", "go to countertop 1", "take apple 1 from countertop 1", "open fridge 1"]
SEARCH_ACTIONS = ["<search> founder born </search>", "nothing tagged", "<answer> Paris </answer>"]


# -- serial and thread pools ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["serial", "thread"])
@pytest.mark.parametrize("case", [SEARCH, HOUSEHOLD], ids=["search_qa", "household"])
def test_play_gives_the_runners_records(kind, case):
    env_id, kwargs, agent = case
    expected = [t.to_dict() for t in run(env_id, agent, 8, group_size=2, env_kwargs=kwargs, progress=False)]
    with make_pool(kind, env_id, 3, env_kwargs=kwargs) as pool:
        assert records(pool, agent, 8, group_size=2) == expected
        assert records(pool, agent, 8, group_size=2, start=5) == expected[5:]  # the pool is reusable


@pytest.mark.parametrize("case", [(SEARCH, SEARCH_ACTIONS), (HOUSEHOLD, HOUSEHOLD_ACTIONS)], ids=["sqa", "hh"])
def test_same_seeds_and_actions_give_byte_identical_observations(case):
    (env_id, kwargs, _), actions = case
    with SerialPool(env_id, 4, env_kwargs=kwargs) as serial, ThreadPool(env_id, 4, env_kwargs=kwargs) as threads:
        assert scripted(threads, actions) == scripted(serial, actions)
    envs = [gym.make(env_id, **kwargs) for _ in range(4)]  # a pool over env objects you already have
    with SerialPool(env_id, 4, env_kwargs=kwargs) as serial:
        assert scripted(as_pool(envs), actions) == scripted(serial, actions)


def test_group_members_get_the_same_reset():
    with ThreadPool("agentgym/SearchQA-v0", 6, env_kwargs={"dataset": "tiny"}) as pool:
        out = pool.reset_groups([5, 6, 7], group_size=2)
        assert [o.observation for o in out] == [o.observation for o in pool.reset(group_seeds(5, 3, 2))]
    tasks = [o.info["task_id"] for o in out]
    assert tasks[0::2] == tasks[1::2] and len(set(tasks[0::2])) == 3


@pytest.mark.parametrize("kind", ["serial", "thread"])
def test_a_failing_step_is_an_errored_outcome_and_the_slot_gets_a_fresh_env(kind):
    with make_pool(kind, SLOW, 2, env_kwargs={"delays": [[0.0]]}) as pool:
        pool.reset([0, 0])
        bad, good = pool.step(["raise", "fine"])
        assert bad.error == "env.step: ValueError: boom (the slot got a fresh env)" and bad.done
        assert good.error is None and good.observation == [{"role": "user", "content": "turn 1: fine"}]
        again = pool.step({0: "fine"})[0]  # a fresh env: it must be reset first
        assert again.error.startswith("env.step: ResetNeeded: Cannot call env.step() before calling env.reset()")
        assert pool.reset([0])[0].error is None and pool.step({0: "fine"})[0].info["turn"] == 1
        assert pool.step({1: "fine"})[0].info["turn"] == 2  # the other slot's episode went on


@pytest.mark.slow
def test_thread_pool_step_timeout_replaces_the_thread():
    with ThreadPool(SLOW, 2, env_kwargs={"delays": [[0.0]]}, step_timeout=2.0) as pool:
        pool.reset([0, 0])
        start = time.perf_counter()
        hung, fine = pool.step(["hang", "fine"])
        assert 2.0 <= time.perf_counter() - start < HANG / 10  # cut short at the timeout, not after the hang
        assert hung.error.startswith("env.step: TimeoutError: no result within step_timeout=2.0 s (slot 0 got a fresh")
        assert fine.error is None and pool.restarts == 1
        assert pool.reset([0])[0].error is None and pool.step({0: "fine"})[0].error is None


def test_play_records_errors_and_stops_on_repeated_ones():
    def policy(messages, info):
        return "raise" if info["task_id"] == "1" else "ok"

    with SerialPool(SLOW, 2, env_kwargs={"delays": [[0.0]] * 3}) as pool:
        trajs = list(pool.play(policy, 6))
        assert [t.error is not None for t in trajs] == [False, True, False, False, True, False]
        assert trajs[1].error.startswith("env.step: ValueError: boom") and len(trajs[0].turns) == 3
        with pytest.raises(RunAborted, match="2 of the last"):
            list(pool.play(lambda m, i: "raise", 6, max_errors=2))
        assert pool.in_flight == [] and len(list(pool.play(echo, 2))) == 2  # still usable


def test_the_rules_of_submitting():
    with SerialPool(SLOW, 2, env_kwargs={"delays": [[0.0]]}) as pool:
        pool.submit_reset(0, seed=1)
        with pytest.raises(RuntimeError, match="slot 0 already has a reset in flight"):
            pool.submit_step(0, "x")
        with pytest.raises(RuntimeError, match=r"needs an idle pool, but slots \[0\]"):
            pool.reset([0])
        with pytest.raises(IndexError, match=r"slots 0\.\.1"):
            pool.submit_reset(2)
        assert [(o.slot, o.kind) for o in pool.collect()] == [(0, "reset")] and pool.collect() == []
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit_reset(0)
    with pytest.raises(ValueError, match="choose from"):
        make_pool("process", SLOW)
    with pytest.raises(ValueError, match="SerialPool cannot interrupt a call: it takes no step_timeout"):
        make_pool("serial", SLOW, step_timeout=1.0)


def test_ray_pool_without_ray_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'agentgym-suite\[ray\]'"):
        RayPool(SLOW, 1)


# -- Ray --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_session():
    if not HAS_RAY:
        pytest.skip("Ray is not installed (pip install 'agentgym-suite[ray]')")
    import ray

    if ray.is_initialized():  # a session another module left behind: this module needs its own (PYTHONPATH)
        ray.shutdown()
    path = os.pathsep.join(p for p in (os.path.dirname(__file__), os.environ.get("PYTHONPATH")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def marks(tmp_path_factory) -> Path:
    """The folder where ``slow_pool``'s envs leave their markers."""
    return tmp_path_factory.mktemp("marks")


@pytest.fixture(scope="module")
def slow_pool(ray_session, marks):
    """Four SlowEnv actors at a quarter CPU each (one CPU of the two), leaving markers in ``marks``."""
    pool = RayPool(SLOW, 4, num_cpus=0.25, env_kwargs={"marks": str(marks)}, start_timeout=START)
    yield pool
    pool.close()


@pytest.mark.slow
@needs_ray
@pytest.mark.parametrize("case", [(SEARCH, SEARCH_ACTIONS), (HOUSEHOLD, HOUSEHOLD_ACTIONS)], ids=["sqa", "hh"])
def test_ray_and_serial_pools_give_identical_trajectories(ray_session, case):
    (env_id, kwargs, agent), actions = case
    ray_pool = RayPool(env_id, 4, env_kwargs=kwargs, num_cpus=0.25, start_timeout=START)
    with SerialPool(env_id, 4, env_kwargs=kwargs) as serial, ray_pool as rp:
        assert records(rp, agent, 8, group_size=2) == records(serial, agent, 8, group_size=2)
        assert scripted(rp, actions) == scripted(serial, actions)
        members = rp.reset_groups([9, 10], group_size=2)  # group members get the same reset
        assert members[0].observation == members[1].observation != members[2].observation == members[3].observation


@pytest.mark.slow
@needs_ray
def test_ray_episodes_are_sticky_and_actors_take_fractional_cpus(ray_session, slow_pool):
    pids = [w.pid for w in slow_pool.workers()]
    assert len(set(pids)) == 4 and os.getpid() not in pids

    def used() -> float:
        return ray_session.cluster_resources()["CPU"] - ray_session.available_resources().get("CPU", 0.0)

    deadline = time.monotonic() + GUARD  # actors of a pool closed just before free their CPUs asynchronously
    while used() != pytest.approx(1.0) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert used() == pytest.approx(1.0)  # 4 actors x 0.25 CPU
    seen: dict[int, set[int]] = {slot: set() for slot in range(4)}
    for slot in range(4):
        slow_pool.submit_reset(slot, options={"task_index": 3})
    steps = 0
    while slow_pool.in_flight:
        for out in slow_pool.collect():
            assert out.error is None
            seen[out.slot].add(out.pid)
            if not out.done:
                slow_pool.submit_step(out.slot, "ok")
                steps += 1
    assert steps == 12 and [seen[slot] for slot in range(4)] == [{pid} for pid in pids]


@needs_ray
def test_ray_a_slow_episode_holds_up_no_other(slow_pool, marks):
    """Episode 0's first step returns only once episode 3 has played all three of its turns: that happens only if
    each episode goes at its own pace. Played one after another or in lockstep batches, episode 3 would wait for
    episode 0's first step, which waits for it: the step's hang guard would then error episode 0."""
    clear(marks)

    def policy(messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        return "wait:ended-3-3" if info["task_id"] == "0" and info["turn"] == 0 else "ok"

    trajs = list(slow_pool.play(policy, 4))  # episode g plays task g
    assert [t.error for t in trajs] == [None] * 4
    assert [len(t.turns) for t in trajs] == [3] * 4 and trajs[0].turns[0].action == "wait:ended-3-3"


@needs_ray
def test_ray_killing_an_actor_mid_episode_errors_that_episode_only(slow_pool, marks):
    slow_pool.reset([None, None], [{"task_index": 4}, {"task_index": 3}])
    victim = slow_pool.workers()[0].pid
    clear(marks)
    slow_pool.submit_step(0, "hang")
    slow_pool.submit_step(1, "ok")
    wait_for(marks / "started-4-1")  # slot 0's step is under way (and runs until the kill)
    os.kill(victim, signal.SIGKILL)
    outs: dict[int, Outcome] = {}
    deadline = time.monotonic() + GUARD
    while slow_pool.in_flight and time.monotonic() < deadline:
        outs.update((o.slot, o) for o in slow_pool.collect(timeout=1.0))
    assert outs[1].error is None and outs[1].info["turn"] == 1
    assert "env.step: " in outs[0].error and "the actor of slot 0 died" in outs[0].error, outs[0].error
    assert slow_pool.restarts >= 1 and slow_pool.workers()[0].pid != victim
    assert [o.error for o in slow_pool.reset([None], [{"task_index": 3}])] == [None]
    assert [o.info["turn"] for o in slow_pool.step({0: "ok", 1: "ok"})] == [1, 2]  # both go on


@pytest.mark.slow
@needs_ray
def test_ray_step_timeout_kills_the_actor_and_the_others_go_on(slow_pool):
    slow_pool.reset([None, None, None], [{"task_index": 3}] * 3, slots=[1, 2, 3])
    before, victim = slow_pool.restarts, slow_pool.workers()[2].pid
    slow_pool.step_timeout = 5.0  # the quick steps take 0.05 s: this leaves them room on a loaded machine
    try:
        start = time.perf_counter()
        outs = slow_pool.step({1: "ok", 2: "hang", 3: "ok"})
        wall = time.perf_counter() - start
    finally:
        slow_pool.step_timeout = None
    assert 5.0 <= wall < HANG / 5 and [o.error is None for o in outs] == [True, False, True]  # cut short
    assert outs[1].error.startswith("env.step: TimeoutError: no result within step_timeout=5.0 s")
    assert slow_pool.restarts == before + 1 and slow_pool.workers()[2].pid != victim


MULTINODE = """
import collections, json
import ray
from ray.cluster_utils import Cluster
from agentgym.running.pool import RayPool

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
env_node = cluster.add_node(num_cpus=2, resources={"envs": 2})  # a node started with --resources='{"envs": 2}'
cluster.wait_for_nodes()
pool = RayPool("agentgym/Household-v0", 4, address=cluster.address, num_cpus=0.25, resources={"envs": 0.5},
               start_timeout=400)
placed = {w.node for w in pool.workers()}
pool.close()  # it joined the cluster itself, so it disconnects
owned = not ray.is_initialized()
with RayPool("agentgym/Household-v0", 4, address=cluster.address, num_cpus=0.25, start_timeout=400) as pool:  # SPREAD
    spread = sorted(collections.Counter(w.node for w in pool.workers()).values())
    errors = [o.error for o in pool.reset([0, 1, 2, 3])]
cluster.shutdown()
print(json.dumps({"envs_only": placed == {env_node.node_id}, "owned": owned, "spread": spread, "errors": errors}))
"""


@needs_ray
@pytest.mark.slow
def test_ray_pool_joins_a_cluster_by_address_and_spreads_over_its_nodes(tmp_path):
    """A two-node cluster (``ray.cluster_utils.Cluster``), in a subprocess: this process is the module's driver."""
    script = tmp_path / "multinode.py"
    script.write_text(MULTINODE, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=590)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"envs_only": True, "owned": True, "spread": [2, 2], "errors": [None] * 4}


@needs_ray
def test_ray_shutdown_leaves_no_orphan_processes(ray_session, slow_pool):
    if not os.path.isdir("/proc"):
        pytest.skip("needs /proc (Linux)")
    actors = {w.pid for w in slow_pool.workers()}
    before = descendants(os.getpid())
    assert actors <= before  # the actors, the raylet, the GCS ... all started by this process
    slow_pool.close()
    ray_session.shutdown()
    deadline = time.monotonic() + GUARD
    while (left := {pid for pid in before if alive(pid)}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left after ray.shutdown(): {sorted(left)}"


def descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and alive(int(name)):
            try:
                with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(name))
    found, todo = set(), [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            found.add(pid)
            todo.append(pid)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False
