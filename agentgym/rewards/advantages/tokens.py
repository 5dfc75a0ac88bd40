"""The turn <-> token plumbing: turn-level advantages reach tokens only through :func:`broadcast_to_tokens`, with
explicit turn spans; :func:`place_turn_rewards` puts turn rewards on tokens for token-level GAE."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentgym.rewards.advantages.base import ArrayLike, Span, _numpy, _vec


def _turn_span_lists(turn_spans: Sequence[Any]) -> list[list[Span]]:
    """Each turn is one ``(start, end)`` or a list of them (a turn split by template tokens)."""
    out = []
    for s in turn_spans:
        if len(s) == 2 and all(isinstance(v, (int, np.integer)) for v in s):
            out.append([(int(s[0]), int(s[1]))])
        else:
            out.append([(int(a), int(b)) for a, b in s])
    return out


def broadcast_to_tokens(
    turn_advantages: Sequence[float] | ArrayLike,
    turn_spans: Sequence[Span] | Sequence[Sequence[Span]],
    length: int,
    loss_mask: ArrayLike | None = None,
) -> np.ndarray:
    """Token advantages ``(length,)``: turn ``k``'s advantage on its tokens ``[start, end)``, exactly 0 on every
    other token (observation/template tokens, padding) and on mask-0 tokens. Turns come only from the explicit
    spans (a turn whose advantage is 0 is still its own turn); a span may also be a list of spans. Spans must lie
    in ``[0, length]`` and not overlap.

    >>> broadcast_to_tokens([2.0, 0.0, -1.0], [(0, 2), (3, 4), (5, 7)], 8, loss_mask=[1, 1, 1, 1, 1, 1, 0, 1]).tolist()
    [2.0, 2.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0]
    """
    adv = _vec(turn_advantages, "turn_advantages")
    spans = _turn_span_lists(turn_spans)
    if len(spans) != adv.size:
        raise ValueError(f"{adv.size} turn advantages but {len(spans)} turn spans")
    out = np.zeros(length)
    owner = np.full(length, -1, dtype=np.intp)
    for k, (a, turn) in enumerate(zip(adv.tolist(), spans, strict=True)):
        for s, e in turn:
            if not 0 <= s <= e <= length:
                raise ValueError(f"turn {k}: span ({s}, {e}) is outside [0, {length}]")
            if (owner[s:e] >= 0).any():
                raise ValueError(f"turn {k}: span ({s}, {e}) overlaps turn {int(owner[s:e].max())}")
            owner[s:e] = k
            out[s:e] = a
    if loss_mask is not None:
        m = np.asarray(_numpy(loss_mask))
        if m.shape != (length,):
            raise ValueError(f"loss_mask shape {m.shape} != ({length},)")
        out = np.where(m != 0, out, 0.0)
    return out + 0.0  # no -0.0


def broadcast_to_tokens_batch(
    turn_advantages: Sequence[ArrayLike],
    turn_spans: Sequence[Sequence[Span] | Sequence[Sequence[Span]]],
    length: int,
    loss_mask: ArrayLike | None = None,
) -> np.ndarray:
    """:func:`broadcast_to_tokens` for a padded batch: ``(B, length)``, with an optional ``(B, length)`` mask."""
    if len(turn_advantages) != len(turn_spans):
        raise ValueError(f"{len(turn_advantages)} advantage rows but {len(turn_spans)} span rows")
    m = None if loss_mask is None else np.asarray(_numpy(loss_mask))
    if m is not None and m.shape != (len(turn_spans), length):
        raise ValueError(f"loss_mask shape {m.shape} != ({len(turn_spans)}, {length})")
    rows = [
        broadcast_to_tokens(a, s, length, None if m is None else m[i])
        for i, (a, s) in enumerate(zip(turn_advantages, turn_spans, strict=True))
    ]
    return np.stack(rows) if rows else np.zeros((0, length))


def place_turn_rewards(turn_rewards: ArrayLike, turn_spans: Sequence[Any], length: int) -> np.ndarray:
    """Token rewards ``(length,)`` with each turn's reward on the last token of its span, 0 elsewhere: the input of
    :func:`token_gae` (docs/rewards.md, 'Token-level PPO GAE and broadcasting': every per-turn reward lands on the last
    policy token of its turn).

    >>> place_turn_rewards([0.5, 1.0], [(0, 3), (5, 7)], 8).tolist()
    [0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 1.0, 0.0]
    """
    r = _vec(turn_rewards, "turn_rewards")
    spans = _turn_span_lists(turn_spans)
    if len(spans) != r.size:
        raise ValueError(f"{r.size} turn rewards but {len(spans)} turn spans")
    out = np.zeros(length)
    for k, (x, turn) in enumerate(zip(r.tolist(), spans, strict=True)):
        ends = [e for s, e in turn if e > s]
        if not ends or max(ends) > length or min(s for s, _ in turn) < 0:
            raise ValueError(f"turn {k}: spans {turn} hold no token inside [0, {length})")
        out[max(ends) - 1] += x
    return out
