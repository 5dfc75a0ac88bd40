"""The learned/judged turn-signal experiment's harness (bench/credit_signals.py; the plan:
bench/results/credit_signals/PLAN.md): its arms are trainer settings the config accepts, it reuses round 2's records
as planned, and its report's retention, paired tests and noise threshold equal hand computations on records written
here."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "credit_signals.py"


@pytest.fixture(scope="module")
def cs():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("credit_signals", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(out: Path, seed: int, method: str, after: float, *, auc: float | None = None, collapsed: str | None = None):
    d = out / "rl" / f"Chain-H16-s{seed}-{method}"
    d.mkdir(parents=True, exist_ok=True)
    hist = [{"iteration": 1, "success_rate": 0.1, "zero_std_group_frac": 0.5, "sampled_tokens": 10}]
    if auc is not None:
        hist[0]["turn_signal_auc"] = auc
    result = {"job": {"env": "Chain", "horizon": 16, "seed": seed, "method": method}, "history": hist,
              "collapsed": collapsed, "before": 0.0, "after": None if collapsed else after}  # fmt: skip
    (d / "result.json").write_text(json.dumps(result))


def test_every_arm_is_a_valid_trainer_config(cs):
    """Each arm's overrides make a TrainConfig (the learned and judged arms name catalogue scorers, so they validate
    once those scorers are registered; until then their config error names the missing scorer)."""
    from agentgym.baselines.config import load_config

    table = cs.arm_table("http://127.0.0.1:8000/v1")
    assert set(table) == set(cs.ARMS)
    for name, overrides in table.items():
        if "scorer" in overrides:
            continue  # the scorer arms: checked by the smoke runs of their cards
        config = load_config("tiny", overrides={"env_id": "agentgym/Chain-v0", **overrides})
        assert config.turn_signal_flip == cs.FLIPS[name.partition("@")[2]]
    ptd = table["progress_td@flip10"]
    assert ptd["signal_progress_coef"] == 1.0 and "progress_key" not in ptd and ptd["reward_components"] == ["outcome"]


def test_report_computes_retention_tests_and_the_noise_threshold(cs, tmp_path):
    # grpo 0.0; oracle mt_grpo 0.1; flip10 keeps half (0.05); flip30 loses 0.02; seed 3's flip30 run collapsed
    gains = {"grpo": 0.0, "mt_grpo": 0.1, "mt_grpo@flip10": 0.05, "mt_grpo@flip30": -0.02}
    for seed in range(4):
        for method, gain in gains.items():
            auc = {"mt_grpo@flip10": 0.9, "mt_grpo@flip30": 0.7}.get(method)
            after = 0.01 * seed + gain + (0.001 * seed if method == "mt_grpo@flip10" else 0)
            collapsed = "valid share halved" if (method == "mt_grpo@flip30" and seed == 3) else None
            write(tmp_path, seed, method, after, auc=auc, collapsed=collapsed)
    args = cs.parse_args(["--env", "Chain", "--out", str(tmp_path), "--seeds", "0", "1", "2", "3", "--report-only"])
    text = cs.report(args, tmp_path)
    summary = json.loads((tmp_path / "results.json").read_text())
    flip10 = summary["arms"]["mt_grpo@flip10"]
    assert flip10["gain"] == pytest.approx(0.05 + 0.0015) and flip10["signal_auc"] == 0.9
    # retention: mean gain (0.0515) / the oracle's (0.1); every bootstrap resample's ratio lies in [0.50, 0.53]
    assert flip10["retention"][0] == pytest.approx(0.515)
    assert 0.5 <= flip10["retention"][1] <= flip10["retention"][2] <= 0.53
    flip30 = summary["arms"]["mt_grpo@flip30"]
    assert flip30["collapsed"] == 1 and flip30["pairs"] == 3 and flip30["gain"] == pytest.approx(-0.02)
    # the curve (0, 0.1), (0.1, 0.0515), (0.3, -0.02) crosses 0 at 0.1 + 0.2 * 0.0515 / 0.0715
    assert summary["noise_threshold"] == pytest.approx(0.1 + 0.2 * 0.0515 / 0.0715)
    tests = {(t["arm"], t["base"]): t for t in summary["tests"]}
    # 4 positive paired differences: the exact two-sided sign-flip p is 2/16
    assert tests[("mt_grpo@flip10", "grpo")]["p"] == pytest.approx(2 / 16)
    assert tests[("mt_grpo@flip10", "grpo")]["family"] == "primary"
    assert tests[("mt_grpo", "grpo")]["family"] == "secondary"
    primary = [t for t in summary["tests"] if t["family"] == "primary"]
    ps = sorted(t["p"] for t in primary)
    assert min(t["holm"] for t in primary) == pytest.approx(min(1.0, ps[0] * len(ps)))
    assert "| `mt_grpo@flip10` | 4 | 0 |" in text and (tmp_path / "credit_signals.png").is_file()
    assert not math.isnan(np.mean([t["mean"] for t in primary]))


def test_round2_records_are_copied_for_every_seed_but_the_checked_one(cs, tmp_path):
    args = cs.parse_args(["--env", "Chain", "--out", str(tmp_path), "--seeds", "0", "1"])
    checks = cs.reuse_round2(args, tmp_path)
    assert {j.method for j in checks} == {"grpo", "mt_grpo", "progress_td"} and {j.seed for j in checks} == {0}
    assert (tmp_path / "rl" / "Chain-H16-s1-mt_grpo" / "result.json").is_file()
    assert not (tmp_path / "rl" / "Chain-H16-s0-mt_grpo").exists()
    assert (tmp_path / "sft" / "Chain-s0" / "result.json").is_file()
    assert [c["status"] for c in cs.reuse_check(args, tmp_path)] == ["pending"] * 3
    # a rerun equal to its record passes the check; one that differs anywhere in its history does not
    src = ROOT / cs.ROUND2["Chain"] / "rl" / "Chain-H16-s0-grpo" / "result.json"
    record = json.loads(src.read_text())
    (tmp_path / "rl" / "Chain-H16-s0-grpo").mkdir(parents=True)
    rerun = {**record, "history": [{**h, "time_update": 9.9, "turn_signal_auc": 0.5} for h in record["history"]]}
    (tmp_path / "rl" / "Chain-H16-s0-grpo" / "result.json").write_text(json.dumps(rerun))
    assert cs.reuse_check(args, tmp_path)[0]["status"] == "equal"
    rerun["history"][-1] = {**rerun["history"][-1], "entropy": -1.0}
    (tmp_path / "rl" / "Chain-H16-s0-grpo" / "result.json").write_text(json.dumps(rerun))
    assert cs.reuse_check(args, tmp_path)[0]["status"] == "DIFFERS"


def test_the_docs_table_is_recomputed_from_the_committed_records(cs, tmp_path):
    """docs/diagnostics.md's table of the experiment is what the report computes from the per-run records under
    bench/results/credit_signals/chain (copied here, so the report is written here): each row of the docs table is
    a row of the recomputed report, and the noise threshold the docs state is the report's."""
    committed = ROOT / "bench" / "results" / "credit_signals" / "chain"
    for record in committed.glob("*/*/result.json"):
        target = tmp_path / record.relative_to(committed)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(record.read_bytes())
    args = cs.parse_args(["--env", "Chain", "--out", str(tmp_path), "--report-only"])
    text = cs.report(args, tmp_path)
    docs = (ROOT / "docs" / "diagnostics.md").read_text(encoding="utf-8")
    section = docs[docs.index("## Learned and judged turn signals") :]
    rows = [line.strip() for line in section.splitlines() if line.strip().startswith("| `")]
    assert len(rows) >= 8 and all(row in text.splitlines() for row in rows), [r for r in rows if r not in text]
    threshold = json.loads((tmp_path / "results.json").read_text())["noise_threshold"]
    assert f"crosses 0 at a flip rate of {threshold:.2f}" in " ".join(section.split())
    assert (ROOT / "docs" / "images" / "credit_signals_chain.png").is_file()
