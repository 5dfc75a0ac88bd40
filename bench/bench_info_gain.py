"""Cost of scoring every turn of a trajectory (IGPO's ``log p(gold | h_t)``, t = 0..T-1) against plain forwards.

Run by hand (not a test)::

    python bench/bench_info_gain.py                          # tiny random Qwen2 on CPU, T = 2 4 8 16
    python bench/bench_info_gain.py --tiny-hidden 512 --tiny-layers 8       # a 63M-parameter random model
    python bench/bench_info_gain.py --model /models/qwen2.5-0.5b-instruct --turns 2 4 8 --threads 2

For each T, one real SearchQA episode (tiny dataset; a scripted agent searches T-1 times, then answers) is rendered
with the model's chat template, and these are timed on that same trajectory, interleaved round-robin so that load on
the machine hits them alike (median of ``--repeats``; ``torch.set_num_threads(--threads)``, 1 by default: on a
2-core machine shared with another busy process, 2 OpenMP threads made a tiny-model forward ~30x slower):

- ``forward``: ONE plain forward pass over the whole trajectory (``model(ids)``: full logits, as when computing the
  policy's log-probs of the trajectory);
- ``fwd-last``: the same forward keeping only the last position's logits (the transformer body alone);
- ``single``: ``LocalAnswerScorer`` single pass: ``[trajectory | suffix_1..suffix_T]`` with a 4D mask;
- ``cached``: ``LocalAnswerScorer(method="cached")``: trajectory prefill into a KV cache + one suffix chunk;
- ``naive``: one forward per turn over ``h_t + suffix`` (logits only at the scored rows: the cheapest per-turn form);
- ``naive-full``: the same with full logits (``model(ids).logits``, the way per-turn scoring is usually written).

It prints a table (ms) with the ratios single/forward, single/fwd-last, cached/fwd-last and naive/single, and the
largest difference between the single-pass and the per-turn log-probs. Target: single <= 1.5 x forward at T = 8.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def scripted_trajectory(turns: int, task_index: int) -> Any:
    """A real SearchQA episode of exactly ``turns`` turns: gold hop queries (cycling), then the gold answer."""
    import gymnasium as gym

    import agentgym  # noqa: F401 - registers the envs
    from agentgym.contract.agent import Agent
    from agentgym.running.runner import run_episode

    class SearchThenAnswer(Agent):
        name = "search_then_answer"
        privileged = True

        def __init__(self) -> None:
            super().__init__()
            self.turn = 0

        def reset(self, *, seed: int | None = None) -> None:
            super().reset(seed=seed)
            self.turn = 0

        def act(self, messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
            self.turn += 1
            gold = info["gold"]
            if self.turn < turns:
                queries = gold["oracle_queries"]
                return f"<think>step {self.turn}</think>\n<search> {queries[(self.turn - 1) % len(queries)]} </search>"
            return f"<answer> {gold['answers'][0]} </answer>"

    env = gym.make("agentgym/SearchQA-v0", dataset="tiny", max_turns=turns)
    try:
        traj = run_episode(env, SearchThenAnswer(), seed=task_index, options={"task_index": task_index})
    finally:
        env.close()
    assert len(traj.turns) == turns, (len(traj.turns), turns)
    return traj


def load(model_path: str | None, attn: str, hidden: int, layers: int) -> tuple[Any, Any, str]:
    if model_path is None:
        from agentgym.tools.tiny_model import build_tiny_model

        heads = max(4, hidden // 64)
        model, tok = build_tiny_model(
            seed=0,
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=heads // 2,
            intermediate_size=4 * hidden,
            max_position_embeddings=8192,
        )
        model.set_attn_implementation(attn)
        return model, tok, f"tiny Qwen2 (random, seed 0, hidden {hidden}, {layers} layers)"
    from transformers import AutoModelForCausalLM

    from agentgym.tools.tiny_model import load_tokenizer

    tok = load_tokenizer(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, local_files_only=True, attn_implementation=attn).eval()
    return model, tok, os.path.basename(os.path.normpath(model_path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="local model directory (default: the tiny random model)")
    parser.add_argument("--turns", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--tiny-hidden", type=int, default=64, help="hidden size of the tiny model (no --model)")
    parser.add_argument("--tiny-layers", type=int, default=2, help="layers of the tiny model (no --model)")
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    parser.add_argument("--task", type=int, default=1, help="SearchQA tiny test-split task index")
    args = parser.parse_args()

    import numpy as np
    import torch

    from agentgym.rewards.answer_scoring import LocalAnswerScorer, encode_suffix, render_trajectory
    from agentgym.rewards.information import IGPO_ANSWER_PROMPT

    torch.set_num_threads(args.threads)
    model, tok, label = load(args.model, args.attn, args.tiny_hidden, args.tiny_layers)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"model: {label}, {n_params / 1e6:.1f}M params, {next(model.parameters()).dtype}, attn={args.attn}; "
        f"torch {torch.__version__}, threads={torch.get_num_threads()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs; median of {args.repeats}"
    )
    scorers = {
        "single": LocalAnswerScorer(model, tok),
        "cached": LocalAnswerScorer(model, tok, method="cached"),
        "naive": LocalAnswerScorer(model, tok, method="naive"),
    }
    header = (
        f"{'T':>3} {'tokens':>6} {'forward':>8} {'fwd-last':>8} {'single':>8} {'cached':>8} {'naive':>8} "
        f"{'naive-full':>10} {'single/fwd':>10} {'single/last':>11} {'cached/last':>11} {'naive/single':>12} "
        f"{'max|diff|':>9}"
    )
    print(header)
    print("-" * len(header))
    for T in args.turns:
        traj = scripted_trajectory(T, args.task)
        rendered = render_trajectory(traj, tok)
        gold = traj.reset_info["gold"]["answers"][0]
        suffix = encode_suffix(tok, [(rendered.generation_prompt + IGPO_ANSWER_PROMPT, False), (gold, True)])
        cuts = rendered.cuts("observation")[:T]
        suffixes = [suffix] * T
        ids = torch.tensor([rendered.ids], dtype=torch.long)

        def plain(keep_last: bool, ids: torch.Tensor = ids) -> None:
            with torch.inference_mode():
                model(ids, logits_to_keep=1) if keep_last else model(ids)

        def naive_full(cuts: list[int] = cuts, r: Any = rendered, suffix: Any = suffix) -> None:
            with torch.inference_mode():
                for cut in cuts:
                    x = torch.tensor([[*r.ids[:cut], *suffix.ids]], dtype=torch.long)
                    torch.log_softmax(model(x).logits[0].float(), dim=-1)

        def scoring(name: str, cuts: list[int] = cuts, suffixes: list[Any] = suffixes, r: Any = rendered) -> Any:
            return scorers[name].logprobs(r.ids, cuts, suffixes)

        jobs: dict[str, Callable[[], Any]] = {
            "forward": lambda: plain(False),
            "fwd-last": lambda: plain(True),
            "single": lambda: scoring("single"),
            "cached": lambda: scoring("cached"),
            "naive": lambda: scoring("naive"),
            "naive-full": naive_full,
        }
        times: dict[str, list[float]] = {k: [] for k in jobs}
        for job in jobs.values():  # warm-up
            job()
        for _ in range(args.repeats):
            for name, job in jobs.items():
                t0 = time.perf_counter()
                job()
                times[name].append(time.perf_counter() - t0)
        ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        diff = max(float(np.abs(a - b).max()) for a, b in zip(scoring("single"), scoring("naive"), strict=True))
        print(
            f"{T:>3} {len(rendered.ids):>6} {ms['forward']:>8.1f} {ms['fwd-last']:>8.1f} {ms['single']:>8.1f} "
            f"{ms['cached']:>8.1f} {ms['naive']:>8.1f} {ms['naive-full']:>10.1f} {ms['single'] / ms['forward']:>10.2f} "
            f"{ms['single'] / ms['fwd-last']:>11.2f} {ms['cached'] / ms['fwd-last']:>11.2f} "
            f"{ms['naive'] / ms['single']:>12.2f} {diff:>9.1e}"
        )


if __name__ == "__main__":
    main()
