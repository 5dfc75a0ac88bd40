"""The reward bench: the Mann-Whitney AUC against a brute-force count, and a small real run on SearchQA that
writes its report, JSON and PNG and finds the progress reward informative (AUC > 0.5)."""

import itertools
import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from agentgym.running.reward_bench import COLUMNS, SHAPERS, mann_whitney_auc, reward_bench, table


def brute_force_auc(scores, labels):
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


@settings(max_examples=200, deadline=None)
@given(data=st.lists(st.tuples(st.integers(-3, 3).map(float), st.booleans()), min_size=1, max_size=30))
def test_auc_matches_the_pairwise_definition(data):
    scores, labels = zip(*data, strict=True)
    auc = mann_whitney_auc(scores, labels)
    if all(labels) or not any(labels):
        assert math.isnan(auc)
        return
    assert auc == pytest.approx(brute_force_auc(scores, labels))
    assert mann_whitney_auc([3 * s + 1 for s in scores], labels) == pytest.approx(auc)  # rank-based
    assert mann_whitney_auc([-s for s in scores], labels) == pytest.approx(1 - auc)


def test_auc_drops_nan_scores():
    assert mann_whitney_auc([math.nan, 1.0, 0.0], [False, True, False]) == 1.0
    assert math.isnan(mann_whitney_auc([], []))


def test_reward_bench_small_run(tmp_path):
    result = reward_bench(["agentgym/SearchQA-v0"], episodes=12, seed=0, out=tmp_path)
    rows = {r["shaper"]: r for r in result.rows}
    assert set(rows) == {s.name for s in SHAPERS}
    for row in rows.values():
        assert row["rollouts"] == 24 and 0 < row["success"] < 1
        assert row["turn_min"] <= row["turn_mean"] <= row["turn_max"]
    assert rows["progress"]["auc_sum"] > 0.5 and rows["progress"]["auc_mean"] > 0.5
    assert rows["none"]["auc_sum"] == 1.0  # the outcome itself defines success
    assert rows["shaping"]["term_sum"] == pytest.approx(0.0, abs=1e-12)  # Phi(s_0) = 0 and Phi(terminal) = 0
    assert rows["shaping"]["auc_sum"] == 0.5  # policy-invariant shaping adds no signal to the return
    assert rows["step_cost"]["turn_max"] <= 1.0 - 0.01 + 1e-12
    assert rows["prm_clip"]["turn_min"] >= -0.1 - 1e-12

    assert result.report_path == tmp_path / "rewards.md" and result.json_path == tmp_path / "rewards.json"
    report = result.report_path.read_text()
    assert "| progress" in report and "rewards_agentgym_SearchQA-v0.png" in report
    payload = json.loads(result.json_path.read_text())
    assert [r["shaper"] for r in payload["rows"]] == [r["shaper"] for r in result.rows]
    assert payload["envs"]["agentgym/SearchQA-v0"]["agents"] == ["heuristic", "random"]
    [png] = result.plots
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = table(result.rows)
    assert printed.splitlines()[0].split("|")[1].strip() == COLUMNS[0] and "prm_delta" in printed
