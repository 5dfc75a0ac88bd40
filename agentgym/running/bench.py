"""``agentgym bench``: every registered env x its built-in agents, as tables, a Markdown report and plots.

For each env the built-in agents play the same ``episodes`` tasks of the test split (task ``i`` with seed
``seed + i``). The report breaks results down by task category (SearchQA: hop type) and writes
``report.md`` (one table per env, with the metrics that env reports, and a legend), ``results.json``,
``trajectories/<env>__<agent>.jsonl`` and PNG bar charts to ``out``.

``progress.json`` records each finished env-agent pair as it finishes, so that an interrupted bench (Ctrl-C)
continues where it stopped when the same bench runs again into the same folder (``bench(..., resume=True)``): the
finished pairs are kept, the interrupted one continues its trajectory file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from agentgym.contract.parsing import loads_untrusted
from agentgym.contract.registry import list_envs, unavailable_reason
from agentgym.running.runner import builtin_agents, format_table, run_to_file

#: Per-env constructor arguments used by the bench (the defaults of each env otherwise).
BENCH_ENV_KWARGS: dict[str, dict[str, Any]] = {}
#: Episode caps per env: a random Household episode runs 50 steps, each recording its admissible commands, so
#: 2,000 of them would write ~165 MB of trajectories; 500 tasks already cover every task type and split. BFCL has
#: 800 tasks (200 per category): more episodes would replay them.
BENCH_MAX_EPISODES: dict[str, int] = {"agentgym/Household-v0": 500, "agentgym/BFCL-v0": 800}
#: Every metric a bench row may hold, in the order the tables show them, with what it means (the report's legend).
#: Rows are means over the row's episodes unless the definition says otherwise.
METRICS: dict[str, str] = {
    "episodes": "episodes played",
    "success": "share of episodes the env scored a success",
    "return": "mean sum of rewards per episode",
    "turns": "mean agent turns per episode",
    "turns_to_success": "mean turns of the successful episodes only",
    "invalid_rate": "share of turns whose action did not parse",
    "error": "share of episodes that ended with an exception (see the trajectories' error field)",
    "em": "exact match of the answer with a gold answer",
    "f1": "token F1 of the answer against the best gold answer",
    "subem": "a gold answer appears in the answer",
    "supporting_recall": "share of the gold supporting documents the searches retrieved",
    "searches": "mean searches per episode",
    "calls": "mean tool calls per episode",
    "state_checks_passed": "share of instructions after which the tool state equals the gold state",
    "facts_told": "share of the facts the agent had to tell the user that it told",
    "db_match": "database as gold: the store after the episode equals the gold calls replayed on a fresh store",
    "policy_violation": "share of episodes ended by a policy violation (an action the service policy forbids)",
    "writes": "mean calls that changed the database",
    "questions": "mean messages to the (simulated) user",
    "questions_per_success": "questions per successful episode (all questions / successes)",
    "elicited": "share of the task's details left out of the opening that the user then stated",
    "elicited_per_question": "those details per question",
    "best": "share of episodes that picked the best item",
    "acceptable": "share that picked an acceptable item that is not the best (part credit)",
    "information_gain": "bits of information the questions gained per episode (log2 of candidates ruled out)",
    "information_gain_per_question": "bits per question (1 is a perfect halving question)",
    "candidates": "candidates at the start of the episode",
    "candidates_left": "candidates still consistent with the answers at the end",
    "unparsed": "questions the answerer could not read as a yes/no question",
    "simulator_failure": "share of episodes the simulated user failed (truncated, not scored as the agent's failure)",
    "python_calls": "mean code runs per episode",
    "invalid_calls": "mean tool calls that did not parse",
    "runs_ok": "mean code runs that exited normally",
    "runs_error": "mean code runs that raised or exited non-zero",
    "runs_timeout": "mean code runs killed at the time limit",
    "runs_memory": "mean code runs killed at the memory limit",
    "runs_killed": "mean code runs killed otherwise",
    "bfcl_success": "BFCL's own verdict (every turn's state and execution checks pass)",
    "turns_passed": "share of the user turns whose checks passed",
    "irrelevance": "no call in a turn whose gold has none",
    "seconds": "wall-clock seconds of the agent's whole run (shown on the all row)",
}
#: Columns every env table starts with (the env and agent come first in the printed tables).
KEY_COLUMNS = ("env", "agent", "category")
#: The printed and report tables' columns, in order; a metric not listed here comes after them, by name.
COLUMNS = (*KEY_COLUMNS, *METRICS)
#: Per-pair progress of a bench, rewritten as each env-agent pair finishes.
PROGRESS = "progress.json"


@dataclass
class BenchResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: env id -> why it was skipped (an adapter whose package or data is missing)
    skipped: dict[str, str] = field(default_factory=dict)
    report_path: Path | None = None
    plots: list[Path] = field(default_factory=list)


class BenchMismatch(ValueError):
    """``resume``: the folder holds the progress of a bench with other settings."""


def _slug(s: str) -> str:
    return s.replace("/", "_").replace(":", "_")


def bench_settings(
    *, episodes: int, seed: int, envs: Sequence[str], agents: Sequence[str] | None, trials: int,
    env_kwargs: dict[str, dict[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    """What must match for a bench to continue another's progress (JSON, as ``progress.json`` stores it)."""
    kwargs = {e: {**BENCH_ENV_KWARGS.get(e, {}), **env_kwargs.get(e, {})} for e in envs}
    return json.loads(json.dumps({"episodes": episodes, "seed": seed, "envs": list(envs), "trials": trials,
                                  "agents": sorted(agents) if agents else None, "env_kwargs": kwargs}))  # fmt: skip


def read_progress(out: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The progress ``out`` holds (``{"settings", "envs": {env: {"agents", "skipped", "rows", "seconds"}},
    "complete"}``), or None when there is none (or it is unreadable)."""
    try:
        progress = loads_untrusted((Path(out) / PROGRESS).read_text(encoding="utf-8"), PROGRESS)
    except (OSError, ValueError):  # unreadable, not JSON, or JSON past the limits (nested thousands deep, ...)
        return None
    return progress if isinstance(progress, dict) and isinstance(progress.get("envs"), dict) else None


def finished_envs(progress: dict[str, Any]) -> list[str]:
    """The envs of ``progress`` that are done: every agent played (or the env skipped)."""
    return [e for e, entry in progress["envs"].items()
            if entry.get("skipped") or set(entry.get("agents", [])) <= set(entry.get("rows", {}))]  # fmt: skip


def _write_progress(out: Path, progress: dict[str, Any]) -> None:
    tmp = out / f".{PROGRESS}.tmp"
    tmp.write_text(json.dumps(progress, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out / PROGRESS)  # a Ctrl-C never leaves half a file


def bench(
    *,
    episodes: int = 100,
    seed: int = 0,
    out: str | os.PathLike[str] = "reports/bench",
    envs: Sequence[str] | None = None,
    agents: Sequence[str] | None = None,
    workers: int = 1,
    progress: bool = True,
    env_kwargs: dict[str, dict[str, Any]] | None = None,
    trials: int = 1,
    resume: bool = False,
) -> BenchResult:
    """Run the benchmark and write the report; returns the summary rows. With ``trials`` K > 1 each task is played
    K times (agent seeds differ) and the rows add ``pass^1`` .. ``pass^K``. ``resume``: continue the progress
    ``out`` holds (the finished env-agent pairs are kept, an interrupted one continues its file); a
    ``BenchMismatch`` if it is the progress of a bench with other settings."""
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    out = Path(out)
    env_ids = list(envs or list_envs())
    settings = bench_settings(episodes=episodes, seed=seed, envs=env_ids, agents=agents, trials=trials,
                              env_kwargs=env_kwargs or {})  # fmt: skip
    state = read_progress(out) if resume else None
    if state is not None and state.get("settings") != settings:
        raise BenchMismatch(f"{out} holds the progress of a bench with other settings")
    state = state or {"settings": settings, "envs": {}, "complete": False}
    state["complete"] = False
    (out / "trajectories").mkdir(parents=True, exist_ok=True)
    _write_progress(out, state)
    result = BenchResult()
    for env_id in env_ids:
        kwargs = settings["env_kwargs"][env_id]
        entry = state["envs"].get(env_id)
        if entry is None:
            probe = gym.make(env_id, **kwargs)
            names = [a for a in builtin_agents(probe) if agents is None or a in agents]
            reason = unavailable_reason(probe)
            probe.close()
            entry = state["envs"][env_id] = {"agents": names, "skipped": reason, "rows": {}, "seconds": {}}
            _write_progress(out, state)
        if entry["skipped"]:
            result.skipped[env_id] = entry["skipped"]
            continue
        n = min(episodes, BENCH_MAX_EPISODES.get(env_id, episodes)) * trials
        for agent in entry["agents"]:
            if agent not in entry["rows"]:
                entry["rows"][agent] = _play(env_id, agent, n, out, kwargs, entry, state, seed=seed,
                                             workers=workers, progress=progress, trials=trials)  # fmt: skip
                _write_progress(out, state)
            result.rows += entry["rows"][agent]
    (out / "results.json").write_text(json.dumps(result.rows, indent=2) + "\n", encoding="utf-8")
    result.plots = plot_results(result.rows, out)
    result.report_path = out / "report.md"
    report = render_report(result.rows, result.plots, episodes, seed, result.skipped)
    result.report_path.write_text(report, encoding="utf-8")
    state["complete"] = True
    _write_progress(out, state)
    return result


def _play(
    env_id: str, agent: str, n: int, out: Path, kwargs: dict[str, Any], entry: dict[str, Any],
    state: dict[str, Any], *, seed: int, workers: int, progress: bool, trials: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """One env-agent pair's rows. A pair with time on record was interrupted: its file continues where it stopped
    (it is restarted if it cannot); a Ctrl-C records the time played so far and re-raises."""
    path = out / "trajectories" / f"{_slug(env_id)}__{agent}.jsonl"
    earlier = float(entry["seconds"].get(agent, 0.0))
    resume = agent in entry["seconds"] and path.exists()
    if not resume:
        path.unlink(missing_ok=True)
    start = time.perf_counter()
    options: dict[str, Any] = {
        "seed": seed,
        "env_kwargs": kwargs,
        "workers": workers,
        "progress": progress,
        "group_size": trials,
    }
    try:
        try:
            summary = run_to_file(env_id, agent, n, path, resume=resume, **options)
        except ValueError:  # its file is not the start of this run (e.g. written by another version): start over
            if not resume:
                raise
            path.unlink()
            summary = run_to_file(env_id, agent, n, path, **options)
    except KeyboardInterrupt:
        entry["seconds"][agent] = earlier + time.perf_counter() - start
        _write_progress(out, state)
        raise
    seconds = earlier + time.perf_counter() - start
    entry["seconds"][agent] = seconds
    rows = []
    for row in summary.rows():
        timing = {"seconds": seconds} if row["category"] == "all" else {}
        rows.append({"env": env_id, "agent": agent, **row, **timing})
    return rows


def _columns(rows: Sequence[dict[str, Any]], *, env_column: bool) -> list[str]:
    """The columns ``rows`` fill (a metric no row has a value for is left out): the key columns, the ``METRICS`` in
    their order, other metrics by name, every ``pass^k`` in order of k, then ``seconds``."""
    filled = {k for r in rows for k, v in r.items() if v is not None}
    keys = [c for c in KEY_COLUMNS if c in filled and (env_column or c != "env")]
    known = [c for c in METRICS if c in filled and c != "seconds"]
    passes = sorted((c for c in filled if c.startswith("pass^")), key=lambda c: int(c.removeprefix("pass^")))
    other = sorted(filled - set(keys) - set(known) - set(passes) - {"env", "seconds"})
    return [*keys, *known, *other, *passes, *(["seconds"] if "seconds" in filled else [])]


def table(rows: Sequence[dict[str, Any]], *, env_column: bool = True) -> str:
    """The rows as aligned Markdown tables, one per env (a blank line between), each with only the columns that env
    fills."""
    if not rows:
        return format_table(rows)
    by_env: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_env.setdefault(r.get("env", ""), []).append(r)
    return "\n\n".join(format_table(group, _columns(group, env_column=env_column)) for group in by_env.values())


#: Columns every env's rows have: the report defines them once, above the tables.
COMMON_COLUMNS = ("episodes", "success", "return", "turns", "turns_to_success", "invalid_rate", "error", "seconds")


def legend(rows: Sequence[dict[str, Any]], *, skip: Sequence[str] = ()) -> list[str]:
    """Markdown list items defining each metric column of ``rows`` (``pass^k`` included), but those in ``skip``."""
    columns = [c for c in _columns(rows, env_column=False) if c not in skip]
    items = [f"- `{c}`: {METRICS.get(c, 'a metric the env reports (see its docs)')}" for c in columns
             if c not in KEY_COLUMNS and not c.startswith("pass^")]  # fmt: skip
    if any(c.startswith("pass^") for c in columns):
        items.append("- `pass^k`: chance that k plays of one task all succeed (tau-bench's reliability, --trials)")
    return items


def render_report(
    rows: Sequence[dict[str, Any]], plots: Sequence[Path], episodes: int, seed: int, skipped: dict[str, str]
) -> str:
    caps = ", ".join(f"{k}: {v}" for k, v in BENCH_MAX_EPISODES.items())
    common = [c for c in COMMON_COLUMNS if any(c in r for r in rows)]
    lines = [
        "# agentgym bench",
        "",
        f"Up to {episodes} episodes per env and agent (caps: {caps}); task i with seed {seed} + i; test split.",
        "`oracle` reads privileged gold data: it is an upper bound proving the tasks are solvable, not a baseline.",
        "",
        "Each env has its own table, with only the metrics it reports (defined under the table): an `all` row per "
        "agent, then one row per task category. Values are means over the row's episodes. The columns every env has:",
        "",
        "- `agent`: the built-in agent that played; `category`: the task category (`all`: every episode)",
        *legend([{c: 0.0 for c in common}]),
        "",
    ]
    plot_of = {p.name: p for p in plots}
    for env_id in dict.fromkeys(r["env"] for r in rows):
        env_rows = [r for r in rows if r["env"] == env_id]
        lines += [f"## {env_id}", "", table(env_rows, env_column=False), ""]
        if own := legend(env_rows, skip=COMMON_COLUMNS):
            lines += [*own, ""]
        if plot := plot_of.get(f"{_slug(env_id)}_success.png"):
            lines += [f"![{plot.stem}]({plot.name})", ""]
    if skipped:
        lines += ["## Skipped", ""]
        lines += [f"- {env_id}: {' '.join(why.split())}" for env_id, why in skipped.items()]
    return "\n".join(lines).rstrip("\n") + "\n"


def _wrap_label(category: str, width: int = 14) -> str:
    """A category name broken after underscores into lines of about ``width`` characters (long task-type names
    such as ``pick_clean_then_place_in_recep`` would otherwise run into their neighbours on the x axis)."""
    lines = [""]
    for part in category.split("_"):
        piece = part if not lines[-1] else "_" + part
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines[-1] += "_"
            lines.append(part)
        else:
            lines[-1] += piece
    return "\n".join(lines)


#: Plot geometry, in inches: the room of one bar's value label (its text, rotated when the bar is narrower), the
#: least width of a figure (a one-category plot still fits its title), and the room of one legend entry.
LABEL_WIDTH, MIN_FIG_WIDTH, LEGEND_ENTRY_WIDTH = 0.32, 4.5, 1.1


def plot_results(rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """One PNG per env: success rate per agent and category (grouped bars). The figure widens with the categories
    and agents; value labels turn upright when bars are too narrow for them; the title wraps to the figure."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for env_id in dict.fromkeys(r["env"] for r in rows):
        env_rows = [r for r in rows if r["env"] == env_id]
        agents = list(dict.fromkeys(r["agent"] for r in env_rows))
        cats = list(dict.fromkeys(r["category"] for r in env_rows))
        group = max(1.4, 0.8 + 0.24 * len(agents))  # inches per category: a bar of each agent and a gap
        fig_width = max(MIN_FIG_WIDTH, 1.2 + group * len(cats))
        bar_width = group * 0.8 / max(1, len(agents))
        upright = bar_width < LABEL_WIDTH
        fig, ax = plt.subplots(figsize=(fig_width, 4.0), dpi=120, layout="constrained")
        width = 0.8 / max(1, len(agents))
        for k, agent in enumerate(agents):
            vals = [
                next((r["success"] for r in env_rows if r["agent"] == agent and r["category"] == c), 0.0) for c in cats
            ]
            xs = [i + (k - (len(agents) - 1) / 2) * width for i in range(len(cats))]
            bars = ax.bar(xs, vals, width=width, label=agent)
            ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2, rotation=90 if upright else 0)
        ax.set_xticks(range(len(cats)), [_wrap_label(c) for c in cats], fontsize=8)
        ax.set_ylim(0, 1.3 if upright else 1.15)
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.set_ylabel("success rate")
        title = f"{env_id}: success by agent and category"
        ax.set_title("\n".join(textwrap.wrap(title, max(20, int(fig_width * 9)))), fontsize=10)
        ncols = max(1, min(len(agents), int(fig_width / LEGEND_ENTRY_WIDTH)))
        fig.legend(fontsize=8, ncols=ncols, loc="outside lower center", frameon=False)
        path = out / f"{_slug(env_id)}_success.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths
