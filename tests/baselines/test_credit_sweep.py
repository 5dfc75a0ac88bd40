"""bench/credit_sweep.py: a micro grid end to end (warm starts searched to a skill band on the real trainer, shared
by every horizon and method of a seed, stored with their accuracy by turn position; resumable; the report with its
tables, paired tests and diagnostics plot on partial results), the skill search's bisection on the real trainer,
the paired statistics and Holm families on hand-made result sets, collapsed runs, and what every method trains on."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

pytest.importorskip("matplotlib")

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "credit_sweep.py"
ARGS = ["--cells", "Chain:1,2", "--methods", "grpo", "vine", "--seeds", "0", "1", "--iterations", "1",
        "--eval-episodes", "4", "--search-episodes", "4", "--target", "0.5", "--tolerance", "0.49", "--sft-chunk",
        "20", "--sft-max-steps", "300", "--batch-tasks", "2", "--group-size", "2", "--minibatch-size", "4", "--jobs",
        "2", "--primary", "Chain:2:vine"]  # fmt: skip


def sweep(out: Path, *extra: str) -> str:
    proc = subprocess.run([sys.executable, str(SCRIPT), *ARGS, "--out", str(out), *extra], capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def cs():
    spec = importlib.util.spec_from_file_location("credit_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_micro_sweep_searches_warm_starts_runs_resumes_and_reports(tmp_path):
    out = tmp_path / "sweep"
    sweep(out)
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert sorted((r["horizon"], r["seed"], r["method"]) for r in runs) == sorted(
        (h, s, m) for h in (1, 2) for s in (0, 1) for m in ("grpo", "vine")
    )
    grpo = {(r["horizon"], r["seed"]): r["sampled_tokens_total"][-1] for r in runs if r["method"] == "grpo"}
    for r in runs:  # vine forks: it samples more per iteration and stops at grpo's tokens of its cell and seed
        if r["method"] == "vine":
            assert r["sampled_tokens_total"][-1] >= grpo[(r["horizon"], r["seed"])]
            assert r["stop_reason"][-1] is not None
    assert all(len(r["success_rate"]) == 1 and 0.0 <= r["after"] <= 1.0 for r in runs)
    assert all(len(r["valid_action_frac"]) == 1 and len(r["turn_accuracy"]) == 1 for r in runs)  # diagnostics kept
    assert sorted(p.name for p in (out / "sft").iterdir()) == ["Chain-s0", "Chain-s1"]  # one warm start per seed
    for seed in (0, 1):
        warm = json.loads((out / "sft" / f"Chain-s{seed}" / "result.json").read_text())
        assert warm["reached"] and warm["job"]["horizon"] == 2  # demonstrations at the longest H
        assert 0.01 <= warm["turn_accuracy"] <= 0.99
        assert warm["sft_steps"] > 0 and warm["sft_steps"] % 20 == 0  # whole chunks: the band is wide
        assert [e["accuracy"] < 0.01 for e in warm["search"]] == [True] * (len(warm["search"]) - 1) + [False]
        by_h = warm["before"]
        assert sorted(by_h) == ["1", "2"] and [len(by_h[h]["eval_turn_accuracy_by_turn"]) for h in "12"] == [1, 2]
        assert by_h["2"]["eval_turn_accuracy"] == warm["turn_accuracy"]  # the search measured these same episodes
        for r in runs:
            if r["seed"] == seed:
                assert r["before"] == by_h[str(r["horizon"])]["eval_success_rate"]  # every method starts there
    assert not list((out / "rl").glob("*/checkpoint.pt"))  # finished runs keep their result, not their weights
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/*/result.json")}
    report = sweep(out)  # everything finished: nothing runs again
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/*/result.json")} == stamps
    for heading in ("## Design", "## Final success", "## Every cell", "## Paired tests", "## Warm starts",
                    "## Missing"):  # fmt: skip
        assert heading in report
    assert "0.5 ± 0.49" in report and "2 paired seeds" in report and "smallest attainable p is 0.5000" in report
    assert "nothing: the requested grid is complete" in report
    tests = json.loads((out / "results.json").read_text())["tests"]
    assert sorted((t["family"], t["horizon"], t["endpoint"]) for t in tests) == [
        ("primary", 2, "final"), ("secondary", 1, "auc"), ("secondary", 1, "final"), ("secondary", 2, "auc")
    ]  # fmt: skip
    assert all(t["n"] == 2 and t["exact"] and t["p"] >= 0.5 for t in tests)  # 2 pairs: p is 0.5 or 1
    assert (out / "credit_sweep.png").stat().st_size > 0 and (out / "credit_diagnostics.png").stat().st_size > 0
    # git keeps results, not weights: a run that needs a warm start whose checkpoint is gone redoes it, identically
    record = json.loads((out / "sft" / "Chain-s0" / "result.json").read_text())
    (out / "sft" / "Chain-s0" / "checkpoint.pt").unlink()
    (out / "rl" / "Chain-H1-s0-grpo" / "result.json").unlink()
    sweep(out, "--seeds", "0")
    redone = json.loads((out / "sft" / "Chain-s0" / "result.json").read_text())
    assert redone.pop("seconds") != record.pop("seconds") and redone == record
    assert (out / "sft" / "Chain-s0" / "checkpoint.pt").is_file()
    assert (out / "rl" / "Chain-H1-s0-grpo" / "result.json").is_file()
    # a wider request over the same folder: the report says what is missing and still draws what finished
    partial = sweep(out, "--seeds", "0", "1", "2", "--report-only")
    assert "warm start Chain seed 2: not run yet" in partial
    assert "Chain H=2 `grpo`: 2 of 3 seeds finished (missing 2)" in partial


@pytest.mark.slow
def test_skill_search_bisects_an_overshoot_on_the_real_trainer(tmp_path, one_thread, cs):
    """Plain SFT measured at steps 0, 40, 60, 80 and 120 gives a(k); a band around a(c) that a(0) lies below and
    a(2c) above makes the search (first chunk 2c) overshoot at 2c, go back to 0, halve its chunk and stop in the
    band at c, with exactly the weights plain SFT had at c (the restore is exact: the same accuracy)."""
    from agentgym.baselines.config import load_config
    from agentgym.baselines.trainer import setup

    args = cs.parse_args(["--cells", "Chain:2", "--eval-episodes", "16"])

    def fresh() -> tuple:
        config = load_config("tiny", overrides=cs.config_overrides(cs.Job("Chain", 2, 0), args, tmp_path))
        return setup(config), config

    state, config = fresh()
    plain = cs.trainer_search(state, config, cs.Band(0.5, 0.4), chunk=1, lr=3e-3, max_steps=0, search_episodes=16)
    acc, at = {0: plain.measure(True)}, 0
    for k in (40, 60, 80, 120):
        plain.sft(at, k - at, 3e-3)
        acc[k], at = plain.measure(True), k
    state.close()
    found = [c for c in (40, 60) if acc[0] < acc[c] < acc[2 * c]]
    assert found, f"plain SFT did not rise on Chain H=2: {acc}"
    c = found[0]
    tol = min(acc[c] - acc[0], acc[2 * c] - acc[c], acc[c], 1 - acc[c]) / 2
    state, config = fresh()
    search = cs.trainer_search(state, config, cs.Band(acc[c], tol), chunk=2 * c, lr=3e-3, max_steps=1000,
                               search_episodes=16)  # fmt: skip
    assert search.run(), search.reason
    state.close()
    assert [(e["position"], e["chunk"]) for e in search.log] == [(0, 2 * c), (2 * c, 2 * c), (c, c)]
    assert [e["accuracy"] for e in search.log] == [acc[0], acc[2 * c], acc[c]]
    assert (search.position, search.spent, search.lr, search.accuracy) == (c, 3 * c, 3e-3, acc[c])


def test_skill_search_gives_up_within_its_budget(tmp_path, one_thread, cs):
    """A band the tiny model cannot reach in 6 SFT steps: the search stops at the budget and says so."""
    from agentgym.baselines.config import load_config
    from agentgym.baselines.trainer import setup

    args = cs.parse_args(["--cells", "Chain:1", "--eval-episodes", "4"])
    config = load_config("tiny", overrides=cs.config_overrides(cs.Job("Chain", 1, 0), args, tmp_path))
    state = setup(config)
    search = cs.trainer_search(state, config, cs.Band(0.9, 0.05), chunk=4, lr=1e-4, max_steps=6, search_episodes=4)
    assert not search.run()
    state.close()
    assert search.spent == 6 and [e["spent"] for e in search.log] == [0, 4, 6]
    assert "not in the band [0.850, 0.950] after 6 SFT steps" in search.reason


def test_band_and_arguments_are_checked(cs):
    assert [cs.Band(0.75, 0.03).where(x) for x in (0.71, 0.72, 0.75, 0.78, 0.79)] == [-1, 0, 0, 0, 1]
    for target, tol in ((0.75, 0.3), (1.0, 0.01), (0.5, 0.0)):
        with pytest.raises(ValueError, match="band"):
            cs.Band(target, tol)
    for bad in (["--target", "0.9", "--tolerance", "0.2"], ["--sft-chunk", "0"], ["--primary", "Chain:x:grpo"]):
        with pytest.raises(SystemExit) as exc:
            cs.parse_args(bad)
        assert exc.value.code == 2
    args = cs.parse_args([])
    assert args.seeds == list(range(8)) and args.eval_episodes == 256 and args.cells == {"Chain": (4, 8, 16)}
    assert (args.target, args.tolerance) == (0.75, 0.03)
    assert cs.parse_primary("Chain:16:a,b;KeyDoor:8:c") == {("Chain", 16, "a"), ("Chain", 16, "b"),
                                                              ("KeyDoor", 8, "c")}  # fmt: skip
    assert cs.parse_primary("none") == set()


def test_every_method_is_a_valid_trainer_config_and_outcome_only_means_the_outcome(tmp_path, cs):
    from agentgym.baselines.config import load_config

    args = cs.parse_args(["--cells", "Chain:2;Umbrella:2", "--eval-episodes", "4", "--batch-tasks", "2",
                          "--group-size", "2", "--minibatch-size", "4", "--iterations", "1",
                          "--token-budget", "none"])  # fmt: skip
    configs = {}
    for env in ("Chain", "Umbrella"):
        warm = cs.Job(env, 2, 0).directory(tmp_path) / "checkpoint.pt"  # init_from must name a file; not loaded here
        warm.parent.mkdir(parents=True)
        warm.touch()
        for method in cs.METHODS:
            job = cs.Job(env, 2, 0, method)
            assert job.warm_start(args) == cs.Job(env, 2, 0)
            config = load_config("tiny", overrides=cs.config_overrides(job, args, tmp_path))
            assert config.env_id == f"agentgym/{env}-v0" and (config.lr, config.epochs) == (args.lr, args.epochs)
            configs[(env, method)] = config
    for env in ("Chain", "Umbrella"):  # Umbrella's distractor rewards never reach the outcome-only methods
        for method in ("grpo", "rloo", "mt_grpo", "vine", "tree"):
            assert configs[(env, method)].counted_components == ("outcome",)
        assert configs[(env, "progress_td")].counted_components == ("outcome", "progress")
    critic = configs[("Chain", "progress_td")]
    assert (critic.algo, critic.lam, critic.detach_critic, critic.progress_key) == ("ppo", 0.0, True, "progress")
    assert (configs[("Chain", "vine")].branch_k, configs[("Chain", "tree")].estimator) == (2, "tree")
    assert all(c.max_sampled_tokens is None for c in configs.values())  # --token-budget none


def test_distractor_reward_reaches_the_rl_runs_and_the_env_only(tmp_path, cs):
    """``--distractor-reward`` sets the distractor envs' reward in the RL runs (training and evaluation), never in the
    warm starts, and is refused with Chain, whose env has no distractors."""
    from agentgym.baselines.config import load_config

    args = cs.parse_args(["--cells", "Umbrella:2", "--distractor-reward", "1.0", "--token-budget", "none"])
    warm = cs.Job("Umbrella", 2, 0).directory(tmp_path) / "checkpoint.pt"
    warm.parent.mkdir(parents=True)
    warm.touch()
    rl = load_config("tiny", overrides=cs.config_overrides(cs.Job("Umbrella", 2, 0, "gtpo"), args, tmp_path))
    sft = load_config("tiny", overrides=cs.config_overrides(cs.Job("Umbrella", 2, 0), args, tmp_path))
    assert rl.env_kwargs["distractor_reward"] == rl.eval_env_kwargs["distractor_reward"] == 1.0
    assert "distractor_reward" not in sft.env_kwargs
    env = gym.make(rl.env_id, **rl.env_kwargs).unwrapped
    assert env.distractor_reward == 1.0
    for bad in (["--distractor-reward", "1"], ["--cells", "Umbrella:2", "--distractor-reward", "-1"],
                ["--cells", "KeyDoor:2", "--distractor-reward", "nan"],
                ["--cells", "Umbrella:2", "--distractor-reward", "2e6"]):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            cs.parse_args(bad)
        assert exc.value.code == 2


def test_branch_methods_get_grpos_tokens_and_wait_for_it(tmp_path, cs):
    """--token-budget grpo: vine and tree stop at grpo's mean tokens per iteration x --iterations (its total when
    it ran them all), read from grpo's result of the same cell and seed, and wait for it; a number applies to
    every run; grpo must be in the grid."""
    from agentgym.baselines.config import load_config

    args = cs.parse_args(["--cells", "Chain:2", "--iterations", "4", "--methods", "grpo", "vine", "tree"])
    warm = cs.Job("Chain", 2, 0).directory(tmp_path) / "checkpoint.pt"
    warm.parent.mkdir(parents=True)
    warm.touch()
    vine = cs.Job("Chain", 2, 0, "vine")
    assert cs.needs(vine, args) == [cs.Job("Chain", 2, 0), cs.Job("Chain", 2, 0, "grpo")]
    assert cs.needs(cs.Job("Chain", 2, 0, "grpo"), args) == [cs.Job("Chain", 2, 0)]
    with pytest.raises(ValueError, match="has not finished"):
        cs.config_overrides(vine, args, tmp_path)
    base = cs.Job("Chain", 2, 0, "grpo").directory(tmp_path)
    base.mkdir(parents=True)
    history = [{"iteration": 0}, {"iteration": 1, "sampled_tokens": 100}, {"iteration": 2, "sampled_tokens": 120},
               {"iteration": 3, "sampled_tokens": 110, "collapse_reason": "gradient norm exploded"}]  # fmt: skip
    (base / "result.json").write_text(json.dumps({"job": {}, "history": history}))
    for method, budget in (("vine", 440), ("tree", 440), ("grpo", None)):  # collapsed at 3: 110 x 4 iterations
        config = load_config("tiny", overrides=cs.config_overrides(cs.Job("Chain", 2, 0, method), args, tmp_path))
        assert config.max_sampled_tokens == budget
    fixed = cs.parse_args(["--cells", "Chain:2", "--token-budget", "5000"])
    assert cs.needs(vine, fixed) == [cs.Job("Chain", 2, 0)]
    assert cs.config_overrides(cs.Job("Chain", 2, 0, "rloo"), fixed, tmp_path)["max_sampled_tokens"] == 5000
    for bad in (["--token-budget", "lots"], ["--token-budget", "0"], ["--methods", "vine"]):
        with pytest.raises(SystemExit) as exc:
            cs.parse_args(bad)
        assert exc.value.code == 2


def _run(method: str, seed: int, after: float | None, auc: float = 0.5, collapsed: str | None = None) -> dict:
    history = [{"iteration": 1, "success_rate": auc, "zero_std_group_frac": 0.25}]
    return {"job": {"env": "Chain", "horizon": 4, "seed": seed, "method": method}, "history": history,
            "before": 0.4, "after": after, "collapsed": collapsed, "seconds": 1.0}  # fmt: skip


def test_collapsed_runs_are_counted_not_averaged_or_paired(cs):
    results = [_run("grpo", 0, 0.6), _run("grpo", 1, 0.8), _run("progress", 0, 0.7),
               _run("progress", 1, None, collapsed="valid-action share fell from 0.84 to 0.12"),
               _run("rloo", 0, None, collapsed="gradient norm exploded"),
               _run("rloo", 1, None, collapsed="gradient norm exploded")]  # fmt: skip
    text, records = cs.table(results, ["grpo", "progress", "rloo"])
    by = {r["method"]: r for r in records}
    assert (by["grpo"]["seeds"], by["grpo"]["collapsed"], by["grpo"]["after_mean"]) == (2, 0, 0.7)
    assert (by["progress"]["seeds"], by["progress"]["collapsed"]) == (1, 1)
    assert by["progress"]["after_mean"] == 0.7  # the collapsed seed is not a zero in the mean
    assert by["progress"]["diff_to_grpo"] == pytest.approx(0.7 - 0.6)  # paired on the surviving seed only
    assert (by["rloo"]["seeds"], by["rloo"]["collapsed"]) == (0, 2)
    assert "| Chain | 4 | `rloo` | 0 | 2 |" in text
    assert "`rloo`" not in cs.pivot(records, ["grpo", "progress", "rloo"])  # no mean to show
    tests = cs.comparisons(results, ["grpo", "progress", "rloo"], set())
    assert [(t["method"], t["endpoint"], t["n"]) for t in tests] == [("progress", "final", 1), ("progress", "auc", 1)]


def test_paired_tests_and_holm_families_on_hand_made_results(cs):
    """Three seeds where mt_grpo beats grpo on every seed (final +0.1, +0.2, +0.3): two of 8 sign patterns are as
    extreme, p = 0.25; its AUC ties everywhere, p = 1. progress: final -0.1, +0.1, +0.3 (sum 0.3; a pattern's sum
    is +-0.3 + 0.1 (s2 - s1): |sum| is 0.3, 0.3, 0.5 or 0.1, so 6 of 8 patterns reach 0.3), p = 0.75. Primary
    family {mt_grpo final, progress final} (Holm over 2: 0.25 x 2 = 0.5, max(0.75, 0.5) = 0.75); secondary: the
    two AUC tests (p = 1 each)."""
    grpo = [0.5, 0.4, 0.3]
    results = [_run("grpo", s, a) for s, a in enumerate(grpo)]
    results += [_run("mt_grpo", s, a + d) for s, (a, d) in enumerate(zip(grpo, (0.1, 0.2, 0.3), strict=True))]
    results += [_run("progress", s, a + d) for s, (a, d) in enumerate(zip(grpo, (-0.1, 0.1, 0.3), strict=True))]
    primary = {("Chain", 4, "mt_grpo"), ("Chain", 4, "progress")}
    tests = {(t["method"], t["endpoint"]): t for t in cs.comparisons(results, ["grpo", "mt_grpo", "progress"],
                                                                      primary)}  # fmt: skip
    mt, pr = tests[("mt_grpo", "final")], tests[("progress", "final")]
    assert (mt["family"], mt["n"], mt["p"], mt["p_holm"], mt["family_size"]) == ("primary", 3, 0.25, 0.5, 2)
    assert mt["mean"] == pytest.approx(0.2) and mt["sd"] == pytest.approx(0.1)
    assert (pr["p"], pr["p_holm"]) == (pytest.approx(0.75), pytest.approx(0.75))
    for method in ("mt_grpo", "progress"):
        auc = tests[(method, "auc")]
        assert (auc["family"], auc["mean"], auc["p"], auc["p_holm"], auc["family_size"]) == ("secondary", 0.0, 1.0,
                                                                                             1.0, 2)  # fmt: skip
    rows = cs.tests_table(list(tests.values())).splitlines()
    assert rows[2].startswith("| primary |") and "| 0.2500 | 0.5000 |" in "\n".join(rows)
    # with 8 seeds all better the smallest p, 2/256, survives Holm over 3 primary tests (0.0234)
    eight = [_run("grpo", s, 0.3) for s in range(8)] + [_run("vine", s, 0.3 + 0.01 * (s + 1)) for s in range(8)]
    (final, _) = cs.comparisons(eight, ["grpo", "vine"], {("Chain", 4, "vine")})
    assert (final["p"], final["p_holm"]) == (2 / 256, 2 / 256)  # a family of one
    assert math.isclose(cs.holm([2 / 256, 0.5, 0.9])[0], 6 / 256)


@pytest.mark.slow
def test_evaluate_reports_turn_accuracy_by_position(tmp_path, one_thread, cs):
    """trainer.evaluate's eval_turn_accuracy on Chain H=3: every turn carries info['correct'], so the overall share
    is the mean of the three positions', and an episode succeeds only when all three are right."""
    from agentgym.baselines.config import load_config
    from agentgym.baselines.trainer import evaluate, setup
    from agentgym.baselines.warmup import sft_step

    args = cs.parse_args(["--cells", "Chain:3", "--eval-episodes", "12"])
    config = load_config("tiny", overrides=cs.config_overrides(cs.Job("Chain", 3, 0), args, tmp_path))
    state = setup(config)
    for k in range(60):
        sft_step(state, config, 0, k)
    result = evaluate(state, config)
    state.close()
    by_turn = result["eval_turn_accuracy_by_turn"]
    assert len(by_turn) == 3 and all(0.0 <= a <= 1.0 for a in by_turn)
    assert result["eval_turn_accuracy"] == pytest.approx(sum(by_turn) / 3)
    assert result["eval_success_rate"] <= min(by_turn)
    assert result["eval_turn_accuracy"] <= result["eval_valid_action_frac"] <= 1.0  # a right choice is a valid one
    assert all(a * 12 == round(a * 12) for a in by_turn)  # shares of the 12 episodes' turns at that position


def test_a_redone_warm_start_must_equal_its_record(cs):
    record = {"reached": True, "sft_steps": 100, "sft_steps_taken": 120, "turn_accuracy": 0.75, "reason": "in band",
              "search": [{"position": 0, "accuracy": 0.0}], "before": {"16": {"eval_success_rate": 0.01}}}  # fmt: skip
    job = cs.Job("Chain", 16, 3)
    same = {**record, "before": {4: {"eval_success_rate": 0.2}, 16: {"eval_success_rate": 0.01, "new": 1}},
            "seconds": 9.0}  # fmt: skip
    cs.check_redone(job, record, same)  # the same search and evaluation; more measured besides: fine
    for change in ({"sft_steps": 101}, {"turn_accuracy": 0.7501}, {"before": {16: {"eval_success_rate": 0.02}}}):
        with pytest.raises(RuntimeError, match=r"Chain-s3 was redone .* differs from its record"):
            cs.check_redone(job, record, {**same, **change})
