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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym.envs.user_sim.understanding import Kind, Lexicon, Reading, Slot as Slot

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

    It reads each message with the slots' lexicons (``understanding.Lexicon``: every clause, every slot a clause
    names by an alias, a cue or a value) and answers every question in one reply, truthfully:

    * an open question ("Which crust?", "How large should it be?") gets the value; a question that lists values
      ("Thin or thick crust?", "Which cabin: economy, premium or business?") gets the value, after "None of those."
      when the list misses it;
    * a yes/no question about one value gets "yes" and the value when it is right, "no" when it is wrong, plus the
      right value with probability ``cooperativeness``;
    * a statement that assumes a wrong value is corrected with probability ``cooperativeness`` (else "Okay.");
    * a slot the user does not hold gets "I don't know" (it knows it has no preference there);
    * a question that asks for more without naming a detail ("Anything else I should know?") counts as asking
      about the next undisclosed detail;
    * a detail in ``loose`` is held loosely: an open question about it gets a partial answer, its slot's hint
      (a sentence that fits two or three values and names none), until a question that offers values (a list, an
      either-or, a yes/no) pins it;
    * after ``volunteer_after`` messages in a row that ask about nothing it holds (None: never), it volunteers the
      next undisclosed detail; after ``patience`` messages it says goodbye and ``###STOP###``.

    A detail is stated only when a clause asks about it or by the volunteering rule (``disclosed`` lists those
    stated so far, and those the opening request states).

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
    >>> user.respond([], "Monday or friday? And how many people?")[0]
    "On friday. I don't know about the people."
    """

    slots: Sequence[Slot]
    goal: Mapping[str, str]
    request: str
    cooperativeness: float = 1.0
    volunteer_after: int | None = 3
    patience: int = 30
    loose: Collection[str] = ()
    disclosed: set[str] = field(default_factory=set)
    hinted: set[str] = field(default_factory=set)
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
        if set(self.loose) - set(self.goal):
            raise ValueError(f"loose slots {sorted(set(self.loose) - set(self.goal))} are not in the goal")
        self._by_name = {s.name: s for s in self.slots}
        self._lexicon = Lexicon.of(self.slots)

    def reset(self, *, seed: int | None = None) -> None:
        self._rng = random.Random(seed)
        request = self.request.lower()  # what the opening request states is told already: never volunteered again
        self.disclosed = {k for k, v in self.goal.items() if find_word(str(v), request)}
        self.hinted = set()
        self._off_target = self._turns = 0
        self._started = False

    def understand(self, message: str) -> tuple[list[Reading], bool]:
        """The readings of ``message``, one per slot (a slot's questions across clauses merged: "Thin crust? Or
        thick?" lists two values; a shared value bound to the slot whose goal it is when the message did not say),
        and whether a clause asks for more without naming a detail."""
        heard = self._lexicon.read(message)
        merged: dict[str, Reading] = {}
        for r in heard.readings:
            if r.alternatives:
                holds = [s for s in r.alternatives if s in self.goal]
                right = [s for s in holds if str(self.goal[s]).lower() in r.values]
                slot = (right or holds or [r.slot])[0]
                r = Reading(slot, r.kind, r.values, r.clause, r.alternatives)
            old = merged.get(r.slot)
            if old is None:
                merged[r.slot] = r
            elif r.asks:
                values = tuple(dict.fromkeys((*old.values, *r.values))) if old.asks else r.values
                kind: Kind = "open" if not values else "confirm" if len(values) == 1 else "values"
                merged[r.slot] = Reading(r.slot, kind, values, old.clause, old.alternatives)
        return list(merged.values()), bool(heard.indirect)

    def _pick(self, pool: Sequence[str]) -> str:
        return pool[self._rng.randrange(len(pool))]

    def _state(self, name: str) -> str:
        self.disclosed.add(name)
        value = self.goal[name]
        sentence = self._pick(self._by_name[name].says or GENERIC_SAYS).format(value=value)
        return sentence[0].upper() + sentence[1:]

    def _hint(self, name: str) -> str | None:
        """The partial answer for a loosely held detail not yet pinned (None: state it)."""
        if name not in self.loose or name in self.disclosed:
            return None
        value = str(self.goal[name]).lower()
        hint = next((h for h, fits in self._by_name[name].hints.items() if value in fits), None)
        if hint is None:
            return None
        again = name in self.hinted
        self.hinted.add(name)
        return f"Like I said, {_continue(hint)}" if again else hint

    def _answer(self, r: Reading, several: bool) -> str | None:
        """The reply to one reading of a slot the user holds (None: nothing to say but "okay")."""
        value = str(self.goal[r.slot]).lower()
        if r.kind == "open":
            return self._hint(r.slot) or self._state(r.slot)
        if r.kind == "values":
            return self._state(r.slot) if value in r.values else f"None of those. {self._state(r.slot)}"
        if r.kind == "confirm":
            if r.values[0] == value:
                return f"{self._pick(YES)} {self._state(r.slot)}"
            if self._rng.random() < self.cooperativeness:
                return f"{self._pick(NO)} {self._state(r.slot)}"
            return f"No, not that {self._by_name[r.slot].aliases[0]}." if several else self._pick(NO)
        if r.kind == "assume" and r.values[0] != value and self._rng.random() < self.cooperativeness:
            sentence = self._state(r.slot)  # (drawn before the lead-in: the RNG order is part of the script)
            return self._pick(CORRECT) + _continue(sentence)
        return None

    def respond(self, dialogue: Sequence[Message], agent_message: str) -> tuple[str, bool]:
        if not self._started:
            self._started = True
            return self.request, False
        self._turns += 1
        if self._turns > self.patience:
            return f"{self._pick(GOODBYE)} {STOP}", True
        readings, indirect = self.understand(agent_message)
        held = [r for r in readings if r.slot in self.goal]
        self._off_target = 0 if held or indirect else self._off_target + 1
        several = len(readings) > 1
        parts: list[str] = []
        for r in readings:
            if r.slot not in self.goal:
                if r.asks:
                    alias = self._by_name[r.slot].aliases[0]
                    parts.append(f"I don't know about the {alias}." if several else self._pick(DONT_KNOW))
                continue
            said = self._answer(r, several)
            if said is not None:
                parts.append(said)
        pending = [s.name for s in self.slots if s.name in self.goal and s.name not in self.disclosed]
        if indirect:
            untouched = [p for p in pending if p not in {r.slot for r in readings}]
            if untouched:
                parts.append(self._hint(untouched[0]) or self._state(untouched[0]))
            elif not parts:
                parts.append(self._pick(ALL_TOLD))
        if parts:
            return " ".join(parts), False
        if readings:
            return self._pick(ACK), False
        if self.volunteer_after is not None and self._off_target >= self.volunteer_after and pending:
            self._off_target = 0
            sentence = self._state(pending[0])
            return self._pick(VOLUNTEER) + _continue(sentence), False
        if not pending:
            return self._pick(ALL_TOLD), False
        return self._pick(OFF_TARGET), False


def _continue(sentence: str) -> str:
    """A sentence continuing a lead-in ("By the way, "): its first letter in lower case, except the pronoun I.

    >>> _continue("On friday."), _continue("I'm leaving from oslo.")
    ('on friday.', "I'm leaving from oslo.")
    """
    if re.match(r"I\b", sentence):
        return sentence
    return sentence[:1].lower() + sentence[1:]
