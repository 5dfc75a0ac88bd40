"""Action parsing: XML-tag actions (Search-R1), Hermes ``<tool_call>`` JSON and OpenAI ``tool_calls``.

Every parser runs in linear time (no backtracking regex over the whole action), so a 1 MB action with
thousands of tags costs milliseconds. Failures raise a typed ``ParseError`` whose message is written for
the model: envs put it in the explanatory observation and in ``info["parse_error"]``.

Two modes:

* ``"lenient"`` (default): Search-R1 semantics for tags (the leftmost complete ``<tag>...</tag>`` pair
  wins; anything after it is ignored), case-insensitive tag names, and an unclosed final tag runs to the
  end of the text (as vLLM's Hermes parser treats an unclosed ``<tool_call>``).
* ``"strict"``: exactly one well-formed action, nothing but whitespace after it, no stray action tags.

All JSON in an action (a ``<tool_call>`` block, an OpenAI message, ``arguments`` given as a JSON string) is read by
``loads_untrusted``, which is total: arrays and objects nested more than ``MAX_JSON_DEPTH`` levels, integer literals
of more than ``MAX_INT_DIGITS`` digits, ``NaN``, ``Infinity`` and numbers out of the float range are a
``JSONLimitError`` (checked before decoding, without recursion), and a lone surrogate written as an escape
(``"\\ud800"``) becomes U+FFFD, as a raw one in the action text does (``agentgym.contract.env.sanitize_action``).

>>> parse_tag_action("<think>hmm</think><search> capital of Ovra </search>", ("search", "answer"))
TagAction(tag='search', content='capital of Ovra')
>>> parse_hermes_tool_calls('<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>')
[ToolCall(name='add', arguments={'a': 1}, id=None)]
"""

from __future__ import annotations

import bisect
import json
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Mode = Literal["lenient", "strict"]
MODES: tuple[str, ...] = ("lenient", "strict")


class ParseError(ValueError):
    """An action that could not be parsed. ``code`` is a stable machine-readable kind."""

    code = "parse_error"


class EmptyActionError(ParseError):
    code = "empty_action"


class NoActionError(ParseError):
    code = "no_action"


class UnclosedTagError(ParseError):
    code = "unclosed_tag"


class MultipleActionsError(ParseError):
    code = "multiple_actions"


class EmptyContentError(ParseError):
    code = "empty_content"


class TrailingTextError(ParseError):
    code = "trailing_text"


class TruncatedActionError(ParseError):
    """The action was cut at the length limit before its tag was complete (or before any tag)."""

    code = "truncated_action"


class InvalidJSONError(ParseError):
    code = "invalid_json"


class InvalidToolCallError(ParseError):
    code = "invalid_tool_call"


class JSONLimitError(InvalidJSONError):
    """JSON that parses but breaks a limit of ``loads_untrusted``: nesting, integer digits, non-finite numbers."""

    code = "json_limit"


@dataclass(frozen=True)
class TagAction:
    """A parsed tag action such as ``<search> query </search>``; ``content`` is stripped."""

    tag: str
    content: str


@dataclass(frozen=True)
class ToolCall:
    """A parsed tool call: a function name, its JSON-object arguments and the call id if one was given."""

    name: str
    arguments: dict[str, Any]
    id: str | None = None


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def _tag_pattern(tags: Sequence[str], ignore_case: bool) -> re.Pattern[str]:
    names = "|".join(re.escape(t) for t in tags)
    return re.compile(rf"<(/?)({names})>", re.IGNORECASE if ignore_case else 0)


def _describe(tags: Sequence[str]) -> str:
    return " or ".join(f"<{t}>...</{t}>" for t in tags)


#: Unicode categories of characters that show nothing: control (NUL, ...), format (zero-width space, joiners,
#: BOM, soft hyphen, ...), separators, unassigned and lone surrogates.
_INVISIBLE = frozenset({"Cc", "Cf", "Cn", "Cs", "Zs", "Zl", "Zp"})


def is_blank(text: str) -> bool:
    """Whether ``text`` has no visible character: only whitespace, control and format (zero-width) characters.

    >>> is_blank(" \\x00\\u200b\\ufeff"), is_blank("\\u200b1155")
    (True, False)
    """
    if text.isprintable():  # (fast) no control, format or separator characters but the space
        return not text.strip()
    return all(c.isspace() or unicodedata.category(c) in _INVISIBLE for c in text)


def _check_content(name: str, content: str, visible: bool) -> None:
    """Raise ``EmptyContentError`` for an empty tag (or, with ``visible``, one of only invisible characters)."""
    if not content or (visible and is_blank(content)):
        what = "is empty: it holds only invisible (control or zero-width) characters" if content else "is empty"
        raise EmptyContentError(f"The <{name}> tag {what}. Write something between <{name}> and </{name}>.")


def _cut_inside(name: str, at: int) -> TruncatedActionError:
    return TruncatedActionError(
        f"Your turn was too long: it was cut at {at} characters, inside the <{name}> tag, so your <{name}> was "
        f"not read. Keep your reasoning shorter and close the tag with </{name}>."
    )


def _cut_before(tags: Sequence[str], at: int) -> TruncatedActionError:
    return TruncatedActionError(
        f"Your turn was too long: it was cut at {at} characters before any complete {_describe(tags)}, and the "
        "rest of the turn (with any action in it) was not read. Keep your reasoning shorter so that the action fits."
    )


def parse_tag_action(
    text: str,
    tags: Sequence[str],
    *,
    mode: Mode = "lenient",
    truncated_at: int | None = None,
    require_visible: bool = False,
) -> TagAction:
    """Find the action among ``tags`` in ``text`` (see the module docstring for the two modes).

    ``truncated_at``: the length ``text`` was cut to (the env's ``max_action_chars``) when the agent's turn was
    longer, else None. A tag the cut left open is then a ``TruncatedActionError`` rather than an action running to
    the end of the text, and so is a turn with no action before the cut: the message tells the model that its turn
    was too long. ``require_visible``: a tag holding only invisible characters (``is_blank``: NUL, control,
    zero-width) is empty, like a tag holding only whitespace.
    """
    _check_mode(mode)
    if not text.strip():
        if truncated_at is not None:
            raise _cut_before(tags, truncated_at)
        raise EmptyActionError(f"The action is empty. Reply with {_describe(tags)}.")
    lenient = mode == "lenient"
    tokens = [
        (m.start(), m.end(), m.group(1) == "/", m.group(2).lower()) for m in _tag_pattern(tags, lenient).finditer(text)
    ]
    if not tokens:
        if truncated_at is not None:
            raise _cut_before(tags, truncated_at)
        raise NoActionError(f"No action found. Put your action inside {_describe(tags)}.")
    if lenient:
        return _leftmost_pair(text, tokens, tags, truncated_at, require_visible)
    return _strict_single(text, tokens, tags, truncated_at, require_visible)


_Tokens = list[tuple[int, int, bool, str]]


def _leftmost_pair(
    text: str, tokens: _Tokens, tags: Sequence[str], truncated_at: int | None, visible: bool
) -> TagAction:
    closes: dict[str, list[int]] = {}
    for i, (_, _, is_close, name) in enumerate(tokens):
        if is_close:
            closes.setdefault(name, []).append(i)
    for i, (_, end, is_close, name) in enumerate(tokens):
        if is_close:
            continue
        later = closes.get(name, [])
        j = bisect.bisect_right(later, i)
        if j < len(later):
            content = text[end : tokens[later[j]][0]].strip()
            _check_content(name, content, visible)
            return TagAction(name, content)
    opens = [t for t in tokens if not t[2]]
    if opens:
        _, end, _, name = opens[-1]
        if truncated_at is not None:
            raise _cut_inside(name, truncated_at)
        content = text[end:].strip()
        if content and not (visible and is_blank(content)):
            return TagAction(name, content)
        raise UnclosedTagError(f"The <{name}> tag is never closed. End it with </{name}>.")
    if truncated_at is not None:
        raise _cut_before(tags, truncated_at)
    raise NoActionError(f"Found only closing tags. Put your action inside {_describe(tags)}.")


def _strict_single(
    text: str, tokens: _Tokens, tags: Sequence[str], truncated_at: int | None, visible: bool
) -> TagAction:
    opens = [t for t in tokens if not t[2]]
    closes = [t for t in tokens if t[2]]
    if len(opens) > 1 or len(closes) > 1:
        raise MultipleActionsError(f"Give exactly one action per turn: one of {_describe(tags)}.")
    if not opens:
        if truncated_at is not None:
            raise _cut_before(tags, truncated_at)
        raise NoActionError(f"Found only a closing tag. Put your action inside {_describe(tags)}.")
    _, open_end, _, name = opens[0]
    if not closes:
        if truncated_at is not None:
            raise _cut_inside(name, truncated_at)
        raise UnclosedTagError(f"The <{name}> tag is never closed. End it with </{name}>.")
    close_start, close_end, _, close_name = closes[0]
    if close_name != name or close_start < open_end:
        raise UnclosedTagError(f"The <{name}> tag is not closed by </{name}>.")
    content = text[open_end:close_start].strip()
    _check_content(name, content, visible)
    if text[close_end:].strip():
        raise TrailingTextError(f"Nothing may follow </{name}>: end your turn right after the action.")
    return TagAction(name, content)


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)

#: Deepest nesting of arrays and objects that ``loads_untrusted`` accepts (a tool call and its arguments need a few).
MAX_JSON_DEPTH = 64
#: Most digits an integer literal may have in ``loads_untrusted`` (a bigger number can be passed as a string).
MAX_INT_DIGITS = 100

_JSON_SPECIAL = re.compile(r'[\\"\[\]{}]')
#: A surrogate escape (``\ud800``-``\udfff``): it may decode into a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class _LimitHit(Exception):
    """Raised by the decoding hooks of ``loads_untrusted`` (json passes it through untouched)."""


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text ``text`` nests arrays and objects more than ``limit`` levels deep (brackets inside
    strings do not count). One linear pass, no recursion; text with at most ``limit`` opening brackets is not read.

    >>> json_too_deep("[[1]]", 1), json_too_deep('["[[[[["]', 1)
    (True, False)
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    depth, in_string, skip = 0, False, -1
    for m in _JSON_SPECIAL.finditer(text):
        at = m.start()
        if at == skip:  # the character after a backslash inside a string
            continue
        c = m.group()
        if in_string:
            if c == "\\":
                skip = at + 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > limit:
                return True
        elif c in "]}":
            depth -= 1
    return False


def _int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise _LimitHit(
            f"it holds an integer of {len(literal.lstrip('-')):,} digits; integers may have at most {MAX_INT_DIGITS} "
            "digits (write a bigger number as a string)"
        )
    return int(literal)


def _float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _LimitHit(f"the number {literal[:20]}{'...' if len(literal) > 20 else ''} is out of range")
    return value


def _constant(name: str) -> Any:
    raise _LimitHit(f"it holds {name}, which is not a JSON number (use a finite number or null)")


#: The decoder of ``loads_untrusted`` (immutable; its hooks enforce the limits on numbers).
_DECODER = json.JSONDecoder(parse_int=_int, parse_float=_float, parse_constant=_constant)


def scrub_surrogates(value: Any) -> Any:
    """``value`` (JSON-like) with every lone surrogate in its strings (keys too) replaced by U+FFFD, so it encodes as
    UTF-8 (depth is bounded by the caller's data: decoded JSON here, request bodies in ``agentgym.tools.llm``).

    >>> scrub_surrogates({"content": "a\\ud800b", "n": [1, "\\udfff"]})
    {'content': 'a\ufffdb', 'n': [1, '\ufffd']}
    """
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list | tuple):
        return [scrub_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {scrub_surrogates(k): scrub_surrogates(v) for k, v in value.items()}
    return value


def loads_untrusted(text: str, what: str = "The JSON") -> Any:
    """Decode untrusted JSON text; never raises anything but ``InvalidJSONError`` (a message for the model that
    starts with ``what``).

    Limits (``JSONLimitError``): at most ``MAX_JSON_DEPTH`` levels of nesting, integer literals of at most
    ``MAX_INT_DIGITS`` digits, no ``NaN``/``Infinity`` and no number beyond the float range (``1e400``). A lone
    surrogate, raw or written as an escape (``"\\ud800"``), is replaced by U+FFFD, so decoded strings always encode.

    >>> loads_untrusted('{"a": [1, 2.5, "x\\\\ud800"]}')
    {'a': [1, 2.5, 'x\ufffd']}
    >>> loads_untrusted("[" * 100 + "]" * 100, "The list")
    Traceback (most recent call last):
    ...
    agentgym.contract.parsing.JSONLimitError: The list is nested more than 64 levels deep; use at most 64 levels ...
    """
    if json_too_deep(text):
        raise JSONLimitError(
            f"{what} is nested more than {MAX_JSON_DEPTH} levels deep; use at most {MAX_JSON_DEPTH} levels of arrays "
            "and objects."
        )
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as e:
        raise InvalidJSONError(f"{what} is not valid JSON: {e.msg} (at character {e.pos}).") from None
    except _LimitHit as e:
        raise JSONLimitError(f"{what} cannot be read: {e}.") from None
    except (RecursionError, ValueError) as e:  # not expected past the checks above; still a clear invalid action
        raise InvalidJSONError(f"{what} cannot be read ({type(e).__name__}).") from None
    escaped = "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None
    return scrub_surrogates(value) if escaped or (not text.isascii() and _SURROGATE.search(text)) else value


def _tool_call_from_obj(obj: Any, call_id: str | None = None) -> ToolCall:
    if not isinstance(obj, dict):
        raise InvalidToolCallError('A tool call must be a JSON object like {"name": ..., "arguments": {...}}.')
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InvalidToolCallError('A tool call needs a "name" (a non-empty string).')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        args = loads_untrusted(args, f'The "arguments" JSON string of {name[:100]!r}') if args.strip() else {}
    if not isinstance(args, dict):
        raise InvalidToolCallError(f'The "arguments" of {name[:100]!r} must be a JSON object.')
    extra_id = obj.get("id")
    return ToolCall(name=name.strip(), arguments=args, id=call_id or (extra_id if isinstance(extra_id, str) else None))


def _loads(block: str) -> Any:
    fenced = _FENCE.match(block)
    if fenced:
        block = fenced.group(1)
    return loads_untrusted(block, "A <tool_call>")


def parse_hermes_tool_calls(text: str, *, mode: Mode = "lenient") -> list[ToolCall]:
    """Parse Hermes/Qwen ``<tool_call>{json}</tool_call>`` blocks (several allowed, in order).

    Lenient mode also accepts an unclosed final ``<tool_call>``, case-insensitive tags, JSON inside a
    Markdown code fence, and ``arguments`` given as a JSON string. Returns ``[]`` if there is no call.
    """
    _check_mode(mode)
    tokens = [
        (m.start(), m.end(), m.group(1) == "/") for m in _tag_pattern(("tool_call",), mode == "lenient").finditer(text)
    ]
    calls: list[ToolCall] = []
    i = 0
    while i < len(tokens):
        _, end, is_close = tokens[i]
        if is_close:
            if mode == "strict":
                raise UnclosedTagError("Found </tool_call> without a matching <tool_call>.")
            i += 1
            continue
        if i + 1 < len(tokens) and tokens[i + 1][2]:
            block = text[end : tokens[i + 1][0]]
            i += 2
        elif i + 1 < len(tokens):
            raise UnclosedTagError("A <tool_call> is opened inside another one. Close each call with </tool_call>.")
        else:
            if mode == "strict":
                raise UnclosedTagError("The last <tool_call> is never closed. End it with </tool_call>.")
            block = text[end:]
            i += 1
        calls.append(_tool_call_from_obj(_loads(block.strip())))
    return calls


def parse_openai_tool_calls(message: dict[str, Any] | str) -> list[ToolCall]:
    """Parse the ``tool_calls`` of an OpenAI assistant message (a dict or its JSON text).

    Each call is ``{"id", "type": "function", "function": {"name", "arguments": "<JSON string>"}}``.
    """
    if isinstance(message, str):
        message = loads_untrusted(message, "The assistant message")
    if not isinstance(message, dict):
        raise InvalidToolCallError("The assistant message must be a JSON object.")
    raw = message.get("tool_calls") or []
    if not isinstance(raw, list):
        raise InvalidToolCallError('"tool_calls" must be a list.')
    calls = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("function"), dict):
            raise InvalidToolCallError('Each tool call needs a "function" object with "name" and "arguments".')
        if item.get("type", "function") != "function":
            raise InvalidToolCallError(f"Unsupported tool call type {item.get('type')!r}; only 'function'.")
        call_id = item.get("id") if isinstance(item.get("id"), str) else None
        calls.append(_tool_call_from_obj(item["function"], call_id))
    return calls


_TOOL_TAG = re.compile(r"</?tool_call>", re.IGNORECASE)


@dataclass(frozen=True)
class ToolTurn:
    """One agent turn of a tool-calling env: ``calls`` (a tool-call turn) or ``text`` (a plain reply), never both."""

    calls: tuple[ToolCall, ...] | None = None
    text: str | None = None


def parse_tool_turn(action: str, max_calls: int | None = None) -> ToolTurn:
    """Read an agent turn in either call format: Hermes ``<tool_call>`` blocks, or an OpenAI assistant message as
    JSON text (``{"tool_calls": [...]}``, or ``{"content": "..."}`` for a plain reply); anything else is a reply.

    Raises ``ParseError`` (a message for the model) for JSON that is not an assistant message, a broken call,
    tool-call tags that hold no call, or more than ``max_calls`` calls (None: any number).

    >>> parse_tool_turn('{"tool_calls": [{"type": "function", "function": {"name": "ls", "arguments": "{}"}}]}')
    ToolTurn(calls=(ToolCall(name='ls', arguments={}, id=None),), text=None)
    >>> parse_tool_turn("All done.")
    ToolTurn(calls=None, text='All done.')
    """
    turn = _tool_turn(action)
    if max_calls is not None and turn.calls is not None and len(turn.calls) > max_calls:
        raise ParseError(f"Too many calls in one turn ({len(turn.calls)}); at most {max_calls}.")
    return turn


def _tool_turn(action: str) -> ToolTurn:
    stripped = action.strip()
    if stripped.startswith("{"):
        try:
            message = loads_untrusted(stripped, "Your turn, which starts with '{',")
        except JSONLimitError:
            raise
        except InvalidJSONError as e:
            raise InvalidJSONError(
                f'{e} Give an OpenAI assistant message with "tool_calls", <tool_call> blocks, or a plain-text reply.'
            ) from None
        if isinstance(message, dict) and message.get("tool_calls"):
            return ToolTurn(calls=tuple(parse_openai_tool_calls(message)))
        if isinstance(message, dict) and isinstance(message.get("content"), str) and "tool_calls" not in message:
            return ToolTurn(text=message["content"])
        raise InvalidToolCallError('The JSON message has no "tool_calls" list and no "content" text.')
    if _TOOL_TAG.search(action):
        calls = parse_hermes_tool_calls(action)
        if not calls:
            raise NoActionError("Found a </tool_call> tag but no call: put JSON inside <tool_call>...</tool_call>.")
        return ToolTurn(calls=tuple(calls))
    return ToolTurn(text=action)


def parse_tool_calls(action: str) -> list[ToolCall]:
    """The tool calls of an agent turn in either format (``[]`` for a plain reply); raises ``ParseError``.

    >>> [c.name for c in parse_tool_calls('<tool_call>{"name": "pwd", "arguments": {}}</tool_call>')]
    ['pwd']
    """
    return list(parse_tool_turn(action).calls or ())
