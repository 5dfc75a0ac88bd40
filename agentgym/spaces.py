"""Spaces for text agents: a ``Chat`` observation space and a full-Unicode ``Text`` action space.

>>> import numpy as np
>>> space = Chat()
>>> space.contains([{"role": "user", "content": "Hello"}])
True
>>> UnicodeText(max_length=8).contains("héllo 世界")
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

#: Roles a chat message may carry (OpenAI chat format).
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
#: Optional keys a message may carry besides ``role`` and ``content``.
OPTIONAL_KEYS: frozenset[str] = frozenset({"name", "tool_call_id", "tool_calls"})

# A sample alphabet that exercises ASCII, accents, CJK, RTL, emoji, combining marks and control characters.
_SAMPLE_CHARSET = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \t\n<>/{}[]\"':,.;!?-_=+*&^%$#@()|\\`~"
    "éüßñçøåœ"
    "世界中文字"
    "مرحبا"
    "שלום"
    "🙂🚀🧪"
    "\u0301\u200b\u200d\ufeff"
    "\x00\x07\x1b"
)


class UnicodeText(spaces.Text):
    """A ``Text`` space that accepts any Python string up to ``max_length`` characters.

    Gymnasium's ``Text`` stores its charset as a set; a set of all 1.1M code points would cost tens of
    megabytes per space, so ``contains`` accepts every string and ``sample`` draws from a small but
    deliberately nasty alphabet (accents, CJK, RTL, emoji, zero-width and control characters).
    """

    def __init__(self, max_length: int, *, min_length: int = 0, seed: int | np.random.Generator | None = None):
        super().__init__(max_length=max_length, min_length=min_length, charset=_SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )


def is_message(x: Any) -> bool:
    """True if ``x`` is an OpenAI-style chat message dict with a known role and string content."""
    if not isinstance(x, dict) or x.get("role") not in ROLES or not isinstance(x.get("content"), str):
        return False
    extra = set(x) - {"role", "content"}
    return extra <= OPTIONAL_KEYS


class Chat(spaces.Space[list]):
    """A list of chat messages: ``[{"role": "user", "content": "..."}, ...]``.

    Observations of every agentgym env are the new messages the env produced this turn.
    ``max_messages`` bounds the list length; ``max_chars`` bounds each message's content.
    """

    def __init__(
        self,
        max_messages: int = 16,
        max_chars: int = 1 << 20,
        roles: Sequence[str] = ROLES,
        seed: int | np.random.Generator | None = None,
    ):
        self.max_messages = max_messages
        self.max_chars = max_chars
        self.roles = tuple(roles)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, list)
            and len(x) <= self.max_messages
            and all(is_message(m) and m["role"] in self.roles and len(m["content"]) <= self.max_chars for m in x)
        )

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, str]]:
        n = int(self.np_random.integers(1, min(self.max_messages, 4) + 1))
        text = UnicodeText(max_length=min(self.max_chars, 64), seed=self.np_random)
        return [{"role": str(self.np_random.choice(self.roles)), "content": text.sample()} for _ in range(n)]

    def to_jsonable(self, sample_n: Sequence[list]) -> list:
        return [list(s) for s in sample_n]

    def from_jsonable(self, sample_n: Sequence[list]) -> list:
        return [list(s) for s in sample_n]

    def __repr__(self) -> str:
        return f"Chat(max_messages={self.max_messages}, max_chars={self.max_chars})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Chat) and (self.max_messages, self.max_chars, self.roles) == (
            other.max_messages,
            other.max_chars,
            other.roles,
        )
