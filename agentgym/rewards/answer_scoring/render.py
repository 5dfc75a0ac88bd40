"""A trajectory as token ids with its context cut points (``render_trajectory``), and the scored suffixes appended
after a cut (``Suffix``, ``encode_suffix``).

The ids are the concatenation of per-message deltas (``template(messages[:k])`` minus ``template(messages[:k-1])``,
the rollout loop's fixed-base convention), so every context is a *prefix* of the full sequence by construction; a
template whose rendering of earlier messages changes when later ones are added (e.g. one that strips past
``<think>`` blocks) raises ``TemplateError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentgym.contract.agent import normalize_messages
from agentgym.contract.trajectory import Trajectory

CutKind = Literal["observation", "action"]
Span = tuple[int, int]


class TemplateError(ValueError):
    """The chat template is not prefix-stable: rendering more messages changed the text of earlier ones."""


# --------------------------------------------------------------------------------------------- rendering


@dataclass(frozen=True)
class TurnSpans:
    """Token spans ``[start, end)`` of one agent turn inside ``RenderedTrajectory.ids``.

    ``action``: the whole assistant message as the template renders it (role header, text, end marker);
    ``action_content``: only the action text (the whole message when the text could not be located).
    ``observation``: all the env's messages for this turn (empty, ``start == end``, when it sent none);
    ``observation_content``: the text of each of those messages.
    """

    action: Span
    action_content: Span
    observation: Span
    observation_content: tuple[Span, ...]


@dataclass(frozen=True)
class RenderedTrajectory:
    """A trajectory as token ids plus where each context ends (see ``cuts``)."""

    ids: tuple[int, ...]
    #: End of the initial observation (the task prompt): the context ``h_0`` = ``h'_0``.
    prompt_end: int
    turns: tuple[TurnSpans, ...]
    #: Text the template appends to open an assistant turn (``add_generation_prompt``), e.g. ``"<|assistant|>"``.
    generation_prompt: str

    def cuts(self, kind: CutKind = "observation") -> list[int]:
        """``[c_0, c_1, ..., c_T]``: ``ids[:c_t]`` is the context after turn t (``c_0`` = the prompt alone).

        ``"observation"``: ``h_t``, ending after the env's reply to turn t (IGPO, TIPS; for a turn with no reply,
        e.g. the final answer, that is the end of the action). ``"action"``: ``h'_t``, ending at the end of the
        agent's turn t (SIOP).
        """
        if kind == "observation":
            return [self.prompt_end, *(t.observation[1] for t in self.turns)]
        if kind == "action":
            return [self.prompt_end, *(t.action[1] for t in self.turns)]
        raise ValueError(f"kind must be 'observation' or 'action', got {kind!r}")


def _apply_template(tokenizer: Any, messages: list[dict[str, Any]], generation: bool, kwargs: dict[str, Any]) -> str:
    if not messages:
        return ""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation, **kwargs)
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, not str")
    return text


def _encode_with_offsets(tokenizer: Any, text: str) -> tuple[list[int], list[Span] | None]:
    """Token ids of ``text`` (no special tokens added) and each token's character span, when the tokenizer has them."""
    if not text:
        return [], []
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    except (NotImplementedError, ValueError, TypeError, KeyError):  # slow tokenizers have no offsets
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]), None


def _char_to_token_span(offsets: list[Span] | None, start: int, end: int, n_tokens: int) -> Span:
    """Tokens overlapping the characters ``[start, end)``; the whole text without offsets."""
    if offsets is None:
        return (0, n_tokens)
    if start >= end:
        first = next((i for i, (s, _) in enumerate(offsets) if s >= start), n_tokens)
        return (first, first)
    hit = [i for i, (s, e) in enumerate(offsets) if e > start and s < end]
    return (hit[0], hit[-1] + 1) if hit else (0, n_tokens)


def render_trajectory(
    traj: Trajectory, tokenizer: Any, *, template_kwargs: dict[str, Any] | None = None
) -> RenderedTrajectory:
    """Render ``traj`` with ``tokenizer``'s chat template into token ids with per-turn spans and context cuts.

    Message k's tokens are the encoding of ``template(messages[:k])[len(template(messages[:k-1])):]``, so each
    ``ids[:cut]`` is exactly the rendering of the conversation so far. Raises ``TemplateError`` when the template is
    not prefix-stable and ``ValueError`` when the trajectory has no initial observation or the tokenizer no template.

    >>> r = render_trajectory(traj, tok)            # doctest: +SKIP
    >>> r.ids[: r.cuts("action")[1]]                # the prompt and the first action  # doctest: +SKIP
    """
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the tokenizer has no chat template")
    if not traj.initial_observation:
        raise ValueError(f"trajectory of task {traj.task_id!r} has no initial observation to condition on")
    kwargs = dict(template_kwargs or {})
    tags: list[tuple[int, str]] = [(-1, "prompt")] * len(traj.initial_observation)
    raw: list[dict[str, Any]] = list(traj.initial_observation)
    for t, turn in enumerate(traj.turns):
        raw.append({"role": "assistant", "content": turn.action})
        tags.append((t, "action"))
        raw.extend(turn.observation)
        tags.extend([(t, "observation")] * len(turn.observation))
    messages = normalize_messages(raw)

    ids: list[int] = []
    spans: list[tuple[Span, Span]] = []  # per message: (whole delta, content) in absolute token indices
    previous = ""
    for k in range(1, len(messages) + 1):
        text = _apply_template(tokenizer, messages[:k], False, kwargs)
        if not text.startswith(previous):
            raise TemplateError(
                f"the chat template is not prefix-stable: adding message {k} ({messages[k - 1]['role']}) changed the "
                "rendering of the earlier messages, so the context after a turn is not a prefix of the whole "
                "trajectory. Use a template that renders past turns verbatim (e.g. keep past reasoning)."
            )
        delta = text[len(previous) :]
        delta_ids, offsets = _encode_with_offsets(tokenizer, delta)
        content = messages[k - 1]["content"]
        at = delta.find(content) if content else -1
        if content and at < 0:
            local = (0, len(delta_ids))
        else:
            start = at if at >= 0 else len(delta)
            local = _char_to_token_span(offsets, start, start + len(content), len(delta_ids))
        base = len(ids)
        ids.extend(delta_ids)
        spans.append(((base, len(ids)), (base + local[0], base + local[1])))
        previous = text

    n_prompt = len(traj.initial_observation)
    with_generation = _apply_template(tokenizer, messages[:n_prompt], True, kwargs)
    prompt_text = _apply_template(tokenizer, messages[:n_prompt], False, kwargs)
    if not with_generation.startswith(prompt_text):
        raise TemplateError("the chat template's generation prompt rewrites the conversation before it")
    prompt_end = spans[n_prompt - 1][0][1]
    turns: list[TurnSpans] = []
    for t in range(len(traj.turns)):
        members = [i for i, (turn, _) in enumerate(tags) if turn == t]
        action_idx = members[0]
        obs_idx = members[1:]
        action_whole, action_content = spans[action_idx]
        obs_start = spans[obs_idx[0]][0][0] if obs_idx else action_whole[1]
        obs_end = spans[obs_idx[-1]][0][1] if obs_idx else action_whole[1]
        turns.append(
            TurnSpans(
                action=action_whole,
                action_content=action_content,
                observation=(obs_start, obs_end),
                observation_content=tuple(spans[i][1] for i in obs_idx),
            )
        )
    return RenderedTrajectory(
        ids=tuple(ids),
        prompt_end=prompt_end,
        turns=tuple(turns),
        generation_prompt=with_generation[len(prompt_text) :],
    )


# --------------------------------------------------------------------------------------------- suffixes


@dataclass(frozen=True)
class Suffix:
    """Tokens appended after a cut, and which of them are scored (``scored[j]`` for ``ids[j]``).

    >>> Suffix((5, 6, 7), (False, True, True)).n_scored
    2
    """

    ids: tuple[int, ...]
    scored: tuple[bool, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(int(i) for i in self.ids))
        object.__setattr__(self, "scored", tuple(bool(s) for s in self.scored))
        if len(self.ids) != len(self.scored):
            raise ValueError(f"suffix has {len(self.ids)} tokens but {len(self.scored)} mask entries")

    @property
    def n_scored(self) -> int:
        return sum(self.scored)


def encode_suffix(tokenizer: Any, pieces: Sequence[tuple[str, bool]]) -> Suffix:
    """Tokenise the concatenated ``pieces`` (``(text, scored)``) as one string; a token is scored when its characters
    overlap a scored piece (so a BPE token merging ``" "`` and the answer's first letters counts). Tokenizers without
    offsets tokenise each piece separately. Raises ``ValueError`` when nothing is scored.

    >>> encode_suffix(tok, [("<|assistant|><answer> ", False), ("Trolkend", True), (" </answer>", False)])
    ... # doctest: +SKIP
    """
    text = "".join(p for p, _ in pieces)
    ids, offsets = _encode_with_offsets(tokenizer, text)
    if offsets is not None:
        scored = [False] * len(ids)
        pos = 0
        for piece, is_scored in pieces:
            if is_scored and piece:
                for i, (s, e) in enumerate(offsets):
                    if e > pos and s < pos + len(piece):
                        scored[i] = True
            pos += len(piece)
        suffix = Suffix(tuple(ids), tuple(scored))
    else:
        all_ids: list[int] = []
        mask: list[bool] = []
        for piece, is_scored in pieces:
            piece_ids = list(tokenizer(piece, add_special_tokens=False)["input_ids"]) if piece else []
            all_ids += piece_ids
            mask += [is_scored] * len(piece_ids)
        suffix = Suffix(tuple(all_ids), tuple(mask))
    if suffix.n_scored == 0:
        raise ValueError(f"no token of the scored text is left after tokenisation: {pieces!r:.200}")
    return suffix
