"""Answer normalisation and scoring: SQuAD normalisation, exact match, substring EM and token F1; and reading the
answer a model gave in free text.

Shared by every layer that compares a predicted answer with golden ones: the search-QA env's metrics and the reward
methods (``agentgym.rewards``). Conventions of Search-R1 / FlashRAG: a prediction is compared with every golden
answer and the best score counts.

The answer parsers of the envs (Clarify's call, TwentyQuestions' name, CodeExec's value) share the reading of free
text: ``extract_answer`` (the answer without its sentence, markdown, quotes or code fence), ``find_call`` (the one
``name(key=value, ...)`` call a text gives) and ``match_choice`` (which allowed value a written value names: any
time, number or weekday form through ``agentgym.grading.facts``, or a synonym).

>>> normalize_answer("The  Hemlo-City!")
'hemlocity'
>>> exact_match("the Hemlo City", ["Hemlo City", "Hemlo"]), sub_exact_match("It is Hemlo.", ["Hemlo City", "Hemlo"])
(1.0, 1.0)
>>> round(f1_score("Hemlo", ["Hemlo City"]), 3)
0.667
>>> score_answer("Hemlo City", "Hemlo")
{'em': 0.0, 'subem': 1.0, 'f1': 0.6666666666666666}
"""

from __future__ import annotations

import datetime as dt
import json
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

from agentgym.grading.facts import parse_number, parse_time

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lowercase, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", s).split())


def _golds(golds: str | Iterable[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else list(golds)


def exact_match(prediction: str, golds: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction equals any normalised golden answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golds(golds)))


def sub_exact_match(prediction: str, golds: str | Iterable[str]) -> float:
    """1.0 if any normalised golden answer is a substring of the normalised prediction, else 0.0.

    A golden answer that normalises to the empty string only matches an empty prediction (it would otherwise be
    a substring of everything).
    """
    pred = normalize_answer(prediction)
    for g in _golds(golds):
        gold = normalize_answer(g)
        if (gold in pred) if gold else not pred:
            return 1.0
    return 0.0


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:  # SQuAD v2 convention: both empty -> 1, one empty -> 0
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golds: str | Iterable[str]) -> float:
    """Token-overlap F1 between normalised prediction and golden answer, maximised over the golden answers."""
    pred = normalize_answer(prediction).split()
    return max((_token_f1(pred, normalize_answer(g).split()) for g in _golds(golds)), default=0.0)


def score_answer(prediction: str, golds: str | Iterable[str]) -> dict[str, float]:
    """``{"em", "subem", "f1"}`` of one prediction."""
    golds = _golds(golds)
    return {
        "em": exact_match(prediction, golds),
        "subem": sub_exact_match(prediction, golds),
        "f1": f1_score(prediction, golds),
    }


# -- extracting the answer from free text --------------------------------------------------------------------------
_FENCE = re.compile(r"```(.*?)(?:```|\Z)", re.DOTALL)
_FENCE_LANGUAGE = re.compile(r"[\w+#.-]*")
_EMPHASIS = (
    re.compile(r"(?<![\w*])\*\*(?=\S)(.+?)(?<=\S)\*\*(?![\w*])", re.DOTALL),  # **bold**
    re.compile(r"(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)", re.DOTALL),  # __bold__
    re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])", re.DOTALL),  # *italics*
    re.compile(r"(?<![\w_])_(?=[^\s_])(.+?)(?<=[^\s_])_(?![\w_])", re.DOTALL),  # _italics_
    re.compile(r"`+([^`]*?)`+"),  # `inline code`
)
#: Phrases after which the answer follows, wherever they are in the text (the last one counts).
_STRONG_LEAD_IN = re.compile(
    r"(?:\b(?:the|my|our)\s+)?\b(?:final\s+|correct\s+|best\s+)?(?:answer|result|guess)(?:\s+(?:is|would\s+be|should\s+be|="
    r")\b|\s*[:=])\s*:?|\bhere\s+(?:you\s+go|it\s+is|is\s+(?:the|my)\s+(?:final\s+)?answer|'s\s+(?:the|my)\s+"
    r"(?:final\s+)?answer)\s*[:!,.-]?",
    re.IGNORECASE,
)
#: Phrases that open an answer (only at its start): a hedge or a pointer to the thing named.
_WEAK_LEAD_IN = re.compile(
    r"(?:(?:so|then|ok|okay|well|alright|great|therefore|thus|hmm)\b[,!.]?\s+)*"
    r"(?:i\s+(?:think|believe|guess|bet)|i'm\s+(?:pretty\s+|fairly\s+|quite\s+)?sure|probably|maybe|surely|"
    r"my\s+(?:final\s+)?guess\s+is|i(?:'d|\s+would)\s+say)?\s*[:,]?\s*"
    r"(?:(?:it|that|this)(?:\s+is|'s|\s+must\s+be|\s+should\s+be|\s+has\s+to\s+be)|you(?:'re|\s+are)\s+thinking\s+of"
    r"|is\s+it)?\b\s*[:,]?\s*",
    re.IGNORECASE,
)
_WORD = re.compile(r"[^\s.!?,;:]")  # something an answer may be (a word, a number, a path such as "/")
_QUOTES = (('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"), ("«", "»"))


def extract_answer(text: str) -> str:
    """The answer a model gave in ``text``, without its wrapping: the last non-empty code fence (with or without a
    language) if there is one, what follows the last lead-in ("The answer is", "Answer:", "Final answer:", "Here you
    go:"), an opening hedge ("It is", "I think it's", "My guess is"), markdown emphasis and inline code, wrapping
    quotes, and a final period or exclamation mark. Never raises; a text with none of these comes back stripped.

    >>> extract_answer("The answer is **3464999702**.")
    '3464999702'
    >>> extract_answer("Here you go:\\n```python\\norder_pizza(size='large')\\n```")
    "order_pizza(size='large')"
    >>> extract_answer("I think it's *The Road to Velkrond*!"), extract_answer("Final answer: `17:00`")
    ('The Road to Velkrond', '17:00')
    >>> extract_answer("  42 "), extract_answer("**Answer:** \\"North\\".")
    ('42', 'North')
    """
    fenced = [_unfence(m.group(1)) for m in _FENCE.finditer(text)]
    fenced = [f for f in fenced if f.strip()]
    if fenced:
        text = fenced[-1]
    for _ in range(4):  # a few rounds: "**Answer:** `42`." unwraps in layers
        before = text
        text = _unquote(_unemphasise(text).strip())
        lead = next(reversed(list(_STRONG_LEAD_IN.finditer(text))), None)  # the last one
        if lead is not None and _WORD.search(text, lead.end()):
            text = text[lead.end() :].strip()
        weak = _WEAK_LEAD_IN.match(text)
        if weak is not None and weak.end() and _WORD.search(text, weak.end()):
            text = text[weak.end() :]
        text = text.strip().rstrip(".!").rstrip()
        text = _unquote(text)
        if text == before:
            break
    return text


def _unfence(body: str) -> str:
    """A code fence's text without its language tag (the first line, when that is one word)."""
    first, newline, rest = body.partition("\n")
    if newline and _FENCE_LANGUAGE.fullmatch(first.strip()):
        return rest
    return body


def _unemphasise(text: str) -> str:
    for pattern in _EMPHASIS:
        text = pattern.sub(r"\1", text)
    return text


def _unquote(text: str) -> str:
    """``text`` without wrapping quotes, or a quote at one end whose partner was cut off with a lead-in or a final
    period (``"The answer is 7".``)."""
    for left, right in _QUOTES:
        if len(text) >= 2 and text.startswith(left) and text.endswith(right) and left not in text[1:-1]:
            return text[1:-1].strip()
        if text.endswith(right) and text.count(right) == 1 and (left == right or left not in text):
            return text[:-1].strip()
        if text.startswith(left) and text.count(left) == 1 and (left == right or right not in text):
            return text[1:].strip()
    return text


# -- calls and choices ---------------------------------------------------------------------------------------------
_CALL_START = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")
_CALL_LIMIT = 4_000  # characters of a call's arguments looked at (a call longer than this is no answer)
_MAX_CALLS = 64  # call-like spans of one text looked at (more: no clear call)


def find_call(text: str) -> tuple[str, dict[str, str]] | None:
    """The one call ``name(key=value, ...)`` the answer ``text`` gives, as ``(name, {key: value})`` (values
    unquoted and stripped, as written), or None when there is none or several different ones. The call may stand
    alone or in a sentence ("Here you go: ...", "I'll book it: ... Enjoy!"), in a code fence, bold or inline code;
    its arguments may be ``key=value`` or ``key: value`` pairs, quoted or not, or one JSON object.

    >>> find_call("Here you go: `order_pizza(size='large', delivery=pickup)`.")
    ('order_pizza', {'size': 'large', 'delivery': 'pickup'})
    >>> find_call('```json\\nbook_table({"people": 6, "day": "thu"})\\n```')
    ('book_table', {'people': '6', 'day': 'thu'})
    >>> find_call("Which crust (thin, thick or stuffed)?"), find_call("f(a=1) or f(a=2)")
    (None, None)
    """
    for source in (extract_answer(text), text):
        found: dict[str, tuple[str, dict[str, str]]] = {}
        quoted, plain = _pairs(source, "\"'"), _pairs(source, "")
        starts = [m for m in _CALL_START.finditer(source) if m.end() - 1 in quoted or m.end() - 1 in plain]
        if len(starts) > _MAX_CALLS:  # (each is parsed: a bound on the work)
            return None
        for m in starts:
            # an unpaired quote ("time=8 o'clock") quotes nothing
            close = quoted.get(m.end() - 1, plain.get(m.end() - 1, 0))
            if close - m.end() > _CALL_LIMIT:
                continue
            args = _arguments(source[m.end() : close])
            if args is not None:
                call = (m.group(1), args)
                found.setdefault(repr(call), call)
        if len(found) == 1:
            return next(iter(found.values()))
        if len(found) > 1:
            return None
    return None


def _pairs(text: str, quotes: str) -> dict[int, int]:
    """``{index of "(": index of its ")"}`` for the parentheses of ``text`` that close (inside one of ``quotes`` a
    parenthesis does not count). One pass."""
    stack: list[int] = []
    out: dict[int, int] = {}
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in quotes:
            quote = ch
        elif ch == "(":
            stack.append(i)
        elif ch == ")" and stack:
            out[stack.pop()] = i
    return out


_PAIR = re.compile(r"""\s*["']?([A-Za-z_]\w*)["']?\s*[=:]\s*("[^"]*"|'[^']*'|[^,]*?)\s*(?:,|$)""")


def _arguments(body: str) -> dict[str, str] | None:
    """``key=value, ...`` (or one JSON object) as ``{key: value}``; None if ``body`` is not that."""
    body = body.strip()
    if body.startswith("{") and body.endswith("}"):
        try:
            obj = json.loads(body)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            return {str(k): _json_text(v) for k, v in obj.items()}
        body = body[1:-1].strip()
    args: dict[str, str] = {}
    pos = 0
    while pos < len(body):
        m = _PAIR.match(body, pos)
        if m is None or m.end() == pos:
            return None
        value = m.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        args[m.group(1)] = value.strip()
        pos = m.end()
    return args


def _json_text(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


_DAY_ABBREVIATIONS = {"mon": "monday", "tue": "tuesday", "tues": "tuesday", "wed": "wednesday", "weds": "wednesday",
                      "thu": "thursday", "thur": "thursday", "thurs": "thursday", "fri": "friday", "sat": "saturday",
                      "sun": "sunday"}  # fmt: skip
_CLOCK = re.compile(r"\d{2}:\d{2}")
_HOUR_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
_CLOCK_WORD = re.compile(r"^(?:" + "|".join(_HOUR_WORDS) + r")\b(?=\s*(?:a\.?m|p\.?m|o'clock|:))")
_CONTINENTAL = re.compile(r"^(\d{1,2})(?:h|\.)(\d{2})?$")
_HOURS = re.compile(r"(.+?)\s*(?:hours?|hrs?|h)")
_ARTICLE = re.compile(r"^(?:a|an|the|on|at|in|for|by|with)\s+")


def match_choice(
    value: str,
    choices: Sequence[str],
    synonyms: Mapping[str, Iterable[str]] | None = None,
    noise: Iterable[str] = (),
) -> str | None:
    """The one of ``choices`` that the answer ``value`` names, or None. A choice is named by itself (any case), by
    one of its ``synonyms``, or by the same value written another way: a ``HH:MM`` choice by any time form
    (``8pm``, ``8:00 p.m.``, ``20:00``; ``8 o'clock`` when only one half of the day is a choice), a number choice by
    digits or a number word (``six``; ``1 hour`` for ``60`` when ``minutes`` is a noise word), a weekday by its
    abbreviation (``thu``, ``Thurs.``). Words of ``noise`` (the slot's own words: ``crust`` in ``thin crust``) and a
    leading article or preposition (``on friday``) are ignored.

    >>> days = ("monday", "thursday")
    >>> match_choice("Thurs.", days), match_choice("8pm", ("19:00", "20:00")), match_choice("six", ("2", "6"))
    ('thursday', '20:00', '6')
    >>> match_choice("thin crust", ("thin", "thick"), noise=["crust"]), match_choice("thick", ("thin",))
    ('thin', None)
    >>> match_choice("pickup", ("delivered", "collected"), {"collected": ["pickup", "pick up"]})
    'collected'
    """
    noise_words = sorted({n.lower() for n in noise if n}, key=len, reverse=True)
    by_form: dict[str, set[str]] = {}
    for choice in choices:
        for form in (choice, *(synonyms or {}).get(choice, ())):
            by_form.setdefault(_plain(form), set()).add(choice)
    readings = [_plain(value)]
    stripped = readings[0]
    for word in noise_words:
        stripped = re.sub(rf"(?<!\w){re.escape(word)}(?!\w)", " ", stripped)
    stripped = " ".join(stripped.split())
    readings += [stripped, _ARTICLE.sub("", stripped)]
    for reading in dict.fromkeys(r for r in readings if r):
        named = by_form.get(reading, set())
        if len(named) == 1:
            return next(iter(named))
        typed = _typed_choice(reading, choices, "minutes" in noise_words)
        if typed is not None:
            return typed
    return None


def _plain(text: str) -> str:
    return " ".join(extract_answer(text).lower().replace("\u2019", "'").split()).rstrip(".")


def _typed_choice(reading: str, choices: Sequence[str], minutes: bool) -> str | None:
    """A choice ``reading`` names as a time, a number or a weekday."""
    if choices and all(_CLOCK.fullmatch(c) for c in choices):
        reading = _CLOCK_WORD.sub(lambda m: str(_HOUR_WORDS.index(m.group(0)) + 1), reading)  # "eight pm"
        said = parse_time(_CONTINENTAL.sub(lambda m: f"{m.group(1)}:{m.group(2) or '00'}", reading))  # "20h30"
        if said is None:
            return None
        named = [c for c in choices if said.matches(dt.time(int(c[:2]), int(c[3:])))]
        return named[0] if len(named) == 1 else None
    if choices and all(c.isdigit() for c in choices):
        number = parse_number(reading)
        if number is None and minutes and (h := _HOURS.fullmatch(reading)):
            hours = parse_number(h.group(1)) if h.group(1) not in ("an", "a") else Decimal(1)
            number = hours * 60 if hours is not None else None
        if number is None or not number.is_finite() or number != number.to_integral_value():
            return None
        text = str(int(number))
        return text if text in choices else None
    day = _DAY_ABBREVIATIONS.get(reading, reading.removesuffix("s"))
    return day if day in choices else None
