"""Rollout back-ends: what samples the policy's turns, chosen by name (``TrainConfig.rollout_backend``).

A back-end is an :class:`~agentgym.baselines.rollout.HFPolicy`: the training model's tokenizer and chat template
build every prompt and observation token (so the token layout is the same whatever samples), and the back-end
overrides how turns are sampled and what happens around a weight update:

- ``sample_batch(contexts, *, budgets, temperature, stop, generators) -> [(ids, logprobs, finish), ...]``;
- ``mark_stale()``: the training weights changed (after every optimizer step);
- ``sleep()``: the rollout phase is over (a colocated engine gives its memory back).

Registered: ``hf`` (transformers KV-cache loop over the live training model, CPU or GPU; with
``think_intervention`` T^2PO's intervening sampler, ``baselines/t2po.py``), ``vllm`` (a colocated
vLLM engine that receives the weights after each update, ``baselines/vllm_backend.py``, GPU) and ``remote`` (an
OpenAI-compatible completions server such as ``vllm serve`` or ``agentgym.tools.openai_server``,
``baselines/remote_backend.py``). A factory takes ``(model, tokenizer, config)`` and reads its own arguments from
``config.backend_kwargs``; add one by adding an entry to ``BACKENDS``.

>>> sorted(BACKENDS)
['hf', 'remote', 'vllm']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from agentgym.baselines.rollout import HFPolicy

__all__ = ["BACKENDS", "amp_dtype", "make_backend"]


def amp_dtype(config: Any) -> torch.dtype | None:
    """The autocast dtype of the config's forward passes (None: the model's own dtype)."""
    return None if config.amp_dtype is None else getattr(torch, config.amp_dtype)


def _hf(model: Any, tokenizer: Any, config: Any) -> HFPolicy:
    """The HF loop; with ``config.think_intervention`` T^2PO's :class:`~agentgym.baselines.t2po.InterveningPolicy`."""
    if getattr(config, "think_intervention", False):
        from agentgym.baselines.t2po import InterveningPolicy

        knobs = {"window": config.think_window, "delta": config.think_delta, "text": config.think_text}
        return InterveningPolicy(model, tokenizer, **knobs, amp_dtype=amp_dtype(config), **config.backend_kwargs)
    return HFPolicy(model, tokenizer, amp_dtype=amp_dtype(config), **config.backend_kwargs)


def _vllm(model: Any, tokenizer: Any, config: Any) -> HFPolicy:
    from agentgym.baselines.vllm_backend import VLLMPolicy

    return VLLMPolicy(model, tokenizer, model_path=config.model, seed=config.seed, **config.backend_kwargs)


def _remote(model: Any, tokenizer: Any, config: Any) -> HFPolicy:
    from agentgym.baselines.remote_backend import RemotePolicy

    return RemotePolicy(model, tokenizer, **config.backend_kwargs)


#: Back-end name -> factory ``(model, tokenizer, config) -> HFPolicy``.
BACKENDS: dict[str, Callable[[Any, Any, Any], HFPolicy]] = {"hf": _hf, "vllm": _vllm, "remote": _remote}


def make_backend(model: Any, tokenizer: Any, config: Any) -> HFPolicy:
    """The back-end ``config.rollout_backend`` over the training ``model``."""
    return BACKENDS[config.rollout_backend](model, tokenizer, config)
