"""How a scripted user reads an agent's message: which details each question is about, and what kind of question.

Deterministic and lexical (no model): each slot declares a *lexicon* (``Slot``: its ``aliases``, paraphrase
``cues``, its ``choices`` and their ``synonyms``), and ``Lexicon.read(message)`` returns one ``Reading`` per
(clause, slot) the message is about.

* A message is split into clauses at ``?``, ``!``, ``;``, a full stop before a space, and line breaks.
* Every term of every slot is matched as a whole word or phrase, any case (``"*"`` in a term stands for up to four
  words: ``"where * going"``; ``"{value}"`` for any way of saying one of the slot's values: ``"from {value}"``). The
  most specific match wins: where matches overlap, the longest is kept (``"how much time"`` names the duration, not
  the ``"time"`` of day inside it; ``"how large"`` names the size, not the value ``large``).
* A value several slots can take (a city for the origin and the destination) binds to the slot a ``{value}`` cue
  gives it (``"to oslo"``), else to the one slot among its candidates that the clause names (``"Is Oslo your
  destination?"``); otherwise the reading keeps every candidate (``Reading.alternatives``) and the user resolves it.
* Each (clause, slot) is classified: ``open`` (a question that names the slot and offers no value), ``values`` (a
  question that offers two or more values: an either-or or a list), ``confirm`` (a yes/no question about one value),
  ``assume`` (a statement that takes a value for granted), ``mention`` (a statement naming the slot, no value).
* A clause that names no slot but asks for more (``"anything else I should know?"``) is ``indirect``.

A clause is a question when it ends with ``?``, opens with a question word or an auxiliary (``what``, ``is``,
``would``, ...) or asks in so many words (``"tell me"``, ``"let me know"``).

>>> from agentgym.envs.user_sim.users import Slot
>>> crust = Slot("crust", ("crust",), ("thin", "thick", "stuffed"))
>>> size = Slot("size", ("size",), ("small", "large"), cues=("how large", "how big"))
>>> lex = Lexicon.of([crust, size])
>>> [(r.slot, r.kind, r.values) for r in lex.read("Thin or thick crust? And how large should it be?").readings]
[('crust', 'values', ('thin', 'thick')), ('size', 'open', ())]
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class Slot:
    """One kind of detail a user may hold, with its *lexicon* (what ``Lexicon`` reads questions with).

    A slot declares:

    * ``name``; ``aliases``: the words that name it in a question ("crust", "base");
    * ``choices``: the values it can take (a question or statement that says one is *about* this slot);
    * ``says``: the sentences the user states a value with (each with a ``{value}`` field; a generic pool when empty);
    * ``cues``: paraphrases that ask about it without its name ("how large", "where * going": ``*`` stands for up to
      four words; ``"from {value}"`` binds a value several slots share to this one);
    * ``synonyms``: other ways to say a value (``{"collected": ("pick it up", "pickup")}``); number words, weekday
      abbreviations and 12-hour times are added for every slot (``understanding.value_forms``);
    * ``hints``: partial answers, each a sentence naming no value, with the values it fits
      (``{"Something spicy.": ("thai", "indian", "mexican")}``), given for a detail the user holds loosely.

    Terms must be specific: where terms of two slots overlap in a question the longest wins, so a generic word of
    one slot ("time", "how much") loses to a longer cue of another ("how much time", "how much memory").
    """

    name: str
    aliases: tuple[str, ...]
    choices: tuple[str, ...]
    says: tuple[str, ...] = ()
    cues: tuple[str, ...] = ()
    synonyms: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)
    hints: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)


Kind = Literal["open", "values", "confirm", "assume", "mention"]

#: Words that open a question.
QUESTION_WORDS = frozenset(
    ("what", "which", "how", "where", "when", "who", "whom", "whose", "why", "would", "will", "do", "does", "did",
     "is", "are", "am", "was", "were", "should", "shall", "can", "could", "may", "might", "any", "have", "has",
     "need", "want")
)  # fmt: skip
#: Phrases that ask without a question mark.
ASKING = ("tell me", "let me know", "please specify", "please confirm", "i need to know", "i'd like to know",
          "i would like to know", "may i ask", "i wonder", "i'm wondering", "please say", "please choose",
          "please pick")  # fmt: skip
#: Phrases that ask for "anything more" without naming a detail.
INDIRECT = ("anything else", "what else", "something else", "any other", "anything more", "any more",
            "other details", "other requirements", "other preferences", "anything i should know",
            "anything i need to know", "did i miss", "have i missed", "am i missing", "i'm missing", "missing anything",
            "is that all", "is that everything", "tell me everything", "what more", "rest of the details",
            "anything to add", "else i should know", "else should i know", "else do i need", "tell me more",
            "more details", "more about it")  # fmt: skip

#: Words before a term that is both a slot's name and one of its values ("delivery") that make it the name.
DETERMINERS = ("the", "your", "a", "what", "which", "this", "that", "any")
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                 "twelve")  # fmt: skip
_DAYS = {"monday": ("mon",), "tuesday": ("tue", "tues"), "wednesday": ("wed",), "thursday": ("thu", "thur", "thurs"),
         "friday": ("fri",), "saturday": ("sat",), "sunday": ("sun",)}  # fmt: skip
_TIME = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


def value_forms(value: str) -> tuple[str, ...]:
    """The common ways of writing ``value`` besides itself: number words from two up ("one" is left out: "which
    one?"), weekday abbreviations, and a ``HH:MM`` time in 12-hour forms ("8pm", "8:30 pm", "half past eight").

    >>> value_forms("20:00")
    ('8pm', '8 pm', '8:00pm', '8:00 pm', "8 o'clock", "eight o'clock", 'eight pm')
    >>> value_forms("09:30"), value_forms("6")[:1], value_forms("friday")
    (('9:30am', '9:30 am', '9:30', 'half past nine', 'nine thirty'), ('six',), ('fri',))
    """
    v = value.lower()
    if v.isdigit() and 2 <= int(v) < len(_NUMBER_WORDS):
        return (_NUMBER_WORDS[int(v)],)
    if v in _DAYS:
        return _DAYS[v]
    m = _TIME.match(v)
    if m is None:
        return ()
    hour, minute = int(m.group(1)), m.group(2)
    h12 = hour % 12 or 12
    half = "am" if hour < 12 else "pm"
    forms = [f"{h12}{half}", f"{h12} {half}"] if minute == "00" else []
    forms += [f"{h12}:{minute}{half}", f"{h12}:{minute} {half}"]
    if hour < 10:
        forms.append(f"{hour}:{minute}")  # 09:30 is also written 9:30
    word = _NUMBER_WORDS[h12] if h12 < len(_NUMBER_WORDS) else str(h12)
    if minute == "00":
        forms += [f"{h12} o'clock", f"{word} o'clock", f"{word} {half}"]
    elif minute == "30":
        forms += [f"half past {word}", f"{word} thirty"]
    return tuple(forms)


def _phrase(term: str) -> str:
    """A term as a regex body: whole words, ``*`` = up to four words between."""
    parts = [re.escape(p.strip()) for p in term.lower().split("*")]
    return r"\s+(?:[\w'-]+\s+){0,4}".join(p for p in parts if p) if len(parts) > 1 else parts[0]


def _bounded(body: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-])(?<!\d[:.]){body}(?![\w-]|[:.]\d)")


@dataclass(frozen=True)
class Term:
    """One compiled entry of a lexicon: it names ``slot`` (an alias or cue), or says ``value`` of it, or both
    (a ``{value}`` cue)."""

    slot: str
    value: str | None
    names: bool
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class Hit:
    """Where terms matched: one span, and each (slot, value, names) read there (several when a value is shared)."""

    start: int
    end: int
    reads: tuple[tuple[str, str | None, bool], ...]


@dataclass(frozen=True)
class Clause:
    """One question or statement of a message: its text (lower case), span, and whether it asks."""

    text: str
    start: int
    end: int
    question: bool


@dataclass(frozen=True)
class Reading:
    """What one clause says about one slot: ``kind`` (see the module docstring) and the values it names, in order.
    ``alternatives`` lists every slot a shared value could belong to when the clause did not say which (then
    ``slot`` is the first)."""

    slot: str
    kind: Kind
    values: tuple[str, ...]
    clause: int
    alternatives: tuple[str, ...] = ()

    @property
    def asks(self) -> bool:
        """Whether the reading asks the user something about the slot."""
        return self.kind in ("open", "values", "confirm")


@dataclass(frozen=True)
class Understanding:
    """A message as the user reads it: the readings in order, the clauses, and the clauses that ask for more
    without naming a detail (``indirect``)."""

    readings: tuple[Reading, ...]
    clauses: tuple[Clause, ...]
    indirect: tuple[int, ...]

    @property
    def slots(self) -> list[str]:
        """The slots the message is about, in order (each once)."""
        return list(dict.fromkeys(r.slot for r in self.readings))


def split_clauses(message: str) -> list[Clause]:
    """The clauses of ``message`` (lower case; ``a.m.``/``p.m.`` read as ``am``/``pm``).

    >>> [(c.text, c.question) for c in split_clauses("Thai food then. Which day?  Tell me the time")]
    [('thai food then.', False), ('which day?', True), ('tell me the time', True)]
    """
    text = re.sub(r"\b([ap])\.m\.", r"\1m", message.lower())
    out: list[Clause] = []
    for m in re.finditer(r"[^?!;\n]+?(?:[?!;]+|\.(?=\s|$)|\n|$)", text):
        raw = m.group(0)
        body = raw.strip()
        if not body.strip(".?!; "):
            continue
        start = m.start() + (len(raw) - len(raw.lstrip()))
        words = re.findall(r"[a-z']+", body)
        question = body.endswith("?") or bool(words and words[0] in QUESTION_WORDS)
        question = question or any(re.search(rf"\b{re.escape(a)}\b", body) for a in ASKING)
        out.append(Clause(body, start, start + len(body), question))
    return out


def _normalise(message: str) -> str:
    return re.sub(r"\b([ap])\.m\.", r"\1m", message.lower())


class Lexicon:
    """The compiled terms of a domain's slots; ``read(message)`` understands a message (module docstring)."""

    def __init__(self, terms: Sequence[Term], slot_order: Sequence[str]) -> None:
        self.terms = tuple(terms)
        self.slot_order = tuple(slot_order)

    @classmethod
    def of(cls, slots: Iterable[Slot]) -> Lexicon:
        """The lexicon of ``slots`` (see ``Slot`` for what each declares)."""
        terms: list[Term] = []
        order: list[str] = []
        for slot in slots:
            order.append(slot.name)
            forms = {c: forms_of(slot, c) for c in slot.choices}
            for phrase in (*slot.aliases, *slot.cues):
                if "{value}" not in phrase:
                    terms.append(Term(slot.name, None, True, _bounded(_phrase(phrase))))
                    continue
                head, _, tail = phrase.partition("{value}")
                for choice, fs in forms.items():
                    said = "|".join(re.escape(f) for f in sorted(fs, key=len, reverse=True))
                    body = (_phrase(head.strip()) + r"\s+" if head.strip() else "") + f"(?:{said})"
                    body += r"\s+" + _phrase(tail.strip()) if tail.strip() else ""
                    terms.append(Term(slot.name, choice, True, _bounded(body)))
            for choice, fs in forms.items():
                said = "|".join(re.escape(f) for f in sorted(fs, key=len, reverse=True))
                terms.append(Term(slot.name, choice, False, _bounded(f"(?:{said})")))
        return cls(terms, order)

    def hits(self, text: str) -> list[Hit]:
        """Every span the terms match in ``text`` (lower case), overlaps resolved longest first."""
        spans: dict[tuple[int, int], list[tuple[str, str | None, bool]]] = {}
        for term in self.terms:
            for m in term.pattern.finditer(text):
                read = (term.slot, term.value, term.names)
                spans.setdefault((m.start(), m.end()), [])
                if read not in spans[(m.start(), m.end())]:
                    spans[(m.start(), m.end())].append(read)
        kept: list[Hit] = []  # non-overlapping, sorted by start
        starts: list[int] = []
        for (start, end), reads in sorted(spans.items(), key=lambda kv: (kv[0][0] - kv[0][1], kv[0][0])):
            i = bisect.bisect_left(starts, start)
            if (i < len(kept) and kept[i].start < end) or (i > 0 and kept[i - 1].end > start):
                continue
            kept.insert(i, Hit(start, end, tuple(reads)))
            starts.insert(i, start)
        return kept

    def read(self, message: str) -> Understanding:
        """The readings of ``message`` (see the module docstring)."""
        text = _normalise(message)
        clauses = split_clauses(message)
        hits = self.hits(text)
        starts = [h.start for h in hits]
        readings: list[Reading] = []
        indirect: list[int] = []
        for ci, clause in enumerate(clauses):
            lo, hi = bisect.bisect_left(starts, clause.start), bisect.bisect_left(starts, clause.end)
            inside = [h for h in hits[lo:hi] if h.end <= clause.end]
            named = {s for h in inside for s, v, names in h.reads if names and v is None}
            values: dict[str, list[str]] = {}
            order: dict[str, int] = {}
            shared: dict[str, tuple[str, ...]] = {}
            for h in inside:
                bound = [(s, v) for s, v, names in h.reads if v is not None and names]  # a {value} cue
                said = bound or [(s, v) for s, v, _ in h.reads if v is not None]
                dual = {s for s, v, _ in h.reads if v is None} & {s for s, _ in said}
                if dual and not bound and re.search(rf"\b(?:{'|'.join(DETERMINERS)})\s+$", text[: h.start]):
                    said = []  # "What delivery ...?", "Is the delivery ...": the word names the slot, not a value
                if not said:
                    for s, _, _ in h.reads:
                        order.setdefault(s, h.start)
                    continue
                candidates = list(dict.fromkeys(s for s, _ in said))
                if len(candidates) > 1:
                    picked = [s for s in candidates if s in named]
                    if len(picked) == 1:
                        candidates = picked
                slot = candidates[0]
                value = next(v for s, v in said if s == slot)
                assert value is not None
                order.setdefault(slot, h.start)
                if value not in values.setdefault(slot, []):
                    values[slot].append(value)
                if len(candidates) > 1:
                    shared[slot] = tuple(candidates)
            if clause.question and not values and len(order) > 1:
                order = _focus(order, inside, text)
            for slot in sorted(order, key=lambda s: (order[s], self.slot_order.index(s))):
                vals = tuple(values.get(slot, ()))
                if clause.question:
                    kind: Kind = "open" if not vals else "confirm" if len(vals) == 1 else "values"
                else:
                    kind = "assume" if vals else "mention"
                readings.append(Reading(slot, kind, vals, ci, shared.get(slot, ())))
            if not order and any(re.search(rf"\b{re.escape(p)}\b", clause.text) for p in INDIRECT):
                indirect.append(ci)
        return Understanding(tuple(readings), tuple(clauses), tuple(indirect))


def _focus(order: dict[str, int], inside: Sequence[Hit], text: str) -> dict[str, int]:
    """The slots an open question with several names asks about: when one is named by its question phrase ("how
    long", "which room") and the others only as objects ("the room", "your meeting"), the question phrase's slot."""
    asked = {
        s
        for h in inside
        for s, v, _ in h.reads
        if v is None and re.match(r"(how|what|which|where|when|who)\b", text[h.start : h.end])
    }
    objects = {s for h in inside for s, v, _ in h.reads
               if v is None and re.search(r"\b(the|your|this|that|a|an)\s+$", text[: h.start])}  # fmt: skip
    if len(asked) == 1 and set(order) - asked <= objects:
        return {s: i for s, i in order.items() if s in asked}
    return order


def forms_of(slot: Slot, choice: str) -> tuple[str, ...]:
    """Every way of saying ``choice`` of ``slot``: itself, its declared synonyms, then ``value_forms``."""
    declared: Mapping[str, Sequence[str]] = slot.synonyms
    out = [choice.lower(), *(s.lower() for s in declared.get(choice, ())), *value_forms(choice)]
    return tuple(dict.fromkeys(out))
