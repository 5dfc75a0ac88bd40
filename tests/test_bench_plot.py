"""`agentgym bench`'s PNG plots stay legible: x tick labels (task categories) do not run into each other, into the
legend, or off the figure. Household's task types (``pick_clean_then_place_in_recep``, ...) are the long ones. The
title of a one-category plot is not cut, and the bars' value labels of five or six agents do not overlap."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from agentgym.envs.household.catalog import TASK_TYPES
from agentgym.envs.search_qa.data import HOP_TYPES

matplotlib = pytest.importorskip("matplotlib")

HOUSEHOLD_TYPES = list(TASK_TYPES)  # the longest category names the bench plots
SEARCHQA_TYPES = list(HOP_TYPES)


def rows(env_id: str, categories: list[str]) -> list[dict]:
    agents = {"oracle": 1.0, "heuristic": 0.5, "random": 0.0}
    return [
        {"env": env_id, "agent": agent, "category": c, "episodes": 10, "success": s}
        for agent, s in agents.items()
        for c in ["all", *categories]
    ]


def overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def check_layout(plot_results, out: Path, monkeypatch) -> None:
    from matplotlib.figure import Figure

    drawn = []  # per figure: the page box, (tick label text, box) pairs, legend boxes, as saved
    save = Figure.savefig

    def record(fig, *args, **kwargs):
        result = save(fig, *args, **kwargs)
        renderer = fig.canvas.get_renderer()
        labels = [t for ax in fig.axes for t in ax.get_xticklabels() if t.get_text()]
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
        drawn.append(
            (
                fig.bbox,
                [(t.get_text(), t.get_window_extent(renderer)) for t in labels],
                [legend.get_window_extent(renderer) for legend in legends],
            )
        )
        return result

    monkeypatch.setattr(Figure, "savefig", record)
    plotted = rows("agentgym/Household-v0", HOUSEHOLD_TYPES) + rows("agentgym/SearchQA-v0", SEARCHQA_TYPES)
    paths = plot_results(plotted, out)
    assert [p.name for p in paths] == ["agentgym_Household-v0_success.png", "agentgym_SearchQA-v0_success.png"]
    assert all(p.stat().st_size > 0 for p in paths)
    for (page, labels, legends), path, n in zip(drawn, paths, (7, 5), strict=True):
        assert len(labels) == n, f"{path.name}: {[t for t, _ in labels]}"
        for (ta, a), (tb, b) in itertools.combinations(labels, 2):
            assert not overlaps(a, b), f"{path.name}: x labels {ta!r} and {tb!r} overlap"
        for text, box in labels:
            inside = page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0
            assert inside, f"{path.name}: x label {text!r} is cut off"
            assert not any(overlaps(legend, box) for legend in legends), f"{path.name}: the legend covers {text!r}"


def test_bench_plot_labels_do_not_overlap(tmp_path, monkeypatch):
    from agentgym.running.bench import plot_results

    check_layout(plot_results, tmp_path, monkeypatch)


AGENTS6 = {"oracle": 1.0, "heuristic": 0.75, "keyword": 0.5, "natural": 0.5, "focused": 0.25, "random": 0.0}


def drawn_figures(plot_results, rows_, out: Path, monkeypatch) -> list[dict]:
    """Plot ``rows_`` and return, per saved figure, the page box and the boxes of its title, value labels and legend."""
    from matplotlib.figure import Figure

    drawn = []
    save = Figure.savefig

    def record(fig, *args, **kwargs):
        result = save(fig, *args, **kwargs)
        renderer = fig.canvas.get_renderer()
        [ax] = fig.axes
        drawn.append(
            {
                "page": fig.bbox,
                "title": ax.title.get_window_extent(renderer),
                "title_text": ax.title.get_text(),
                "values": [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts if t.get_text()],
                "legends": [legend.get_window_extent(renderer) for legend in fig.legends],
            }
        )
        return result

    monkeypatch.setattr(Figure, "savefig", record)
    plot_results(rows_, out)
    return drawn


def inside(page, box) -> bool:
    return page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1


@pytest.mark.parametrize("agents", [2, 5, 6])
def test_a_one_category_plot_keeps_its_whole_title(agents, tmp_path, monkeypatch):
    from agentgym.running.bench import plot_results

    env_id = "agentgym/TwentyQuestions-v0"  # the longest id: its title is wider than a one-category plot
    plotted = [
        {"env": env_id, "agent": a, "category": "all", "episodes": 10, "success": s}
        for a, s in list(AGENTS6.items())[:agents]
    ]
    [fig] = drawn_figures(plot_results, plotted, tmp_path, monkeypatch)
    assert env_id in fig["title_text"].replace("\n", " ")
    assert inside(fig["page"], fig["title"]), f"title {fig['title']} is cut by the page {fig['page']}"
    for legend in fig["legends"]:
        assert inside(fig["page"], legend), "the legend runs off the figure"


@pytest.mark.parametrize("agents", [5, 6])
def test_value_labels_of_many_agents_do_not_overlap(agents, tmp_path, monkeypatch):
    from agentgym.running.bench import plot_results

    plotted = [
        {"env": "agentgym/Household-v0", "agent": a, "category": c, "episodes": 10, "success": s}
        for a, s in list(AGENTS6.items())[:agents]
        for c in ["all", *HOUSEHOLD_TYPES]
    ]
    [fig] = drawn_figures(plot_results, plotted, tmp_path, monkeypatch)
    values = fig["values"]
    assert len(values) == agents * (1 + len(HOUSEHOLD_TYPES))  # one label per bar
    for (ta, a), (tb, b) in itertools.combinations(values, 2):
        assert not overlaps(a, b), f"value labels {ta!r} and {tb!r} overlap"
    for text, box in values:
        assert inside(fig["page"], box), f"value label {text!r} runs off the figure"
        assert not overlaps(box, fig["title"]), f"value label {text!r} runs into the title"
