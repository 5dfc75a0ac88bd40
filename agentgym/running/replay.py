"""Deterministic replay: re-execute recorded trajectories, check the run as a whole, report any divergence.

Each episode is replayed on an env built from its ``env_id`` and ``env_kwargs``, reset with its ``seed`` and
``options``, and fed its recorded actions; every observation, reward, flag and ``info`` must match the record
exactly (compared as canonical JSON: key order never matters), the record's ``task_id`` must be the one the env
resets to, and an episode recorded without an error must end where the env ends it (no turns missing).

A run's file starts with a run header (``agentgym.contract.trajectory.RunHeader``); replay checks that the records after
it are exactly the run's planned episodes, each once, in order: episode ``i`` names the run and position ``i``, has
the env, arguments and agent label of the header, the seed and options the plan gives position ``i``, and the run
holds as many episodes as planned (a file cut short is reported). When the header names a built-in agent of the
env (given by name, e.g. ``heuristic``), replay reruns it with the episode's agent seed and its actions must be
the recorded ones; any other agent's label (an LLM, a callable) cannot be checked by re-execution, and such
episodes are reported as *unverified*, not identical. Records without a run header (format 1 and 2 files, or a
``TrajectoryWriter`` used directly) and format-1 records (no checksum) are refused unless ``allow_legacy``: then
they are replayed one by one and reported as unverified.

The checksum of each record is a digest anyone can recompute, not a signature: it catches accidental corruption;
re-execution catches any edit that changes what the env would do and the run-level check any missing, duplicated
or reordered episode. Neither stops someone who rewrites a record's agent label or actions (for an agent replay
cannot rerun) and recomputes its checksum; signatures do (``key``: records written with ``$AGENTGYM_TRAJECTORY_KEY``
set carry an HMAC that only a holder of the key can make). In format 4 each signature also covers the run's random
nonce and the signature of the record before it (``agentgym.contract.trajectory.Seal``), so with the key replay refuses
records of two runs of one plan spliced together, and a run's records reordered or dropped from the middle, naming
the first record that does not follow its run. A format-3 signature vouches for its record alone: the label of an
agent replay cannot rerun stays unverified in such a run.

An episode whose record was too large to write holds only what identifies it and its ``error`` (``TOO_LARGE``):
replay checks its task and reports it unverified.

A bad record (unreadable, an unknown field or format version, an env that is not registered or does not accept the
recorded arguments) is reported and replay goes on: nothing in the file makes replay raise. Only registered envs
are made: a record cannot make replay import a module.

>>> import agentgym, tempfile, os
>>> from agentgym.running.runner import run
>>> path = os.path.join(tempfile.mkdtemp(), "t.jsonl")
>>> _ = run("agentgym/SearchQA-v0", "heuristic", 2, env_kwargs={"dataset": "tiny"}, out=path, progress=False)
>>> [(r.ok, r.unverified) for r in replay_file(path)]
[(True, None), (True, None)]
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym.contract.agent import Agent
from agentgym.contract.env import AgentEnv
from agentgym.contract.trajectory import (
    KEY_ENV,
    TOO_LARGE,
    Record,
    RunHeader,
    Seal,
    Trajectory,
    canonical,
    read_records,
)
from agentgym.contract.trust import checked_kwargs, operator_args_for


@dataclass
class ReplayResult:
    """Outcome of replaying one trajectory; ``divergence`` describes the first mismatch, ``unverified`` what replay
    could not check of an episode that otherwise replayed identically. ``kind == "run"`` marks a problem of the
    file as a whole (an incomplete run, a misplaced header), not of one episode."""

    index: int
    task_id: str
    turns: int
    divergence: str | None = None
    unverified: str | None = None
    kind: str = "episode"
    lineno: int = 0

    @property
    def ok(self) -> bool:
        return self.divergence is None


def _canon(x: Any) -> str:
    try:
        return canonical(x)
    except ValueError as e:  # a replayed value with no JSON form (NaN, an object): never equal to a record
        return f"<no JSON form: {e}>"


def _first_diff(what: str, recorded: Any, replayed: Any) -> str | None:
    a, b = _canon(recorded), _canon(replayed)
    if a == b:
        return None
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    lo, hi = max(0, i - 40), i + 40
    return f"{what} differs at character {i}: recorded {a[lo:hi]!r} vs replayed {b[lo:hi]!r}"


def replay_trajectory(
    traj: Trajectory,
    env: gym.Env | None = None,
    index: int = 0,
    *,
    agent: Agent | None = None,
    agent_seed: int | None = None,
) -> ReplayResult:
    """Replay one trajectory (on ``env`` if given, else a fresh env from its record). With ``agent`` (a
    deterministic built-in agent, reset with ``agent_seed``) each recorded action must also be the agent's."""
    result = ReplayResult(index=index, task_id=traj.task_id, turns=len(traj.turns))
    own = env is None
    try:
        env = env or make_recorded_env(traj)
    except ValueError as e:
        result.divergence = str(e)
        return result
    try:
        result.divergence = _replay(traj, env, agent, agent_seed)
        if result.divergence is None and too_large(traj):
            result.unverified = TOO_LARGE_NOTE
    except Exception as e:  # the env or the agent raised on recorded input: reported, replay goes on
        result.divergence = f"replay raised {type(e).__name__}: {' '.join(str(e).split())[:300]}"
    finally:
        if own:
            env.close()
    return result


def _error(e: Exception) -> str:
    return f"{type(e).__name__}: {e}"


def too_large(traj: Trajectory) -> bool:
    """Whether ``traj`` is the record of an episode too large to write (``agentgym.running.runner``): its identity and
    error only."""
    return (traj.error or "").startswith(f"{TOO_LARGE}:") and not traj.turns and not traj.initial_observation


TOO_LARGE_NOTE = "the episode's record was too large to write: its task is checked, its turns are not in the file"


def _replay(traj: Trajectory, env: gym.Env, agent: Agent | None, agent_seed: int | None) -> str | None:
    error = traj.error or ""
    if too_large(traj):
        _, info = env.reset(seed=traj.seed, options=traj.options or None)
        if traj.task_id != str(info.get("task_id", "")):
            return f"the record says task {traj.task_id[:80]!r}, the env reset to {str(info.get('task_id', ''))[:80]!r}"
        return None
    try:
        obs, info = env.reset(seed=traj.seed, options=traj.options or None)
    except Exception as e:
        if error == f"env.reset: {_error(e)}" and not traj.turns:
            return None
        raise
    if error.startswith("env.reset: "):
        return f"the record says the reset failed ({error[:80]!r}); it succeeds on replay"
    diff = _first_diff("reset observation", traj.initial_observation, obs) or _first_diff(
        "reset info", traj.reset_info, info
    )
    if diff:
        return diff
    if traj.task_id != str(info.get("task_id", "")):
        return f"the record says task {traj.task_id[:80]!r}, the env reset to {str(info.get('task_id', ''))[:80]!r}"
    messages = list(obs)
    if agent is not None:
        agent.reset(seed=agent_seed)
    ended = False
    for k, turn in enumerate(traj.turns, 1):
        if ended:
            return f"turn {k} follows the end of the episode"
        if agent is not None:
            diff = _agent_diff(agent, messages, info, turn.action, k)
            if diff:
                return diff
        obs, reward, terminated, truncated, info = env.step(turn.action)
        recorded = [turn.observation, turn.reward, turn.terminated, turn.truncated, turn.info]
        diff = _first_diff(f"turn {k}", recorded, [obs, float(reward), terminated, truncated, info])
        if diff:
            return diff
        ended = terminated or truncated
        messages.append({"role": "assistant", "content": turn.action})
        messages.extend(obs)
    if ended and traj.error is not None:
        return f"the record has an error ({traj.error[:80]!r}) but its episode ended normally"
    if not ended and traj.error is None:
        return f"the record ends after turn {len(traj.turns)}, before the env ended the episode"
    if not ended and agent is not None:  # the episode stopped on a failure: the rerun agent must meet it again
        return _failure_diff(traj, env, agent, messages, info)
    return None


def _failure_diff(
    traj: Trajectory, env: gym.Env, agent: Agent, messages: list[Any], info: dict[str, Any]
) -> str | None:
    """Whether the failure that ended a record (the agent's or the env's step) happens again on replay."""
    error = traj.error or ""
    try:
        action = agent.act(list(messages), info)
    except Exception as e:
        failed = _error(e)
        return None if failed == error else f"the agent failed with {failed[:80]!r}, the record says {error[:80]!r}"
    if not error.startswith("env.step: "):
        return f"the record says the agent failed after turn {len(traj.turns)}, but it plays {action[:80]!r}"
    try:
        env.step(action)
    except Exception as e:
        failed = f"env.step: {_error(e)}"
        return None if failed == error else f"the env failed with {failed[:80]!r}, the record says {error[:80]!r}"
    return f"the record says the env failed on turn {len(traj.turns) + 1}; it succeeds on replay"


def _agent_diff(
    agent: Agent, messages: list[dict[str, Any]], info: dict[str, Any], recorded: str, k: int
) -> str | None:
    try:
        action = agent.act(list(messages), info)
    except Exception as e:
        return f"turn {k}: the agent {agent.name!r} raised {type(e).__name__}: {e}; recorded action {recorded[:80]!r}"
    if action != recorded and _canon(action) != _canon(recorded):
        return f"turn {k}: the agent {agent.name!r} plays {action[:80]!r}, the record says {recorded[:80]!r}"
    return None


def make_recorded_env(traj: Trajectory, env_args: Mapping[str, Any] | None = None) -> gym.Env:
    """The env a record names, made only if its id is registered and its ``env_kwargs`` are ones an outside caller
    may set (``agentgym.contract.trust``: a record is not trusted); ``env_args`` are the operator's (``agentgym replay
    --env-arg``), which replace the record's. ``ValueError`` says why it cannot be made (``UntrustedArgumentError``
    for a refused argument)."""
    if traj.env_id not in gym.registry:
        raise ValueError(f"env {traj.env_id!r} is not registered (replay makes registered envs only)")
    operator = operator_args_for(traj.env_id, env_args or {})
    kwargs = checked_kwargs(traj.env_id, traj.env_kwargs, operator=operator, operator_wins=True)
    try:
        return gym.make(traj.env_id, **kwargs)
    except Exception as e:
        raise ValueError(f"cannot make {traj.env_id} with the recorded env_kwargs: {type(e).__name__}: {e}") from None


# --- a whole file ------------------------------------------------------------------------------------------------

UNSIGNED = f"not signed with the operator's key (${KEY_ENV}): written without it, or altered by someone without it"
#: Why the label of an agent replay cannot rerun stays unverified in a signed format-3 run.
FORMAT_3_SIGNED = "signed in format 3, whose signature vouches for each record alone, not for the run it is in"
#: Envs replay keeps built at once (one per distinct env_id and env_kwargs, the least recently used closed first).
MAX_ENVS = 8
LEGACY_HINT = "pass allow_legacy (agentgym replay --allow-unverified) to replay it, reported as unverified"


@dataclass
class _Run:
    """The run being checked: its (latest) header, the position the next record should hold, its agent."""

    header: RunHeader
    lineno: int
    next: int = 0
    agent: Agent | None = None
    agent_note: str | None = None
    agent_error: str | None = None
    agent_ready: bool = False
    #: With a key: the run's nonce (its first header's), and the seal of its last record read so far and its line;
    #: ``linked`` is False after an unreadable record, whose signature the next record names but replay never saw.
    nonce: str | None = None
    seal: Seal | None = None
    seal_line: int = 0
    linked: bool = True

    def link(self, rec: Record) -> str | None:
        """Why a validly signed record does not follow this run's last record (None when it does); the run's chain
        then goes on from it."""
        seal, want, line = rec.seal, self.seal, self.seal_line
        if seal is not None:
            self.seal, self.seal_line, self.linked = seal, rec.lineno, True
        if seal is None:
            return None if self.nonce is None else "the record has no seal (nonce and prev) in a run bound by one"
        if self.nonce is None:
            return f"the record is bound to a run, but its header at line {self.lineno} (format 3) binds none"
        if seal.nonce != self.nonce:
            return (f"the record is signed for another run than the one of the header at line {self.lineno} (their "
                    "nonces differ: records of two runs spliced together)")  # fmt: skip
        if want is not None and self.linked and seal.prev != want.mac:
            return (f"the record does not follow line {line} of its run (its signature names another record before "
                    "it: records reordered, or removed between them)")  # fmt: skip
        return None


@dataclass
class _Replayer:
    allow_legacy: bool
    env_args: Mapping[str, Any] = field(default_factory=dict)
    key: bytes | None = None
    envs: dict[str, gym.Env] = field(default_factory=dict)  # the most recently used, at most MAX_ENVS
    run: _Run | None = None
    episodes: int = 0  # episode lines so far (each record that is not a header)

    def env_for(self, traj: Trajectory) -> gym.Env:
        key = canonical([traj.env_id, traj.env_kwargs])
        env = self.envs.pop(key, None)
        if env is None:
            env = make_recorded_env(traj, self.env_args)
            if len(self.envs) >= MAX_ENVS:  # a file of many env arguments: memory stays bounded
                self.envs.pop(next(iter(self.envs))).close()
        self.envs[key] = env
        return env

    def close(self) -> None:
        if self.run is not None and self.run.agent is not None:
            self.run.agent.close()
        for env in self.envs.values():
            env.close()

    def header(self, rec: Record) -> Iterator[ReplayResult]:
        h = rec.header
        assert h is not None
        if rec.altered or rec.signed is False:
            yield from self.end_run()
            yield _problem(rec.lineno, f"the run header: {rec.altered or UNSIGNED}")
            return
        if self.run is not None and h.run_id == self.run.header.run_id and h.start == self.run.next:
            broken = self.run.link(rec) if self.key is not None else None
            if broken:
                yield _problem(rec.lineno, f"the run header continuing run {h.run_id}: {broken}")
            self.run.header, self.run.lineno = h, rec.lineno  # the run continues with another episode count
            return
        yield from self.end_run()
        if h.start != 0:
            yield _problem(rec.lineno, f"a run header continuing run {h.run_id} at episode {h.start}, but the file "
                           "holds no such run before it (records removed?)")  # fmt: skip
            return
        self.run = _Run(h, rec.lineno)
        if self.key is not None and rec.seal is not None:  # a new run: its chain starts at its header
            self.run.nonce, self.run.seal, self.run.seal_line = rec.seal.nonce, rec.seal, rec.lineno

    def end_run(self) -> Iterator[ReplayResult]:
        run, self.run = self.run, None
        if run is not None and run.agent is not None:
            run.agent.close()
        if run is not None and run.next < run.header.episodes:
            h = run.header
            yield _problem(run.lineno, f"run {h.run_id} ({h.env_id[:80]}, agent {h.agent[:80]!r}) "
                           f"planned {h.episodes} episodes; the file holds {run.next} (a run cut short: "
                           "continue it with agentgym run ... --append)")  # fmt: skip

    def episode(self, rec: Record) -> ReplayResult:
        traj = rec.trajectory
        assert traj is not None
        index, self.episodes = self.episodes, self.episodes + 1
        result = ReplayResult(index=index, task_id=traj.task_id, turns=len(traj.turns), lineno=rec.lineno)
        run = self.run
        if run is not None:
            position = run.next
            if traj.index is None or traj.index >= position:  # a duplicate keeps the place; a gap resynchronises
                run.next = position + 1 if traj.index is None else traj.index + 1
        try:
            if rec.version < 3 or run is None:
                result.divergence, result.unverified = self.legacy(rec)
                if result.divergence is None:
                    self.replay(result, traj, None, None)
            else:
                result.divergence = _plan_diff(traj, run.header, position)
                if result.divergence is None:
                    env = self.env_for(traj)
                    result.divergence = _options_diff(traj, run.header, position, env)
                    agent = self.agent_of(run, env)
                    result.divergence = result.divergence or run.agent_error
                    if result.divergence is None:
                        result.unverified = self.label_note(rec, run)
                        self.replay(result, traj, env, agent, run.header.seed + position)
        except ValueError as e:  # e.g. an env that cannot be made from the record: reported, replay goes on
            result.divergence = str(e)
        except Exception as e:
            result.divergence = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        broken = run.link(rec) if run is not None and self.key is not None else None
        if broken and rec.signed:
            result.divergence = f"line {rec.lineno}: {broken}" + (f"; and {result.divergence}" if result.divergence
                                                                   else "")  # fmt: skip
        if rec.signed is False:
            result.divergence = f"line {rec.lineno}: {UNSIGNED}" + (f"; and {result.divergence}" if result.divergence
                                                                    else "")  # fmt: skip
        if rec.altered:
            result.divergence = f"line {rec.lineno}: {rec.altered}" + (
                f"; and {result.divergence}" if result.divergence else ""
            )
        return result

    @staticmethod
    def label_note(rec: Record, run: _Run) -> str | None:
        """What is unverified of a record's agent label: nothing when the agent is rerun or the record is signed
        in format 4 (the key holder's word, bound to this run); a format-3 signature binds the record to no run."""
        if run.agent_note is None or (rec.signed and rec.seal is not None):
            return None
        return f"{run.agent_note} ({FORMAT_3_SIGNED})" if rec.signed else run.agent_note

    def legacy(self, rec: Record) -> tuple[str | None, str | None]:
        """Why a record outside a run, or in format 1 or 2, is refused, or what is unverified when allowed."""
        traj = rec.trajectory
        assert traj is not None
        if traj.run_id is not None:
            return f"line {rec.lineno}: the record names run {traj.run_id[:40]}, but no header of it precedes it", None
        if rec.version < 2:
            why = "a format-1 record has no checksum"
        elif rec.version < 3:
            why = f"a format-{rec.version} record belongs to no checked run (older agentgym)"
        else:
            why = "the record belongs to no run (the file has no run header)"
        if not self.allow_legacy:
            return f"line {rec.lineno}: {why}: refused; {LEGACY_HINT}", None
        return None, f"{why}: which episodes the file should hold, and the agent, are not checked"

    def replay(
        self, result: ReplayResult, traj: Trajectory, env: gym.Env | None, agent: Agent | None, seed: int | None = None
    ) -> None:
        done = replay_trajectory(traj, env if env is not None else self.env_for(traj), result.index, agent=agent,
                                 agent_seed=seed)  # fmt: skip
        result.divergence, result.unverified = done.divergence, done.unverified or result.unverified

    def agent_of(self, run: _Run, env: gym.Env) -> Agent | None:
        """The run's built-in agent, rebuilt once per run; None (with ``run.agent_note``) when it cannot be."""
        if run.agent_ready:
            return run.agent
        run.agent_ready = True
        h = run.header
        agents = env.unwrapped.agents if isinstance(env.unwrapped, AgentEnv) else {}
        if h.agent_name is None or h.agent_kwargs is None or h.agent_name not in agents:
            run.agent_note = (f"the agent {h.agent[:80]!r} is not a built-in agent of {h.env_id} that replay can "
                              "rerun: its actions are taken as recorded")  # fmt: skip
            return None
        if not all(v is None or isinstance(v, bool | int | float | str) for v in h.agent_kwargs.values()):
            run.agent_note = f"the agent {h.agent[:80]!r} has arguments that are not plain values: not rerun"
            return None
        from agentgym.running.runner import make_agent

        try:
            agent = make_agent(h.agent_name, env, **h.agent_kwargs)
        except Exception as e:
            why = f"{type(e).__name__}: {str(e)[:200]}"
            run.agent_note = f"the agent {h.agent_name!r} cannot be rebuilt ({why}): not rerun"
            return None
        if agent.name != h.agent:
            agent.close()
            run.agent_error = (
                f"the run's agent {h.agent_name!r} is a built-in agent named {agent.name!r}, not {h.agent[:80]!r}"
            )
            return None
        run.agent = agent
        return agent


def _problem(lineno: int, message: str) -> ReplayResult:
    return ReplayResult(index=-1, task_id="", turns=0, divergence=f"line {lineno}: {message}", kind="run",
                        lineno=lineno)  # fmt: skip


def _plan_diff(traj: Trajectory, h: RunHeader, position: int) -> str | None:
    """What in a record contradicts its run's plan at ``position`` (options aside: they need the env)."""
    if traj.run_id != h.run_id:
        return f"the record belongs to run {str(traj.run_id)[:40]}, not to run {h.run_id} of the header before it"
    if traj.index != position:
        if traj.index is not None and traj.index < position:
            return (f"the record is episode {traj.index} of the run again (a duplicate, or out of order): episode "
                    f"{position} was expected here")  # fmt: skip
        return f"episode(s) {position}..{traj.index - 1 if traj.index else '?'} of the run are missing before it"
    if position >= h.episodes:
        return f"the record is episode {position} of a run of {h.episodes} planned episodes"
    plan = [h.env_id, h.env_kwargs, h.agent, h.seed + position // h.group_size,
            str(position // h.group_size) if h.group_size > 1 else None]  # fmt: skip
    got = [traj.env_id, traj.env_kwargs, traj.agent, traj.seed, traj.group_id]
    for name, want, have in zip(["env_id", "env_kwargs", "agent", "seed", "group_id"], plan, got, strict=True):
        if type(want) is not type(have) or want != have or (name == "env_kwargs" and _canon(want) != _canon(have)):
            return f"the record's {name} is {_canon(have)[:80]}, the run's plan says {_canon(want)[:80]}"
    if any(t.token_spans is not None for t in traj.turns):
        return "the record has token spans: a run records none"
    return None


def _options_diff(traj: Trajectory, h: RunHeader, position: int, env: gym.Env) -> str | None:
    if h.tasks == "random":
        want: dict[str, Any] = {}
    else:
        num_tasks = getattr(env.unwrapped, "num_tasks", None)
        g = position // h.group_size
        want = {"task_index": g % num_tasks if isinstance(num_tasks, int) and num_tasks > 0 else g}
    if _canon(want) != _canon(traj.options):
        return f"the record's options are {_canon(traj.options)[:80]}, the run's plan says {_canon(want)}"
    return None


def replay_file(
    path: str | os.PathLike[str],
    *,
    allow_legacy: bool = False,
    env_args: Mapping[str, Any] | None = None,
    key: bytes | None = None,
) -> Iterator[ReplayResult]:
    """Replay every record of a JSONL file, streamed, reusing one env per (env_id, env_kwargs), and check each run
    as a whole: one result per episode record (bad or altered ones included), plus a ``kind == "run"`` result for
    each problem of a run (cut short, a header out of place). Nothing in the file makes this raise. ``env_args``:
    the operator's constructor arguments (see :func:`make_recorded_env`). With ``key`` (the operator's, as
    ``$AGENTGYM_TRAJECTORY_KEY`` held when the run was written) every record must carry a valid signature, and an
    agent label replay cannot rerun counts as vouched for by the key holder, not unverified; and each signed
    format-4 record must follow the record before it in its run (``_Run.link``)."""
    replayer = _Replayer(allow_legacy, dict(env_args or {}), key)
    try:
        for rec in read_records(path, verify=False, key=key):
            if rec.header is not None:
                yield from replayer.header(rec)
            elif rec.trajectory is not None:
                yield replayer.episode(rec)
            else:
                index, replayer.episodes = replayer.episodes, replayer.episodes + 1
                if replayer.run is not None:
                    replayer.run.next += 1  # an unreadable record takes the place of one episode
                    replayer.run.linked = False
                yield ReplayResult(index=index, task_id="", turns=0, divergence=f"line {rec.lineno}: {rec.error}",
                                   lineno=rec.lineno)  # fmt: skip
        yield from replayer.end_run()
    finally:
        replayer.close()
