"""Spaces for text agents: a ``Chat`` observation space and a full-Unicode ``Text`` action space.

``Chat`` works with Gymnasium's vector envs, ``AsyncVectorEnv``'s shared memory included (its default): each
sub-env gets a ``Chat.shared_memory_bytes`` slot (1 MiB by default) that holds one observation as UTF-8 JSON.
A larger observation stops the vector env with a message that says to pass
``vector_kwargs={"shared_memory": False}`` (observations then travel through the worker pipes).

>>> import numpy as np
>>> space = Chat()
>>> space.contains([{"role": "user", "content": "Hello"}])
True
>>> UnicodeText(max_length=8).contains("héllo 世界")
True
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterable, Iterator, Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

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
    ``max_messages`` bounds the list length; ``max_chars`` bounds each message's content;
    ``shared_memory_bytes`` is the size of a sub-env's observation slot in ``AsyncVectorEnv``'s shared memory.
    """

    def __init__(
        self,
        max_messages: int = 16,
        max_chars: int = 1 << 20,
        roles: Sequence[str] = ROLES,
        seed: int | np.random.Generator | None = None,
        shared_memory_bytes: int = 1 << 20,
    ):
        self.max_messages = max_messages
        self.max_chars = max_chars
        self.roles = tuple(roles)
        self.shared_memory_bytes = shared_memory_bytes
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

    def to_jsonable(self, sample_n: Iterable[list]) -> list:
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


# -- AsyncVectorEnv shared memory -------------------------------------------------------------------------------
_LENGTH_BYTES = 8


class ChatSharedMemory:
    """``n`` slots of ``8 + slot_bytes`` bytes in shared memory: a little-endian length, then UTF-8 JSON."""

    def __init__(self, n: int, slot_bytes: int, ctx: ModuleType):
        self.n, self.slot_bytes = n, slot_bytes
        self.buffer = ctx.RawArray("B", n * (_LENGTH_BYTES + slot_bytes))

    def _slot(self, index: int) -> memoryview:
        size = _LENGTH_BYTES + self.slot_bytes
        return memoryview(self.buffer).cast("B")[index * size : (index + 1) * size]

    def write(self, index: int, messages: list) -> None:
        data = json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        if len(data) > self.slot_bytes:
            raise ValueError(
                f"an observation of {len(data):,} bytes does not fit the {self.slot_bytes:,}-byte shared-memory "
                "slot of Chat; make the vector env with vector_kwargs={'shared_memory': False}"
            )
        slot = self._slot(index)
        slot[_LENGTH_BYTES : _LENGTH_BYTES + len(data)] = data
        slot[:_LENGTH_BYTES] = len(data).to_bytes(_LENGTH_BYTES, "little")

    def read(self, index: int) -> list:
        slot = self._slot(index)
        length = int.from_bytes(slot[:_LENGTH_BYTES], "little")
        return json.loads(bytes(slot[_LENGTH_BYTES : _LENGTH_BYTES + length]).decode("utf-8")) if length else []


class ChatBatch(Sequence):
    """The live observations of an ``AsyncVectorEnv`` over ``Chat`` (what ``copy=False`` returns); a deep copy, as
    the vector env makes by default, is a plain tuple of message lists."""

    def __init__(self, memory: ChatSharedMemory):
        self.memory = memory

    def __len__(self) -> int:
        return self.memory.n

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return tuple(self.memory.read(i) for i in range(self.memory.n)[index])
        if not -self.memory.n <= index < self.memory.n:
            raise IndexError(index)
        return self.memory.read(index % self.memory.n)

    def __iter__(self) -> Iterator[list]:
        return (self.memory.read(i) for i in range(self.memory.n))

    def __deepcopy__(self, memo: dict) -> tuple[list, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"ChatBatch({list(self)!r})"


@create_shared_memory.register(Chat)
def _create_chat_shared_memory(space: Chat, n: int = 1, ctx: ModuleType = multiprocessing) -> ChatSharedMemory:
    return ChatSharedMemory(n, space.shared_memory_bytes, ctx)


@read_from_shared_memory.register(Chat)
def _read_chat_shared_memory(space: Chat, shared_memory: ChatSharedMemory, n: int = 1) -> ChatBatch:
    return ChatBatch(shared_memory)


@write_to_shared_memory.register(Chat)
def _write_chat_shared_memory(space: Chat, index: int, value: list, shared_memory: ChatSharedMemory) -> None:
    shared_memory.write(index, value)
