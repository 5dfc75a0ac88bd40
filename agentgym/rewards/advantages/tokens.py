"""The turn <-> token plumbing: turn-level advantages reach tokens only through :func:`broadcast_to_tokens`, with
explicit turn spans (or :func:`broadcast_to_action_tokens`, which gives a turn's action tokens their own advantage);
:func:`place_turn_rewards` puts turn rewards on tokens for token-level GAE; :func:`action_char_span` and
:func:`action_token_span` find the part of a turn the env reads as its action."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
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


def _masked(out: np.ndarray, loss_mask: ArrayLike | None, length: int) -> np.ndarray:
    """``out`` with exact zeros where ``loss_mask`` is 0 (``None``: no mask), and no ``-0.0``."""
    if loss_mask is not None:
        m = np.asarray(_numpy(loss_mask))
        if m.shape != (length,):
            raise ValueError(f"loss_mask shape {m.shape} != ({length},)")
        out = np.where(m != 0, out, 0.0)
    return out + 0.0  # no -0.0


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
    return _masked(out, loss_mask, length)


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


#: The tags whose block is a turn's action: the union of the tag sets the envs hand ``parse_tag_action``
#: (SearchQA's ``search``/``answer``, Household's ``action`` under the verl prompt, the diagnostics' and CodeExec's
#: ``answer``).
ACTION_TAGS: tuple[str, ...] = ("search", "answer", "action")
_TOOL_CALL = re.compile(r"<(/?)tool_call>", re.IGNORECASE)
_CLOSE_TAG = re.compile(r"</\w+>")


def _stripped(text: str, start: int, end: int) -> Span:
    """``[start, end)`` without the whitespace at either end (empty when blank)."""
    piece = text[start:end]
    lead = len(piece) - len(piece.lstrip())
    return (start + lead, start + lead + len(piece.strip()))


def _tag_block(text: str, tags: Sequence[str]) -> Span | None:
    """The leftmost complete ``<tag>...</tag>`` pair of ``tags`` (case-insensitive, tags included), else the last
    unclosed opening tag to the end of the text, else None: ``parse_tag_action``'s lenient reading."""
    names = "|".join(re.escape(t) for t in tags)
    found = [(m.start(), m.end(), m.group(1) == "/", m.group(2).lower())
             for m in re.finditer(rf"<(/?)({names})>", text, re.IGNORECASE)]  # fmt: skip
    closes: dict[str, list[int]] = {}
    for i, (_, _, is_close, name) in enumerate(found):
        if is_close:
            closes.setdefault(name, []).append(i)
    for i, (start, _, is_close, name) in enumerate(found):
        later = closes.get(name, [])
        j = bisect.bisect_right(later, i)
        if not is_close and j < len(later):
            return (start, found[later[j]][1])
    opens = [start for start, _, is_close, _ in found if not is_close]
    return (opens[-1], len(text)) if opens else None


def action_char_span(text: str, tags: Sequence[str] = ACTION_TAGS) -> Span:
    """The characters ``[start, end)`` of one turn's ``text`` that the env reads as its action, by the rules of
    ``agentgym.contract.parsing`` (``parse_tool_turn``, then ``parse_tag_action``'s lenient mode):

    1. an OpenAI assistant message (the stripped turn starts with ``{``): the whole turn, stripped;
    2. Hermes tool calls: from the first ``<tool_call>`` tag to the end of the last ``</tool_call>`` (to the end of
       the turn after an unclosed final ``<tool_call>``);
    3. a tag action: the leftmost complete ``<tag>...</tag>`` pair of ``tags``, the tags included (an unclosed last
       tag runs to the end of the turn);
    4. a plain command (Household): the text after the last closing tag of any block (``</think>``, a
       ``</subgoal>``), stripped.

    A turn where that finds nothing (blank, or reasoning only) is its action whole: the env read all of it.

    >>> text = "<think>who?</think> <search>Paris mayor</search>"
    >>> s, e = action_char_span(text); text[s:e]
    '<search>Paris mayor</search>'
    >>> s, e = action_char_span("<think>desk first</think> go to desk 1"); (s, e)
    (26, 38)
    """
    if text.lstrip().startswith("{"):
        span = _stripped(text, 0, len(text))
    elif calls := list(_TOOL_CALL.finditer(text)):
        last = calls[-1]
        span = (calls[0].start(), last.end() if last.group(1) else len(text))
    elif (block := _tag_block(text, tags)) is not None:
        span = block
    else:
        closing = list(_CLOSE_TAG.finditer(text))
        span = _stripped(text, closing[-1].end() if closing else 0, len(text))
    return span if span[1] > span[0] else (0, len(text))  # choice: no action found: the whole turn is the action


def action_token_span(
    ids: Sequence[int], decode: Callable[[list[int]], str], tags: Sequence[str] = ACTION_TAGS
) -> Span:
    """The tokens ``[start, end)`` of one turn's sampled ``ids`` that hold its action (:func:`action_char_span` of
    ``decode(ids)``, the text the env got): every token with a character in the action (a token straddling the
    action's edge counts), and, when the action runs to the end of the text, the turn's trailing tokens that decode
    to nothing (the end-of-turn token). A token's characters are read from the lengths of decoded prefixes,
    ``len(decode(ids[:j]))``, found by bisection (a few decodes per turn); that takes a prefix's text to be a prefix
    of the turn's, which holds but for a multi-byte character split across tokens (then the edge may move by one
    token). A turn that is its action whole is ``(0, len(ids))``.

    >>> words = ["<think>", "hmm", "</think>", "<answer>", "x", "</answer>"]
    >>> action_token_span([0, 1, 2, 3, 4, 5], lambda ids: " ".join(words[i] for i in ids))
    (3, 6)
    """
    ids = list(ids)
    n = len(ids)
    text = decode(ids)
    s, e = action_char_span(text, tags)
    if n == 0 or (s == 0 and e >= len(text)):
        return (0, n)

    def ends_at(j: int) -> int:
        return len(decode(ids[:j]))

    lo, hi = 0, n - 1  # start: the last j with len(decode(ids[:j])) <= s (token j holds character s)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ends_at(mid) <= s else (lo, mid - 1)
    start = lo
    if e >= len(text):  # choice: an action that ends the turn owns the end-of-turn token after it
        return (start, n)
    lo, hi = start + 1, n  # end: the first j with len(decode(ids[:j])) >= e (the first j tokens hold the action)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ends_at(mid) >= e else (mid + 1, hi)
    return (start, lo)


def broadcast_to_action_tokens(
    turn_advantages: Sequence[float] | ArrayLike,
    action_advantages: Sequence[float] | ArrayLike,
    turn_spans: Sequence[Span] | Sequence[Sequence[Span]],
    action_spans: Sequence[Span],
    length: int,
    loss_mask: ArrayLike | None = None,
) -> np.ndarray:
    """:func:`broadcast_to_tokens` of ``turn_advantages``, except that the tokens of ``action_spans[k]`` (inside turn
    ``k``'s span; empty: none) get ``action_advantages[k]``: a turn's action tokens one advantage, its other tokens
    (reasoning) another. Exactly 0 off the turns and on mask-0 tokens.

    >>> broadcast_to_action_tokens([1.0, -1.0], [2.0, -0.5], [(0, 3), (4, 6)], [(1, 3), (5, 6)], 7).tolist()
    [1.0, 2.0, 2.0, 0.0, -1.0, -0.5, 0.0]
    """
    out = broadcast_to_tokens(turn_advantages, turn_spans, length)
    act = _vec(action_advantages, "action_advantages")
    turns = _turn_span_lists(turn_spans)
    if act.size != len(turns) or len(action_spans) != len(turns):
        raise ValueError(f"{len(turns)} turns but {act.size} action advantages and {len(action_spans)} action spans")
    for k, (a, (s, e), turn) in enumerate(zip(act.tolist(), action_spans, turns, strict=True)):
        if e > s and not any(ts <= s and e <= te for ts, te in turn):
            raise ValueError(f"turn {k}: action span ({s}, {e}) is not inside the turn's span {turn}")
        out[int(s) : int(e)] = a
    return _masked(out, loss_mask, length)
