"""Does a learned or judged turn signal keep the oracle's credit? ``mt_grpo`` and ``progress_td`` at H = 16 fed the
oracle turn signal, the same signal corrupted at known rates, a judge's verdicts and three learned signals, against
GRPO, paired by seed (issue 35; the design, fixed before any result: bench/results/credit_signals/PLAN.md).

    nice -n 10 python bench/credit_signals.py --env Chain --out bench/results/credit_signals/chain
    python bench/credit_signals.py --env Chain --arms mt_grpo@flip10 --seeds 100 --iterations 5 --out runs/pilot
    python bench/credit_signals.py --env Chain --report-only --out bench/results/credit_signals/chain

The sweep is ``bench/credit_sweep.py``'s (its warm starts at a target skill, its runs, budget and evaluation), with
the arms of :func:`arm_table` added to its methods. Round 2's records of the oracle and GRPO arms (``grpo``,
``mt_grpo``, ``progress_td``: bench/results/credit_round2) are copied in for every seed but 0; seed 0 of each is
rerun here and must equal its record to the digit (the report states the check), so the copied seeds are paired with
this sweep's runs as runs of the same code. The ``judge_smollm2`` arms are judged by SmolLM2-135M-Instruct on the
suite's own model server (``agentgym.tools.openai_server``), started in this process for the sweep's workers.

The report (``REPORT.md``, ``results.json``, ``credit_signals.png`` under ``--out``) is computed from the
``result.json`` files alone and works on partial results: per arm the final held-out success, the paired difference
against ``grpo`` and against the oracle arm of its method (exact sign-flip tests, Holm within the plan's families),
the share of the oracle's gain each arm keeps (retention, with a paired bootstrap interval), the mean
``turn_signal_auc`` (how well the signal the arm read told right turns from wrong; a signal flipped at rate p: 1 - p)
and the flip rate at which ``mt_grpo`` stops helping.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shutil
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

if str(Path(__file__).resolve().parent) not in sys.path:  # bench/ is no package: the credit sweep is a sibling
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import credit_sweep
from credit_sweep import METHODS, Job, _fmt, read_result, summarise

from agentgym.running.stats import holm, sign_flip_test

#: The oracle arm of each method (round 2's settings) and GRPO, the baseline.
ORACLES = {"mt_grpo": "mt_grpo", "progress_td": "progress_td"}
BASELINE = "grpo"
#: Round 2's folders, per env: the records reused for the oracle and GRPO arms.
ROUND2 = {"Chain": "bench/results/credit_round2/grid", "Umbrella": "bench/results/credit_round2/distractors"}
#: The sweep settings of each env's warm starts (round 2's) and its seeds.
ENV_SETTINGS: dict[str, dict[str, Any]] = {
    "Chain": {"tolerance": 0.03, "sft_max_steps": 600, "seeds": list(range(8))},
    "Umbrella": {"tolerance": 0.05, "sft_max_steps": 1000, "seeds": list(range(10))},
}
#: The flip rates of the noise curve.
FLIPS = {"flip10": 0.1, "flip30": 0.3, "flip50": 0.5}
#: The plan's primary family: Chain H = 16, mt_grpo fed these sources, each against grpo.
PRIMARY = ("mt_grpo@flip10", "mt_grpo@flip30", "mt_grpo@judge_smollm2", "mt_grpo@spa", "mt_grpo@oprl",
           "mt_grpo@sweet")  # fmt: skip
#: Arms that check the pipeline (they must equal the oracle arm), run on these seeds only.
CHECK_ARMS = {"mt_grpo@judge_rule": (0, 1), "progress_td@judge_rule": (0, 1)}
#: The learned scorers (catalogue names) of the learned arms.
LEARNED = {"spa": "spa", "oprl": "oprl", "sweet": "sweet_rl"}


def arm_table(judge_url: str | None) -> dict[str, dict[str, Any]]:
    """Arm name -> trainer overrides. ``judge_url``: SmolLM2's server (None: the ``judge_smollm2`` arms get a
    placeholder that fails at their first judge call; they are only run with a server)."""
    mt = {"algo": "grpo", "estimator": "mt_grpo"}
    ptd = {k: v for k, v in METHODS["progress_td"].items() if k != "progress_key"}
    ptd["reward_components"] = ["outcome"]  # the signal's progress joins the rewards in place of the env's
    smollm2 = {"base_url": judge_url or "http://127.0.0.1:9/v1", "answer": "logprob", "max_retries": 0}
    judges = {"judge_rule": "rule", "judge_smollm2": smollm2}
    table: dict[str, dict[str, Any]] = {}
    for name, rate in FLIPS.items():
        table[f"mt_grpo@{name}"] = {**mt, "turn_signal_flip": rate}
        if name != "flip50":
            table[f"progress_td@{name}"] = {**ptd, "signal_progress_coef": 1.0, "turn_signal_flip": rate}
    for name, judge in judges.items():  # the judge reads the turn it judges, not the whole conversation (PLAN.md)
        kwargs = {"judge": judge, "context": "turn"}
        verdicts = {"scorer": "turn_verdict", "scorer_kwargs": kwargs, "turn_signal_source": "scorer"}
        table[f"mt_grpo@{name}"] = {**mt, **verdicts}
        table[f"progress_td@{name}"] = {**ptd, **verdicts, "signal_progress_coef": 1.0}
    for name, card in LEARNED.items():
        table[f"mt_grpo@{name}"] = {**mt, "scorer": card, "turn_signal_source": "scorer"}
        table[f"progress_td@{name}"] = {**ptd, "scorer": card}  # its per-turn rewards join the turn rewards
    return table


ARMS = tuple(arm_table(None))


def method_of(arm: str) -> str:
    """``mt_grpo@flip10`` -> ``mt_grpo``; an oracle arm is its own method; ``grpo`` has none."""
    return arm.partition("@")[0]


def sweep_args(args: argparse.Namespace, judge_url: str | None) -> argparse.Namespace:
    """The ``credit_sweep`` arguments of this sweep: its env at H = 16, round 2's warm-start settings, these arms."""
    env = ENV_SETTINGS[args.env]
    argv = ["--cells", f"{args.env}:16", "--methods", BASELINE, "--tolerance", str(env["tolerance"]),
            "--sft-max-steps", str(env["sft_max_steps"]), "--iterations", str(args.iterations), "--primary", "none",
            "--jobs", str(args.jobs), "--out", args.out, "--seeds", *map(str, args.seeds)]  # fmt: skip
    out = credit_sweep.parse_args(argv)
    out.method_table = {**METHODS, **arm_table(judge_url)}
    out.methods = list(args.arms)
    return out


def reuse_round2(args: argparse.Namespace, out: Path) -> list[Job]:
    """Copy round 2's warm starts and its oracle/GRPO runs of every seed but 0 into ``out`` (a record already there
    is kept); return the seed-0 runs to check against round 2's records once rerun."""
    src = Path(args.round2)
    checks = []
    for seed in args.seeds:
        warm = Job(args.env, 16, seed)
        paths = [(warm.directory(src), warm.directory(out))]
        for arm in (BASELINE, *ORACLES.values()):
            if arm not in args.arms:
                continue
            job = Job(args.env, 16, seed, arm)
            if seed == 0:
                checks.append(job)
            else:
                paths.append((job.directory(src), job.directory(out)))
        for a, b in paths:
            if (a / "result.json").is_file() and not (b / "result.json").is_file():
                b.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(a / "result.json", b / "result.json")
    return checks


def reuse_check(args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """Per seed-0 oracle/GRPO run: whether this sweep's rerun equals round 2's record (history and final success)."""
    rows = []
    for arm in (BASELINE, *ORACLES.values()):
        job = Job(args.env, 16, 0, arm)
        old, new = read_result(job, Path(args.round2)), read_result(job, out)
        if old is None or new is None:
            rows.append({"arm": arm, "status": "pending"})
            continue
        same = old.get("after") == new.get("after") and len(old["history"]) == len(new["history"]) and all(
            h_new.get(k) == v for h_old, h_new in zip(old["history"], new["history"], strict=True)
            for k, v in h_old.items() if not k.startswith("time_"))  # fmt: skip
        rows.append({"arm": arm, "status": "equal" if same else "DIFFERS", "after": new.get("after")})
    return rows


# ----------------------------------------------------------------------------------------------------------------
# report


def load(out: Path, env: str) -> dict[str, dict[int, dict[str, Any]]]:
    """arm -> seed -> its summary (``credit_sweep.summarise``) plus ``collapsed`` and the mean ``turn_signal_auc``."""
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted((out / "rl").glob(f"{env}-H16-s*-*/result.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        job = result["job"]
        row = summarise(result)
        aucs = [h["turn_signal_auc"] for h in result["history"] if "turn_signal_auc" in h]
        row["signal_auc"] = float(np.mean(aucs)) if aucs else math.nan
        row["collapsed"] = result.get("collapsed")
        runs.setdefault(job["method"], {})[int(job["seed"])] = row
    return runs


def paired(runs: dict[str, dict[int, dict[str, Any]]], arm: str, base: str) -> tuple[list[int], list[float]]:
    """The seeds both arms finished without collapsing, and the arm's final success minus the base's on each."""
    a, b = runs.get(arm, {}), runs.get(base, {})
    seeds = sorted(s for s in set(a) & set(b) if not a[s]["collapsed"] and not b[s]["collapsed"])
    return seeds, [a[s]["after"] - b[s]["after"] for s in seeds]


def retention(gain: list[float], oracle_gain: list[float], *, draws: int = 10_000, seed: int = 0
              ) -> tuple[float, float, float]:  # fmt: skip
    """mean(gain) / mean(oracle_gain) over the same seeds, with a 95% percentile interval from ``draws`` paired
    bootstrap resamples of the seeds (a resample whose oracle gain is 0 is dropped). NaN when undefined."""
    g, o = np.asarray(gain, dtype=np.float64), np.asarray(oracle_gain, dtype=np.float64)
    if len(g) == 0 or len(g) != len(o) or o.mean() == 0:
        return math.nan, math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(g), size=(draws, len(g)))
    num, den = g[idx].mean(axis=1), o[idx].mean(axis=1)
    ratios = num[den != 0] / den[den != 0]
    lo, hi = np.percentile(ratios, [2.5, 97.5]) if len(ratios) else (math.nan, math.nan)
    return float(g.mean() / o.mean()), float(lo), float(hi)


def noise_threshold(points: list[tuple[float, float]]) -> float | None:
    """The flip rate at which the mean gain over GRPO first crosses 0, interpolated linearly between measured
    (rate, gain) points in increasing rate; None if it never does.

    >>> round(noise_threshold([(0.0, 0.1), (0.1, 0.06), (0.3, -0.02)]), 6)
    0.25
    """
    pts = sorted(points)
    for (r0, g0), (r1, g1) in itertools.pairwise(pts):
        if g0 > 0 >= g1:
            return r0 + (r1 - r0) * g0 / (g0 - g1)
    return None


def comparisons(runs: dict[str, dict[int, dict[str, Any]]], env: str) -> list[dict[str, Any]]:
    """Every arm against grpo and against its method's oracle; Holm within the plan's families."""
    rows = []
    for arm in sorted(runs):
        method = method_of(arm)
        if arm == BASELINE:
            continue
        for base in (BASELINE, ORACLES.get(method)):
            if base is None or base == arm:
                continue
            seeds, diffs = paired(runs, arm, base)
            if not diffs:
                continue
            test = sign_flip_test(diffs)
            primary = env == "Chain" and base == BASELINE and arm in PRIMARY
            rows.append({"arm": arm, "base": base, "family": "primary" if primary else "secondary", "n": len(diffs),
                         "mean": test.mean, "sd": test.sd, "p": test.p, "seeds": seeds})  # fmt: skip
    for family in ("primary", "secondary"):
        idx = [i for i, r in enumerate(rows) if r["family"] == family]
        for i, p in zip(idx, holm([rows[i]["p"] for i in idx]) if idx else [], strict=True):
            rows[i]["holm"] = p
    return rows


def arm_row(runs: dict[str, dict[int, dict[str, Any]]], arm: str) -> dict[str, Any]:
    """One arm's line of the report: finished and collapsed runs, final successes, its mean signal AUC, its mean
    paired gain over grpo and its retention of its method's oracle gain (on the seeds all three share)."""
    cell = runs.get(arm, {})
    final = [r["after"] for r in cell.values() if not r["collapsed"]]
    auc = [r["signal_auc"] for r in cell.values() if math.isfinite(r["signal_auc"])]
    seeds, gain = paired(runs, arm, BASELINE)
    oracle = ORACLES.get(method_of(arm))
    ret = (math.nan, math.nan, math.nan)
    if oracle is not None and arm != oracle and gain:
        both = [s for s in seeds if s in paired(runs, oracle, BASELINE)[0]]
        base = runs[BASELINE]
        ret = retention([runs[arm][s]["after"] - base[s]["after"] for s in both],
                        [runs[oracle][s]["after"] - base[s]["after"] for s in both])  # fmt: skip
    return {"finished": len(cell), "collapsed": sum(bool(r["collapsed"]) for r in cell.values()), "final": final,
            "signal_auc": float(np.mean(auc)) if auc else None, "gain": float(np.mean(gain)) if gain else None,
            "pairs": len(gain), "retention": ret}  # fmt: skip


def report(args: argparse.Namespace, out: Path) -> str:
    """Write REPORT.md, results.json and the plot of what has finished under ``out``; return the report."""
    runs = load(out, args.env)
    tests = comparisons(runs, args.env)
    arms = [a for a in [BASELINE, *ORACLES.values(), *sorted(a for a in runs if "@" in a)] if runs.get(a)]
    rows = {arm: arm_row(runs, arm) for arm in arms}
    curve = [(0.0, rows["mt_grpo"]["gain"])] if "mt_grpo" in rows and rows["mt_grpo"]["gain"] is not None else []
    curve += [(rate, rows[f"mt_grpo@{n}"]["gain"]) for n, rate in FLIPS.items()
              if f"mt_grpo@{n}" in rows and rows[f"mt_grpo@{n}"]["gain"] is not None]  # fmt: skip
    threshold = noise_threshold(curve)
    checks = reuse_check(args, out)
    lines = [f"# Learned and judged turn signals: {args.env} H = 16", "",
             "Design: bench/results/credit_signals/PLAN.md (fixed before any result). Command: "
             f"`python bench/credit_signals.py --env {args.env} --out {args.out}`.", "",
             "## Final held-out success", "",
             "| arm | finished | collapsed | final (mean ± sd) | signal AUC | − grpo (paired) | retention [95% CI] |",
             "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for arm, row in rows.items():
        final, ret = row["final"], row["retention"]
        mean = _fmt(float(np.mean(final)) if final else math.nan)
        sd = _fmt(float(np.std(final, ddof=1)) if len(final) > 1 else math.nan)
        auc = "" if row["signal_auc"] is None else _fmt(row["signal_auc"])
        gain = "" if arm == BASELINE or row["gain"] is None else f"{row['gain']:+.3f} (n={row['pairs']})"
        kept = "" if not math.isfinite(ret[0]) else f"{ret[0]:.2f} [{ret[1]:.2f}, {ret[2]:.2f}]"
        lines.append(f"| `{arm}` | {row['finished']} | {row['collapsed']} | {mean} ± {sd} | {auc} | {gain} | {kept} |")
    lines += ["", "## Paired tests", "", "| family | arm | against | n | mean diff ± sd | p | Holm p |",
              "|---|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for t in sorted(tests, key=lambda t: (t["family"] != "primary", t["arm"], t["base"])):
        lines.append(f"| {t['family']} | `{t['arm']}` | `{t['base']}` | {t['n']} | {t['mean']:+.3f} ± {_fmt(t['sd'])}"
                     f" | {t['p']:.4f} | {t['holm']:.4f} |")  # fmt: skip
    points = ", ".join(f"{r:g}: {g:+.3f}" for r, g in curve) or "no finished pairs yet"
    crossing = "not crossed" if threshold is None else f"{threshold:.2f}"
    lines += ["", "## Noise curve (`mt_grpo`)", "", f"Mean paired gain over `grpo` by flip rate: {points}.",
              f"Flip rate where the gain crosses 0: {crossing}.", "", "## Reuse of round 2's records", "",
              "Seed 0 of each reused arm, rerun here against its round-2 record: "
              + ", ".join(f"`{c['arm']}` {c['status']}" for c in checks) + "."]  # fmt: skip
    checked = {a: [s for s in seeds if s in args.seeds] or args.seeds for a, seeds in CHECK_ARMS.items()}
    missing = [f"{a} s{s}" for a in args.arms for s in checked.get(a, args.seeds) if s not in runs.get(a, {})]
    shown = ", ".join(missing[:40]) + (" ..." if len(missing) > 40 else "")
    lines += ["", f"Missing runs: {len(missing)}" + (f" ({shown})" if missing else "") + "."]
    summary = {"env": args.env, "arms": rows, "tests": tests, "noise_curve": curve, "noise_threshold": threshold,
               "reuse_check": checks}  # fmt: skip
    (out / "results.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    plot(summary, out / "credit_signals.png")
    text = "\n".join(lines) + "\n"
    (out / "REPORT.md").write_text(text, encoding="utf-8")
    return text


def plot(summary: dict[str, Any], path: Path) -> None:
    """The noise curve (gain over grpo against the signal's AUC, 1 - flip rate) with the judged and learned arms
    placed by their measured AUC."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    if summary["noise_curve"]:
        xs, ys = zip(*[(1 - r, g) for r, g in summary["noise_curve"]], strict=True)
        ax.plot(xs, ys, "o-", label="mt_grpo, oracle flipped at rate p (AUC 1 - p)")
    for arm, cell in summary["arms"].items():
        tests = [t for t in summary["tests"] if t["arm"] == arm and t["base"] == BASELINE]
        if "@" in arm and "flip" not in arm and cell["signal_auc"] is not None and tests:
            ax.plot(cell["signal_auc"], tests[0]["mean"], "s", label=arm)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel("signal AUC (right vs wrong turns)")
    ax.set_ylabel("final success − grpo")
    ax.set_title(f"{summary['env']} H=16")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=list(ENV_SETTINGS), default="Chain")
    parser.add_argument("--arms", nargs="+", choices=[BASELINE, *ORACLES.values(), *ARMS])
    parser.add_argument("--seeds", type=int, nargs="+")
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--round2", help="round 2's folder of this env (default: the committed one)")
    parser.add_argument("--out", default="runs/credit_signals")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    args.seeds = args.seeds or ENV_SETTINGS[args.env]["seeds"]
    default = [BASELINE, *ORACLES.values(), *(a for a in ARMS if not (args.env != "Chain" and a.endswith("flip50")))]
    args.arms = args.arms or default
    args.round2 = args.round2 or ROUND2[args.env]
    return args


def serve_judge(stack: ExitStack) -> str:
    """SmolLM2-135M-Instruct on the suite's model server, on loopback for this process's lifetime; its base URL."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.tools.named_models import resolve_model_path
    from agentgym.tools.openai_server import create_app
    from agentgym.tools.serving import BackgroundServer

    path = resolve_model_path("smollm2-135m")
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    app = create_app(model, AutoTokenizer.from_pretrained(path), model_name="smollm2-135m")
    server = stack.enter_context(BackgroundServer(app))
    return server.url + "/v1"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        with ExitStack() as stack:
            url = serve_judge(stack) if any(a.endswith("judge_smollm2") for a in args.arms) else None
            reuse_round2(args, out)
            sweep = sweep_args(args, url)
            sweep.methods = [a for a in args.arms if a not in CHECK_ARMS]
            credit_sweep.run_grid(sweep, out)
            for arm, seeds in CHECK_ARMS.items():  # the pipeline checks: their seeds (a pilot's own seeds else)
                if arm in args.arms:
                    sweep.methods, sweep.seeds = [arm], [s for s in seeds if s in args.seeds] or args.seeds
                    credit_sweep.run_grid(sweep, out)
    print(report(args, out))


if __name__ == "__main__":
    main()
