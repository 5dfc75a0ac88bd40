"""The ``agentgym`` command line: list, run, bench, check, replay, serve-retriever, and plugin commands (train).

Plugin commands come from the ``agentgym.commands`` entry-point group: ``agentgym NAME ARGS...`` calls the entry
point's ``main(ARGS)`` (``--help`` included). agentgym's own ``train`` is one (``agentgym.baselines.trainer:main``).

agentgym list
agentgym run agentgym/SearchQA-v0 --agent heuristic --episodes 100 --seed 0 --out runs/heuristic
agentgym bench --episodes 500
agentgym check agentgym/SearchQA-v0
agentgym replay runs/heuristic/trajectories.jsonl
agentgym serve-retriever corpus.jsonl --port 8000
agentgym train --preset tiny
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any


def _kv(pairs: Sequence[str]) -> dict[str, Any]:
    """Parse ``key=value`` pairs; values are JSON when they parse as JSON, else strings."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"expected key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def cmd_list(args: argparse.Namespace) -> int:
    import gymnasium as gym

    from agentgym.registry import list_envs
    from agentgym.runner import GENERIC_AGENTS, builtin_agents

    for env_id in list_envs():
        agents = builtin_agents(gym.make(env_id, **_kv(args.env_arg))) if args.agents else []
        suffix = f"  agents: {', '.join([*agents, *GENERIC_AGENTS])}" if agents else ""
        print(f"{env_id}{suffix}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from agentgym.runner import format_table, run, summarize

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "trajectories.jsonl"
    if path.exists() and not args.append:
        raise SystemExit(f"{path} exists; pass --append to add to it or choose another --out")
    trajs = run(
        args.env_id, args.agent, args.episodes, seed=args.seed, env_kwargs=_kv(args.env_arg),
        agent_kwargs=_kv(args.agent_arg), tasks=args.tasks, group_size=args.group_size, workers=args.workers, out=path,
        progress=not args.quiet,
    )  # fmt: skip
    rows = summarize(trajs)
    (out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    print(format_table(rows))
    print(f"\ntrajectories: {path}")
    errors = sum(t.error is not None for t in trajs)
    if errors:
        print(f"warning: {errors} episode(s) ended with an agent error (see the 'error' field)", file=sys.stderr)
    return 0


def _print_report(table_text: str, skipped: dict[str, str], report: Path | None, plots: Sequence[Path]) -> None:
    print(table_text)
    for env_id, why in skipped.items():
        print(f"skipped {env_id}: {why}")
    print(f"\nreport: {report}")
    for p in plots:
        print(f"plot:   {p}")


def cmd_bench(args: argparse.Namespace) -> int:
    if args.rewards:
        from agentgym.reward_bench import reward_bench
        from agentgym.reward_bench import table as reward_table

        out = args.out if args.out != "reports/bench" else "reports/rewards"
        rewards = reward_bench(
            args.env or None, episodes=args.episodes, seed=args.seed, out=out, agents=args.agent or None
        )
        _print_report(reward_table(rewards.rows), rewards.skipped, rewards.report_path, rewards.plots)
        return 0
    from agentgym.bench import bench, table

    result = bench(
        episodes=args.episodes, seed=args.seed, out=args.out, envs=args.env or None, agents=args.agent or None,
        workers=args.workers, progress=not args.quiet,
    )  # fmt: skip
    _print_report(table(result.rows), result.skipped, result.report_path, result.plots)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from agentgym.checker import check

    report = check(args.env_id, env_kwargs=_kv(args.env_arg), seed=args.seed)
    print(report)
    return 0 if report.ok else 1


def cmd_replay(args: argparse.Namespace) -> int:
    from agentgym.replay import replay_file

    n = bad = 0
    for r in replay_file(args.file):
        n += 1
        if not r.ok:
            bad += 1
            print(f"episode {r.index} ({r.task_id}): DIVERGED: {r.divergence}")
    print(f"replayed {n} episode(s): {n - bad} identical, {bad} diverged")
    return 1 if bad else 0


def cmd_serve_retriever(args: argparse.Namespace) -> int:
    from agentgym.tools.retrieval.server import serve_retriever

    serve_retriever(args.corpus, retriever=args.retriever, host=args.host, port=args.port, cache_dir=args.cache_dir)
    return 0


def build_parser(plugins: Mapping[str, EntryPoint] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentgym", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list registered envs")
    p.add_argument("--agents", action="store_true", help="also list each env's agents (builds each env)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("run", help="run an agent on an env and write trajectories")
    p.add_argument("env_id")
    p.add_argument("--agent", required=True, help="a built-in agent (oracle, heuristic, random) or openai / hf")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/latest")
    p.add_argument("--append", action="store_true", help="append to an existing trajectories.jsonl")
    p.add_argument("--workers", type=int, default=1, help="parallel episodes (threads); output is identical")
    p.add_argument("--tasks", choices=["sequential", "random"], default="sequential")
    p.add_argument(
        "--group-size", type=int, default=1, metavar="K",
        help="play each task K times in a row with one seed (GRPO-style groups; --episodes must be a multiple of K)",
    )  # fmt: skip
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env constructor argument")
    p.add_argument("--agent-arg", action="append", default=[], metavar="KEY=VALUE", help="agent constructor argument")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("bench", help="every env x built-in agents: table, Markdown report, PNG plots")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="reports/bench")
    p.add_argument("--env", action="append", default=[], help="restrict to these env ids")
    p.add_argument("--agent", action="append", default=[], help="restrict to these agents")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--rewards", action="store_true", help="benchmark the reward shapers instead (-> reports/rewards)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("check", help="run the env checker (Gymnasium + text-env contract)")
    p.add_argument("env_id")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(fn=cmd_check)

    p = sub.add_parser("replay", help="re-execute recorded trajectories and report divergence")
    p.add_argument("file")
    p.set_defaults(fn=cmd_replay)

    p = sub.add_parser("serve-retriever", help="serve a corpus over Search-R1's POST /retrieve API")
    p.add_argument("corpus", help='corpus JSONL: {"id", "contents"} per line')
    p.add_argument("--retriever", default="bm25", help="bm25, bm25:rank_bm25, dense or hybrid")
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--cache-dir", default=None, help="where indexes persist")
    p.set_defaults(fn=cmd_serve_retriever)

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


def run_plugin(ep: EntryPoint, argv: Sequence[str]) -> int:
    """Load a plugin command and call it with ``argv``; a plugin that fails to load is a one-line error (exit 2)."""
    try:
        command = ep.load()
    except Exception as exc:  # a broken third-party plugin: one line, not a traceback
        why = " ".join(f"{type(exc).__name__}: {exc}".split())
        print(f"agentgym: command {ep.name!r} ({ep.value}) failed to load: {why}", file=sys.stderr)
        return 2
    return int(command(list(argv)) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    plugins = plugin_commands()
    if argv[:1] and argv[0] in plugins:  # a plugin has its own parser: hand it every other argument, --help included
        return run_plugin(plugins[argv[0]], argv[1:])
    parser = build_parser(plugins)
    args = parser.parse_args(argv)
    if args.command == "run" and (args.group_size < 1 or args.episodes % args.group_size):
        parser.error(f"--episodes ({args.episodes}) must be a positive multiple of --group-size ({args.group_size})")
    import agentgym  # noqa: F401  (registers the envs)

    return int(args.fn(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
