"""``agentgym bench --rewards``: how each reward shaper behaves on real episodes, and whether it tells success apart.

For every env, each of ``episodes`` tasks is played once by each agent (by default the env's non-privileged
built-in agents, e.g. ``heuristic`` and ``random``, so there are successes and failures); the agents' rollouts of
one task form a group that shares a frozen novelty count table, updated after the group. Every rollout runs
through one stack of all the step wrappers (each records its own component, so one run serves all of them), and
the post-episode transforms are computed from the recorded ``progress`` component. For each shaper:

* the shaped turn reward is the env's own reward of the turn (its outcome) plus the shaper's term; the table
  gives its mean, std, min and max over all turns of all rollouts;
* ``auc_sum`` / ``auc_mean``: the rank-based (Mann-Whitney) AUC with which the per-episode sum / per-turn mean of
  the shaper's term *alone* (without the outcome) separates successful from failed episodes (0.5 = no signal,
  NaN when one class is empty). The ``none`` row is the reference: its term is the env reward itself.

Writes ``rewards.md``, ``rewards.json`` and one PNG heatmap grid per env (rollouts x turns, successes on top) to
``out``.

>>> result = reward_bench(["agentgym/SearchQA-v0"], episodes=4, out=tmp_dir)            # doctest: +SKIP
>>> print(table(result.rows))                                                          # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym.contract.agent import Agent
from agentgym.contract.env import AgentEnv
from agentgym.contract.registry import list_envs, unavailable_reason
from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.base import TurnScorer
from agentgym.rewards.process import ComponentScorer, GatedAccumulation, PRMClip, PRMDelta
from agentgym.rewards.wrappers import (
    CountTable,
    FormatPenalty,
    NoveltyBonus,
    PotentialShaping,
    ProgressReward,
    StepCost,
)
from agentgym.running.runner import format_table, make_agent, run_episode

#: Per-env constructor arguments used by the reward bench.
BENCH_ENV_KWARGS: dict[str, dict[str, Any]] = {
    "agentgym/SearchQA-v0": {"dataset": "small"},
    "agentgym/Household-v0": {"expert_plan": True},  # progress = 1 - remaining optimal plan / initial plan
}
COLUMNS = ("env", "shaper", "kind", "rollouts", "success", "turn_mean", "turn_std", "turn_min", "turn_max",
           "term_sum", "auc_sum", "auc_mean")  # fmt: skip


@dataclass(frozen=True)
class ShaperSettings:
    """The knobs of the benchmarked shapers."""

    format_penalty: float = 0.1
    step_cost: float = 0.01
    progress_scale: float = 1.0
    shaping_gamma: float = 1.0
    novelty_beta: float = 0.1
    novelty_episodic: float = 0.05
    gra_delta: float = 1.0
    prm_eta: float = 0.1


@dataclass(frozen=True)
class Shaper:
    name: str
    kind: str  # "reference", "wrapper" or "offline"
    needs: tuple[str, ...]  # info keys the env must provide
    description: str


SHAPERS: tuple[Shaper, ...] = (
    Shaper("none", "reference", (), "no shaping: the term is the env reward itself (the outcome)"),
    Shaper("format", "wrapper", (), "FormatPenalty: -penalty on invalid actions"),
    Shaper("step_cost", "wrapper", (), "StepCost: -cost per turn"),
    Shaper("progress", "wrapper", ("progress",), "ProgressReward: increase of the verified progress"),
    Shaper("shaping", "wrapper", ("progress",), "PotentialShaping with Phi = progress, Phi(terminal) = 0"),
    Shaper("novelty", "wrapper", ("anchor",), "NoveltyBonus: beta/sqrt(n+1) + episodic/sqrt(n_ep), frozen counts"),
    Shaper("gra", "offline", ("progress",), "G-RA over the progress term: kept only if outcome >= delta"),
    Shaper("prm_clip", "offline", ("progress",), "PRM Clip over the progress term: min(r - eta, 0)"),
    Shaper("prm_delta", "offline", ("progress",), "PRM Delta over the progress term: r_k - r_{k+1}, r_K"),
)
WRAPPER_NAMES = frozenset(s.name for s in SHAPERS if s.kind == "wrapper")


@dataclass
class RewardBenchResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: env id -> why it was skipped (an adapter whose package or data is missing)
    skipped: dict[str, str] = field(default_factory=dict)
    report_path: Path | None = None
    json_path: Path | None = None
    plots: list[Path] = field(default_factory=list)


def mann_whitney_auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """P(score of a random positive > score of a random negative) + 0.5 P(tie), from average ranks.

    NaN scores are dropped; NaN if either class is empty.

    >>> mann_whitney_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True])
    0.75
    """
    x = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    keep = ~np.isnan(x)
    x, y = x[keep], y[keep]
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    starts = np.cumsum(counts) - counts
    ranks = (starts + (counts + 1) / 2.0)[inverse]
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def _slug(s: str) -> str:
    return s.replace("/", "_").replace(":", "_")


def _wrap(env: gym.Env, available: set[str], table: CountTable, s: ShaperSettings) -> gym.Env:
    env = FormatPenalty(env, penalty=s.format_penalty, name="format")
    env = StepCost(env, cost=s.step_cost, name="step_cost")
    if "progress" in available:
        env = ProgressReward(env, key="progress", scale=s.progress_scale, name="progress")
        env = PotentialShaping(env, lambda obs, info: float(info["progress"]), gamma=s.shaping_gamma, name="shaping")
    if "anchor" in available:
        env = NoveltyBonus(env, table, beta=s.novelty_beta, episodic=s.novelty_episodic, name="novelty")
    return env


def _offline(s: ShaperSettings) -> dict[str, TurnScorer]:
    return {
        "gra": ComponentScorer("progress", GatedAccumulation(delta=s.gra_delta), name="gra"),
        "prm_clip": ComponentScorer("progress", PRMClip(eta=s.prm_eta), name="prm_clip"),
        "prm_delta": ComponentScorer("progress", PRMDelta(), name="prm_delta"),
    }


def _default_agents(env: gym.Env) -> list[str]:
    unwrapped = env.unwrapped
    factories = unwrapped.agents if isinstance(unwrapped, AgentEnv) else {}
    return [name for name, f in factories.items() if not getattr(f, "privileged", False)]


def play(
    env_id: str,
    *,
    episodes: int,
    seed: int = 0,
    agents: Sequence[str] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    settings: ShaperSettings | None = None,
) -> tuple[list[Trajectory], set[str], list[str]]:
    """Play the bench's rollouts through the wrapper stack; returns (trajectories, available info keys, agents)."""
    settings = settings or ShaperSettings()
    kwargs = dict(env_kwargs or {})
    base = gym.make(env_id, **kwargs)
    try:
        unwrapped = base.unwrapped
        if not isinstance(unwrapped, AgentEnv):
            raise TypeError(f"{env_id} is not an AgentEnv: the reward bench plays its tasks by task_index")
        _, info = base.reset(seed=seed)
        available: set[str] = {k for k in ("progress", "anchor") if k in info}
        names = list(agents) if agents is not None else _default_agents(base)
        if not names:
            raise ValueError(f"{env_id} has no non-privileged built-in agents; pass agents=")
        table = CountTable()
        env = _wrap(base, available, table, settings)
        players: list[Agent] = [make_agent(n, base) for n in names]
        trajs: list[Trajectory] = []
        for i in range(episodes):
            group = [
                run_episode(env, agent, seed=seed + i, options={"task_index": i % unwrapped.num_tasks},
                            env_id=env_id, env_kwargs=kwargs, group_id=f"{env_id}:{i}")
                for agent in players
            ]  # fmt: skip
            table.update(str(t.info["anchor"]) for traj in group for t in traj.turns if "anchor" in t.info)
            trajs.extend(group)
        for agent in players:
            agent.close()
    finally:
        base.close()
    return trajs, available, names


def _env_reward(components: dict[str, float]) -> float:
    return float(sum(v for k, v in components.items() if k not in WRAPPER_NAMES))


def shaper_terms(
    trajs: Sequence[Trajectory], available: set[str], settings: ShaperSettings | None = None
) -> tuple[list[list[float]], dict[str, list[list[float]]]]:
    """(env reward per turn without any bench shaper, {shaper: its term per turn}) for every trajectory."""
    settings = settings or ShaperSettings()
    base = [[_env_reward(t.reward_components) for t in tr.turns] for tr in trajs]
    terms: dict[str, list[list[float]]] = {"none": base}
    for shaper in SHAPERS:
        if shaper.kind != "wrapper" or not set(shaper.needs) <= available:
            continue
        terms[shaper.name] = [[t.reward_components[shaper.name] for t in tr.turns] for tr in trajs]
    if "progress" in available:
        for name, scorer in _offline(settings).items():
            terms[name] = [s.rewards for s in scorer(trajs)]
    return base, terms


def _stats(env_id: str, shaper: Shaper, base: list[list[float]], term: list[list[float]], success: list[bool]) -> dict:
    shaped = [b + t for bs, ts in zip(base, term, strict=True) for b, t in zip(bs, ts, strict=True)]
    if shaper.name == "none":
        shaped = [b for bs in base for b in bs]
    arr = np.asarray(shaped, dtype=float)
    sums = [float(sum(t)) for t in term]
    means = [float(np.mean(t)) if t else math.nan for t in term]
    return {
        "env": env_id,
        "shaper": shaper.name,
        "kind": shaper.kind,
        "rollouts": len(term),
        "success": float(np.mean(success)) if success else math.nan,
        "turn_mean": float(arr.mean()) if arr.size else math.nan,
        "turn_std": float(arr.std()) if arr.size else math.nan,
        "turn_min": float(arr.min()) if arr.size else math.nan,
        "turn_max": float(arr.max()) if arr.size else math.nan,
        "term_sum": float(np.mean(sums)) if sums else math.nan,
        "auc_sum": mann_whitney_auc(sums, success),
        "auc_mean": mann_whitney_auc(means, success),
    }


def reward_bench(
    envs: Sequence[str] | None = None,
    *,
    episodes: int = 50,
    seed: int = 0,
    out: str | os.PathLike[str] = "reports/rewards",
    agents: Sequence[str] | None = None,
    env_kwargs: dict[str, dict[str, Any]] | None = None,
    settings: ShaperSettings | None = None,
    plots: bool = True,
) -> RewardBenchResult:
    """Run the reward bench (see the module docstring); returns the rows and the paths it wrote.

    ``episodes`` tasks per env, each played by every agent (``agents``: names of built-in agents, default the
    env's non-privileged ones); ``env_kwargs`` maps env id -> constructor arguments (merged over
    ``BENCH_ENV_KWARGS``, which picks SearchQA's ``small`` dataset).
    """
    settings = settings or ShaperSettings()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result = RewardBenchResult()
    heatmaps: dict[str, dict[str, tuple[list[list[float]], list[bool]]]] = {}
    meta: dict[str, Any] = {"episodes": episodes, "seed": seed, "settings": asdict(settings), "envs": {}}
    for env_id in envs or list_envs():
        kwargs = {**BENCH_ENV_KWARGS.get(env_id, {}), **(env_kwargs or {}).get(env_id, {})}
        probe = gym.make(env_id, **kwargs)
        reason = unavailable_reason(probe)
        probe.close()
        if reason:
            result.skipped[env_id] = reason
            continue
        start = time.perf_counter()
        trajs, available, names = play(
            env_id, episodes=episodes, seed=seed, agents=agents, env_kwargs=kwargs, settings=settings
        )
        base, terms = shaper_terms(trajs, available, settings)
        success = [t.success for t in trajs]
        meta["envs"][env_id] = {"env_kwargs": kwargs, "agents": names, "seconds": time.perf_counter() - start}
        heatmaps[env_id] = {}
        for shaper in SHAPERS:
            if shaper.name not in terms:
                continue
            term = terms[shaper.name]
            result.rows.append(_stats(env_id, shaper, base, term, success))
            shaped = term if shaper.name == "none" else [[b + x for b, x in zip(bs, ts, strict=True)]
                                                           for bs, ts in zip(base, term, strict=True)]  # fmt: skip
            heatmaps[env_id][shaper.name] = (shaped, success)
    if plots:
        result.plots = [plot_heatmaps(env_id, panels, out) for env_id, panels in heatmaps.items()]
    result.json_path = out / "rewards.json"
    payload = {**meta, "rows": [_json_row(r) for r in result.rows], "plots": [p.name for p in result.plots]}
    result.json_path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    result.report_path = out / "rewards.md"
    result.report_path.write_text(render_report(result.rows, result.plots, meta), encoding="utf-8")
    return result


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as an aligned Markdown table (the columns of ``COLUMNS``)."""
    return format_table(rows, [c for c in COLUMNS if any(c in r for r in rows)])


def render_report(rows: Sequence[dict[str, Any]], plots: Sequence[Path], meta: dict[str, Any]) -> str:
    lines = [
        "# Reward bench",
        "",
        f"{meta['episodes']} tasks per env, base seed {meta['seed']}; each task is played by every agent.",
        "Shaped turn reward = env reward of the turn + the shaper's term (turn_* columns, over all turns).",
        "term_sum = mean per-episode sum of the term; auc_sum / auc_mean = Mann-Whitney AUC of the per-episode",
        "sum / per-turn mean of the term alone in telling successful from failed episodes (0.5 = no signal).",
        "",
        "| shaper | kind | what |",
        "|---|---|---|",
        *(f"| {s.name} | {s.kind} | {s.description} |" for s in SHAPERS),
        "",
        f"Settings: `{json.dumps(meta['settings'])}`",
        "",
    ]
    for env_id, info in meta["envs"].items():
        env_rows = [r for r in rows if r["env"] == env_id]
        kwargs = json.dumps(info["env_kwargs"])
        agents = ", ".join(info["agents"])
        lines += [f"## {env_id}", "", f"agents: {agents}; env kwargs: `{kwargs}` ({info['seconds']:.1f} s)"]
        lines += ["", table(env_rows), ""]
        lines += [f"![{p.stem}]({p.name})" for p in plots if p.stem == f"rewards_{_slug(env_id)}"]
        lines.append("")
    return "\n".join(lines)


def plot_heatmaps(env_id: str, panels: dict[str, tuple[list[list[float]], list[bool]]], out: Path) -> Path:
    """One figure per env: a heatmap (rollouts x turns, successes on top) of shaped turn rewards per shaper."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#c8c8c8")  # grey: turns after the episode ended
    cols = 3
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, (name, (rewards, success)) in zip(axes.flat, panels.items(), strict=False):
        order = sorted(range(len(rewards)), key=lambda i: (not success[i], i))
        width = max((len(r) for r in rewards), default=1) or 1
        grid = np.full((max(len(rewards), 1), width), np.nan)
        for row, i in enumerate(order):
            grid[row, : len(rewards[i])] = rewards[i]
        vmax = float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0
        image = ax.imshow(grid, aspect="auto", cmap=cmap, vmin=-(vmax or 1.0), vmax=vmax or 1.0,
                          interpolation="nearest")  # fmt: skip
        n_success = sum(success)
        if 0 < n_success < len(success):
            ax.axhline(n_success - 0.5, color="black", linewidth=1)
        ax.set_title(f"{name} ({n_success} successes on top; grey: no turn)", fontsize=9)
        ax.set_xlabel("turn")
        ax.set_ylabel("rollout")
        ax.set_xticks(range(width), [str(t + 1) for t in range(width)])
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(f"{env_id}: shaped turn rewards", fontsize=11)
    fig.tight_layout()
    path = out / f"rewards_{_slug(env_id)}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
