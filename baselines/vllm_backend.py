"""Optional vLLM sampling back-end for the reference rollout (CUDA; ``pip install "agentgym-suite[vllm]"``).

``VLLMPolicy`` is an :class:`~agentgym.baselines.rollout.HFPolicy` whose ``sample_batch`` runs on a vLLM engine
colocated with the trainer on the same GPU. The transformers model stays the training copy: it provides the chat
template pieces (prompt and observation tokens are built exactly as with the HF back-end) and is the source of the
weights pushed into the engine. The cycle per iteration is

    wake_up -> (weights changed?) load the training weights into the engine -> generate -> sleep(level=1)

so the engine's KV cache is released while the trainer updates. The engine runs in-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so weights are handed over by reference, without serialisation.

Sampling: each row gets a vLLM per-request seed drawn from that row's generator (reproducible for a fixed engine
and batch, not token-identical to the HF back-end); log-probs are vLLM's *processed* log-probs (after
temperature scaling), so they match the trainer's ``log_softmax(logits / T)`` up to kernel differences. The
trainer recomputes the behaviour log-probs by default (``old_logprobs="recompute"``) and logs the gap as
``rollout_logprob_maxdiff``.

Not exercised on the CPU-only machines this project is developed on; ``tests/baselines/test_vllm_backend.py``
runs where ``vllm`` imports and CUDA is available and is skipped with the reason otherwise.

>>> policy = VLLMPolicy(model, tokenizer, model_path="/models/Qwen2.5-0.5B-Instruct")   # doctest: +SKIP
>>> collect_rollouts(policy, env_factory, seeds, group_size=8, config=RolloutConfig())   # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from agentgym.baselines.rollout import HFPolicy, check_rows, request_seed

__all__ = ["VLLMPolicy", "vllm_unavailable_reason"]


def vllm_unavailable_reason() -> str | None:
    """Why the vLLM back-end cannot run here (None when it can)."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        return f"vllm is not installed ({exc}); install the optional extra: pip install 'agentgym-suite[vllm]'"
    if not torch.cuda.is_available():
        return "vllm needs a CUDA GPU and none is available"
    return None


def _load_weights(worker: Any, weights: list[tuple[str, torch.Tensor]]) -> None:
    """Runs inside the engine's worker: load HF-named tensors into vLLM's model."""
    worker.model_runner.model.load_weights(weights=weights)


class VLLMPolicy(HFPolicy):
    """HFPolicy with generation on a colocated vLLM engine (see the module docstring)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        model_path: str,
        gpu_memory_utilization: float = 0.35,
        dtype: str = "bfloat16",
        max_model_len: int | None = None,
        sleep: bool = True,
        seed: int = 0,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(model, tokenizer)
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # before vllm reads its settings
        reason = vllm_unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        from vllm import LLM

        self.llm = LLM(
            model=model_path,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enable_sleep_mode=sleep,
            seed=seed,
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=True,
            **(engine_kwargs or {}),
        )
        self.use_sleep = sleep
        self.sleeping = False
        self.stale = True  # the engine holds the checkpoint's weights, not (necessarily) the training copy's

    # -- engine lifecycle -------------------------------------------------------------------------------------
    def mark_stale(self) -> None:
        """The training weights changed: push them before the next generation."""
        self.stale = True

    def sleep(self) -> None:
        """Release the engine's GPU memory (KV cache; weights offloaded to CPU) while the trainer updates."""
        if self.use_sleep and not self.sleeping:
            self.llm.sleep(level=1)
            self.sleeping = True

    def wake(self) -> None:
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False

    def sync_weights(self) -> None:
        """Load the training model's current weights into the engine (cast to the engine's dtype by vLLM)."""
        self.wake()
        weights = [(name, p.detach()) for name, p in self.model.state_dict().items()]
        self.llm.collective_rpc(_load_weights, args=(weights,))
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        self.stale = False

    # -- sampling ---------------------------------------------------------------------------------------------
    @torch.no_grad()
    def sample_batch(
        self,
        contexts: Sequence[Sequence[int]],
        *,
        budgets: Sequence[int],
        temperature: float,
        stop: Sequence[str],
        generators: Sequence[torch.Generator],
        share_prefill: bool = False,  # HFPolicy's prefill sharing; vLLM caches shared prefixes itself
    ) -> list[tuple[list[int], list[float], str]]:
        check_rows(contexts, budgets, generators)
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self.wake()
        if self.stale:
            self.sync_weights()
        params = []
        for budget, generator in zip(budgets, generators, strict=True):
            seed = request_seed(generator)
            params.append(
                SamplingParams(
                    n=1,
                    temperature=temperature,
                    max_tokens=max(int(budget), 1),
                    stop=list(stop) or None,
                    include_stop_str_in_output=True,
                    logprobs=0,  # the sampled token's log-prob only
                    seed=seed,
                )
            )
        prompts = [TokensPrompt(prompt_token_ids=list(c)) for c in contexts]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        results = []
        for out in outputs:
            completion = out.outputs[0]
            tokens = list(completion.token_ids)
            logprobs = [
                float(step[token].logprob) for step, token in zip(completion.logprobs or [], tokens, strict=False)
            ]
            if len(logprobs) != len(tokens):
                raise RuntimeError("vLLM returned log-probs for fewer tokens than it sampled")
            if completion.finish_reason == "length":
                finish = "length"
            elif isinstance(completion.stop_reason, str):
                finish = "stop"
            else:
                finish = "eos"
            results.append((tokens, logprobs, finish))
        return results
