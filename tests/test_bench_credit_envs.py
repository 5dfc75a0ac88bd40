"""bench/credit_envs.py (issue 34): the committed REPORT.md is what the script computes from the committed per-run
records, its primary tests agree with a sign-flip test done here by hand over every sign pattern, the grid and
``--env-config`` parse as documented, and the reason the plan plays Sokoban at 6x6-2 holds (at 6x6-1 the env's
turn signal only ever fires on a final turn, where mt_grpo gives the outcome alone, so mt_grpo is grpo)."""

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
RESULTS = ROOT / "bench" / "results" / "credit_envs"


@pytest.fixture(scope="module")
def ce():
    spec = importlib.util.spec_from_file_location("credit_envs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def committed_args(ce):
    """The planned grid (the script's defaults), read from the committed folder."""
    return ce.parse_args(["--out", str(RESULTS)])


def rows_after(header_start: str, text: str) -> list[dict[str, str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    block = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in block]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


def test_committed_report_is_recomputed_from_the_per_run_records(ce):
    if not (RESULTS / "REPORT.md").is_file():
        pytest.skip("no committed report yet")
    md, results = ce.render(committed_args(ce), RESULTS)
    assert md == (RESULTS / "REPORT.md").read_text(encoding="utf-8")
    committed = json.loads((RESULTS / "results.json").read_text(encoding="utf-8"))
    assert json.loads(json.dumps(results)) == committed


def test_committed_primary_tests_agree_with_a_sign_flip_by_hand(ce):
    """Each primary row of REPORT.md: the mean paired difference of final held-out success (from the runs'
    result.json, nothing else) and its exact two-sided p over all 2^n sign patterns, counted here."""
    if not (RESULTS / "REPORT.md").is_file():
        pytest.skip("no committed report yet")
    rows = [r for r in rows_after("| family |", (RESULTS / "REPORT.md").read_text()) if r["family"] == "primary"]
    for row in rows:
        env, arm = row["env"], row["arm − `grpo`"].strip("`")
        slug = env.rpartition("/")[2]
        diffs = []
        for seed in range(8):
            mine, base = (RESULTS / "rl" / f"{slug}-s{seed}-{a}" / "result.json" for a in (arm, "grpo"))
            if not (mine.is_file() and base.is_file()):
                continue
            a, b = (json.loads(p.read_text()) for p in (mine, base))
            if a["collapsed"] or b["collapsed"]:
                continue
            diffs.append(a["after_eval"]["eval_success_rate"] - b["after_eval"]["eval_success_rate"])
        d = np.array(diffs)
        observed = abs(d.mean())
        flips = [abs((d * np.array(signs)).mean()) for signs in itertools.product((1, -1), repeat=d.size)]
        p = sum(f >= observed - 1e-12 for f in flips) / len(flips)
        assert int(row["n"]) == d.size
        assert float(row["mean diff ± sd"].split("±")[0]) == pytest.approx(d.mean(), abs=5e-5)
        assert float(row["p (exact)"]) == pytest.approx(p, abs=5e-5)
        ahead, behind, tied = (int(x) for x in row["ahead / behind / tied"].split("/"))
        assert (ahead, behind, tied) == (int((d > 0).sum()), int((d < 0).sum()), int((d == 0).sum()))


def test_grid_is_seed_by_seed_warm_starts_first(ce):
    args = ce.parse_args(["--envs", "agentgym/Sokoban-v0", "agentgym/SQL-v0", "--seeds", "3", "4"])
    names = [j.name for j in ce.grid(args)]
    assert names[:6] == ["Sokoban-v0-s3", "SQL-v0-s3", "Sokoban-v0-s3-grpo", "Sokoban-v0-s3-mt_grpo",
                         "SQL-v0-s3-grpo", "SQL-v0-s3-mt_grpo"]  # fmt: skip
    assert names[6:] == [n.replace("-s3", "-s4") for n in names[:6]]
    rl = ce.Job("agentgym/Sokoban-v0", 3, "mt_grpo")
    config = ce.config_overrides(rl, args, Path("out"))
    assert config["init_from"] == str(Path("out/warm/Sokoban-v0-s3/checkpoint.pt"))
    assert (config["seed"], config["model_seed"], config["estimator"], config["iterations"]) == (3, 3, "mt_grpo", 15)
    assert config["env_kwargs"]["level_seed"] == 0 and config["eval_env_kwargs"]["level_seed"] == 1


def test_env_config_merges_env_arguments_into_train_and_eval(ce):
    args = ce.parse_args(["--envs", "agentgym/Sokoban-v0", "--env-config",
                          'agentgym/Sokoban-v0={"env_kwargs": {"size": "6x6-1"}, "sft_steps": 7}'])  # fmt: skip
    s = ce.setting_of("agentgym/Sokoban-v0", args)
    assert s.sft_steps == 7 and s.max_new_tokens == 8
    assert s.env_kwargs == {"size": "6x6-1", "num_levels": 200, "level_seed": 0, "max_turns": 12}
    assert s.eval_kwargs() == {"size": "6x6-1", "num_levels": 200, "level_seed": 1, "max_turns": 12}
    other = ce.parse_args(["--envs", "agentgym/Chain-v0", "--env-config", 'agentgym/Chain-v0={"stop": ["x"]}'])
    chain = ce.setting_of("agentgym/Chain-v0", other)  # an env without a planned setting: the defaults
    assert chain.stop == ("x",) and chain.env_kwargs == {} and chain.eval_kwargs() == {}


@pytest.mark.parametrize(
    "argv",
    [
        ["--envs", "agentgym/Sokoban-v0", "--env-config", 'agentgym/Sokoban-v0={"sft_step": 7}'],  # no such field
        ["--envs", "agentgym/Sokoban-v0", "--env-config", 'agentgym/SQL-v0={"sft_steps": 7}'],  # not in --envs
        ["--envs", "agentgym/Sokoban-v0", "--env-config", "agentgym/Sokoban-v0=[1]"],  # not an object
        ["--envs", "agentgym/NoSignal-v0"],  # mt_grpo needs a TURN_SIGNALS entry
        ["--arms", "mt_grpo"],  # nothing to compare with
    ],
)
def test_bad_grids_are_refused(ce, argv):
    with pytest.raises(SystemExit):
        ce.parse_args(argv)


def test_at_6x6_1_sokobans_turn_signal_leaves_mt_grpo_equal_to_grpo():
    """One box: boxes_on_target is 1 only on the solving move, which ends the episode; mt_grpo gives the final turn
    the outcome term alone, so its turn cells (the earlier turns) all hold 0 and it is grpo exactly. A group of
    four: solved at turn 3, unsolved after 4 moves, solved at turn 2, unsolved after 3 moves."""
    from agentgym.rewards.advantages import TURN_SIGNALS, grpo, mt_grpo

    signal = TURN_SIGNALS["agentgym/Sokoban-v0"]
    infos = [[0, 0, 1], [0, 0, 0, 0], [0, 1], [0, 0, 0]]
    rows = [signal.read({"boxes_on_target": 0}, [{"boxes_on_target": b} for b in row]) for row in infos]
    outcomes = [1.0, 0.0, 1.0, 0.0]
    a_mt = mt_grpo(outcomes, rows, ["g"] * 4)
    a_o = grpo(outcomes, ["g"] * 4)
    for adv, row, base in zip(a_mt, rows, a_o, strict=True):
        assert adv.tolist() == [pytest.approx(float(base))] * len(row)
    assert a_o.tolist() == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-5)


def test_the_docs_tables_are_the_committed_reports():
    """docs/diagnostics.md's Sokoban/SQL section shows REPORT.md's summary and paired-tests tables verbatim."""
    if not (RESULTS / "REPORT.md").is_file():
        pytest.skip("no committed report yet")
    report = (RESULTS / "REPORT.md").read_text(encoding="utf-8")
    docs = (ROOT / "docs" / "diagnostics.md").read_text(encoding="utf-8")
    for header in ("| env | seeds playable |", "| family | env | arm − `grpo` |"):
        table = rows_after(header, report)
        assert table and rows_after(header, docs) == table
