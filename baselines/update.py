"""The policy-gradient update's pieces: the model (policy, value head), per-token log-probs, padded batches and the
clipped loss. ``agentgym.baselines.trainer`` composes them; each is usable on its own.

- :func:`forward_tokens`: per-token log-probs, entropy and values of sampled tokens only (observations skip the LM
  head), under ``log_softmax(logits / temperature)`` as the rollout records them.
- :func:`make_batch` / :func:`select` / :func:`score_batch`: rollouts -> right-padded tensors in sequence
  coordinates; minibatch rows trimmed to their longest row; log-probs of a whole batch in minibatches.
- :func:`minibatch_loss`: clipped surrogate with clip-higher (``eps_low``/``eps_high``) + k3 KL to a frozen
  reference, ``exp(ref - lp) - (ref - lp) - 1`` (``kl_coef``) - entropy bonus (``ent_coef``) + clipped value loss,
  reduced by :func:`aggregate_loss` (``token-mean``, ``seq-mean-token-mean``, ``constant``: Dr. GRPO's normaliser).
  ``ratio_level="turn"`` (AT^2PO): one importance ratio per turn, the geometric mean of its tokens' ratios
  (:func:`turn_mean_log_ratio` over the batch's ``turn_ids``), clipped per turn.

>>> aggregate_loss(torch.tensor([[1.0, 3.0], [5.0, 0.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]]), "token-mean")
tensor(3.)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from agentgym.baselines.backends import amp_dtype
from agentgym.baselines.checkpoint import TrainState
from agentgym.baselines.config import CRITIC_TRUNKS, DISTILL_ESTIMATORS, LOSS_AGG_MODES, TrainConfig
from agentgym.baselines.rollout import Rollout, autocast

__all__ = [
    "TrunkValueHead",
    "aggregate_loss",
    "build_policy",
    "build_value_head",
    "clip_bounds",
    "clipped_value_loss",
    "critic_values",
    "distill_term",
    "entropy_band_penalty",
    "explained_variance",
    "forward_tokens",
    "freeze_lower_layers",
    "make_batch",
    "minibatch_loss",
    "score_batch",
    "select",
    "sft_update",
    "sync_critic_trunk",
    "turn_ids",
    "turn_mean_log_ratio",
    "value_epoch_loss",
    "value_only_loss",
]


def build_policy(config: TrainConfig) -> tuple[Any, Any]:
    """(model, tokenizer) on ``config.device`` in ``config.dtype``. Never downloads: ``model`` is ``"tiny"``, a
    named model (``agentgym.tools.named_models``, loaded from the operator's model cache, ``$AGENTGYM_MODEL_CACHE``)
    or a local directory."""
    if not config.model:
        raise ValueError("no model: give a local model directory with --model PATH (nothing is downloaded)")
    if config.model == "tiny":
        from agentgym.tools.tiny_model import build_tiny_model

        model, tok = build_tiny_model(config.model_seed)
    else:
        from transformers import AutoModelForCausalLM

        from agentgym.tools.named_models import resolve_model_path
        from agentgym.tools.tiny_model import load_tokenizer

        path = resolve_model_path(config.model)
        tok = load_tokenizer(path)
        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
    # transformers wraps Module.to with functools.wraps: mypy takes the bound method for an unbound one
    model = model.to(device=config.device, dtype=getattr(torch, config.dtype))  # type: ignore[call-arg]
    if config.trainable_layers is not None:
        freeze_lower_layers(model, config.trainable_layers)
    if config.gradient_checkpointing:
        # active in train mode only, so sampling keeps its KV cache (transformers 5 renamed the method)
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    return model, tok


def freeze_lower_layers(model: Any, trainable_layers: int) -> list[str]:
    """Freeze everything but the top ``trainable_layers`` decoder layers and the final norm (``requires_grad``
    False); returns the names of the parameters left trainable. The embeddings stay frozen, and with them an LM
    head tied to them (SmolLM2's); an untied LM head is frozen too. ``ValueError`` when the model has fewer layers
    or no ``get_decoder().layers`` / ``.norm`` (Llama, Qwen2, Mistral have them)."""
    decoder = model.get_decoder()
    layers, norm = getattr(decoder, "layers", None), getattr(decoder, "norm", None)
    if layers is None or norm is None:
        raise ValueError(f"trainable_layers: {type(model).__name__} has no decoder .layers and .norm to train")
    if trainable_layers > len(layers):
        raise ValueError(f"trainable_layers={trainable_layers}, but the model has {len(layers)} decoder layers")
    model.requires_grad_(False)
    for module in [*(list(layers)[len(layers) - trainable_layers :]), norm]:
        module.requires_grad_(True)
    return [name for name, p in model.named_parameters() if p.requires_grad]


class TrunkValueHead(torch.nn.Linear):
    """A linear value head that reads the last hidden states of a trunk of its own (``trunk``: a copy of the
    policy's decoder, ``TrainConfig.critic_trunk="separate"``) instead of the policy's. The value loss trains the
    trunk and the head; the policy's weights never see it. :func:`sync_critic_trunk` copies the policy's decoder
    into it (the trainer does so after ``init_from`` and after the SFT warm start)."""

    def __init__(self, trunk: torch.nn.Module, hidden_size: int) -> None:
        super().__init__(hidden_size, 1)
        self.trunk = trunk

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The trunk's last hidden states ``(B, L, hidden)``."""
        return self.trunk(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state


def build_value_head(model: Any, trunk: str = "shared") -> torch.nn.Linear:
    """A linear critic, zero-initialised (V = 0 at the start, deterministic), on the policy's last hidden state
    (``trunk="shared"``) or on a copy of the policy's decoder of its own (``"separate"``: :class:`TrunkValueHead`)."""
    if trunk not in CRITIC_TRUNKS:
        raise ValueError(f"critic trunk must be one of {CRITIC_TRUNKS}, got {trunk!r}")
    size = model.config.hidden_size
    head = torch.nn.Linear(size, 1) if trunk == "shared" else TrunkValueHead(copy.deepcopy(model.get_decoder()), size)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return head.to(next(model.parameters()).device)


@torch.no_grad()
def sync_critic_trunk(model: Any, value_head: torch.nn.Module | None) -> bool:
    """Copy the policy's decoder weights into a separate critic trunk (a no-op for a shared head); True if copied."""
    if not isinstance(value_head, TrunkValueHead):
        return False
    value_head.trunk.load_state_dict(model.get_decoder().state_dict())
    return True


def forward_tokens(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
    value_head: torch.nn.Module | None = None,
    token_mask: torch.Tensor | None = None,
    amp: torch.dtype | None = None,
    detach_value: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-token ``(logprobs, entropy, values)`` in sequence coordinates ``(B, L)``: entry ``t`` is about token ``t``
    given tokens ``< t`` (entry 0 is 0). Log-probs/entropy of ``softmax(logits / temperature)`` (T=1 if greedy).

    Only the positions where ``token_mask`` is set (default: every real token) go through the LM head; the others
    are 0. In multi-turn rollouts most tokens are observations, so scoring only the sampled ones saves most of the
    ``(tokens, vocab)`` logits. Assumes ``logits = lm_head(decoder(...).last_hidden_state)`` (Llama/Qwen/Mistral
    style); a model with logit soft-capping falls back to the full forward. ``amp``: autocast dtype of the forward
    (the log-softmax is float32 either way). ``detach_value``: the value head reads the hidden states detached, so
    a value loss trains the head alone and never moves the policy's trunk."""
    scale = temperature if temperature > 0 else 1.0
    sel = (attention_mask if token_mask is None else token_mask).bool().clone()
    sel[:, 0] = False
    rows, cols = sel.nonzero(as_tuple=True)
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    with autocast(model, amp):
        if decoder is None or head is None or getattr(model.config, "final_logit_softcapping", None):
            out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
            hidden = out.hidden_states[-1]
            logits = out.logits[rows, cols - 1]
        else:
            hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
            logits = head(hidden[rows, cols - 1])
    logp = torch.log_softmax(logits.float() / scale, dim=-1)
    lp_sel = logp.gather(-1, input_ids[rows, cols][:, None]).squeeze(-1)
    ent_sel = -(logp.exp() * logp).sum(-1)
    zeros = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    lp = zeros.index_put((rows, cols), lp_sel)
    entropy = zeros.index_put((rows, cols), ent_sel)
    values = None
    if value_head is not None:
        if isinstance(value_head, TrunkValueHead):  # its own trunk: the policy's hidden states play no part
            with autocast(model, amp):
                own = value_head.hidden(input_ids, attention_mask)
            h = own[rows, cols - 1].float()
        else:
            h = hidden[rows, cols - 1].float()
            h = h.detach() if detach_value else h
        values = zeros.index_put((rows, cols), value_head(h).squeeze(-1))
    return lp, entropy, values


def critic_values(
    model: Any,
    value_head: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_mask: torch.Tensor,
    amp: torch.dtype | None = None,
    detach_value: bool = False,
) -> torch.Tensor:
    """The critic's values alone, ``(B, L)`` in sequence coordinates like :func:`forward_tokens`' (entry ``t``: the
    value read before token ``t``, where ``token_mask`` is set; 0 elsewhere), without the policy's LM head (and,
    for a :class:`TrunkValueHead`, without the policy at all)."""
    sel = token_mask.bool().clone()
    sel[:, 0] = False
    rows, cols = sel.nonzero(as_tuple=True)
    with autocast(model, amp):
        if isinstance(value_head, TrunkValueHead):
            hidden = value_head.hidden(input_ids, attention_mask)
        else:
            decoder = model.get_decoder()
            if decoder is None:
                out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                            use_cache=False)  # fmt: skip
                hidden = out.hidden_states[-1]
            else:
                hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    h = hidden[rows, cols - 1].float()
    if detach_value and not isinstance(value_head, TrunkValueHead):
        h = h.detach()
    zeros = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    return zeros.index_put((rows, cols), value_head(h).squeeze(-1))


def clipped_value_loss(values: torch.Tensor, mb: dict[str, torch.Tensor], value_clip: float) -> torch.Tensor:
    """PPO's clipped value loss ``0.5 * max((V - R)^2, (V_old + clip(V - V_old, +-c) - R)^2)``, token-mean over the
    minibatch's loss tokens (``mb``: ``old_values``, ``returns``, ``loss_mask``)."""
    old_v, ret = mb["old_values"], mb["returns"]
    v_clipped = old_v + torch.clamp(values - old_v, -value_clip, value_clip)
    vloss = 0.5 * torch.maximum((values - ret) ** 2, (v_clipped - ret) ** 2)
    return aggregate_loss(vloss, mb["loss_mask"], "token-mean")


def aggregate_loss(values: torch.Tensor, mask: torch.Tensor, mode: str, norm_const: float = 1.0) -> torch.Tensor:
    """Reduce per-token losses ``(B, L)`` over mask-1 tokens:

    - ``token-mean``: ``sum(x * m) / sum(m)`` (every token of the minibatch weighs the same);
    - ``seq-mean-token-mean``: mean over rows (with any mask-1 token) of each row's token mean;
    - ``constant``: ``sum(x * m) / (B * norm_const)`` (Dr. GRPO: no length bias).
    """
    m = mask.to(values.dtype)
    total = (values * m).sum()
    if mode == "token-mean":
        return total / m.sum().clamp(min=1.0)
    if mode == "seq-mean-token-mean":
        per_row = m.sum(-1)
        keep = per_row > 0
        if not bool(keep.any()):
            return total * 0.0
        return ((values * m).sum(-1)[keep] / per_row[keep]).mean()
    if mode == "constant":
        return total / (values.shape[0] * norm_const)
    raise ValueError(f"unknown loss aggregation mode {mode!r}; known: {LOSS_AGG_MODES}")


def pad_rows(rows: Sequence[Sequence[float]], length: int, value: float, dtype: torch.dtype) -> torch.Tensor:
    out = torch.full((len(rows), length), value, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(list(row), dtype=dtype)
    return out


def make_batch(
    rollouts: Sequence[Rollout],
    pad_id: int,
    *,
    advantages: Sequence[np.ndarray] | None = None,
    returns: Sequence[np.ndarray] | None = None,
    mask_truncated: bool = False,
    clip_scales: Sequence[np.ndarray] | None = None,
    with_turns: bool = False,
) -> dict[str, torch.Tensor]:
    """Right-padded tensors ``(B, L)`` in sequence coordinates (prompt + response); response-coordinate arrays are
    shifted by each row's prompt length. ``loss_mask`` is 0 on prompts, env tokens, padding (and on truncated
    episodes when ``mask_truncated``). With ``advantages``, also ``clip_scale``: the per-token factor of the clip
    range (``clip_scales``, A^2TGPO's adaptive clip; 1.0 everywhere when None). ``with_turns``: also ``turn_ids``
    (:func:`turn_ids`, for ``ratio_level="turn"``)."""
    length = max(len(r.input_ids) for r in rollouts)

    def seq(r: Rollout, resp: Sequence[float] | np.ndarray) -> list[float]:
        return [0.0] * len(r.prompt_ids) + list(resp)

    def mask_of(r: Rollout) -> list[float]:
        if mask_truncated and r.truncated and not r.terminated:
            return [0.0] * len(r.input_ids)
        return seq(r, r.loss_mask)

    batch = {
        "input_ids": pad_rows([r.input_ids for r in rollouts], length, pad_id, torch.long),
        "attention_mask": pad_rows([[1] * len(r.input_ids) for r in rollouts], length, 0, torch.long),
        "loss_mask": pad_rows([mask_of(r) for r in rollouts], length, 0.0, torch.float32),
        "rollout_logprobs": pad_rows([seq(r, r.rollout_logprobs) for r in rollouts], length, 0.0, torch.float32),
    }
    if advantages is not None:
        batch["advantages"] = pad_rows(
            [seq(r, a) for r, a in zip(rollouts, advantages, strict=True)], length, 0.0, torch.float32
        )
        scales = clip_scales or [np.ones(len(r.response_ids)) for r in rollouts]
        batch["clip_scale"] = pad_rows(
            [[1.0] * len(r.prompt_ids) + list(c) for r, c in zip(rollouts, scales, strict=True)],
            length,
            1.0,
            torch.float32,
        )
    if returns is not None:
        batch["returns"] = pad_rows(
            [seq(r, a) for r, a in zip(rollouts, returns, strict=True)], length, 0.0, torch.float32
        )
    if with_turns:
        batch["turn_ids"] = turn_ids(rollouts)
    return batch


def turn_ids(rollouts: Sequence[Rollout]) -> torch.Tensor:
    """``(B, L)`` in ``make_batch``'s sequence coordinates (prompt + response, right-padded): the sampled tokens of
    turn ``k`` hold ``k``, every other position -1."""
    length = max((len(r.input_ids) for r in rollouts), default=0)
    out = torch.full((len(rollouts), length), -1, dtype=torch.long)
    for row, r in enumerate(rollouts):
        p = len(r.prompt_ids)
        for k, (s, e) in enumerate(r.turn_spans):
            out[row, p + s : p + e] = k
    return out


def turn_mean_log_ratio(log_ratio: torch.Tensor, turns: torch.Tensor) -> torch.Tensor:
    """AT^2PO's turn-level importance ratio, as a log: every token of a turn gets the mean of its turn's token
    log-ratios (the log of their geometric mean), so one clipped ratio covers the whole turn; positions with turn
    -1 get 0. Differentiable in ``log_ratio``. :func:`minibatch_loss` uses it in place of the token log-ratio with
    ``ratio_level="turn"``.

    >>> turn_mean_log_ratio(torch.tensor([[0.25, 0.75, -0.5, 9.0]]), torch.tensor([[0, 0, 1, -1]])).tolist()
    [[0.5, 0.5, -0.5, 0.0]]
    """
    rows = turns.shape[0]
    width = int(turns.max().item()) + 1 if turns.numel() else 0
    if width <= 0:
        return torch.zeros_like(log_ratio)
    on = turns >= 0
    slot = (turns.clamp(min=0) + width * torch.arange(rows, device=turns.device)[:, None])[on]
    sums = torch.zeros(rows * width, dtype=log_ratio.dtype, device=log_ratio.device).index_add(0, slot, log_ratio[on])
    counts = torch.zeros(rows * width, dtype=log_ratio.dtype, device=log_ratio.device).index_add(
        0, slot, torch.ones_like(log_ratio[on])
    )
    out = torch.zeros_like(log_ratio)
    out[on] = (sums / counts.clamp(min=1))[slot]
    return out


def select(batch: dict[str, torch.Tensor], idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """Rows ``idx`` of every tensor, trimmed to the longest selected row."""
    sub = {k: v[idx] for k, v in batch.items()}
    length = int(sub["attention_mask"].sum(-1).max().item())
    return {k: v[:, :length] for k, v in sub.items()}


@torch.no_grad()
def score_batch(
    model: Any,
    batch: dict[str, torch.Tensor],
    temperature: float,
    minibatch_size: int,
    value_head: torch.nn.Module | None = None,
    amp: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and values) of every row, computed in minibatches, padded to the batch length."""
    n, length = batch["input_ids"].shape
    device = next(model.parameters()).device
    lps = torch.zeros(n, length)
    vals = torch.zeros(n, length) if value_head is not None else None
    for start in range(0, n, minibatch_size):
        idx = torch.arange(start, min(n, start + minibatch_size))
        mb = select(batch, idx)
        lp, _, v = forward_tokens(
            model,
            mb["input_ids"].to(device),
            mb["attention_mask"].to(device),
            temperature,
            value_head,
            token_mask=mb["loss_mask"].to(device) > 0,
            amp=amp,
        )
        lps[idx, : lp.shape[1]] = lp.cpu()
        if vals is not None and v is not None:
            vals[idx, : v.shape[1]] = v.cpu()
    return lps, vals


def clip_bounds(ratio: torch.Tensor, scale: torch.Tensor | None, eps_low: float, eps_high: float
                ) -> tuple[torch.Tensor | float, torch.Tensor | float]:  # fmt: skip
    """The clip range ``[1 - eps_low * s, 1 + eps_high * s]`` per token (``s``: the batch's ``clip_scale``; None:
    the global range). Computed in float64 and rounded once to the ratio's dtype, so ``s = 1`` gives exactly the
    bounds of the scalar range."""
    if scale is None:
        return 1.0 - eps_low, 1.0 + eps_high
    s = scale.double()
    return (1.0 - eps_low * s).to(ratio.dtype), (1.0 + eps_high * s).to(ratio.dtype)


def entropy_band_penalty(entropy: torch.Tensor, reference: float | None, kappa: float, delta: float) -> torch.Tensor:
    """EPO's entropy smoothing: ``kappa * max(0, |H - ref| - delta)`` for the minibatch's entropy ``H`` (a scalar
    tensor, differentiable) and ``ref`` the EMA of past iterations' entropies (None before the first: 0). Inside
    the band ``|H - ref| <= delta`` it is 0 and so is its gradient."""
    if reference is None or kappa == 0.0:
        return torch.zeros((), device=entropy.device)
    return kappa * torch.clamp((entropy - reference).abs() - delta, min=0.0)


def distill_term(lp: torch.Tensor, mb: dict[str, torch.Tensor], estimator: str = "forward") -> torch.Tensor | None:
    """HINT-SD's distillation loss of a minibatch (baselines/self_distill.py): with ``d = teacher_logprobs - lp`` on
    the sampled tokens, ``exp(d) - d - 1`` (``"forward"``: its gradient on the student's own samples estimates that
    of KL(teacher || student)) or ``stopgrad(-d) * lp`` (``"reverse"``: KL(student || teacher)), token-mean over
    ``mb["distill_mask"]``; None when the minibatch has no targeted token (then nothing joins the loss).

    >>> lp = torch.log(torch.tensor([[0.5, 0.2, 0.9]]))
    >>> teacher = torch.log(torch.tensor([[0.25, 0.4, 0.1]]))
    >>> mb = {"teacher_logprobs": teacher, "distill_mask": torch.tensor([[1.0, 1.0, 0.0]])}
    >>> round(float(distill_term(lp, mb)), 4)
    0.25
    """
    if estimator not in DISTILL_ESTIMATORS:
        raise ValueError(f"distill_estimator must be one of {DISTILL_ESTIMATORS}, got {estimator!r}")
    mask = mb["distill_mask"]
    if not bool((mask > 0).any()):
        return None
    d = (mb["teacher_logprobs"] - lp) * mask
    per_token = torch.exp(d) - d - 1.0 if estimator == "forward" else (-d).detach() * lp
    return aggregate_loss(per_token, mask, "token-mean")


def minibatch_loss(
    model: Any,
    value_head: torch.nn.Module | None,
    mb: dict[str, torch.Tensor],
    config: TrainConfig,
    *,
    ent_coef: float | None = None,
    entropy_ref: float | None = None,
) -> dict[str, torch.Tensor]:
    """Clipped surrogate (clip-higher; per-token range ``eps * clip_scale`` when the batch carries ``clip_scale``)
    + k3 KL to the reference - entropy bonus (+ clipped value loss) + EPO's entropy band penalty
    (``config.entropy_kappa`` around ``entropy_ref``, the EMA of past entropies; :func:`entropy_band_penalty`).
    ``ent_coef``: this iteration's entropy weight (None: ``config.ent_coef``; EPO's schedule is
    ``config.ent_coef_at``). ``config.ratio_level="turn"`` (AT^2PO): the ratio of every token is its turn's
    geometric-mean ratio over the turn's loss tokens (the batch's ``turn_ids``), so the clip acts per turn; the
    approximate KL stays per token."""
    lp, entropy, values = forward_tokens(
        model,
        mb["input_ids"],
        mb["attention_mask"],
        config.temperature,
        value_head if config.value_epochs is None else None,  # else the critic trains in its own epochs
        token_mask=mb["loss_mask"] > 0,
        amp=amp_dtype(config),
        detach_value=config.detach_critic,
    )
    mask, adv, mode = mb["loss_mask"], mb["advantages"], config.loss_mode
    on = mask > 0
    token_log_ratio = (lp - mb["old_logprobs"]) * mask
    log_ratio = token_log_ratio
    if config.ratio_level == "turn":  # AT^2PO: the turn's mean over its loss tokens (masked ones leave the turn)
        log_ratio = turn_mean_log_ratio(token_log_ratio, torch.where(on, mb["turn_ids"], -1))
    ratio = torch.exp(log_ratio)
    low, high = clip_bounds(ratio, mb.get("clip_scale"), config.eps_low, config.eps_high)
    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, low, high)  # type: ignore[arg-type]
    pg = torch.maximum(pg1, pg2)
    per_token = pg - (config.ent_coef if ent_coef is None else ent_coef) * entropy
    kl_ref = torch.zeros((), device=lp.device)
    if "ref_logprobs" in mb:
        d = (mb["ref_logprobs"] - lp) * mask
        kl = torch.exp(d) - d - 1.0
        per_token = per_token + config.kl_coef * kl
        kl_ref = aggregate_loss(kl.detach(), mask, "token-mean")
    loss = aggregate_loss(per_token, mask, mode, config.norm_const)
    out = {"pg_loss": aggregate_loss(pg.detach(), mask, mode, config.norm_const), "kl_ref": kl_ref}
    if "distill_mask" in mb and config.distill_coef > 0:  # HINT-SD (baselines/self_distill.py): targeted tokens only
        distill = distill_term(lp, mb, config.distill_estimator)
        if distill is not None:  # a minibatch without targeted tokens leaves the loss as it is
            loss = loss + config.distill_coef * distill
            out["distill_loss"] = distill.detach()
    if config.entropy_kappa > 0 and entropy_ref is not None:  # EPO (never touches the loss when off)
        band = entropy_band_penalty(aggregate_loss(entropy, mask, "token-mean"), entropy_ref, config.entropy_kappa,
                                    config.entropy_delta)  # fmt: skip
        loss = loss + band
        out["entropy_penalty"] = band.detach()
    if values is not None:
        value_loss = clipped_value_loss(values, mb, config.value_clip)
        loss = loss + config.vf_coef * value_loss
        out["value_loss"] = value_loss.detach()
    with torch.no_grad():
        lr_ = token_log_ratio.detach()
        clipped = ((ratio < low) & (adv < 0)) | ((ratio > high) & (adv > 0))
        out.update(
            approx_kl=aggregate_loss(torch.exp(lr_) - 1.0 - lr_, mask, "token-mean"),
            clip_frac=aggregate_loss(clipped.float(), mask, "token-mean"),
            entropy=aggregate_loss(entropy.detach(), mask, "token-mean"),
            ratio_maxdev=(ratio.detach() - 1.0).abs()[on].max() if bool(on.any()) else torch.zeros(()),
        )
    out["loss"] = loss
    return out


def value_only_loss(
    model: Any, value_head: torch.nn.Module, mb: dict[str, torch.Tensor], config: TrainConfig
) -> torch.Tensor:
    """The critic warm-up's loss: ``0.5 * (V - return)^2``, token-mean over sampled tokens, unclipped (the warm-up
    fits a fresh head; PPO's value clipping would hold it near zero). With ``detach_critic`` only the head gets
    gradients."""
    values = critic_values(model, value_head, mb["input_ids"], mb["attention_mask"], mb["loss_mask"] > 0,
                           amp_dtype(config), config.detach_critic)  # fmt: skip
    return aggregate_loss(0.5 * (values - mb["returns"]) ** 2, mb["loss_mask"], "token-mean")


def value_epoch_loss(
    model: Any, value_head: torch.nn.Module, mb: dict[str, torch.Tensor], config: TrainConfig
) -> torch.Tensor:
    """A step of the critic's own epochs (``config.value_epochs``): :func:`clipped_value_loss` of the critic's values
    against the iteration's returns and its values before the update (``value_clip``). No ``vf_coef``: nothing
    else shares the loss."""
    values = critic_values(model, value_head, mb["input_ids"], mb["attention_mask"], mb["loss_mask"] > 0,
                           amp_dtype(config), config.detach_critic)  # fmt: skip
    return clipped_value_loss(values, mb, config.value_clip)


def explained_variance(pred: np.ndarray, target: np.ndarray) -> float:
    """``1 - Var(target - pred) / Var(target)`` (NaN when the target is constant)."""
    var = float(np.var(target))
    return float("nan") if var == 0 else 1.0 - float(np.var(target - pred)) / var


def sft_update(state: TrainState, config: TrainConfig, rollouts: list[Rollout]) -> float:
    """One supervised step on ``rollouts``: the mean negative log-likelihood of their action tokens, at ``sft_lr``
    (else ``lr``), gradients clipped at ``max_grad_norm``; the optimizer's learning rates are restored after it.
    Returns the loss."""
    device = next(state.model.parameters()).device
    batch = {k: v.to(device) for k, v in make_batch(rollouts, state.tokenizer.pad_token_id).items()}
    state.model.train()
    lp, _, _ = forward_tokens(state.model, batch["input_ids"], batch["attention_mask"], 1.0,
                              token_mask=batch["loss_mask"] > 0, amp=amp_dtype(config))  # fmt: skip
    loss = -aggregate_loss(lp, batch["loss_mask"], "token-mean")
    state.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for g in state.optimizer.param_groups for p in g["params"]], config.max_grad_norm)
    lrs = [g["lr"] for g in state.optimizer.param_groups]
    for g in state.optimizer.param_groups:
        g["lr"] = config.sft_lr if config.sft_lr is not None else config.lr
    state.optimizer.step()
    for g, lr in zip(state.optimizer.param_groups, lrs, strict=True):
        g["lr"] = lr
    state.policy.mark_stale()
    state.model.eval()
    return float(loss.detach())
