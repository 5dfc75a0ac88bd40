"""Does the reference trainer's critic learn? Per-iteration explained variance of PPO's value head against the
Monte-Carlo returns, on Chain-v0 and Umbrella-v0 at H = 8, for the credit sweep's critic and the fixed one.

    python bench/critic_ev.py                                            # both envs, DEFAULT_ARMS, 16 iterations
    python bench/critic_ev.py --init-from Chain=bench/results/credit_round3/sft/Chain-s0/checkpoint.pt \\
        --init-from Umbrella=bench/results/credit_round3/umbrella/sft/Umbrella-s0/checkpoint.pt
    python bench/critic_ev.py --report-only                              # the table and plot of what has finished

Arms (``ARMS``, added to the credit sweep's ``progress_td`` settings: verified progress as an immediate reward with
the outcome, turn-level PPO with TD(0) over turns, 24 critic warm-up steps, a detached head with learning rate
1e-2):

- ``sweep``: the sweep's critic as it was: a linear head on the policy's last hidden state, detached, refitted by
  ridge regression during the warm-up, then one Adam step per iteration (the value loss rides in the policy's one
  epoch of one minibatch of 16 episodes);
- ``separate``: the critic reads a copy of the policy's decoder of its own (``critic_trunk="separate"``), trained
  with the head by the value loss, ``value_epochs=4`` value-only epochs per iteration and per warm-up step, Adam at
  ``value_lr=1e-3``; ``separate_e8``: the same with 8 value epochs (not run by default: ``separate_lr3e-3``, 4
  epochs at ``value_lr=3e-3``; ``separate_e8_noclip``, 8 epochs without PPO's value clipping).

**Ceiling.** No critic can explain the part of a Monte-Carlo return that the state does not determine (whether
later turns go right). :func:`ev_ceiling` gives the explained variance of the exact value function of a policy that
is right on each decisive turn with probability ``p`` (the iteration's measured ``turn_accuracy``), independently,
with three sampled tokens per turn (the value before the first two knows the state, the value before the third
knows the turn's choice too), as the trainer measures it: over every sampled token of the batch. It is a model
(independent turns, the same accuracy at every position), printed beside the measured numbers.

Warm starts: ``--init-from ENV=checkpoint.pt`` (e.g. the credit sweep's warm starts, which are not committed), else
``--sft-steps`` SFT steps of the trainer's own warm start on the env's oracle (written under ``--out``/sft/, kept
out of git). Results: ``results.json``, ``runs.jsonl`` (every run's per-iteration metrics), ``results.md`` and
``critic_ev.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

#: Every arm's base: the credit sweep's ``progress_td`` (bench/credit_sweep.py ``METHODS``) and its run settings.
BASE: dict[str, Any] = {
    "algo": "ppo", "estimator": "turn_ppo", "progress_key": "progress", "lam": 0.0,
    "reward_components": ["outcome", "progress"], "detach_critic": True, "critic_warmup_steps": 24, "value_lr": 1e-2,
    "model": "tiny", "max_new_tokens": 8, "max_total_tokens": 4096, "stop": ["</answer>"], "batch_tasks": 4,
    "group_size": 4, "minibatch_size": 16, "epochs": 1, "lr": 5e-4, "kl_coef": 0.0, "plot": False, "progress": False,
    "checkpoint_every": 0, "eval_every": 0,
}  # fmt: skip
#: Arm name -> overrides of ``BASE``.
ARMS: dict[str, dict[str, Any]] = {
    "sweep": {},
    "separate": {"critic_trunk": "separate", "value_epochs": 4, "value_lr": 1e-3},
    # the knobs around it (not run by default)
    "separate_e8": {"critic_trunk": "separate", "value_epochs": 8, "value_lr": 1e-3},
    "separate_lr3e-3": {"critic_trunk": "separate", "value_epochs": 4, "value_lr": 3e-3},
    "separate_e8_noclip": {"critic_trunk": "separate", "value_epochs": 8, "value_lr": 1e-3, "value_clip": 100.0},
}
#: The arms run by default.
DEFAULT_ARMS = ("sweep", "separate", "separate_e8")
#: The per-iteration numbers kept.
KEPT = ("iteration", "explained_variance", "explained_variance_mc", "turn_accuracy", "success_rate", "value_loss",
        "value_grad_norm", "critic_warmup_explained_variance_first", "critic_warmup_explained_variance",
        "time_rollout", "time_update")  # fmt: skip


def simulate(env: str, p: float, horizon: int, components: tuple[str, ...], *, distractor: float = 0.1,
             episodes: int = 100_000, seed: int = 0
             ) -> tuple[np.ndarray, list[np.ndarray], dict[int, float]]:  # fmt: skip
    """The ceiling model's episodes: per turn the Monte-Carlo returns ``(n, H)``, the state keys before and after
    the turn's choice (:func:`state_key`), and the exact value of each key (the mean return over the episodes)."""
    rng = np.random.default_rng(seed)
    n, h = episodes, horizon
    right = rng.random((n, h)) < p
    if env == "Chain":
        ok = np.cumprod(right, axis=1).astype(bool)  # ok[:, t]: no mistake through turn t
        potential = np.where(ok, np.arange(1, h + 1) / h, 0.0)
    elif env == "Umbrella":
        ok = np.repeat(right[:, :1], h, axis=1)
        potential = ok.astype(float)
    else:
        raise ValueError(f"no ceiling model for {env!r}")
    rewards = np.zeros((n, h))
    if "outcome" in components:
        rewards[:, -1] += ok[:, -1]
    if "progress" in components:
        rewards += np.diff(np.concatenate([np.zeros((n, 1)), potential], axis=1), axis=1)
    if "distractor" in components and env == "Umbrella":
        rewards[:, 1:] += rng.choice([-distractor, distractor], size=(n, h - 1))
    returns = np.cumsum(rewards[:, ::-1], axis=1)[:, ::-1]  # gamma = 1
    before = np.concatenate([np.ones((n, 1), bool), ok[:, :-1]], axis=1)  # the decisive results known before turn t
    played = np.arange(h)[None, :] >= (1 if env == "Umbrella" else 0)  # Umbrella: turn 1 decides, once played
    turns = np.arange(h)[None, :]
    keys = [state_key(turns, False, before | ~played, played), state_key(turns, True, ok, True)]
    flat_g = returns.ravel()
    table = {}
    for key in keys:
        flat_k = np.broadcast_to(key, returns.shape).ravel()
        for k in np.unique(flat_k):
            table[int(k)] = float(flat_g[flat_k == k].mean())
    return returns, keys, table


def state_key(turn: Any, chosen: Any, ok: Any, played: Any) -> Any:
    """A state of the ceiling model: the turn (0-based), whether the turn's choice is made, whether the decisive
    choices so far were right, and whether any was played yet."""
    return turn * 8 + np.asarray(chosen, dtype=int) * 4 + np.asarray(ok, dtype=int) * 2 + np.asarray(played, dtype=int)


def ev_ceiling(env: str, p: float, horizon: int, components: tuple[str, ...], *, distractor: float = 0.1,
               episodes: int = 100_000, seed: int = 0) -> float:  # fmt: skip
    """The explained variance, against the Monte-Carlo returns of every sampled token, of the exact value function
    of a policy right on each decisive turn with probability ``p`` (independently), three tokens a turn (values
    before tokens 1-2 know the state, before token 3 the turn's choice too). ``components``: the counted reward
    (``outcome``, ``progress``: the verified potential's differences, ``distractor``: Umbrella's +-``distractor``
    on turns 2..H, unpredictable). Chain: every turn decisive, progress t/H while no mistake; Umbrella: turn 1
    decides, progress 1 from turn 1 on if it was right."""
    returns, keys, table = simulate(env, p, horizon, components, distractor=distractor, episodes=episodes, seed=seed)
    values = [np.vectorize(table.__getitem__)(np.broadcast_to(k, returns.shape)) for k in keys]
    pred = np.stack([values[0], values[0], values[1]], axis=-1)
    target = np.repeat(returns[..., None], 3, axis=-1)
    var = float(np.var(target))
    return float("nan") if var == 0 else 1.0 - float(np.var(target - pred)) / var


def final_probe(state: Any, cfg: Any, env: str, episodes: int) -> dict[str, float]:
    """The trained critic on ``episodes`` fresh episodes of the final policy: its explained variance against their
    Monte-Carlo returns (``ev_mc``) and against the exact value of the ceiling model at their turn accuracy
    (``ev_exact``), and the exact value's own against the returns (``ev_exact_mc``: the ceiling on these
    episodes)."""
    from agentgym.baselines.credit import training_rollouts
    from agentgym.baselines.update import explained_variance, make_batch, score_batch
    from agentgym.baselines.warmup import mc_returns

    rollouts = []
    for b in range(math.ceil(episodes / (cfg.batch_tasks * cfg.group_size))):
        seeds = np.random.default_rng([cfg.seed, 99, b]).integers(0, cfg.task_seed_range, size=cfg.batch_tasks)
        rollouts += training_rollouts(state, cfg, seeds.tolist(), 10_000 + b, b * cfg.batch_tasks)
    batch = make_batch(rollouts, state.tokenizer.pad_token_id)
    _, values = score_batch(state.model, batch, cfg.temperature, cfg.minibatch_size, state.value_head)
    assert values is not None
    mc = mc_returns(rollouts, cfg, [np.zeros(len(r.response_ids)) for r in rollouts])
    correct = [[i.get("correct") is True for i in r.infos] for r in rollouts]
    decisive = [c for r, cs in zip(rollouts, correct, strict=True) for c, i in zip(cs, r.infos, strict=True)
                if i.get("correct") is not None]  # fmt: skip
    p = float(np.mean(decisive)) if decisive else 0.0
    _, _, table = simulate(env, p, cfg.max_turns, tuple(cfg.reward_components))
    v, g, x = [], [], []
    for i, (r, cs) in enumerate(zip(rollouts, correct, strict=True)):
        off = len(r.prompt_ids)
        for k, (s, e) in enumerate(r.turn_spans):
            done = cs[: k + 1] if env == "Chain" else cs[:1]
            before = all(cs[:k]) if env == "Chain" else (k == 0 or cs[0])
            for j in range(s, e):
                if r.loss_mask[j]:
                    after = j - s >= 2  # the turn's choice is the second token: the third token's value knows it
                    key = (state_key(k, True, all(done), True) if after
                           else state_key(k, False, before, env == "Chain" or k >= 1))  # fmt: skip
                    v.append(float(values[i, off + j]))
                    g.append(float(mc[i, off + j]))
                    x.append(table.get(int(key), float("nan")))
    v_, g_, x_ = np.array(v), np.array(g), np.array(x)
    return {
        "episodes": len(rollouts),
        "turn_accuracy": p,
        "ev_mc": explained_variance(v_, g_),
        "ev_exact": explained_variance(v_, x_),
        "ev_exact_mc": explained_variance(x_, g_),
    }


def run_config(env: str, arm: str, args: argparse.Namespace, out: Path, init_from: str | None) -> dict[str, Any]:
    env_kwargs = {"horizon": args.horizon, "num_options": 2}
    return {**BASE, **ARMS[arm], "env_id": f"agentgym/{env}-v0", "env_kwargs": env_kwargs,
            "eval_env_kwargs": env_kwargs, "max_turns": args.horizon, "seed": args.seed, "model_seed": args.seed,
            "iterations": args.iterations, "init_from": init_from,
            "out_dir": str(out / "rl" / f"{env}-s{args.seed}-{arm}")}  # fmt: skip


def warm_start(env: str, args: argparse.Namespace, out: Path) -> str:
    """``--init-from``'s checkpoint of ``env``, else the trainer's own SFT warm start (made once)."""
    given = dict(s.split("=", 1) for s in args.init_from)
    if env in given:
        return given[env]
    from agentgym.baselines.trainer import load_config, train

    ckpt = out / "sft" / f"{env}-s{args.seed}" / "checkpoint.pt"
    if not ckpt.is_file():
        cfg = run_config(env, "sweep", args, out, None)
        cfg.update(algo="grpo", estimator=None, detach_critic=False, critic_warmup_steps=0, value_lr=None,
                   progress_key=None, reward_components="auto", iterations=0, sft_steps=args.sft_steps[env],
                   sft_lr=3e-3, checkpoint_every=1, out_dir=str(ckpt.parent), lam=0.95)  # fmt: skip
        train(load_config(None, None, cfg))
    return str(ckpt)


def run_one(env: str, arm: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    import torch

    from agentgym.baselines.trainer import load_config, train

    torch.set_num_threads(1)
    cfg = load_config(None, None, run_config(env, arm, args, out, warm_start(env, args, out)))
    t0 = time.perf_counter()
    summary = train(cfg)
    probe = final_probe(summary["state"], cfg, env, args.probe_episodes)
    history = [{k: h[k] for k in KEPT if k in h} for h in summary["history"]]
    comps = tuple(cfg.reward_components) if isinstance(cfg.reward_components, tuple) else ("outcome", "distractor")
    for h in history:
        if isinstance(h.get("turn_accuracy"), float):
            h["ev_ceiling"] = ev_ceiling(env, h["turn_accuracy"], args.horizon, comps)
    return {"env": env, "arm": arm, "horizon": args.horizon, "seed": args.seed, "overrides": ARMS[arm],
            "seconds": time.perf_counter() - t0, "final": probe, "history": history}  # fmt: skip


def median(xs: list[float]) -> float:
    xs = [x for x in xs if isinstance(x, float) and math.isfinite(x)]
    return float(np.median(xs)) if xs else float("nan")


def report(out: Path) -> None:
    path = out / "runs.jsonl"
    runs = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    runs.sort(key=lambda r: (r["env"], list(ARMS).index(r["arm"]) if r["arm"] in ARMS else len(ARMS), r["seed"]))
    summary = []
    lines = ["# Critic explained variance (bench/critic_ev.py)", "",
             "| env | arm | seed | median EV (MC) | second half | median ceiling | final: EV (MC) "
             "| final: EV (exact V) | final: ceiling |", "|---|---|---:|---:|---:|---:|---:|---:|---:|",
             "<!-- summary -->", "",
             "Per RL iteration: `explained_variance_mc` (the critic's values before the iteration's update against the "
             "Monte-Carlo returns of the iteration's fresh rollouts, over every sampled token) and the ceiling "
             "`ev_ceiling` of an exact value function at the iteration's turn accuracy. Iteration 0: the warm-up's "
             "last held-out step.", ""]  # fmt: skip
    for r in runs:
        hist = [h for h in r["history"] if h["iteration"] >= 1]
        evs = [h.get("explained_variance_mc") for h in hist]
        late = evs[len(evs) // 2 :]
        row = {"env": r["env"], "arm": r["arm"], "seed": r["seed"], "median_ev_mc": median(evs),
               "median_ev_mc_second_half": median(late),
               "median_ceiling": median([h.get("ev_ceiling") for h in hist]),
               "warmup_ev": r["history"][0].get("critic_warmup_explained_variance") if r["history"] else None,
               "seconds": r["seconds"], "final": r.get("final")}  # fmt: skip
        summary.append(row)
        title = f"{r['env']} H={r['horizon']}, seed {r['seed']}, arm `{r['arm']}` {json.dumps(r['overrides'])}"
        lines += [f"## {title}", "",
                  "| iteration | EV (MC) | EV (lam-returns) | ceiling | turn accuracy | value loss |",
                  "|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        w = r["history"][0] if r["history"] else {}
        if "critic_warmup_explained_variance" in w:
            lines.append(f"| 0 (warm-up) | {w['critic_warmup_explained_variance']:.3f} | | | | |")
        for h in hist:
            cells = [h.get(k) for k in ("explained_variance_mc", "explained_variance", "ev_ceiling", "turn_accuracy",
                                        "value_loss")]  # fmt: skip
            lines.append(f"| {h['iteration']} | " + " | ".join("" if c is None else f"{c:.3f}" for c in cells) + " |")
        lines += ["", f"Median EV (MC) {row['median_ev_mc']:.3f}, second half {row['median_ev_mc_second_half']:.3f}; "
                  f"median ceiling {row['median_ceiling']:.3f}; {r['seconds']:.0f} s.", ""]  # fmt: skip
        if r.get("final"):
            f = r["final"]
            lines += [f"The final critic on {f['episodes']} fresh episodes of the final policy (turn accuracy "
                      f"{f['turn_accuracy']:.3f}): EV against their MC returns {f['ev_mc']:.3f}, against the exact "
                      f"value {f['ev_exact']:.3f}; the exact value's own EV against the returns (the ceiling) "
                      f"{f['ev_exact_mc']:.3f}.", ""]  # fmt: skip
    rows = []
    for row in summary:
        f = row["final"] or {}
        cells = [row["median_ev_mc"], row["median_ev_mc_second_half"], row["median_ceiling"], f.get("ev_mc"),
                 f.get("ev_exact"), f.get("ev_exact_mc")]  # fmt: skip
        shown = " | ".join("" if c is None else f"{c:.3f}" for c in cells)
        rows.append(f"| {row['env']} | `{row['arm']}` | {row['seed']} | {shown} |")
    at = lines.index("<!-- summary -->")
    lines[at : at + 1] = rows
    (out / "results.md").write_text("\n".join(lines), encoding="utf-8")
    (out / "results.json").write_text(json.dumps({"summary": summary, "arms": ARMS, "base": BASE}, indent=2),
                                      encoding="utf-8")  # fmt: skip
    if runs:
        plot(runs, out / "critic_ev.png")


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({r["env"] for r in runs})
    fig, axes = plt.subplots(1, len(envs), figsize=(5.5 * len(envs), 4), squeeze=False)
    for ax, env in zip(axes[0], envs, strict=True):
        for r in (r for r in runs if r["env"] == env):
            hist = [h for h in r["history"] if h["iteration"] >= 1]
            it = [h["iteration"] for h in hist]
            line = ax.plot(it, [h.get("explained_variance_mc", np.nan) for h in hist], marker="o", ms=3,
                           label=f"{r['arm']} (seed {r['seed']}): EV vs MC")  # fmt: skip
            if r["arm"] == "separate":
                ax.plot(it, [h.get("ev_ceiling", np.nan) for h in hist], ls="--", color=line[0].get_color(),
                        alpha=0.6, label="ceiling (exact V)")  # fmt: skip
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
        ax.set(title=f"{env}-v0, H = {runs[0]['horizon']}", xlabel="RL iteration", ylabel="explained variance",
               ylim=(-1.0, 1.0))  # fmt: skip
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["Chain", "Umbrella"], choices=["Chain", "Umbrella"])
    parser.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), choices=list(ARMS))
    parser.add_argument("--horizon", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--init-from", action="append", default=[], metavar="ENV=CHECKPOINT")
    parser.add_argument("--sft-steps", type=json.loads, default={"Chain": 112, "Umbrella": 502},
                        help="SFT steps of each env's own warm start (JSON), without --init-from")  # fmt: skip
    parser.add_argument("--probe-episodes", type=int, default=64, help="fresh episodes the final critic is probed on")
    parser.add_argument("--out", default="bench/results/critic_ev")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        path = out / "runs.jsonl"
        lines = path.read_text().splitlines() if path.is_file() else []
        done = {(r["env"], r["arm"], r["seed"]) for r in map(json.loads, lines)}
        for env in args.envs:
            for arm in args.arms:
                if (env, arm, args.seed) in done:
                    continue
                rec = run_one(env, arm, args, out)
                with (out / "runs.jsonl").open("a", encoding="utf-8") as f:
                    f.write(json.dumps(rec) + "\n")
                ev = median([h.get("explained_variance_mc") for h in rec["history"]])
                print(f"{env} {arm}: median EV (MC) {ev:.3f} in {rec['seconds']:.0f} s", flush=True)
    report(out)


if __name__ == "__main__":
    main()
