"""The README is a true front page, and the numbers of the README and the docs are what their commands print.

Every ```python block of README.md runs, and prints what its comments say. Each block runs on its own, in a fresh
module namespace (a reader copies one block, not the whole README), in a temporary working directory, offline. A
block fenced ```python no-run is skipped: only for examples that need a GPU, a remote endpoint, a network or data
downloaded separately. A ``print(...)  # text`` line's comment is the output it shows: the block's output must
contain each such text, in order, with ``...`` standing for anything (whitespace is compared collapsed).

The README is at most 300 lines, its links resolve, and it links to the pages for benchmarking an agent, training
with a dense reward and writing an env. Every results table of the README or of a docs page names the command that
prints it (or the committed results it reads), and the tests below check each number against it, wherever the
table lives.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import re
import shlex
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_docs import (  # tests/ is on sys.path (pytest's default rootdir-relative import)
    DOC_FILES,
    NEEDS_TORCH,
    Block,
    check_printed,
    code_blocks,
    headings,
    printed_comments,
)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCKS = code_blocks(README.read_text(encoding="utf-8"))
RUNNABLE = [b for b in BLOCKS if b.runs]
#: The README's most lines: a front page, not the manual.
MAX_README_LINES = 300


def quickstart() -> Block:
    """The first python block after the README's opening commands (its first, ```bash, block)."""
    first_bash = next(i for i, b in enumerate(BLOCKS) if b.info[:1] == ("bash",))
    return next(b for b in BLOCKS[first_bash + 1 :] if b.is_python)


def run_block(block: Block) -> tuple[dict, str]:
    """Run one block in a fresh module namespace; returns (its namespace, what it printed). Envs it leaves open
    (vector envs own worker processes) are closed."""
    import gymnasium as gym

    if NEEDS_TORCH.search(block.source):
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    name = f"readme_block_{block.line}"
    module = types.ModuleType(name)
    module.__file__ = str(README)
    sys.modules[name] = module  # dataclasses and pickling look classes up by module
    out = io.StringIO()
    try:
        # pad with newlines so tracebacks give the block's real line numbers in README.md
        code = compile("\n" * block.line + block.source, str(README), "exec")
        with contextlib.redirect_stdout(out):
            try:
                exec(code, module.__dict__)
            except Exception as e:
                raise AssertionError(f"README.md: the block at line {block.line} failed: {e!r}") from e
    finally:
        sys.modules.pop(name, None)
        for value in list(module.__dict__.values()):
            if isinstance(value, gym.Env | gym.vector.VectorEnv):
                value.close()
    return module.__dict__, out.getvalue()


def test_readme_has_runnable_blocks():
    assert RUNNABLE, "README.md has no runnable python block"
    for block in BLOCKS:
        if block.is_python:  # ``python norun`` would silently run (or skip) the block
            assert block.info in (("python",), ("python", "no-run")), f"README.md:{block.line}: {block.info}"


def test_printed_comments_parser():
    source = 'x = 1  # not a print\nprint(x)  # 1\nprint("# no")\nprint(x, x)  # 1 ... 1\n'
    assert printed_comments(source) == [(2, "1"), (4, "1 ... 1")]
    check_printed("a b\n  c\n7 a", [(2, "a b c"), (4, "7 ... a")], "x")  # whitespace collapsed; ... elides
    with pytest.raises(AssertionError, match="does not show"):
        check_printed("1 2", [(1, "2"), (2, "1")], "x")


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: f"line{b.line}")
def test_block_runs_and_prints_what_it_says(block, sandbox):
    _, output = run_block(block)
    check_printed(output, printed_comments(block.source), f"README.md:{block.line}")


def test_quickstart_answers_correctly(sandbox):
    """The opening example plays one task to the end and its answer is right (reward 1.0), as its comments say."""
    block = quickstart()
    assert block.runs and "SearchQA-v0" in block.source
    ns, _ = run_block(block)
    assert ns["reward"] == 1.0
    assert ns["terminated"] and ns["info"]["success"]
    assert ns["info"]["metrics"]["em"] == 1.0


# -- the front page -------------------------------------------------------------------------------------------------

#: Relative Markdown links ``[text](target)`` (external ``scheme://`` links and bare ``#anchor`` links excluded).
LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:)([^)#\s]+)(?:#([^)\s]+))?\)")


def anchors_of(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as the docs site (and GitHub, for these headings) makes them."""
    from markdown.extensions.toc import slugify

    return {slugify(h, "-") for h in headings(path)}


def test_readme_is_a_front_page():
    """At most MAX_README_LINES lines: the detail lives in the docs site."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_links_resolve():
    """Every relative link of the README names a file of the repository and, with ``#anchor``, one of its headings."""
    pytest.importorskip("markdown")
    bad = []
    for target, anchor in LINK.findall(README.read_text(encoding="utf-8")):
        path = ROOT / target
        if not path.exists():
            bad.append(f"{target}: no such file")
        elif anchor and anchor not in anchors_of(path):
            bad.append(f"{target}#{anchor}: no such heading")
    assert not bad, "README.md links that do not resolve:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("topic", "page"),
    [
        ("benchmarking an agent", "docs/cli.md"),
        ("training with a dense reward", "docs/rewards.md"),
        ("training with a dense reward", "docs/trainer.md"),
        ("writing an env", "docs/writing-an-env.md"),
    ],
)
def test_readme_links_to_the_guide(topic, page):
    """The front page's quick starts lead into the docs: each links to the page that goes on where it stops."""
    targets = {target for target, _ in LINK.findall(README.read_text(encoding="utf-8"))}
    assert page in targets, f"README.md does not link to {page} ({topic})"
    assert (ROOT / page).is_file()


def test_the_link_pattern():
    text = "[a](docs/x.md) [b](docs/y.md#z-1) [c](https://e.org/p.md) [d](#local) ![i](img/p.png)"
    assert LINK.findall(text) == [("docs/x.md", ""), ("docs/y.md", "z-1"), ("img/p.png", "")]


# -- figures of the README and the docs ------------------------------------------------------------------------------
# Every results table of the README or a docs page names the command that prints it (in backticks just before the
# table); these tests run that command and check each number of the table against what it printed, to the decimals
# shown. Tables that take a minute or more on 2 cores are marked slow (CI still runs them).

#: A cell ``a / b / c`` holds these categories in order (the user-simulation envs' levels).
LEVELS = ("easy", "medium", "hard")


@dataclass(frozen=True)
class Figure:
    """A README table and the ``agentgym`` command that prints it.

    ``columns``: README column header -> (metric, category); category ``"levels"``: the cell is ``LEVELS``' values
    joined by " / "; None: the rows have no category (reward bench). ``rows``: README row label -> the value of
    ``row_key`` in the command's results (default: the label's first `code` span, e.g. "`oracle` (privileged)")."""

    command: str
    columns: dict[str, tuple[str, str | None]]
    results: str = "results.json"
    row_key: str = "agent"
    rows: dict[str, str] | None = None
    slow: bool = True


def _per_level(*names: tuple[str, str]) -> dict[str, tuple[str, str | None]]:
    return {header: (metric, "levels") for header, metric in names}


FIGURES = [
    Figure(
        "agentgym bench --env agentgym/SearchQA-v0 --episodes 2000",
        {
            "1-hop": ("em", "1hop"),
            "bridge": ("em", "bridge"),
            "comparison": ("em", "comparison"),
            "3-4 hop": ("em", "multihop"),
            "all": ("em", "all"),
            "supporting-doc recall": ("supporting_recall", "all"),
            "invalid actions": ("invalid_rate", "all"),
        },
    ),
    Figure(
        "agentgym bench --env agentgym/Household-v0 --episodes 500",
        {
            "simple": ("success", "pick_and_place_simple"),
            "look in light": ("success", "look_at_obj_in_light"),
            "clean": ("success", "pick_clean_then_place_in_recep"),
            "heat": ("success", "pick_heat_then_place_in_recep"),
            "cool": ("success", "pick_cool_then_place_in_recep"),
            "pick two": ("success", "pick_two_obj_and_place"),
            "all": ("success", "all"),
            "mean steps": ("turns", "all"),
        },
    ),
    Figure(
        "agentgym bench --env agentgym/Clarify-v0 --episodes 60 --trials 4",
        _per_level(
            ("success", "success"),
            ("pass^4", "pass^4"),
            ("turns", "turns"),
            ("questions per success", "questions_per_success"),
            ("hidden details drawn out", "elicited"),
        ),
        slow=False,
    ),
    Figure(
        "agentgym bench --env agentgym/Preference-v0 --episodes 900",
        _per_level(
            ("best item (success)", "best"),
            ("acceptable item", "acceptable"),
            ("questions", "questions"),
            ("questions per success", "questions_per_success"),
        ),
    ),
    Figure(
        "agentgym bench --env agentgym/TwentyQuestions-v0 --episodes 1200",
        _per_level(
            ("success", "success"), ("questions", "questions"), ("bits per question", "information_gain_per_question")
        ),
    ),
    Figure(
        "agentgym bench --env agentgym/CustomerService-v0 --episodes 900",
        _per_level(
            ("success", "success"),
            ("database as gold", "db_match"),
            ("facts told", "facts_told"),
            ("policy violations", "policy_violation"),
            ("turns", "turns"),
        ),
    ),
    Figure(
        "agentgym bench --rewards --env agentgym/SearchQA-v0 --episodes 50",
        {
            "turn reward mean": ("turn_mean", None),
            "std": ("turn_std", None),
            "AUC (episode sum)": ("auc_sum", None),
            "AUC (mean per turn)": ("auc_mean", None),
        },
        results="rewards.json",
        row_key="shaper",
        rows={
            "none (outcome only)": "none",
            "format penalty": "format",
            "step cost": "step_cost",
            "progress (VPR: supporting docs)": "progress",
            "potential shaping over progress": "shaping",
            "novelty (count-based)": "novelty",
            "G-RA over progress": "gra",
            "PRM clip over progress": "prm_clip",
            "PRM delta over progress": "prm_delta",
        },
    ),
]


def split_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def documents() -> dict[str, str]:
    """README.md and every page under docs/, by path relative to the repository: where results tables live."""
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in (README, *DOC_FILES)}


def table_after(command: str, text: str | None = None) -> list[dict[str, str]]:
    """The table that follows the one mention of `command` in the README or a docs page (within a few lines), as
    dicts by header; ``text``: look in that text instead."""
    texts = documents() if text is None else {"text": text}
    mention = f"`{command}`"
    where = [name for name, body in texts.items() if mention in body]
    count = sum(texts[name].count(mention) for name in where)
    assert count == 1, f"the README and docs/ should name {mention} once, before its table (found {count}: {where})"
    body = texts[where[0]]
    lines = body[body.index(mention) :].splitlines()
    start = next((i for i, line in enumerate(lines[:12]) if line.startswith("|")), None)
    assert start is not None, f"{where[0]}: no table right after {mention}"
    block = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
    header = split_row(block[0])
    return [dict(zip(header, split_row(line), strict=True)) for line in block[2:]]


def shown_values(cell: str) -> list[tuple[float, int]] | None:
    """The numbers a cell shows, each with its decimals ("1,000" -> 1000; "**0.334**" -> 0.334); None for "-"."""
    cell = cell.replace("**", "").strip()
    if cell == "-":
        return None
    values = []
    for part in cell.split(" / "):
        number = part.strip().replace(",", "")
        values.append((float(number), len(number.partition(".")[2])))
    return values


def agrees(actual: float, shown: float, decimals: int) -> bool:
    """Whether ``actual`` rounds to ``shown`` (either way at a tie)."""
    return abs(actual - shown) <= 0.5 * 10.0**-decimals + 1e-9


def test_figure_helpers():
    text = "x `agentgym a`:\n\n| agent | m |\n|---|---:|\n| `oracle` (privileged) | **0.30** / 1,000 / - |\n\nmore"
    assert table_after("agentgym a", text) == [{"agent": "`oracle` (privileged)", "m": "**0.30** / 1,000 / -"}]
    assert shown_values("**0.30**") == [(0.30, 2)] and shown_values("1,000 / 4.5") == [(1000.0, 0), (4.5, 1)]
    assert shown_values("-") is None
    assert agrees(4.225, 4.22, 2) and agrees(4.225, 4.23, 2) and not agrees(4.226, 4.22, 2)
    with pytest.raises(AssertionError, match="once"):
        table_after("agentgym b", text)


@pytest.fixture(scope="module")
def command_runs(tmp_path_factory):
    """Runs a README command once per module: ``run(command) -> (what it printed, its results rows)``."""
    from agentgym.cli import main

    done: dict[str, tuple[str, list[dict[str, Any]]]] = {}

    def run(command: str, results: str) -> tuple[str, list[dict[str, Any]]]:
        if command not in done:
            out = tmp_path_factory.mktemp("figure") / "out"
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                code = main([*shlex.split(command)[1:], "--out", str(out), "--quiet"])
            assert code == 0, f"`{command}` exited {code}"
            data = json.loads((out / results).read_text(encoding="utf-8"))
            done[command] = (printed.getvalue(), data["rows"] if isinstance(data, dict) else data)
        return done[command]

    return run


@pytest.mark.parametrize(
    "figure", [pytest.param(f, marks=[pytest.mark.slow] if f.slow else []) for f in FIGURES], ids=lambda f: f.command
)
def test_readme_figure_is_what_its_command_prints(figure, command_runs):
    table = table_after(figure.command)
    _, results = command_runs(figure.command, figure.results)
    label = next(iter(table[0]))
    assert set(table[0]) - {label} == set(figure.columns), "every column of the table is checked"
    wrong = []
    for row in table:
        name = row[label]
        key = figure.rows[name] if figure.rows is not None else re.search(r"`([^`]+)`", name)[1]
        for header, (metric, category) in figure.columns.items():
            shown = shown_values(row[header])
            if shown is None:
                continue
            categories = LEVELS if category == "levels" else (category,)
            assert len(shown) == len(categories), f"{name} / {header}: {row[header]!r}"
            for (value, decimals), cat in zip(shown, categories, strict=True):
                match = [r for r in results if r[figure.row_key] == key and cat in (None, r.get("category"))]
                assert len(match) == 1, f"`{figure.command}` has no single row for {key} / {cat}"
                actual = match[0][metric]
                if not agrees(actual, value, decimals):
                    wrong.append(f"{name} / {header} / {cat}: shown {value}, the command {actual:.{decimals + 2}f}")
    assert not wrong, f"the table after `{figure.command}` differs from what it prints:\n" + "\n".join(wrong)


@pytest.mark.slow
def test_bench_trials_prints_every_pass_k_column(command_runs):
    """`--trials 4` prints pass^1 .. pass^4 (it showed only pass^2 and pass^4)."""
    printed, results = command_runs("agentgym bench --env agentgym/Clarify-v0 --episodes 60 --trials 4", "results.json")
    header = split_row(printed.splitlines()[0])
    assert [c for c in header if c.startswith("pass^")] == ["pass^1", "pass^2", "pass^3", "pass^4"]
    assert header.index("pass^4") < header.index("seconds")
    assert all(r["pass^1"] == pytest.approx(r["success"]) for r in results)


@pytest.mark.parametrize("preset", ["tiny", "small", pytest.param("100k", marks=pytest.mark.slow)])
def test_searchqa_preset_table_counts(preset):
    """The SearchQA preset table's docs and train / test questions are what ``build_dataset`` makes (the tiny
    corpus has 446 docs, the 100k one 111,178: the table said 448 and 111,210)."""
    from agentgym.envs.search_qa.data import build_dataset

    table = table_after("python bench/bench_search_qa.py --preset NAME")
    row = next(r for r in table if r["preset"].startswith(f"`{preset}`"))
    ds = build_dataset(preset)
    assert shown_values(row["docs"]) == [(len(ds.corpus), 0)]
    assert shown_values(row["train / test questions"]) == [(len(ds.train), 0), (len(ds.test), 0)]


@pytest.mark.slow
def test_searching_the_question_rarely_finds_the_last_hop():
    """The stated share of bridge and 3-4-hop test questions (``small``) whose last supporting document is in the top 3
    when the agent searches the question itself (SearchQA's page)."""
    import gymnasium as gym

    import agentgym  # noqa: F401  (registers the envs)

    text = " ".join(" ".join(documents().values()).split())
    claim = re.search(r"last hop's document in the top 3 for only ([\d.]+)% of bridge and ([\d.]+)% of 3-4-hop", text)
    assert claim is not None, "neither the README nor docs/ states the shares any more"
    env = gym.make("agentgym/SearchQA-v0").unwrapped
    hits = {"bridge": 0, "multihop": 0}
    totals = dict.fromkeys(hits, 0)
    for i in range(env.num_tasks):
        obs, info = env.reset(options={"task_index": i})
        kind = info["gold"]["hop_type"]
        if kind in hits:
            question = obs[0]["content"].rpartition("Question: ")[2].strip()
            _, _, _, _, after = env.step(f"<search> {question} </search>")
            hits[kind] += info["gold"]["supporting_doc_ids"][-1] in after["retrieved_doc_ids"]
            totals[kind] += 1
    assert totals == {"bridge": 500, "multihop": 500}
    for kind, shown in zip(hits, claim.groups(), strict=True):
        decimals = len(shown.partition(".")[2])
        assert agrees(100 * hits[kind] / totals[kind], float(shown), decimals), (kind, hits[kind], shown)


def _table_at(header_start: str) -> list[dict[str, str]]:
    """The one table of the README or docs/ whose header line starts with ``header_start``, as dicts by header."""
    found = [
        (name, lines, i)
        for name, body in documents().items()
        for lines in [body.splitlines()]
        for i, line in enumerate(lines)
        if line.startswith(header_start)
    ]
    assert len(found) == 1, f"one table should start {header_start!r} in the README and docs/, found {len(found)}"
    _, lines, start = found[0]
    block = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
    header = split_row(block[0])
    return [dict(zip(header, split_row(line), strict=True)) for line in block[2:]]


def _number(cell: str) -> tuple[float, int]:
    text = cell.replace("**", "").replace("−", "-").strip()
    return float(text), len(text.partition(".")[2])


@pytest.mark.parametrize(
    ("folder", "env", "seed_column", "diff_column", "methods"),
    [
        ("grid", "Chain", "seed", "method − `grpo` (final success)", ["grpo", "progress_td", "mt_grpo", "vine"]),
        ("distractors", "Umbrella", "Umbrella seed", "method − `grpo` (Umbrella H = 16, final success)",
         ["grpo", "gtpo", "mt_grpo", "progress_td", "vine"]),
    ],
)  # fmt: skip
def test_readme_credit_primary_tables_are_the_committed_sweep(
    folder: str, env: str, seed_column: str, diff_column: str, methods: list[str]
):
    """The credit section's per-seed tables and primary paired tests (Chain H = 16; Umbrella H = 16) are what
    bench/credit_sweep.py recorded in bench/results/credit_round2/<folder> (runs.jsonl, results.json, the warm
    starts' result.json): nothing typed by hand drifts from the results."""
    out = ROOT / "bench" / "results" / "credit_round2" / folder
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text(encoding="utf-8").splitlines()]
    by = {(r["seed"], r["method"]): r for r in runs if r["env"] == env and r["horizon"] == 16}
    results = json.loads((out / "results.json").read_text())
    cells = {c["method"]: c for c in results["cells"] if (c["env"], c["horizon"]) == (env, 16)}
    rows = _table_at(f"| {seed_column} | warm start |")
    assert [m.strip("`") for m in rows[0] if m.startswith("`")] == methods
    seeds = [int(row[seed_column]) for row in rows if row[seed_column].isdigit()]
    assert seeds == sorted({s for s, m in by if m == "grpo"}), "the table has every paired seed, nothing else"
    wrong = []
    for row in rows:
        for column, cell in row.items():
            if column == seed_column:
                continue
            method = "grpo" if column == "warm start" else column.strip("`")
            if cell == "collapsed":  # a run the trainer stopped: shown as such, never as a number
                if not by[(int(row[seed_column]), method)]["collapsed"]:
                    wrong.append(f"seed {row[seed_column]} / {column}: shown collapsed, the run finished")
                continue
            value, decimals = _number(cell)
            if row[seed_column].isdigit():
                run = by[(int(row[seed_column]), method)]
                actual = run["before"] if column == "warm start" else run["after"]
                if actual is None or (column != "warm start" and run["collapsed"]):
                    wrong.append(f"seed {row[seed_column]} / {column}: shown {cell}, the run collapsed")
                    continue
            elif row[seed_column] == "mean":
                actual = cells[method]["before_mean" if column == "warm start" else "after_mean"]
            else:
                assert row[seed_column] == "held-out turn accuracy after", row[seed_column]
                if column == "warm start":  # the warm starts' held-out turn accuracy, mean over the seeds
                    starts = [json.loads((out / "sft" / f"{env}-s{s}" / "result.json").read_text()) for s in seeds]
                    actual = sum(w["before"]["16"]["eval_turn_accuracy"] for w in starts) / len(starts)
                else:
                    actual = cells[method]["turn_acc_mean"]
            if not agrees(actual, value, decimals):
                wrong.append(f"seed {row[seed_column]} / {column}: shown {cell}, recorded {actual:.5f}")
    tests = {t["method"]: t for t in results["tests"] if t["family"] == "primary"}
    for row in _table_at(f"| {diff_column} |"):
        t = tests[row[diff_column].strip("`")]
        mean, sd = (_number(x) for x in row["mean ± sd"].split("±"))
        pairs = [(by[(s, t["method"])], by[(s, "grpo")]) for s in seeds]
        pairs = [(mine["after"], base["after"]) for mine, base in pairs if not (mine["collapsed"] or base["collapsed"])]
        ahead, of = row["seeds ahead"].split(" of ")
        checks = [(t["mean"], mean), (t["sd"], sd), (t["p"], _number(row["p (exact)"])),
                  (t["p_holm"], _number(row["Holm p"])), (sum(a > b for a, b in pairs), (float(ahead), 0)),
                  (len(pairs), (float(of), 0)), (t["n"], (float(of), 0))]  # fmt: skip
        wrong += [f"{t['method']}: shown {shown}, recorded {actual}" for actual, shown in checks
                  if not agrees(actual, *shown)]  # fmt: skip
    assert not wrong, f"the credit tables differ from {folder}:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    ("folders", "header"),
    [
        (["credit_round2/grid"], "| H | method | seeds | collapsed |"),
        (["credit_round2/distractors"], "| env | H | method | seeds | collapsed |"),
        (["credit_round2/distractors_r1"], "| env, distractors ±1 | H | method | seeds | collapsed |"),
        (["credit_round3:Chain", "credit_round3/umbrella"], "| env, round 3 | H | method | seeds | collapsed |"),
    ],
)
def test_readme_credit_table_of_every_cell_is_the_committed_sweep(folders: list[str], header: str):
    """Every row of the credit section's tables of all methods and cells (the Chain grid; Umbrella and KeyDoor; the
    catalogue's new estimators) is what bench/credit_sweep.py recorded in bench/results/<folder>/results.json
    (``folder:Env``: that env's cells only): seeds, collapses, success, and each paired test's difference, raw p
    and Holm p (primary-family tests marked as such)."""
    cells, tests = {}, {}
    for folder in folders:
        path, _, env = folder.partition(":")
        results = json.loads((ROOT / "bench" / "results" / path / "results.json").read_text())
        cells |= {(c["env"], c["horizon"], c["method"]): c for c in results["cells"] if env in ("", c["env"])}
        tests |= {(t["env"], t["horizon"], t["method"], t["endpoint"]): t for t in results["tests"]
                  if env in ("", t["env"])}  # fmt: skip
    rows = _table_at(header)
    env_column = split_row(header)[0] if header.startswith("| env") else None
    keys = [(r[env_column] if env_column else "Chain", int(r["H"]), r["method"].strip("`")) for r in rows]
    assert set(keys) == set(cells) and len(keys) == len(cells)  # every cell once, nothing else
    wrong = []
    for key, row in zip(keys, rows, strict=True):
        cell = cells[key]
        checks = [(cell["seeds"], (float(row["seeds"]), 0)), (cell["collapsed"], (float(row["collapsed"]), 0)),
                  (cell["after_mean"], _number(row["final success"]))]  # fmt: skip
        for endpoint, (diff, p, holm) in {"final": ("− `grpo`", "p", "Holm p"),
                                          "auc": ("AUC − `grpo`", "AUC p", "AUC Holm p")}.items():  # fmt: skip
            t = tests.get((*key, endpoint))
            if t is None:
                assert key[2] == "grpo" and not row[diff], f"{key}: no {endpoint} test recorded, shown {row[diff]}"
                continue
            shown_holm = row[holm].removesuffix(" (primary)")
            assert (shown_holm != row[holm]) == (t["family"] == "primary"), f"{key} {endpoint}: family"
            checks += [(t["mean"], _number(row[diff])), (t["p"], _number(row[p])), (t["p_holm"], _number(shown_holm))]
        wrong += [f"{key}: shown {shown}, recorded {actual}" for actual, shown in checks if not agrees(actual, *shown)]
    assert not wrong, f"the table of every credit cell differs from {folders}:\n" + "\n".join(wrong)


def test_readme_smollm2_tables_are_the_committed_runs():
    """The real-model section's per-seed table and paired tests are bench/smollm2_rl.py's committed results.json."""
    results = json.loads((ROOT / "bench" / "results" / "smollm2_rl" / "results.json").read_text())
    rows = _table_at("| SmolLM2 seed | before |")
    methods = [c.removesuffix(" after").strip("`") for c in rows[0] if c.endswith(" after")]
    assert methods == ["grpo", "mt_grpo"]
    shown_runs = {f"{m}-s{row['SmolLM2 seed']}" for row in rows for m in methods}
    assert shown_runs == set(results["runs"]), "the table has every finished run, nothing else"
    wrong = []
    for row in rows:
        for m in methods:
            run = results["runs"][f"{m}-s{row['SmolLM2 seed']}"]
            for actual, cell in ((run["before"], row["before"]), (run["after"], row[f"`{m}` after"])):
                if not agrees(actual, *_number(cell)):
                    wrong.append(f"{m} seed {row['SmolLM2 seed']}: shown {cell}, recorded {actual}")
    for row in _table_at("| SmolLM2 paired test |"):
        t = results["tests"][row["SmolLM2 paired test"].replace("`", "")]
        checks = [(t["n"], (float(row["seeds"]), 0)), (t["mean"], _number(row["mean"])), (t["p"], _number(row["p"]))]
        wrong += [f"{row['SmolLM2 paired test']}: shown {shown}, recorded {actual}" for actual, shown in checks
                  if not agrees(actual, *shown)]  # fmt: skip
    assert not wrong, "the SmolLM2 tables differ from bench/results/smollm2_rl:\n" + "\n".join(wrong)
