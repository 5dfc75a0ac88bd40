"""Facts stated in free text, compared by value: numbers, amounts of money, dates and times of day.

An env that checks what an agent told the user ("the new balance is 2,610.50", "refunded $.45", "it was delivered
on May 8th", "it starts at 8am") asks whether the text *states* a value, whatever way it is written. A correct value
in any common form counts; a different value in any form does not. Every env that checks facts told uses this
module, so the forms accepted are the same everywhere.

* ``numbers_in(text)``: the numbers a text states (``2,610.50``, ``2610.5``, ``.45``, ``-3``, ``1e6``, ``**42**``,
  and the number words ``zero`` .. ``ninety-nine``), as ``Decimal``. A number that is part of a date, a time, a
  range, an id or a word (``2026-05-08``, ``08:00``, ``3-5``, ``W1234567``, ``8am``, ``8th``) is not one of them.
* ``amounts_in(text)``: the amounts of money a text states: the numbers above, with or without a currency sign or
  word (``$0``, ``0 dollars``, ``USD 12``, ``12 usd``), ``45 cents`` (0.45); a number word counts as an amount
  with a currency word after it (``five dollars``) or when it is ``zero``. Amounts compare by magnitude: the sign of
  ``-4.50`` says which way the money went, which the words around it say too.
* ``dates_in(text)``: the calendar dates a text states (``2026-05-08``, ``May 8``, ``May 8th``, ``Friday, May 8,
  2026``, ``8 May 2026``, ``the 8th of May``, ``Jan. 5``, ``05/08/2026``). A date without a year matches that day
  of any year; a weekday stated with it must be that date's. Numeric ``a/b/yyyy`` dates are read month first (the
  US order, ``day_first=False``, which CustomerService and ToolUse use) or day first (``day_first=True``); a form
  only one order can read (``25/12/2026``) is read that way in both.
* ``times_in(text)``: the times of day a text states: 24-hour ``08:00``, ``8:00``, ``20:00``, ``08:00:00``;
  12-hour ``8am``, ``8 a.m.``, ``8:30 pm``, ``8 in the evening``; ``noon``, ``midday``, ``midnight``; and the
  spoken ``8 o'clock``, ``half past 8``, ``quarter to 9``, which do not say the half of the day and match both
  (``8 o'clock`` is 08:00 or 20:00). ``H:MM`` without am/pm is 24-hour (``8:00`` is 08:00, not 20:00); a bare
  number (``at 8``) is not a time.
* ``states(text, value, kind)``: whether ``text`` states ``value`` (``kind``: ``number``, ``money``, ``date``,
  ``time`` or ``text``; ``None`` infers it from the value's canonical form with ``kind_of``). ``text`` facts are
  whole words or phrases, any case, any whitespace.

>>> states("The new balance is $2,610.5.", "2610.50"), states("It is 2610.51.", "2610.50")
(True, False)
>>> states("45 cents have been refunded", "0.45"), states("Your balance is zero.", "0.00")
(True, True)
>>> states("It was delivered on the 8th of May.", "2026-05-08"), states("On May 18th", "2026-05-08")
(True, False)
>>> states("It starts at 8 a.m.", "08:00"), states("It starts at 8pm.", "08:00"), states("At 8.", "08:00")
(True, False, False)
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal

Kind = Literal["number", "money", "date", "time", "text"]
#: The kinds of fact ``states`` compares.
KINDS: tuple[Kind, ...] = ("number", "money", "date", "time", "text")

# -- numbers ------------------------------------------------------------------------------------------------------
_UNITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")  # fmt: skip
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_WORD_VALUE = {**{w: i for i, w in enumerate(_UNITS)}, **_TENS}
_UNIT_WORDS = "|".join(_UNITS[1:10])
_NUMBER_WORD = re.compile(
    rf"(?<![\w-])(?:(?P<tens>{'|'.join(_TENS)})(?:[- ](?P<unit>{_UNIT_WORDS}))?|(?P<small>{'|'.join(_UNITS)}))"
    r"(?![\w-])",
    re.IGNORECASE,
)
# A numeral: not inside a word, an id, a date, a time, a range or a path; thousands separators in groups of three.
_NUMERAL = re.compile(
    r"(?<![\w.,:/])(?<!\w-)"
    r"(?P<sign>(?<![\w-])[-\u2212+])?"
    r"(?P<digits>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?P<exp>[eE][-+]?\d{1,4})?"
    r"(?![\w:/]|[.,]\d|-\d)"
)
_CURRENCY_BEFORE = re.compile(r"(?:\$|us\$|usd|€|£|eur|gbp)\s*$", re.IGNORECASE)
_CURRENCY_AFTER = re.compile(r"^\s*(?:dollars?|bucks|usd|euros?|eur|pounds?|gbp)\b", re.IGNORECASE)
_CENTS_AFTER = re.compile(r"^\s*(?:cents?\b|¢)", re.IGNORECASE)


@dataclass(frozen=True)
class Number:
    """A number a text states: its ``value``, where it stands (``start``, ``end``), and whether it was written as a
    word (``word``) and in cents (``cents``; ``value`` is then in the main unit: ``45 cents`` is 0.45)."""

    value: Decimal
    start: int
    end: int
    word: bool = False
    cents: bool = False
    currency: bool = False


def _numerals(text: str) -> list[Number]:
    out = []
    for m in _NUMERAL.finditer(text):
        digits = m.group("digits").replace(",", "")
        try:
            value = Decimal(digits + (m.group("exp") or ""))
        except InvalidOperation:  # pragma: no cover - the pattern only lets valid literals through
            continue
        if m.group("sign") in ("-", "\u2212"):
            value = -value
        out.append(Number(value, m.start(), m.end()))
    for m in _NUMBER_WORD.finditer(text):
        if m.group("small"):
            word_value = _WORD_VALUE[m.group("small").lower()]
        else:
            unit = _WORD_VALUE[m.group("unit").lower()] if m.group("unit") else 0
            word_value = _TENS[m.group("tens").lower()] + unit
        out.append(Number(Decimal(word_value), m.start(), m.end(), word=True))
    return sorted(out, key=lambda n: n.start)


def numbers_in(text: str, *, words: bool = True) -> list[Decimal]:
    """The numbers ``text`` states, in order (see the module docstring); ``words=False`` skips number words.

    >>> numbers_in("Paid 2,610.50 (was 2610.5), then **42** and .5 on 2026-05-08 at 08:00; item W1234567")
    [Decimal('2610.50'), Decimal('2610.5'), Decimal('42'), Decimal('0.5')]
    >>> numbers_in("twenty-five or six, -3 and 1e3"), numbers_in("one", words=False)
    ([Decimal('25'), Decimal('6'), Decimal('-3'), Decimal('1E+3')], [])
    """
    return [n.value for n in _numerals(text) if words or not n.word]


def parse_number(text: str) -> Decimal | None:
    """The number that ``text`` is, alone (surrounding whitespace, markdown ``*``/`````, a trailing ``.`` allowed),
    or None.

    >>> parse_number(" **3,464,999,702** "), parse_number("twelve"), parse_number("12 apples")
    (Decimal('3464999702'), Decimal('12'), None)
    """
    core = _bare(text)
    found = _numerals(core)
    if len(found) == 1 and found[0].start == 0 and found[0].end == len(core):
        return found[0].value
    return None


def _money(text: str) -> list[Number]:
    out = []
    for n in _numerals(text):
        before, after = text[max(0, n.start - 4) : n.start], text[n.end : n.end + 12]
        cents = bool(_CENTS_AFTER.match(after))
        currency = cents or bool(_CURRENCY_BEFORE.search(before)) or bool(_CURRENCY_AFTER.match(after))
        if n.word and not currency and n.value != 0:
            continue  # "one more thing" states no amount; "zero" and "five dollars" do
        value = abs(n.value) / 100 if cents else abs(n.value)
        out.append(Number(value, n.start, n.end, n.word, cents, currency))
    return out


def amounts_in(text: str) -> list[Decimal]:
    """The amounts of money ``text`` states, in order, as magnitudes in the main unit (see the module docstring).

    >>> amounts_in("Refunded $.45, i.e. 45 cents, of USD 12; balance zero, one more thing, five dollars, -4.50")
    [Decimal('0.45'), Decimal('0.45'), Decimal('12'), Decimal('0'), Decimal('5'), Decimal('4.50')]
    """
    return [n.value for n in _money(text)]


# -- dates --------------------------------------------------------------------------------------------------------
_MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
                "november", "december")  # fmt: skip
_MONTHS = {
    **{m: i for i, m in enumerate(_MONTH_NAMES, 1)},
    **{m[:3]: i for i, m in enumerate(_MONTH_NAMES, 1)},
    "sept": 9,
}
_WEEKDAYS = {
    **{d: i for i, d in enumerate(["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"])},
    **{d: i for i, d in enumerate(["mon", "tue", "wed", "thu", "fri", "sat", "sun"])},
    **{"tues": 1, "weds": 2, "thur": 3, "thurs": 3},
}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_WEEKDAY = r"(?:(?P<weekday>" + "|".join(sorted(_WEEKDAYS, key=len, reverse=True)) + r")\.?,?\s+)?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(?P<year>\d{4}))?"
_DATE_FORMS = (
    # 2026-05-08, 2026/05/08
    re.compile(
        r"(?<![\w.:/-])(?P<year>\d{4})(?P<sep>[-/])(?P<month>\d{1,2})(?P=sep)(?P<day>\d{1,2})(?!(?!T\d)[\w:/-]|\.\d)"
    ),
    # 05/08/2026 or 5-8-2026 (the locale's order), and 05/08/26 is not read (two-digit years are too ambiguous)
    re.compile(r"(?<![\w.:/-])(?P<a>\d{1,2})(?P<sep>[/-])(?P<b>\d{1,2})(?P=sep)(?P<year>\d{4})(?![\w:/-]|\.\d)"),
    # (Friday,) May 8(th)(, 2026), May the 8th
    re.compile(rf"(?<![\w-]){_WEEKDAY}{_MONTH}\s+(?:the\s+)?{_DAY}(?![\w:]|\.\d){_YEAR}(?![\w:])", re.IGNORECASE),
    # (Friday,) (the) 8(th) (of) May(,) (2026)
    re.compile(rf"(?<![\w-]){_WEEKDAY}(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH}(?![\w]){_YEAR}(?![\w:])", re.IGNORECASE),
)


@dataclass(frozen=True)
class DateMention:
    """A date a text states: ``year`` and ``weekday`` (Monday = 0) are None when the text leaves them out."""

    month: int
    day: int
    year: int | None = None
    weekday: int | None = None

    def matches(self, date: dt.date) -> bool:
        """Whether this mention can be ``date``: the same month and day, and the year and weekday if stated."""
        return (
            (self.month, self.day) == (date.month, date.day)
            and self.year in (None, date.year)
            and self.weekday in (None, date.weekday())
        )


def _valid(year: int | None, month: int, day: int) -> bool:
    try:
        dt.date(2024 if year is None else year, month, day)  # 2024: a leap year, so February 29 is a date
    except ValueError:
        return False
    return True


def dates_in(text: str, *, day_first: bool = False) -> list[DateMention]:
    """The dates ``text`` states, in order (see the module docstring for the forms and ``day_first``).

    >>> dates_in("Delivered Friday, May 8th, 2026 (2026-05-08), not 8 May or 05/08/2026")
    [DateMention(month=5, day=8, year=2026, weekday=4), DateMention(month=5, day=8, year=2026, weekday=None), \
DateMention(month=5, day=8, year=None, weekday=None), DateMention(month=5, day=8, year=2026, weekday=None)]
    >>> dates_in("05/08/2026", day_first=True), dates_in("May 32, Feb 30 and 5/8")
    ([DateMention(month=8, day=5, year=2026, weekday=None)], [])
    """
    found: list[tuple[int, int, DateMention]] = []
    for form in _DATE_FORMS:
        for m in form.finditer(text):
            groups = m.groupdict()
            year = int(groups["year"]) if groups.get("year") else None
            if "a" in groups:
                a, b = int(groups["a"]), int(groups["b"])
                month, day = (b, a) if (day_first and b <= 12) or a > 12 else (a, b)
            else:
                month = _MONTHS[groups["month"].lower()] if not groups["month"].isdigit() else int(groups["month"])
                day = int(groups["day"])
            weekday = _WEEKDAYS[groups["weekday"].lower()] if groups.get("weekday") else None
            if _valid(year, month, day):
                found.append((m.start(), m.end(), DateMention(month, day, year, weekday)))
    kept: list[tuple[int, int, DateMention]] = []
    for start, end, mention in sorted(found, key=lambda f: (f[0], -(f[1] - f[0]))):
        if not any(s < end and start < e for s, e, _ in kept):  # overlapping readings: the longest from the left
            kept.append((start, end, mention))
    return [m for _, _, m in kept]


# -- times --------------------------------------------------------------------------------------------------------
_AM = r"(?:a\.\s?m\.?|am\b|in the morning\b)"
_PM = r"(?:p\.\s?m\.?|pm\b|in the afternoon\b|in the evening\b|at night\b|tonight\b)"
_HALF = rf"(?:\s*(?:(?P<am>{_AM})|(?P<pm>{_PM})))?"
_TIME_FORMS = (
    # 08:00, 8:00, 20:00:00, 8:30 pm
    re.compile(
        rf"(?:(?<=\dT)|(?<![\w.:/]))(?P<hour>[01]?\d|2[0-3])(?P<sep>[:.])(?P<minute>[0-5]\d)(?::00)?(?!\d|[:.]\d)"
        rf"{_HALF}(?!\w)",
        re.IGNORECASE,
    ),
    # 8am, 8 p.m., 8 in the evening, 8 o'clock (in the evening)
    re.compile(
        rf"(?<![\w.:/,])(?P<hour>1[0-2]|0?[1-9])(?:\s*(?P<oclock>o['\u2019]?\s?clock))?(?:\s*(?:(?P<am>{_AM})|"
        rf"(?P<pm>{_PM})))",
        re.IGNORECASE,
    ),
    re.compile(r"(?<![\w.:/,])(?P<hour>1[0-2]|0?[1-9])\s*(?P<oclock>o['\u2019]?\s?clock)\b", re.IGNORECASE),
    # half past 8, quarter past 8, quarter to 9 (in the evening)
    re.compile(
        rf"(?<![\w-])(?P<spoken>half past|(?:a\s+)?quarter past|(?:a\s+)?quarter to)\s+(?P<hour>1[0-2]|0?[1-9]|"
        rf"{'|'.join(_UNITS[1:13])})(?![\w:]){_HALF}",
        re.IGNORECASE,
    ),
    re.compile(r"(?<![\w-])(?:12\s+)?(?P<named>noon|midday|midnight)(?![\w-])", re.IGNORECASE),
)


@dataclass(frozen=True)
class ClockTime:
    """A time of day a text states, ``hour`` (0-23) and ``minute``; ``half_known=False`` when the text does not say
    which half of the day (``8 o'clock``): it then matches that time in both halves."""

    hour: int
    minute: int
    half_known: bool = True

    def matches(self, time: dt.time) -> bool:
        """Whether this mention can be ``time`` (the hour and minute; the half of the day if it is known)."""
        if self.minute != time.minute:
            return False
        return self.hour == time.hour if self.half_known else self.hour % 12 == time.hour % 12


def _hour_of(word: str) -> int:
    return int(word) if word.isdigit() else _WORD_VALUE[word.lower()]


def _times(text: str) -> list[tuple[int, int, ClockTime]]:
    found: list[tuple[int, int, ClockTime]] = []
    for form in _TIME_FORMS:
        for m in form.finditer(text):
            g = m.groupdict()
            if g.get("named"):
                hour = 0 if g["named"].lower() == "midnight" else 12
                found.append((m.start(), m.end(), ClockTime(hour, 0)))
                continue
            half = "am" if g.get("am") else "pm" if g.get("pm") else None
            if g.get("sep") == "." and half is None:
                continue  # 3.30 alone is a number; 3.30 pm is a time
            hour = _hour_of(g["hour"])
            minute = int(g["minute"]) if g.get("minute") is not None else 0
            spoken = (g.get("spoken") or "").lower()
            if spoken.startswith("half"):
                minute = 30
            elif "past" in spoken:
                minute = 15
            elif spoken:  # a quarter to 9
                hour, minute = (hour - 1) % 12 or 12, 45
            if half is not None:
                if not 1 <= hour <= 12:
                    continue  # 20:00 pm is not a time
                mention = ClockTime(hour % 12 + (12 if half == "pm" else 0), minute)
            elif g.get("oclock") or spoken:
                mention = ClockTime(hour % 12, minute, half_known=False)
            else:
                mention = ClockTime(hour, minute)
            found.append((m.start(), m.end(), mention))
    kept: list[tuple[int, int, ClockTime]] = []
    for start, end, mention in sorted(found, key=lambda f: (f[0], -(f[1] - f[0]))):
        if not any(s < end and start < e for s, e, _ in kept):  # overlapping readings: the longest from the left
            kept.append((start, end, mention))
    return kept


def times_in(text: str) -> list[ClockTime]:
    """The times of day ``text`` states, in order (see the module docstring).

    >>> [(t.hour, t.minute) for t in times_in("08:00, 8:30pm, 8 a.m., noon, half past 3, 20:00:00")]
    [(8, 0), (20, 30), (8, 0), (12, 0), (3, 30), (20, 0)]
    >>> times_in("at 8, on 2026-05-08, 3.5 km, 3.30"), times_in("8 o'clock")
    ([], [ClockTime(hour=8, minute=0, half_known=False)])
    """
    return [t for _, _, t in _times(text)]


def _bare(text: str) -> str:
    """``text`` without surrounding whitespace, markdown emphasis or code marks, and a final full stop."""
    core = text.strip().strip("*`_ \n")
    return core[:-1].rstrip() if core.endswith(".") and not core.lower().endswith(("a.m.", "p.m.")) else core


def parse_time(text: str) -> ClockTime | None:
    """The time of day that ``text`` is, alone (surrounding whitespace, markdown, a final ``.`` allowed), or None.

    >>> parse_time("**17:00**"), parse_time("5 pm."), parse_time("at 17:00"), parse_time("17")
    (ClockTime(hour=17, minute=0, half_known=True), ClockTime(hour=17, minute=0, half_known=True), None, None)
    """
    core = _bare(text)
    found = _times(core)
    if len(found) == 1 and found[0][0] == 0 and found[0][1] == len(core):
        return found[0][2]
    return None


# -- text ---------------------------------------------------------------------------------------------------------
def _clean(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    return " ".join(text.split())


def says_phrase(text: str, phrase: str) -> bool:
    """Whether ``text`` states ``phrase`` as a whole word or phrase: any case, any whitespace, not inside a longer
    word, number, time or path (``15`` is not in ``15:00``, ``/home/a`` is not in ``/home/a/b``).

    >>> says_phrase("It is at /home/ann/docs/todo.txt.", "/home/ann/docs/todo.txt"), says_phrase("doc2", "doc")
    (True, False)
    """
    words = _clean(phrase).lower()
    if not words:
        return False
    pattern = rf"(?<![\w-])(?<!\d[:.]){re.escape(words)}(?![\w-]|[:.]\d|/\w)"
    return re.search(pattern, _clean(text).lower()) is not None


# -- facts --------------------------------------------------------------------------------------------------------
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_HHMM = re.compile(r"\d{2}:\d{2}")
_MONEY = re.compile(r"-?\d+\.\d{2}")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def kind_of(value: str) -> Kind:
    """The kind of a fact from its canonical form: ``2026-05-08`` a date, ``08:00`` a time, ``2610.50`` (two
    decimals) money, ``42`` or ``3.5`` a number, anything else text.

    >>> [kind_of(v) for v in ("2026-05-08", "08:00", "2610.50", "4321", "processed")]
    ['date', 'time', 'money', 'number', 'text']
    """
    v = value.strip()
    if _ISO_DATE.fullmatch(v):
        return "date"
    if _HHMM.fullmatch(v):
        return "time"
    if _MONEY.fullmatch(v):
        return "money"
    if _NUMBER.fullmatch(v):
        return "number"
    return "text"


def _as_decimal(value: object) -> Decimal:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"a number or money fact must be a number or a numeric string, got {value!r}")
    try:
        return Decimal(str(value).replace(",", "").lstrip("$").strip())
    except InvalidOperation:
        raise ValueError(f"not a number: {value!r}") from None


def _as_date(value: object) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"a date fact is written YYYY-MM-DD, got {value!r}") from None
    raise TypeError(f"a date fact must be a date or a YYYY-MM-DD string, got {value!r}")


def _as_time(value: object) -> dt.time:
    if isinstance(value, dt.time):
        return value
    if isinstance(value, str):
        try:
            return dt.time.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"a time fact is written HH:MM, got {value!r}") from None
    raise TypeError(f"a time fact must be a time or an HH:MM string, got {value!r}")


def states(text: str, value: object, kind: Kind | None = None, *, day_first: bool = False) -> bool:
    """Whether ``text`` states the fact ``value`` of ``kind`` (None: ``kind_of(str(value))``), in any of the forms
    the module docstring lists. ``value`` is a canonical string (``"2610.50"``, ``"2026-05-08"``, ``"08:00"``) or
    the matching Python value (``Decimal``, ``int``, ``float``, ``datetime.date``, ``datetime.time``).

    >>> states("Your balance is 0.0", "0.00"), states("Balance: $0", 0), states("It's 2610.5", 2610.5, "number")
    (True, True, True)
    >>> states("Due May 8", dt.date(2026, 5, 8)), states("Thursday, May 8", "2026-05-08")
    (True, False)
    >>> states("It is already processed.", "processed"), states("It is unprocessed.", "processed")
    (True, False)
    """
    if kind is None:
        kind = kind_of(value) if isinstance(value, str) else _kind_of_object(value)
    if kind == "money":
        target = abs(_as_decimal(value))
        return any(a == target for a in amounts_in(text))
    if kind == "number":
        target = _as_decimal(value)
        return any(n == target for n in numbers_in(text))
    if kind == "date":
        date = _as_date(value)
        return any(d.matches(date) for d in dates_in(text, day_first=day_first))
    if kind == "time":
        time = _as_time(value)
        return any(t.matches(time) for t in times_in(text))
    if kind == "text":
        return says_phrase(text, str(value))
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def _kind_of_object(value: object) -> Kind:
    if isinstance(value, dt.date):
        return "date"
    if isinstance(value, dt.time):
        return "time"
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return "number"
    raise TypeError(f"cannot infer the kind of fact {value!r}; pass kind= one of {KINDS}")
