"""ToolUse-v0's facts check (issue 20, "Facts told"): a reply states a fact when it states its value in any common
form (``agentgym.grading.facts``), and a wrong value in any form still fails.

Each case plays a real task through the env (the gold calls, then the reply under test) and reads
``info["state_check"]["facts_told"]``; tasks are found by what their facts are, not by index."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from decimal import Decimal

import pytest

from agentgym.envs.tool_use.env import ToolUseEnv
from agentgym.envs.tool_use.tasks import make_task
from agentgym.grading.facts import kind_of


def find(world: str, pred: Callable[[str], bool]) -> tuple[int, int, str]:
    """The first task of ``world`` with an instruction whose only fact satisfies ``pred``: (task, instruction, fact)."""
    for i in range(2000):
        for k, ins in enumerate(make_task(world, i)["instructions"]):
            if len(ins["facts"]) == 1 and pred(ins["facts"][0]):
                return i, k, ins["facts"][0]
    raise LookupError("no such task")


def facts_told(world: str, index: int, k: int, reply: str) -> bool:
    """Play task ``index`` of ``world`` (variant base) with the gold calls, replying ``reply`` to instruction ``k``
    (the gold reply to the others); the facts verdict of instruction ``k``."""
    env = ToolUseEnv(world=world, variant="base")
    _, info = env.reset(options={"task_id": f"{world}/{index}"})
    instruction = 0
    for turn in info["gold"]["turns"]:
        if turn["calls"]:
            calls = "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in turn["calls"])
            _, _, _, _, step_info = env.step(calls)
            assert step_info["action_valid"]
            continue
        text = reply if instruction == k else turn["reply"]
        _, _, _, _, step_info = env.step(text)
        if instruction == k:
            return step_info["state_check"]["facts_told"]
        instruction += 1
    raise AssertionError("instruction not reached")


def money_forms(value: str) -> list[str]:
    v = Decimal(value)
    short = f"{v:f}".rstrip("0").rstrip(".")
    return [f"{v:.2f}", f"{v:,.2f}", f"${v:,.2f}", short or "0", f"${short or '0'}", f"{v:,.2f} dollars"]


@pytest.mark.parametrize("target", ["2610.50", "0.00"])
def test_balances_in_any_form(target):
    """The issue's values when the tasks have them (bank/3 tells 2610.50, bank/5 0.00), else the first such fact."""
    try:
        index, k, fact = find("bank", lambda f: f == target)
    except LookupError:  # pragma: no cover - the generator changed: any balance of that shape does
        index, k, fact = find("bank", lambda f: (Decimal(f) == 0) == (Decimal(target) == 0) and f.endswith("0"))
    forms = money_forms(fact)
    if Decimal(fact) == 0:
        forms += ["0", "0.0", "zero", "$0", "0 dollars", "nothing left: $0.00"]
    else:
        forms += [f"{Decimal(fact).normalize():f}"]
    for form in forms:
        assert facts_told("bank", index, k, f"The balance is {form}."), form
    wrong = Decimal(fact) + Decimal("0.01")
    for form in money_forms(str(wrong)) + ([] if Decimal(fact) else ["one", "$1", "0.01"]):
        assert not facts_told("bank", index, k, f"The balance is {form}."), form


def test_start_times_in_any_form():
    index, k, fact = find("calendar", lambda f: f == "08:00")
    for form in ("08:00", "8:00", "8am", "8 a.m.", "8:00 AM", "8 o'clock", "**08:00**"):
        assert facts_told("calendar", index, k, f"It starts at {form}."), form
    for form in ("18:00", "8pm", "20:00", "8", "08:30", "9am"):
        assert not facts_told("calendar", index, k, f"It starts at {form}."), form
    index, k, fact = find("calendar", lambda f: kind_of(f) == "time" and f[3:] != "00")
    hour, minute = int(fact[:2]), fact[3:]
    h12, half, other = hour % 12 or 12, ("am" if hour < 12 else "pm"), ("pm" if hour < 12 else "am")
    for form in (fact, f"{hour}:{minute}", f"{h12}:{minute}{half}", f"{h12}:{minute} {half[0]}.m."):
        assert facts_told("calendar", index, k, f"It starts at {form}."), form
    for form in (f"{h12}:{minute}{other}", f"{(hour + 1) % 24:02d}:{minute}", f"{hour:02d}:00", f"{h12}{half}"):
        assert not facts_told("calendar", index, k, f"It starts at {form}."), form


def test_text_facts_are_whole_phrases_in_any_case():
    index, k, path = find("filesystem", lambda f: f.startswith("/"))
    assert facts_told("filesystem", index, k, f"It is at `{path}`.")
    assert facts_told("filesystem", index, k, f"Found it:\n**{path.upper()}**")
    assert not facts_told("filesystem", index, k, f"It is at {path.rsplit('/', 1)[0]}.")
    index, k, content = find("filesystem", lambda f: not f.startswith("/") and " " in f.strip())
    assert facts_told("filesystem", index, k, f'It says "{content.strip()}".')
    assert not facts_told("filesystem", index, k, f"It says {content.split()[0]}.")


def test_every_fact_kind_the_generators_make_is_covered():
    """Walk the task generators: the facts are money (bank), times (calendar) and phrases (paths, contents,
    titles); the tests above cover each, so a new kind shows up here first."""
    kinds: Counter[tuple[str, str]] = Counter()
    for world in ("filesystem", "bank", "calendar"):
        for i in range(300):
            for ins in make_task(world, i)["instructions"]:
                kinds.update((world, kind_of(f)) for f in ins["facts"])
    assert set(kinds) == {("bank", "money"), ("calendar", "time"), ("calendar", "text"), ("filesystem", "text")}


def test_the_gold_reply_states_every_fact():
    for world in ("filesystem", "bank", "calendar"):
        for i in range(40):
            for k, ins in enumerate(make_task(world, i)["instructions"]):
                if ins["facts"]:
                    reply = "Done." + "".join(f" {f}" for f in ins["facts"])
                    assert facts_told(world, i, k, reply), (world, i, k)
                    break
