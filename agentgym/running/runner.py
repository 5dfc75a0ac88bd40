"""Run agents on envs: one episode, or many (serially or on a thread pool) with byte-identical output.

The agent is a built-in agent's name (``oracle``, ``heuristic``, ``random``, or ``openai`` / ``hf``), an
``Agent`` object, or any callable policy ``(messages, info) -> str``.

Episode ``i`` of a run with base seed ``s`` and group size ``k`` belongs to group ``g = i // k``: it is reset
with ``seed=s + g`` and, with ``tasks="sequential"``, ``options={"task_index": g % num_tasks}``, so the k
episodes of a group play the same task (GRPO-style groups) and consecutive groups play distinct tasks. The
agent of episode ``i`` is reset with ``seed=s + i``, so group members sample differently. Each worker owns its
env and agent; trajectories are written in episode order whatever the completion order, so serial and
parallel runs produce the same file.

>>> import agentgym
>>> trajs = run("agentgym/SearchQA-v0", "oracle", episodes=2, seed=0, env_kwargs={"dataset": "tiny"},
...             progress=False)
>>> [t.success for t in trajs]
[True, True]
>>> groups = run("agentgym/SearchQA-v0", "random", episodes=4, group_size=2, env_kwargs={"dataset": "tiny"},
...              progress=False)
>>> [(t.group_id, t.task_id) for t in groups] == [("0", groups[0].task_id)] * 2 + [("1", groups[2].task_id)] * 2
True
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from tqdm.auto import tqdm

from agentgym.contract.agent import Agent
from agentgym.contract.trajectory import (
    KEY_ENV,
    TOO_LARGE,
    RecordTooLarge,
    RunHeader,
    Seal,
    Trajectory,
    TrajectoryWriter,
    cut_torn_tail,
    normalize,
    read_records,
    trajectory_key,
)
from agentgym.running.episode import (
    GENERIC_AGENTS as GENERIC_AGENTS,  # re-exported: runner was their home before agentgym.running.episode
    CallableAgent as CallableAgent,
    Policy,
    RunAborted,
    RunSpec,
    builtin_agents as builtin_agents,
    env_kwargs_of as env_kwargs_of,
    error_kind,
    group_seeds as group_seeds,
    make_agent,
    run_episode,
)

if TYPE_CHECKING:
    from agentgym.running.pool import EnvPool


def iter_episodes(
    env_id: str,
    agent: Policy,
    episodes: int,
    *,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    agent_kwargs: dict[str, Any] | None = None,
    tasks: str = "sequential",
    group_size: int = 1,
    workers: int = 1,
    start: int = 0,
    make_env: Callable[[], gym.Env] | None = None,
    max_errors: int | None = 5,
    pool: EnvPool | None = None,
) -> Iterator[Trajectory]:
    """Yield episodes ``start .. episodes - 1`` in order, each as soon as it and those before it have finished.

    At most ``2 * workers`` episodes are in flight, so memory stays flat however many episodes a run has. With
    ``workers > 1`` each worker gets its own copy of an ``Agent`` object (``copy.deepcopy``); a plain callable is
    shared by the workers and must be thread-safe. An episode that fails (``Trajectory.error``: the agent or the
    env raised, e.g. an unreachable server) is recorded and yielded; once ``max_errors`` of the last
    ``4 * max_errors`` episodes failed with the same kind of error, ``RunAborted`` is raised, so a broken setup
    stops in a few episodes instead of failing every one (``None`` never stops).

    With ``pool`` (an ``agentgym.running.pool.EnvPool`` of ``env_id``, e.g. a ``RayPool``) the episodes run on its slots
    (``EnvPool.play``: the same records); ``workers``, ``env_kwargs`` and ``make_env`` are then the pool's.
    """
    if pool is not None:
        if pool.env_info.env_id != env_id:
            raise ValueError(f"the pool runs {pool.env_info.env_id}, not {env_id}")
        yield from pool.play(agent, episodes, seed=seed, tasks=tasks, group_size=group_size,
                             agent_kwargs=agent_kwargs, start=start, max_errors=max_errors)  # fmt: skip
        return
    spec = RunSpec(env_id, episodes, seed, dict(env_kwargs or {}), tasks, group_size)
    if not 0 <= start <= episodes:
        raise ValueError(f"start must be in 0..{episodes}, got {start}")
    factory = make_env or (lambda: gym.make(spec.env_id, **spec.env_kwargs))
    workers = max(1, min(workers, episodes - start or 1))
    local = threading.local()
    made: list[tuple[gym.Env, Agent]] = []
    lock = threading.Lock()

    def play(i: int) -> Trajectory:
        if not hasattr(local, "env"):
            local.env = factory()
            with lock:
                given = copy.deepcopy(agent) if isinstance(agent, Agent) and workers > 1 else agent
                local.agent = make_agent(given, local.env, **dict(agent_kwargs or {}))
                made.append((local.env, local.agent))
        num_tasks = getattr(local.env.unwrapped, "num_tasks", None)
        return run_episode(
            local.env, local.agent, seed=spec.env_seed(i), options=spec.options(i, num_tasks), env_id=spec.env_id,
            env_kwargs=spec.env_kwargs, group_id=spec.group_id(i), agent_seed=spec.seed + i,
        )  # fmt: skip

    threads = ThreadPoolExecutor(max_workers=workers)
    pending: dict[int, Future[Trajectory]] = {}
    submitted = start
    recent: deque[str | None] = deque(maxlen=4 * max_errors if max_errors else 1)
    try:
        for i in range(start, episodes):
            while submitted < episodes and len(pending) < 2 * workers:
                pending[submitted] = threads.submit(play, submitted)
                submitted += 1
            traj = pending.pop(i).result()
            yield traj
            recent.append(None if traj.error is None else error_kind(traj.error))
            if max_errors and traj.error is not None and recent.count(recent[-1]) >= max_errors:
                raise RunAborted(
                    f"stopped: {recent.count(recent[-1])} of the last {len(recent)} episodes failed with the same "
                    f"kind of error; the last (episode {i}): {traj.error}"
                )
    finally:
        threads.shutdown(wait=True, cancel_futures=True)
        for env, ag in made:
            if ag is not agent:  # the caller's own Agent object stays theirs to close
                ag.close()
            env.close()


def agent_spec(agent: Policy, agent_kwargs: dict[str, Any] | None) -> tuple[str | None, dict[str, Any] | None]:
    """What a run header says of the agent: its name and kwargs when it was given by name (so replay can rebuild a
    built-in one), else ``(None, None)``; kwargs with no JSON form count as not given by name."""
    if not isinstance(agent, str):
        return None, None
    try:
        kwargs = normalize(dict(agent_kwargs or {}))
    except ValueError:
        return None, None
    return agent, kwargs


def run_header(spec: RunSpec, first: Trajectory, agent: Policy, agent_kwargs: dict[str, Any] | None) -> RunHeader:
    """The header of a run of ``spec`` whose first episode played is ``first`` (which holds the env's full
    constructor arguments and the agent's label)."""
    name, kwargs = agent_spec(agent, agent_kwargs)
    return RunHeader(env_id=spec.env_id, env_kwargs=normalize(first.env_kwargs), agent=first.agent, agent_name=name,
                     agent_kwargs=kwargs, seed=spec.seed, tasks=spec.tasks, group_size=spec.group_size,
                     episodes=spec.episodes)  # fmt: skip


def too_large_record(traj: Trajectory, size: int, limit: int) -> Trajectory:
    """The record written instead of ``traj`` when its record (``size`` bytes) is longer than a writer allows
    (``limit``): what identifies the episode (env, seeds, options, task, agent, run and position) and an ``error``
    saying why, without its observations, turns or infos; ``agentgym.running.replay`` checks its task and reports it
    unverified."""
    error = (f"{TOO_LARGE}: the episode's record is {size} bytes, over the {limit} allowed; written without its "
             f"observations and its {len(traj.turns)} turn(s) (return {traj.total_reward:g}, success "
             f"{traj.success})")  # fmt: skip
    return dataclasses.replace(traj, initial_observation=[], reset_info={}, turns=[], error=error)


class _RunLog:
    """Writes a run to a ``TrajectoryWriter``: the run header before the first episode (built from it), then each
    episode stamped with the run's id and its position (on the record written; the caller's object is left as
    ``iter_episodes`` made it). An episode too large to write is written as ``too_large_record`` and the run goes on."""

    def __init__(self, writer: TrajectoryWriter | None, spec: RunSpec, agent: Policy, options: dict[str, Any],
                 header: RunHeader | None = None, start: int = 0):  # fmt: skip
        self.writer, self.spec, self.agent = writer, spec, agent
        self.agent_kwargs = options.get("agent_kwargs")
        self.header, self.next = header, start

    def add(self, traj: Trajectory) -> Trajectory:
        """Write ``traj`` as the run's next episode; returns the record written (``traj`` without a writer)."""
        if self.header is None:
            self.header = run_header(self.spec, traj, self.agent, self.agent_kwargs)
            if self.writer is not None:
                self.writer.write(self.header)
        index, self.next = self.next, self.next + 1
        if self.writer is None:
            return traj
        record = dataclasses.replace(traj, run_id=self.header.run_id, index=index)
        try:
            self.writer.write(record)
            return record
        except RecordTooLarge as e:
            size, limit = e.size, e.limit  # the exception (and any text it kept alive) is gone after this block
        record = too_large_record(record, size, limit)
        self.writer.write(record)
        return record


def _spec(env_id: str, episodes: int, options: dict[str, Any]) -> RunSpec:
    return RunSpec(env_id, episodes, options.get("seed", 0), dict(options.get("env_kwargs") or {}),
                   options.get("tasks", "sequential"), options.get("group_size", 1))  # fmt: skip


def run(
    env_id: str,
    agent: Policy,
    episodes: int,
    *,
    out: str | os.PathLike[str] | None = None,
    progress: bool = True,
    **options: Any,
) -> list[Trajectory]:
    """Play ``episodes`` episodes and return their records; optionally append them to the JSONL file ``out``
    (a run header, then the episodes: a new run after whatever the file holds), each record signed when
    ``$AGENTGYM_TRAJECTORY_KEY`` holds a key.

    ``options`` are those of ``iter_episodes`` (``seed``, ``env_kwargs``, ``agent_kwargs``, ``tasks``,
    ``group_size``, ``workers``, ``make_env``, ``max_errors``). This keeps every record in memory:
    for long runs use ``run_to_file``, which streams.
    """
    trajs: list[Trajectory] = []  # as played (the caller's objects), not as written
    spec = _spec(env_id, episodes, options)
    key = trajectory_key()  # the operator's signing key, if $AGENTGYM_TRAJECTORY_KEY is set
    with TrajectoryWriter(out, key=key) if out is not None else contextlib.nullcontext() as writer:
        log = _RunLog(writer, spec, agent, options)
        for traj in _progress(iter_episodes(env_id, agent, episodes, **options), episodes, 0, env_id, agent, progress):
            log.add(traj)
            trajs.append(traj)
    return trajs


def run_to_file(
    env_id: str,
    agent: Policy,
    episodes: int,
    out: str | os.PathLike[str],
    *,
    resume: bool = False,
    progress: bool = True,
    **options: Any,
) -> Summary:
    """Play ``episodes`` episodes, appending a run header and then each record to ``out`` as it finishes; returns
    the summary.

    Memory stays flat in the number of episodes (records are streamed, the summary is a running aggregate of the
    records written). With ``resume=True`` the episodes of the last run in ``out`` count as this run's first (a
    torn final record is cut first): the run continues where an interrupted run of the same arguments stopped, and
    the file ends up identical to an uninterrupted run's (signed, with the key of ``$AGENTGYM_TRAJECTORY_KEY``, as
    the records of the same run: a signed run is continued only with its key, and an unsigned one only without a
    key). Resuming with another ``episodes`` adds a header saying so (the run was extended or cut short).
    ``options`` are those of ``iter_episodes``.
    """
    summary = Summary(group_size=options.get("group_size", 1))
    spec = _spec(env_id, episodes, options)
    key = trajectory_key()
    header, start, after = None, 0, None
    if resume and os.path.exists(out):
        with open(out, "ab+") as f:
            cut_torn_tail(f)
        header, start, summary, after = _resume_point(out, spec, agent, options.get("agent_kwargs"), key)
    with TrajectoryWriter(out, key=key, after=after) as writer:
        if header is not None and header.episodes != episodes:
            header = dataclasses.replace(header, episodes=episodes, start=start)
            writer.write(header)
        log = _RunLog(writer, spec, agent, options, header, start)
        stream = iter_episodes(env_id, agent, episodes, start=start, **options)
        for traj in _progress(stream, episodes, start, env_id, agent, progress):
            summary.add(log.add(traj))
    return summary


def _resume_point(
    out: str | os.PathLike[str], spec: RunSpec, agent: Policy, agent_kwargs: dict[str, Any] | None,
    key: bytes | None = None,
) -> tuple[RunHeader | None, int, Summary, Seal | None]:  # fmt: skip
    """The header of the last run in ``out``, how many of its episodes are there, their summary, and the seal of
    its last record (None unless signed); ``ValueError`` if that run is not ``spec``'s, its records are not its
    first episodes in order, or it is signed and ``key`` cannot continue its chain (no key, another key, or a run
    signed in format 3), or unsigned and ``key`` is given."""
    header: RunHeader | None = None
    start = 0
    summary = Summary(group_size=spec.group_size)
    chain = _Chain(out, key)
    for rec in read_records(out, key=key):
        if rec.header is not None:
            if rec.header.start == 0 and (header is None or rec.header.run_id != header.run_id or start):
                header, start, summary = rec.header, 0, Summary(group_size=spec.group_size)  # a new run
                chain = _Chain(out, key)
            elif header is None or rec.header.run_id != header.run_id or rec.header.start != start:
                raise ValueError(f"{out}:{rec.lineno}: cannot resume: a run header out of place")
            else:
                header = rec.header
            chain.add(rec.lineno, rec.seal, rec.signed)
            continue
        if rec.trajectory is None:
            raise ValueError(f"{out}:{rec.lineno}: cannot resume after a bad record: {rec.error}")
        traj = rec.trajectory
        if header is None:
            raise ValueError(f"{out} holds records without a run header (an older agentgym's, or not a run's): it "
                             "cannot be continued; start a new run (--overwrite, or another --out)")  # fmt: skip
        if traj.run_id != header.run_id or traj.index != start:
            raise ValueError(f"{out}:{rec.lineno}: cannot resume: the record is not episode {start} of its run")
        chain.add(rec.lineno, rec.seal, rec.signed)
        summary.add(traj)
        start += 1
    if header is None:
        return None, 0, summary, None
    name, kwargs = agent_spec(agent, agent_kwargs)
    given = normalize(spec.env_kwargs)
    theirs = (header.env_id, header.seed, header.tasks, header.group_size, header.agent_name, header.agent_kwargs)
    ours = (spec.env_id, spec.seed, spec.tasks, spec.group_size, name, kwargs)
    if theirs != ours or any(header.env_kwargs.get(k, object()) != v for k, v in given.items()):
        raise ValueError(f"{out} holds another run ({header.env_id}, seed {header.seed}, agent {header.agent}, "
                         f"env_kwargs {header.env_kwargs}); resume it with the arguments it was made with")  # fmt: skip
    if start > spec.episodes:
        raise ValueError(f"{out} already holds {start} episodes, more than --episodes {spec.episodes}")
    return header, start, summary, chain.last()


@dataclass
class _Chain:
    """The signing chain of the run being resumed: whether the operator's ``key`` can continue it (its records all
    signed with it in format 4, each following the one before) and the seal of its last record."""

    out: str | os.PathLike[str]
    key: bytes | None
    seal: Seal | None = None
    signed: bool = False  # whether any record of the run is signed (has a seal)
    problem: str | None = None

    def add(self, lineno: int, seal: Seal | None, signed: bool | None) -> None:
        if self.problem is None and self.key is not None:
            if not signed:
                self.problem = f"line {lineno} is not signed with this key"
            elif seal is None:
                self.problem = f"line {lineno} is signed in format 3, whose signatures do not chain"
            elif self.seal is not None and (seal.nonce != self.seal.nonce or seal.prev != self.seal.mac):
                self.problem = f"line {lineno} does not follow the record before it in the run"
        self.seal, self.signed = seal, self.signed or seal is not None

    def last(self) -> Seal | None:
        """The seal the run's next record follows (None without a key); ``ValueError`` if it cannot be continued."""
        if self.key is None and self.signed:
            raise ValueError(f"{self.out} holds a signed run: set ${KEY_ENV} to the key it was signed with to "
                             "continue it")  # fmt: skip
        if self.problem is not None:
            raise ValueError(f"cannot continue the run in {self.out} signed with ${KEY_ENV}: {self.problem} (unset "
                             "the variable to continue an unsigned run, or start a new run)")  # fmt: skip
        return self.seal if self.key is not None else None


def _progress(
    stream: Iterator[Trajectory], episodes: int, start: int, env_id: str, agent: Policy, show: bool
) -> Iterator[Trajectory]:
    """Show a progress bar over ``stream``. It starts once the first episode is done, so building the env (and,
    on a first run, compiling retrieval kernels) does not count towards the rate: the ETA stays honest."""
    label = agent if isinstance(agent, str) else getattr(agent, "name", None) or getattr(agent, "__name__", "policy")
    bar = None
    try:
        for traj in stream:
            if bar is None:
                bar = tqdm(total=episodes, initial=start, desc=f"{env_id} | {label}", disable=not show, unit="ep",
                           leave=False)  # fmt: skip
            bar.update(1)
            yield traj
    finally:
        if bar is not None:
            bar.close()


def episode_metrics(traj: Trajectory) -> dict[str, float]:
    """Per-episode numbers for summaries: success, return, turns, invalid-action rate, env metrics."""
    n = len(traj.turns)
    out = {
        "success": float(traj.success),
        "return": traj.total_reward,
        "turns": float(n),
        "invalid_rate": sum(not t.action_valid for t in traj.turns) / n if n else 0.0,
        "error": float(traj.error is not None),
    }
    for k, v in traj.final_info.get("metrics", {}).items():
        if isinstance(v, int | float):
            out[k] = float(v)
    return out


def category_of(traj: Trajectory) -> str:
    """The task category used to break summaries down (SearchQA: the hop type)."""
    gold = traj.reset_info.get("gold") or {}
    return str(gold.get("category") or gold.get("hop_type") or gold.get("task_type") or "all")


def pass_hat_k(successes: int, trials: int, k: int) -> float:
    """tau-bench's pass^k of one task: the chance that ``k`` trials drawn from ``trials`` all succeed,
    ``C(successes, k) / C(trials, k)`` (pass^1 is the success rate; pass^k falls as k grows unless the agent is
    reliable).

    >>> pass_hat_k(3, 4, 1), pass_hat_k(3, 4, 2), pass_hat_k(4, 4, 4)
    (0.75, 0.5, 1.0)
    """
    if not 1 <= k <= trials or not 0 <= successes <= trials:
        raise ValueError(f"need 1 <= k <= trials and 0 <= successes <= trials, got {successes=}, {trials=}, {k=}")
    return math.comb(successes, k) / math.comb(trials, k)


class Summary:
    """Running means of ``episode_metrics``, overall and per task category: what ``summarize`` reports, built
    one episode at a time in constant memory per category.

    ``turns_to_success`` is the mean number of turns of the successful episodes (None without any); where the
    episodes report a ``questions`` metric (the user-simulation envs), ``questions_per_success`` is every question
    asked divided by the successes: what one success costs in questions, failures included (None without any). With
    ``group_size`` K > 1 (episodes added in groups of K trials of one task, as ``run(..., group_size=K)`` plays
    them), rows also hold ``pass^1`` .. ``pass^K``: ``pass_hat_k`` per task, averaged over tasks.

    >>> s = Summary()
    >>> s.rows()
    []
    """

    def __init__(self, *, by_category: bool = True, group_size: int = 1):
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        self.by_category = by_category
        self.group_size = group_size
        self._sums: dict[str, dict[str, float]] = {}
        self._counts: dict[str, int] = {}
        self._pass_sums: dict[str, list[float]] = {}
        self._pass_counts: dict[str, int] = {}
        self._trial_successes: list[bool] = []  # the current group's
        self._won: dict[str, list[float]] = {}  # group -> [successful episodes, their turns]

    def add(self, traj: Trajectory) -> None:
        metrics = episode_metrics(traj)
        groups = ("", category_of(traj)) if self.by_category else ("",)
        for group in groups:
            sums = self._sums.setdefault(group, {})
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + v
            self._counts[group] = self._counts.get(group, 0) + 1
            if traj.success:
                won = self._won.setdefault(group, [0.0, 0.0])
                won[0] += 1
                won[1] += len(traj.turns)
        if self.group_size > 1:
            self._trial_successes.append(bool(traj.success))
            if len(self._trial_successes) == self.group_size:
                c, n = sum(self._trial_successes), self.group_size
                for group in groups:
                    pass_sums = self._pass_sums.setdefault(group, [0.0] * n)
                    for j in range(1, n + 1):
                        pass_sums[j - 1] += pass_hat_k(c, n, j)
                    self._pass_counts[group] = self._pass_counts.get(group, 0) + 1
                self._trial_successes = []

    @property
    def episodes(self) -> int:
        return self._counts.get("", 0)

    def rows(self) -> list[dict[str, Any]]:
        """One row for all episodes, then one per category when there is more than one category."""
        groups = [g for g in self._counts if g]
        names = [("", "all")] + ([(g, "uncategorised" if g == "all" else g) for g in groups] if len(groups) > 1 else [])
        rows = []
        for group, name in names:
            if group not in self._counts:
                continue
            n = self._counts[group]
            row = {"category": name, "episodes": n, **{k: v / n for k, v in self._sums[group].items()}}
            won = self._won.get(group)
            row["turns_to_success"] = won[1] / won[0] if won else None
            if "questions" in self._sums[group]:
                wins = self._sums[group].get("success", 0.0)
                row["questions_per_success"] = self._sums[group]["questions"] / wins if wins else None
            tasks = self._pass_counts.get(group, 0)
            for j, total in enumerate(self._pass_sums.get(group, []), start=1):
                row[f"pass^{j}"] = total / tasks
            rows.append(row)
        return rows


def summarize(trajs: Iterable[Trajectory], *, by_category: bool = True) -> list[dict[str, Any]]:
    """Mean metrics over episodes, overall and per category; one dict per row."""
    summary = Summary(by_category=by_category)
    for t in trajs:
        summary.add(t)
    return summary.rows()


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, *, markdown: bool = True) -> str:
    """Render rows as an aligned Markdown table (floats to 3 decimals)."""
    if not rows:
        return "(no rows)"
    cols = list(columns or dict.fromkeys(k for r in rows for k in r))

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}"
        return "" if v is None else str(v)

    body = [[cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]
    numeric = [any(_is_number(r.get(c)) for r in rows) and all(_is_number(r.get(c)) or r.get(c) is None for r in rows)
               for c in cols]  # fmt: skip

    def line(cells: Sequence[str]) -> str:
        parts = [s.rjust(w) if num else s.ljust(w) for s, w, num in zip(cells, widths, numeric, strict=True)]
        return "| " + " | ".join(parts) + " |"

    sep = (
        "|"
        + "|".join(("-" * (w + 1) + ":") if num else ("-" * (w + 2)) for w, num in zip(widths, numeric, strict=True))
        + "|"
    )
    lines = [line(cols), sep, *(line(b) for b in body)]
    return "\n".join(lines) if markdown else "\n".join(lines[:1] + lines[2:])


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)
