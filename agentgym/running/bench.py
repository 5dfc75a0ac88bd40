"""``agentgym bench``: every registered env x its built-in agents, as a table, a Markdown report and plots.

For each env the built-in agents play the same ``episodes`` tasks of the test split (task ``i`` with seed
``seed + i``). The report breaks results down by task category (SearchQA: hop type) and writes
``report.md``, ``results.json``, ``trajectories/<env>__<agent>.jsonl`` and PNG bar charts to ``out``.
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

from agentgym.contract.registry import list_envs, unavailable_reason
from agentgym.running.runner import builtin_agents, format_table, run_to_file

#: Per-env constructor arguments used by the bench (the defaults of each env otherwise).
BENCH_ENV_KWARGS: dict[str, dict[str, Any]] = {}
#: Episode caps per env: a random Household episode runs 50 steps, each recording its admissible commands, so
#: 2,000 of them would write ~165 MB of trajectories; 500 tasks already cover every task type and split. BFCL has
#: 800 tasks (200 per category): more episodes would replay them.
BENCH_MAX_EPISODES: dict[str, int] = {"agentgym/Household-v0": 500, "agentgym/BFCL-v0": 800}
#: Columns shown in the printed table, in order (those an env does not report are left out); every ``pass^k``
#: the rows hold (``--trials K``: pass^1 .. pass^K) comes in order of k before ``seconds``.
COLUMNS = ("env", "agent", "category", "episodes", "success", "return", "turns", "turns_to_success", "invalid_rate",
           "em", "f1", "subem", "supporting_recall", "searches", "simulator_failure", "elicited", "questions",
           "questions_per_success", "information_gain",
           "seconds")  # fmt: skip


@dataclass
class BenchResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: env id -> why it was skipped (an adapter whose package or data is missing)
    skipped: dict[str, str] = field(default_factory=dict)
    report_path: Path | None = None
    plots: list[Path] = field(default_factory=list)


def _slug(s: str) -> str:
    return s.replace("/", "_").replace(":", "_")


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
) -> BenchResult:
    """Run the benchmark and write the report; returns the summary rows. With ``trials`` K > 1 each task is played
    K times (agent seeds differ) and the rows add ``pass^1`` .. ``pass^K``."""
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    out = Path(out)
    (out / "trajectories").mkdir(parents=True, exist_ok=True)
    result = BenchResult()
    for env_id in envs or list_envs():
        kwargs = {**BENCH_ENV_KWARGS.get(env_id, {}), **(env_kwargs or {}).get(env_id, {})}
        probe = gym.make(env_id, **kwargs)
        names = [a for a in builtin_agents(probe) if agents is None or a in agents]
        reason = unavailable_reason(probe)
        probe.close()
        if reason:
            result.skipped[env_id] = reason
            continue
        n = min(episodes, BENCH_MAX_EPISODES.get(env_id, episodes)) * trials
        for agent in names:
            path = out / "trajectories" / f"{_slug(env_id)}__{agent}.jsonl"
            path.unlink(missing_ok=True)
            start = time.perf_counter()
            summary = run_to_file(env_id, agent, n, path, seed=seed, env_kwargs=kwargs, workers=workers,
                                  progress=progress, group_size=trials)  # fmt: skip
            seconds = time.perf_counter() - start
            for row in summary.rows():
                timing = {"seconds": seconds} if row["category"] == "all" else {}
                result.rows.append({"env": env_id, "agent": agent, **row, **timing})
    (out / "results.json").write_text(json.dumps(result.rows, indent=2) + "\n", encoding="utf-8")
    result.plots = plot_results(result.rows, out)
    result.report_path = out / "report.md"
    report = render_report(result.rows, result.plots, episodes, seed, result.skipped)
    result.report_path.write_text(report, encoding="utf-8")
    return result


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as an aligned Markdown table: the ``COLUMNS`` they have, with all their ``pass^k`` columns."""
    present = [c for c in COLUMNS if any(c in r for r in rows)]
    passes = sorted({c for r in rows for c in r if c.startswith("pass^")}, key=lambda c: int(c.removeprefix("pass^")))
    at = present.index("seconds") if "seconds" in present else len(present)
    return format_table(rows, present[:at] + passes + present[at:])


def render_report(
    rows: Sequence[dict[str, Any]], plots: Sequence[Path], episodes: int, seed: int, skipped: dict[str, str]
) -> str:
    caps = ", ".join(f"{k}: {v}" for k, v in BENCH_MAX_EPISODES.items())
    lines = [
        "# agentgym bench",
        "",
        f"Up to {episodes} episodes per env and agent (caps: {caps}); task i with seed {seed} + i; test split.",
        "`oracle` reads privileged gold data: it is an upper bound proving the tasks are solvable, not a baseline.",
        "",
        table(rows),
        "",
    ]
    lines += [f"Skipped {env_id}: {why}" for env_id, why in skipped.items()]
    lines += [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(lines) + "\n"


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


def plot_results(rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """One PNG per env: success rate per agent and category (grouped bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for env_id in dict.fromkeys(r["env"] for r in rows):
        env_rows = [r for r in rows if r["env"] == env_id]
        agents = list(dict.fromkeys(r["agent"] for r in env_rows))
        cats = list(dict.fromkeys(r["category"] for r in env_rows))
        fig, ax = plt.subplots(figsize=(1.2 + 1.4 * len(cats), 3.6), dpi=120, layout="constrained")
        width = 0.8 / max(1, len(agents))
        for k, agent in enumerate(agents):
            vals = [
                next((r["success"] for r in env_rows if r["agent"] == agent and r["category"] == c), 0.0) for c in cats
            ]
            xs = [i + (k - (len(agents) - 1) / 2) * width for i in range(len(cats))]
            bars = ax.bar(xs, vals, width=width, label=agent)
            ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
        ax.set_xticks(range(len(cats)), [_wrap_label(c) for c in cats], fontsize=8)
        ax.set_ylim(0, 1.12)
        ax.set_ylabel("success rate")
        ax.set_title(f"{env_id}: success by agent and category")
        fig.legend(fontsize=8, ncols=len(agents), loc="outside lower center", frameon=False)
        path = out / f"{_slug(env_id)}_success.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths
