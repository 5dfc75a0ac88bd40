"""The Shop-v0 credit experiment (issue 34; bench/results/credit_shop/PLAN.md): the committed REPORT.md is what
bench/credit_envs.py computes from the committed per-run records with the planned arguments, and the table of
docs/shop.md's "Credit experiment" section (the plan's endpoints: final score and success, training AUC) is
recomputed here from the same ``result.json`` files, with an exact sign-flip test counted by hand over every sign
pattern and Holm's correction over the two co-primary endpoints."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "credit_envs.py"
RESULTS = ROOT / "bench" / "results" / "credit_shop"
DOC = ROOT / "docs" / "shop.md"
SECTION = "## Credit experiment (exploratory)"
#: The plan's command (PLAN.md), less ``--jobs`` and ``--out``, which do not change the report.
SETTING = {"env_kwargs": {"catalogue": "tiny", "seed": 0, "show_actions": False, "max_turns": 6}, "max_turns": 6,
           "max_new_tokens": 32, "max_total_tokens": 1536, "sft_steps": 600}  # fmt: skip
ARGV = ["--envs", "agentgym/Shop-v0", "--env-config", f"agentgym/Shop-v0={json.dumps(SETTING)}", "--iterations",
        "10", "--batch-tasks", "2", "--eval-tasks", "64"]  # fmt: skip
SEEDS = range(8)
#: Docs row label -> (how a run's value is read from its result.json, co-primary?).
ENDPOINTS = {
    "final score": (lambda r: r["after_eval"]["eval_reward_mean"], True),
    "final success": (lambda r: r["after_eval"]["eval_success_rate"], True),
    "training AUC, score": (lambda r: float(np.mean([h["reward_mean"] for h in r["history"] if h["iteration"] > 0])),
                            False),
    "training AUC, success": (lambda r: float(np.mean([h["success_rate"] for h in r["history"]
                                                       if h["iteration"] > 0])), False),
}  # fmt: skip


@pytest.fixture(scope="module")
def ce():
    spec = importlib.util.spec_from_file_location("credit_envs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def runs_of(arm: str) -> dict[int, dict]:
    """Seed -> the finished, not collapsed run of ``arm``."""
    out = {}
    for seed in SEEDS:
        path = RESULTS / "rl" / f"Shop-v0-s{seed}-{arm}" / "result.json"
        if path.is_file() and not (r := json.loads(path.read_text(encoding="utf-8")))["collapsed"]:
            out[seed] = r
    return out


def exact_p(d: np.ndarray) -> float:
    """Two-sided: the share of the 2^n sign patterns whose |mean| is at least the observed one."""
    observed = abs(d.mean())
    flips = [abs((d * np.array(signs)).mean()) for signs in itertools.product((1, -1), repeat=d.size)]
    return sum(f >= observed - 1e-12 for f in flips) / len(flips)


def expected_rows() -> dict[str, dict[str, float]]:
    """Per endpoint: both arms' means, the mean paired difference, the counts, p, and Holm p (co-primary)."""
    mt, base = runs_of("mt_grpo"), runs_of("grpo")
    seeds = sorted(set(mt) & set(base))
    rows = {}
    for name, (read, _) in ENDPOINTS.items():
        a, b = np.array([read(mt[s]) for s in seeds]), np.array([read(base[s]) for s in seeds])
        d = a - b
        counts = {"ahead": int((d > 0).sum()), "behind": int((d < 0).sum()), "tied": int((d == 0).sum())}
        rows[name] = {"n": len(seeds), "grpo": b.mean(), "mt_grpo": a.mean(), "diff": d.mean(), "p": exact_p(d),
                      **counts}  # fmt: skip
    primary = sorted((n for n, (_, co) in ENDPOINTS.items() if co), key=lambda n: rows[n]["p"])
    running = 0.0
    for k, name in enumerate(primary):  # Holm, by hand: step-down, monotone, capped at 1
        running = max(running, min(1.0, (len(primary) - k) * rows[name]["p"]))
        rows[name]["holm"] = running
    return rows


def doc_rows() -> list[dict[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    lines = text[text.index(SECTION) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| endpoint |"))
    block = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in block]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


def committed() -> bool:
    return (RESULTS / "REPORT.md").is_file()


def test_committed_report_is_recomputed_from_the_per_run_records(ce):
    if not committed():
        pytest.skip("no committed report yet")
    md, results = ce.render(ce.parse_args([*ARGV, "--out", str(RESULTS)]), RESULTS)
    assert md == (RESULTS / "REPORT.md").read_text(encoding="utf-8")
    assert json.loads(json.dumps(results)) == json.loads((RESULTS / "results.json").read_text(encoding="utf-8"))


def test_docs_table_is_recomputed_from_the_per_run_records():
    if not committed():
        pytest.skip("no committed report yet")
    want = expected_rows()
    rows = doc_rows()
    assert [r["endpoint"] for r in rows] == list(ENDPOINTS)
    for row in rows:
        w = want[row["endpoint"]]
        assert int(row["n"]) == w["n"] >= 1
        for col, key in (("`grpo`", "grpo"), ("`mt_grpo`", "mt_grpo"), ("mean diff", "diff")):
            assert float(row[col]) == pytest.approx(w[key], abs=5e-4)
        assert [int(x) for x in row["ahead / behind / tied"].split("/")] == [w["ahead"], w["behind"], w["tied"]]
        assert float(row["p (exact)"]) == pytest.approx(w["p"], abs=5e-5)
        if "holm" in w:
            assert float(row["Holm p"]) == pytest.approx(w["holm"], abs=5e-5)
        else:
            assert row["Holm p"] == "—"


def test_report_primary_row_is_the_docs_success_row():
    """REPORT.md's one primary test (final success, mt_grpo − grpo) is the docs' final-success row."""
    if not committed():
        pytest.skip("no committed report yet")
    tests = json.loads((RESULTS / "results.json").read_text(encoding="utf-8"))["tests"]
    (primary,) = [t for t in tests if t["family"] == "primary"]
    w = expected_rows()["final success"]
    assert (primary["env"], primary["arm"], primary["n"]) == ("agentgym/Shop-v0", "mt_grpo", w["n"])
    assert primary["mean"] == pytest.approx(w["diff"], abs=1e-12)
    assert primary["p"] == pytest.approx(w["p"], abs=5e-5)


def test_exact_p_counts_sign_patterns():
    """Hand-computed: d = (1, 1, 1) has |mean| 1 only under all-plus and all-minus, p = 2/8; d = (1, -1) has mean 0,
    which every pattern reaches, p = 1."""
    assert exact_p(np.array([1.0, 1.0, 1.0])) == 0.25
    assert exact_p(np.array([1.0, -1.0])) == 1.0
