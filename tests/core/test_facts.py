"""agentgym.grading.facts: every common rendering of a value is recognised, and no rendering of a different value is.

The issue's cases (issue 20, "Correct answers scored wrong") are here as examples; the properties draw random
values, render them in every form the module docstring promises, put each rendering in a sentence, and check the
verdict against the value and against a different one.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, settings, strategies as st

from agentgym.grading.facts import (
    ClockTime,
    DateMention,
    amounts_in,
    dates_in,
    kind_of,
    numbers_in,
    parse_number,
    parse_time,
    says_phrase,
    states,
    times_in,
)

SENTENCES = ("{}", "The answer is {}.", "It is **{}**", "`{}`", "Done: {}, as you asked.", "({})", "=> {}\n")
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")  # fmt: skip
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")  # fmt: skip
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def word(n: int) -> str:
    if n < 20:
        return WORDS[n]
    tens, unit = divmod(n, 10)
    return TENS[tens] + (f"-{WORDS[unit]}" if unit else "")


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


# -- the issue's cases ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value", "stated"),
    [
        ("The balance is 2610.5.", "2610.50", True),
        ("The balance is 2,610.50.", "2610.50", True),
        ("The balance is $2,610.50", "2610.50", True),
        ("The balance is 2610.51.", "2610.50", False),
        ("The balance is 12,610.50.", "2610.50", False),
        ("Your balance is 0.", "0.00", True),
        ("Your balance is 0.0", "0.00", True),
        ("Your balance is zero.", "0.00", True),
        ("Your balance is $0.", "0.00", True),
        ("There are 0 dollars left.", "0.00", True),
        ("Your balance is 0.01.", "0.00", False),
        ("161.5 has been refunded", "161.50", True),
        ("$161.50 has been refunded", "161.50", True),
        ("161.05 has been refunded", "161.50", False),
        ("You get $.45 back.", "0.45", True),
        ("You get 45 cents back.", "0.45", True),
        ("You get USD 0.45 back.", "0.45", True),
        ("You get $0.54 back.", "0.45", False),
        ("You get 45 dollars back.", "0.45", False),
        ("It was delivered on May 8th.", "2026-05-08", True),
        ("It was delivered on the 8th of May.", "2026-05-08", True),
        ("It was delivered on 05/08/2026.", "2026-05-08", True),
        ("It was delivered on Friday, May 8, 2026.", "2026-05-08", True),
        ("It was delivered on 8 May 2026.", "2026-05-08", True),
        ("It was delivered on May 18th.", "2026-05-08", False),
        ("It was delivered on 08/05/2026.", "2026-05-08", False),  # US order: August 5
        ("It was delivered on May 8, 2025.", "2026-05-08", False),
        ("It was delivered on Thursday, May 8.", "2026-05-08", False),  # May 8, 2026 is a Friday
        ("It starts at 8:00.", "08:00", True),
        ("It starts at 8am.", "08:00", True),
        ("It starts at 8 a.m.", "08:00", True),
        ("It starts at 08:00.", "08:00", True),
        ("It starts at 8 o'clock.", "08:00", True),
        ("It starts at 18:00.", "08:00", False),
        ("It starts at 8pm.", "08:00", False),
        ("It starts at 8.", "08:00", False),
        ("It starts at 20:00.", "20:00", True),
        ("It starts at 8pm.", "20:00", True),
        ("It starts at 8 p.m.", "20:00", True),
        ("It starts at 8:00.", "20:00", False),  # H:MM without am/pm is 24-hour
        ("It starts at noon.", "12:00", True),
    ],
)
def test_issue_cases(text, value, stated):
    assert states(text, value) is stated


def test_kinds_and_explicit_kinds():
    assert [kind_of(v) for v in ("2026-05-08", "08:00", "0.00", "4321", "-3.5", "Lunch with Sam", "")] == [
        "date", "time", "money", "number", "number", "text", "text"]  # fmt: skip
    assert states("card ending in 4321", "4321") and not states("card ending in 4322", "4321")
    assert states("It is 2610.5", Decimal("2610.50"), "money") and states("at 8am", dt.time(8, 0))
    assert states("on May 8", dt.date(2026, 5, 8)) and states("x is 3", 3) and not states("x is 3", 4)
    assert states("it is 4321", "4321", "text") and not states("it is 43210", "4321", "text")
    for bad_kind in ("colour", ""):
        with pytest.raises(ValueError, match="kind must be"):
            states("x", "1", bad_kind)  # type: ignore[arg-type]
    for value, kind, error in (("May 8", "date", ValueError), ("8am", "time", ValueError), ("x", "money", ValueError),
                               (None, "number", TypeError), (object(), None, TypeError)):  # fmt: skip
        with pytest.raises(error):
            states("x", value, kind)


def test_text_facts_are_whole_phrases():
    assert says_phrase("It is already PROCESSED.", "processed")
    assert not says_phrase("It is unprocessed.", "processed") and not says_phrase("at 15:00", "15")
    assert says_phrase("Titles: Lunch  with\nSam, Dentist", "Lunch with Sam")
    assert says_phrase("It is at `/home/ann/docs/todo.txt`.", "/home/ann/docs/todo.txt")
    assert not says_phrase("/home/ann/docs/todo.txt", "/home/ann/docs") and not says_phrase("x", "   ")
    assert says_phrase("It says \u2018alpha river\u2019", "alpha river")


def test_parsers_skip_what_is_not_their_kind():
    assert numbers_in("on 2026-05-08 at 08:00, order #W1234567, 8am, the 8th, pages 3-5, 1/2") == []
    assert numbers_in("1,2,3 or 2610,50") == []  # not thousands groups: no number is read, so none is misread
    assert amounts_in("one more thing: I have two questions") == []  # a number word needs a currency word
    assert dates_in("May 32, February 30, 13/13/2026, 5/8, may 2026") == []
    assert dates_in("February 29") == [DateMention(2, 29)]  # a date without a year can be a leap day
    assert times_in("at 8, 24:00, 3.30, 8 amazing, 2026-05-08") == []
    assert times_in("2-3pm, 08:00-09:30, 2026-05-08T10:00") == [ClockTime(15, 0), ClockTime(8, 0), ClockTime(9, 30),
                                                                ClockTime(10, 0)]  # fmt: skip
    assert dates_in("2026-05-08T10:00") == [DateMention(5, 8, 2026)]
    assert parse_number("1,000.") == Decimal("1000") and parse_number("1,000 and 2") is None
    assert parse_time("half past 8") == ClockTime(8, 30, half_known=False) and parse_time("") is None


# -- properties ------------------------------------------------------------------------------------------------------
CENTS = st.integers(0, 10**9)


def money_renderings(cents: int) -> list[str]:
    v = Decimal(cents) / 100
    out = [f"{v:.2f}", f"{v:,.2f}", f"${v:,.2f}", f"$ {v:.2f}", f"USD {v:.2f}", f"{v:.2f} USD", f"{v:,.2f} dollars"]
    short = f"{v:f}".rstrip("0").rstrip(".") if "." in f"{v:f}" else f"{v:f}"
    out += [short, f"${short}", f"-{v:.2f}"]
    if cents < 100:
        out += [f"{cents} cents", f"${v:.2f}"[0] + f".{cents:02d}", f"{word(cents)} cents"]
    if cents % 100 == 0 and cents // 100 < 100:
        out += [f"{word(cents // 100)} dollars", f"{cents // 100}"]
    if cents == 0:
        out += ["zero", "$0", "0", "0.0"]
    return out


@settings(max_examples=300, deadline=None)
@given(cents=CENTS, other=CENTS, template=st.sampled_from(SENTENCES))
def test_money_every_rendering_counts_and_no_other_value_does(cents, other, template):
    value = f"{Decimal(cents) / 100:.2f}"
    for r in money_renderings(cents):
        assert states(template.format(r), value), (r, value)
    if other != cents:
        for r in money_renderings(other):
            assert not states(template.format(r), value), (r, value)


def number_renderings(n: Decimal) -> list[str]:
    plain = f"{n:f}"
    out = [plain, f"{n:,f}", f"**{plain}**", f"`{plain}`"]
    if n == n.to_integral_value() and n >= 0:
        out += [f"{n:.2f}", f"{int(n):,}"]
        if n < 100:
            out.append(word(int(n)))
    return out


NUMBERS = st.decimals(min_value=-(10**12), max_value=10**12, places=3, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(n=NUMBERS, other=NUMBERS, template=st.sampled_from(SENTENCES))
def test_numbers_every_rendering_counts_and_no_other_value_does(n, other, template):
    for r in number_renderings(n):
        assert states(template.format(r), n, "number"), r
        assert parse_number(r) == n, r
    if other != n:
        for r in number_renderings(other):
            assert not states(template.format(r), n, "number"), r


def date_renderings(d: dt.date, *, with_year_only: bool = False) -> list[str]:
    month, wd = MONTHS[d.month - 1], WEEKDAYS[d.weekday()]
    out = [d.isoformat(), f"{d:%m/%d/%Y}", f"{d.month}/{d.day}/{d.year}", f"{d.month}-{d.day}-{d.year}",
           f"{month} {d.day}, {d.year}", f"{d.day} {month} {d.year}", f"{wd}, {month} {ordinal(d.day)}, {d.year}",
           f"the {ordinal(d.day)} of {month} {d.year}", f"{d.year}/{d.month:02d}/{d.day:02d}"]  # fmt: skip
    if not with_year_only:
        out += [f"{month} {d.day}", f"{month} {ordinal(d.day)}", f"{ordinal(d.day)} of {month}",
                f"{d.day} {month.lower()}", f"{month[:3]}. {d.day}", f"{wd} {month} {d.day}",
                f"{wd[:3]}, {month.upper()} the {ordinal(d.day)}"]  # fmt: skip
    return out


DATES = st.dates(min_value=dt.date(1900, 1, 1), max_value=dt.date(2200, 12, 31))


@settings(max_examples=300, deadline=None)
@given(d=DATES, other=DATES, template=st.sampled_from(SENTENCES))
def test_dates_every_rendering_counts_and_no_other_value_does(d, other, template):
    for r in date_renderings(d):
        assert states(template.format(r), d.isoformat()), r
    if other != d:  # a rendering without a year states the day in every year: only those with one can differ
        same_day = (other.month, other.day) == (d.month, d.day)
        for r in date_renderings(other, with_year_only=same_day):
            assert not states(template.format(r), d.isoformat()), r


def test_day_first_locale():
    d = "2026-08-05"
    assert states("on 05/08/2026", d, day_first=True) and not states("on 05/08/2026", d)
    assert states("on 25/12/2026", "2026-12-25") and states("on 25/12/2026", "2026-12-25", day_first=True)


def time_renderings(t: dt.time) -> tuple[list[str], list[str]]:
    """(renderings that say the half of the day, renderings that do not)."""
    h12, half = t.hour % 12 or 12, ("am" if t.hour < 12 else "pm")
    exact = [f"{t:%H:%M}", f"{t.hour}:{t.minute:02d}", f"{t:%H:%M}:00", f"{h12}:{t.minute:02d}{half}",
             f"{h12}:{t.minute:02d} {half.upper()}", f"{h12}:{t.minute:02d} {half[0]}.m."]  # fmt: skip
    loose = []
    if t.minute == 0:
        exact += [f"{h12}{half}", f"{h12} {half[0]}.m.", f"{h12} o'clock {'in the morning' if half == 'am' else 'pm'}"]
        loose.append(f"{h12} o'clock")
        if t.hour == 12:
            exact.append("noon")
        if t.hour == 0:
            exact.append("midnight")
    if t.minute == 30:
        loose.append(f"half past {h12}")
    return exact, loose


TIMES = st.builds(dt.time, st.integers(0, 23), st.sampled_from([0, 0, 15, 30, 45, 5, 59]))


@settings(max_examples=300, deadline=None)
@given(t=TIMES, other=TIMES, template=st.sampled_from(SENTENCES))
def test_times_every_rendering_counts_and_no_other_value_does(t, other, template):
    value = f"{t:%H:%M}"
    exact, loose = time_renderings(t)
    for r in exact + loose:
        assert states(template.format(r), value), r
        assert parse_time(r) is not None and parse_time(r).matches(t), r
    if other != t:
        exact, loose = time_renderings(other)
        same_clock = (other.hour % 12, other.minute) == (t.hour % 12, t.minute)  # "8 o'clock" is both halves
        for r in exact + ([] if same_clock else loose):
            assert not states(template.format(r), value), r


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=80), value=st.sampled_from(["2610.50", "0.00", "2026-05-08", "08:00", "42", "done"]))
def test_any_text_is_total(text, value):
    assert isinstance(states(text, value), bool)
    numbers_in(text), amounts_in(text), dates_in(text), times_in(text)
