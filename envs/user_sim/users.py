"""Simulated users: the ``User`` interface, the end-of-conversation markers and ``SimulatorError``.

A user holds a hidden goal and answers the agent one message at a time: ``respond(dialogue, agent_message)`` returns
``(message, done)``. ``dialogue`` is the conversation so far from the agent's side (``role`` ``"user"`` for the
simulated user's messages, ``"assistant"`` for the agent's), without ``agent_message``. A user ends the conversation
by putting one of ``END_MARKERS`` in its message (then ``done`` is True); ``split_marker`` separates the text from
the marker.

A user that cannot answer (an endpoint down, a timeout, a 5xx, a malformed reply, no end within its turn limit)
raises ``SimulatorError``: envs end the episode as a *simulator failure* (``info["simulator_failure"]``), which is
counted apart and never scored as the agent's failure.

>>> split_marker("Thanks, that is all. ###STOP###")
('Thanks, that is all.', '###STOP###')
>>> split_marker("Could you say more?")
('Could you say more?', None)
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Message = dict[str, Any]

STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
#: Markers a user puts in its last message (tau2's conventions).
END_MARKERS: tuple[str, ...] = (STOP, TRANSFER, OUT_OF_SCOPE)

FailureKind = Literal["timeout", "connection", "http", "malformed", "turn_limit", "error"]


class SimulatorError(RuntimeError):
    """The simulated user failed; ``kind`` says how (``timeout``, ``connection``, ``http``, ``malformed``,
    ``turn_limit``, ``error``). Envs report it as a simulator failure, apart from the agent's failures."""

    def __init__(self, message: str, kind: FailureKind = "error") -> None:
        super().__init__(message)
        self.kind: FailureKind = kind


def split_marker(message: str) -> tuple[str, str | None]:
    """``message`` without its end marker (the first one found; any text around it kept), and that marker."""
    for marker in END_MARKERS:
        if marker in message:
            return " ".join(message.replace(marker, " ").split()), marker
    return message, None


class User:
    """A simulated person with a hidden goal (see the module docstring)."""

    def reset(self, *, seed: int | None = None) -> None:
        """Start a new conversation (``seed`` seeds any randomness the user has)."""

    def respond(self, dialogue: Sequence[Message], agent_message: str) -> tuple[str, bool]:
        """The user's next message to ``agent_message`` and whether the conversation is over."""
        raise NotImplementedError

    def close(self) -> None:
        """Release resources (HTTP clients)."""


# -- scripted users ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    """One kind of detail a user may hold: its ``name``, the words that name it in a question (``aliases``), the
    values it can take (``choices``: a question or statement that mentions one is *about* this slot) and the
    sentences the user states it with (``says``, each with a ``{value}`` field; a generic pool when empty)."""

    name: str
    aliases: tuple[str, ...]
    choices: tuple[str, ...]
    says: tuple[str, ...] = ()


GENERIC_SAYS = ("It's {value}.", "{value}, please.", "That would be {value}.", "I'd like {value}.")
YES = ("Yes.", "Yes, that's right.", "Correct.")
NO = ("No.", "No, it isn't.", "That's not it.")
DONT_KNOW = ("I don't know.", "I have no preference there.", "I'm not sure, it doesn't matter to me.")
OFF_TARGET = (
    "Sorry, what do you need to know?",
    "Could you ask me something more specific?",
    "I'm not sure what you mean.",
)
ACK = ("Okay.", "Sure.", "Alright.")
ALL_TOLD = ("That's everything I can tell you.", "I think I've told you all I know.")
VOLUNTEER = ("By the way, ", "Oh, and ", "I should mention: ")
CORRECT = ("Actually, ", "No wait, ", "Hmm, not quite: ")
GOODBYE = ("I have to go now, sorry.", "Let's stop here, I'm out of time.")


def find_word(word: str, text: str) -> re.Match[str] | None:
    """The first place ``word`` appears in ``text`` (lower case) as a whole word or phrase: not inside a longer
    word, number or time (``15`` is not in ``15:00``, ``flight`` is in ``a flight: ...``).

    >>> bool(find_word("15", "at 15:00")), bool(find_word("flight", "a flight: on monday"))
    (False, True)
    """
    return re.search(rf"(?<![\w-])(?<!\d[:.]){re.escape(word.lower())}(?![\w-]|[:.]\d)", text)


@dataclass(frozen=True)
class Mention:
    """What an agent message says about one slot: whether it asks (a question), and the choice it names, if any."""

    slot: str
    question: bool
    choice: str | None


def mentions(slots: Sequence[Slot], message: str) -> list[Mention]:
    """The slots ``message`` is about, in order of first appearance: a slot is named by one of its aliases or one of
    its choices (whole words, any case); a message with a ``?`` asks. A choice that belongs to several slots counts
    for the first.

    >>> day = Slot("day", ("day", "when"), ("monday", "friday"))
    >>> mentions([day], "Is friday ok?")
    [Mention(slot='day', question=True, choice='friday')]
    """
    text = message.lower()
    question = "?" in text
    found: list[tuple[int, Mention]] = []
    seen: set[str] = set()
    for slot in slots:
        where, choice = None, None
        for c in slot.choices:
            m = find_word(c, text)
            if m and (where is None or m.start() < where):
                where, choice = m.start(), c
        for a in slot.aliases:
            m = find_word(a, text)
            if m and (where is None or m.start() < where):
                where = m.start()
        if where is not None and slot.name not in seen:
            seen.add(slot.name)
            found.append((where, Mention(slot.name, question, choice)))
    return [m for _, m in sorted(found, key=lambda x: x[0])]


@dataclass
class ScriptedUser(User):
    """A deterministic user: a pure function of its hidden ``goal``, what it has said so far, the agent's message
    and its seeded RNG (which only picks paraphrases and, below full cooperativeness, whether to correct).

    * It answers one detail per message, and only a detail it was asked about: a question naming the slot (an alias
      or one of its values). A yes/no question about a wrong value gets "no", plus the right value with probability
      ``cooperativeness``. A slot the user does not hold gets "I don't know".
    * A statement that assumes a wrong value is corrected with probability ``cooperativeness``.
    * After ``volunteer_after`` messages in a row that ask about nothing it holds (None: never), it volunteers the
      next undisclosed detail.
    * After ``patience`` messages it says goodbye and ``###STOP###``.

    Args:
        slots: every slot of the domain (the user holds ``goal``'s; it knows it does not hold the others).
        goal: the hidden details, ``{slot name: value}``.
        request: the opening message (the conversation starts with it; ``respond([], "")`` returns it).

    >>> day = Slot("day", ("day", "when"), ("monday", "friday"), ("On {value}.",))
    >>> size = Slot("size", ("people", "size"), ("2", "4"))
    >>> user = ScriptedUser([day, size], {"day": "friday"}, "Book me a table.", cooperativeness=0.0)
    >>> user.reset(seed=0)
    >>> user.respond([], "")
    ('Book me a table.', False)
    >>> user.respond([], "Is monday ok?")[0], user.disclosed
    ("No, it isn't.", set())
    >>> user.respond([], "For how many people?")[0], user.respond([], "Which day?")[0], sorted(user.disclosed)
    ("I don't know.", 'On friday.', ['day'])
    """

    slots: Sequence[Slot]
    goal: Mapping[str, str]
    request: str
    cooperativeness: float = 1.0
    volunteer_after: int | None = 3
    patience: int = 30
    disclosed: set[str] = field(default_factory=set)
    _rng: random.Random = field(default_factory=random.Random, repr=False)
    _off_target: int = 0
    _turns: int = 0
    _started: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.cooperativeness <= 1.0:
            raise ValueError(f"cooperativeness must be in [0, 1], got {self.cooperativeness}")
        names = {s.name for s in self.slots}
        unknown = set(self.goal) - names
        if unknown:
            raise ValueError(f"goal slots {sorted(unknown)} are not among the slots {sorted(names)}")
        self._by_name = {s.name: s for s in self.slots}

    def reset(self, *, seed: int | None = None) -> None:
        self._rng = random.Random(seed)
        request = self.request.lower()  # what the opening request states is told already: never volunteered again
        self.disclosed = {k for k, v in self.goal.items() if find_word(str(v), request)}
        self._off_target = self._turns = 0
        self._started = False

    def _pick(self, pool: Sequence[str]) -> str:
        return pool[self._rng.randrange(len(pool))]

    def _state(self, name: str) -> str:
        self.disclosed.add(name)
        value = self.goal[name]
        sentence = self._pick(self._by_name[name].says or GENERIC_SAYS).format(value=value)
        return sentence[0].upper() + sentence[1:]

    def respond(self, dialogue: Sequence[Message], agent_message: str) -> tuple[str, bool]:
        if not self._started:
            self._started = True
            return self.request, False
        self._turns += 1
        if self._turns > self.patience:
            return f"{self._pick(GOODBYE)} {STOP}", True
        about = mentions(self.slots, agent_message)
        held = [m for m in about if m.slot in self.goal]
        if about:
            self._off_target = 0 if held else self._off_target + 1
        else:
            self._off_target += 1
        first = about[0] if about else None
        if first is not None and first.question:
            if first.slot not in self.goal:
                return self._pick(DONT_KNOW), False
            value = self.goal[first.slot]
            if first.choice is not None and first.choice.lower() != value.lower():
                if self._rng.random() < self.cooperativeness:
                    return f"{self._pick(NO)} {self._state(first.slot)}", False
                return self._pick(NO), False
            if first.choice is not None:
                self.disclosed.add(first.slot)
                return self._pick(YES), False
            return self._state(first.slot), False
        if first is not None and first.slot in self.goal and first.choice is not None:
            if first.choice.lower() != self.goal[first.slot].lower() and self._rng.random() < self.cooperativeness:
                sentence = self._state(first.slot)  # (drawn before the lead-in: the RNG order is part of the script)
                return self._pick(CORRECT) + _continue(sentence), False
            return self._pick(ACK), False
        pending = [s.name for s in self.slots if s.name in self.goal and s.name not in self.disclosed]
        if self.volunteer_after is not None and self._off_target >= self.volunteer_after and pending:
            self._off_target = 0
            sentence = self._state(pending[0])
            return self._pick(VOLUNTEER) + _continue(sentence), False
        if not pending and first is None:
            return self._pick(ALL_TOLD), False
        return self._pick(OFF_TARGET if first is None else ACK), False


def _continue(sentence: str) -> str:
    """A sentence continuing a lead-in ("By the way, "): its first letter in lower case, except the pronoun I.

    >>> _continue("On friday."), _continue("I'm leaving from oslo.")
    ('on friday.', "I'm leaving from oslo.")
    """
    if re.match(r"I\b", sentence):
        return sentence
    return sentence[:1].lower() + sentence[1:]
