"""The bounds of the tool worlds (ToolUse, BFCL, CustomerService), derived here in one place.

Every step's output is bounded, whatever the agent does: how many calls one step may make, how long a tool result
and a whole observation may be, and how large a world may grow. Where a step goes past a limit the agent reads a
message that names the limit (a result cut with a note, a call refused as invalid); nothing raises.

The observation budget comes from the ``Chat`` space every env uses: its ``max_messages`` messages, and a shared
memory slot of ``shared_memory_bytes`` for one observation as UTF-8 JSON (``AsyncVectorEnv``). A character takes at
most 6 bytes there (a control character escaped as ``\\u001b``), so ``MAX_OBSERVATION_CHARS`` characters of content
take at most three quarters of the slot, which leaves the rest for roles, names and call ids.

>>> MAX_CALLS_PER_STEP, MAX_OBSERVATION_CHARS, MAX_RESULT_CHARS, MAX_WORLD_CHARS
(16, 131072, 8192, 131072)
>>> cut("abcdef", 100)
'abcdef'
>>> len(cut("x" * 10_000, 200)) <= 200
True
"""

from __future__ import annotations

import json
from typing import Any

from agentgym.contract.spaces import Chat

_SPACE = Chat()
#: Worst-case UTF-8 JSON bytes of one character of content (a control character escaped as ``\\u001b``).
JSON_BYTES_PER_CHAR = 6
#: Tool calls one step may make (one ``tool`` message each): the ``Chat`` space's ``max_messages``. A step with more
#: is invalid and runs none of them.
MAX_CALLS_PER_STEP: int = _SPACE.max_messages
#: Characters of content in one step's observation, all messages together: its worst-case JSON fills at most three
#: quarters of the ``Chat`` space's shared-memory slot (1 MiB).
MAX_OBSERVATION_CHARS: int = _SPACE.shared_memory_bytes * 3 // 4 // JSON_BYTES_PER_CHAR
#: Characters of one tool message (a result or an error): an even share of the observation among the most calls a
#: step may make, so a step's tool messages always fit its observation.
MAX_RESULT_CHARS: int = MAX_OBSERVATION_CHARS // MAX_CALLS_PER_STEP
#: The largest a world may grow, as the length of its state in JSON (files and their contents, accounts and their
#: history, events, the store's records): as large as one observation. A call that would make it larger is refused.
MAX_WORLD_CHARS: int = MAX_OBSERVATION_CHARS
#: The longest file content a ToolUse file system holds: half a result, so that ``cat`` shows it whole even with its
#: quotes, backslashes and newlines escaped in JSON. A longer ``write`` is refused.
MAX_FILE_CHARS: int = MAX_RESULT_CHARS // 2


def cut(text: str, limit: int, what: str = "the result") -> str:
    """``text``, or its start with a note saying it was cut (the whole at most ``limit`` characters)."""
    if len(text) <= limit:
        return text
    note = f"\n[... cut: {what} has {len(text):,} characters; at most {limit:,} are shown]"
    return text[: max(0, limit - len(note))] + note[:limit]


def shares(lengths: list[int], budget: int) -> list[int]:
    """How many characters each of several texts may keep so that together they fit ``budget``: short ones whole,
    the rest an even share of what is left (water-filling, deterministic).

    >>> shares([10, 500, 20], 100)
    [10, 70, 20]
    >>> shares([10, 20], 100)
    [10, 20]
    """
    if sum(lengths) <= budget:
        return list(lengths)
    out = [0] * len(lengths)
    left, todo = budget, sorted(range(len(lengths)), key=lambda i: lengths[i])
    for k, i in enumerate(todo):
        share = left // (len(todo) - k)
        out[i] = min(lengths[i], share)
        left -= out[i]
    return out


def cap_observation(messages: list[dict[str, Any]], budget: int = MAX_OBSERVATION_CHARS) -> list[dict[str, Any]]:
    """``messages`` with their contents cut (each with a note) so that together they hold at most ``budget``
    characters; the same list when they already fit."""
    lengths = [len(m["content"]) for m in messages]
    if sum(lengths) <= budget:
        return messages
    keep = shares(lengths, budget)
    return [
        m if n == len(m["content"]) else {**m, "content": cut(m["content"], n, "this message")}
        for m, n in zip(messages, keep, strict=True)
    ]


def json_chars(state: Any) -> int:
    """The length of ``state`` as compact JSON (what ``MAX_WORLD_CHARS`` bounds); worlds hold plain JSON data."""
    return len(json.dumps(state, ensure_ascii=False, separators=(",", ":"), default=repr))


def world_limit_error(size: int, limit: int = MAX_WORLD_CHARS) -> str:
    """The message for a call that would make a world ``size`` characters large."""
    return (
        f"the world would grow to {size:,} characters (as JSON), over its limit of {limit:,}; the call was not run. "
        "Remove something first, or write less."
    )
