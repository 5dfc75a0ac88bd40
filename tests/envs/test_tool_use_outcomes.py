"""ToolUse-v0's state check judges the outcome the user asked for, not the path (issue 20).

Every case is played on the env itself. Outcomes reached another way pass: two transfers that add up to the one
asked for, a wrong transfer reversed before the right one, an event created at another time and moved, an event's
attendees added one by one. Wrong outcomes fail: a reversed wrong transfer with the right one never made, a cent
off, an event moved to the wrong time, a stray transfer, file or folder. Hypothesis closes the class: for random
tasks, the gold with its independent calls permuted, its money moves split into parts and do-and-undo pairs added
still passes; one field of the final state changed fails; the path alone changed (the bank's history, an id)
passes.
"""

from __future__ import annotations

import copy
import json
import posixpath
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agentgym.envs.tool_use.agents import hermes
from agentgym.envs.tool_use.env import MAX_CALLS_PER_TURN, ToolUseEnv
from agentgym.envs.tool_use.tasks import make_task
from agentgym.envs.tool_use.tools import ToolError
from agentgym.envs.tool_use.worlds import WORLDS, Bank, Calendar, FileSystem, World, item_id

Call = dict[str, Any]
Plan = Callable[[World], list[Call]]


def call(name: str, /, **arguments: Any) -> Call:
    return {"name": name, "arguments": arguments}


def reply(ins: dict[str, Any]) -> str:
    return " ".join(["Done.", *ins["facts"]])


def play(
    world: str,
    index: int,
    plans: dict[int, Plan] | None = None,
    before_reply: dict[int, Callable[[World], None]] | None = None,
) -> dict[str, Any]:
    """Play task ``index`` of ``world``: instruction k's calls are ``plans[k](world at its start)`` (the gold's when
    absent), sent 16 to a turn, each of which must succeed; ``before_reply[k]`` may change the live world before the
    reply that ends instruction k. Returns the last step's info."""
    plans, before_reply = plans or {}, before_reply or {}
    env = ToolUseEnv(world=world, max_turns=200)
    _, info = env.reset(options={"task_index": index})
    for k, ins in enumerate(info["gold"]["task"]["instructions"]):
        calls = plans[k](env.world.copy()) if k in plans else ins["calls"]
        for at in range(0, len(calls), MAX_CALLS_PER_TURN):
            obs, _, _, _, info = env.step(hermes(calls[at : at + MAX_CALLS_PER_TURN]))
            errors = [m["content"] for m in obs if m["content"].startswith("Error")]
            assert info["action_valid"] and not errors, (k, errors)
        if k in before_reply:
            before_reply[k](env.world)
        _, _, terminated, _, info = env.step(reply(ins))
    assert terminated
    return info


def gold(world: str, index: int, k: int) -> list[Call]:
    return copy.deepcopy(make_task(world, index)["instructions"][k]["calls"])


# -- the cases ---------------------------------------------------------------------------------------------
# bank/1, instruction 1: "Move all the money in gifts to savings, then close gifts." (gifts holds 641.75)
SWEEP = ("bank", 1, 1)


def test_two_transfers_that_add_up_to_all_the_money_pass():
    assert [c["name"] for c in gold(*SWEEP)] == ["get_balance", "transfer", "close_account"]
    assert gold(*SWEEP)[1]["arguments"] == {"source": "gifts", "target": "savings", "amount": 641.75}
    plan = [call("get_balance", account="gifts"), call("transfer", source="gifts", target="savings", amount=600.0),
            call("transfer", source="gifts", target="savings", amount=41.75),
            call("close_account", account="gifts")]  # fmt: skip
    info = play("bank", 1, {1: lambda w: plan})
    assert info["success"] and all(info["state_checks"])


def test_a_wrong_transfer_reversed_before_the_right_one_passes():
    plan = [call("transfer", source="gifts", target="checking", amount=641.75),
            call("transfer", source="checking", target="gifts", amount=641.75),
            call("transfer", source="gifts", target="savings", amount=641.75),
            call("close_account", account="gifts")]  # fmt: skip
    info = play("bank", 1, {1: lambda w: plan})
    assert info["success"] and all(info["state_checks"])


def test_a_wrong_transfer_reversed_without_the_right_one_fails():
    plan = [call("transfer", source="gifts", target="checking", amount=641.75),
            call("transfer", source="checking", target="gifts", amount=641.75)]  # fmt: skip
    info = play("bank", 1, {1: lambda w: plan})
    assert not info["success"] and info["state_checks"][1] is False
    env = ToolUseEnv(world="bank")  # the same, checked at the instruction itself
    env.reset(options={"task_index": 1})
    env.step(hermes(gold("bank", 1, 0)))
    env.step("Done.")
    env.step(hermes(plan))
    _, _, _, _, info = env.step("Done.")
    assert info["state_check"]["mismatched"] == ["balances", "kinds"]  # gifts still open


# bank/3, instruction 0: "Transfer 302.50 from savings to checking. Then tell me the new balance of checking."
@pytest.mark.parametrize("amounts", [[302.5], [300.0, 2.5], [0.01, 302.49], [100.0, 100.0, 102.5]])
def test_a_transfer_in_parts_passes(amounts):
    plan = [call("transfer", source="savings", target="checking", amount=x) for x in amounts]
    assert play("bank", 3, {0: lambda w: plan})["success"]


@pytest.mark.parametrize("amounts", [[302.49], [302.51], [300.0, 2.49], [302.5, 0.01]])
def test_an_amount_off_by_a_cent_fails(amounts):
    plan = [call("transfer", source="savings", target="checking", amount=x) for x in amounts]
    info = play("bank", 3, {0: lambda w: plan})
    assert not info["success"] and info["state_checks"][0] is False


def test_a_stray_transfer_fails_and_its_reversal_passes():
    stray = call("transfer", source="checking", target="savings", amount=1.0)
    back = call("transfer", source="savings", target="checking", amount=1.0)
    assert not play("bank", 3, {0: lambda w: [*gold("bank", 3, 0), stray]})["success"]
    assert play("bank", 3, {0: lambda w: [*gold("bank", 3, 0), stray, back]})["success"]


def test_a_stray_file_or_folder_fails_and_its_removal_passes():
    home = make_task("filesystem", 0)["init"]["cwd"]
    for stray in (call("touch", path=f"{home}/stray.txt"), call("mkdir", path=f"{home}/stray")):
        assert not play("filesystem", 0, {0: lambda w, s=stray: [*gold("filesystem", 0, 0), s]})["success"]
        undo = call("rm", path=stray["arguments"]["path"])
        assert play("filesystem", 0, {0: lambda w, s=stray, u=undo: [*gold("filesystem", 0, 0), s, u]})["success"]


# calendar/0, instruction 1: "Schedule 'Dentist' on Monday 2026-02-16 at 14:45 for 90 minutes with Ana and Sam."
# Instruction 3 cancels it by the id the gold trace holds: an id that depended on the creation time broke it.
SCHEDULE = ("calendar", 0, 1)


def _create_then_move(to: str) -> Plan:
    def plan(w: World) -> list[Call]:
        (create,) = gold(*SCHEDULE)
        args = create["arguments"]
        assert isinstance(w, Calendar) and args["start"] == "14:45"
        other = next(s for s in w.free_slots(args["date"], args["duration_minutes"]) if s not in ("14:45", to))
        first = call("create_event", **{**args, "start": other})
        eid = w.create_event(**first["arguments"])["id"]
        return [first, call("move_event", event_id=eid, date=args["date"], start=to)]

    return plan


def test_an_event_created_at_another_time_and_moved_passes():
    info = play("calendar", 0, {1: _create_then_move("14:45")})
    assert info["success"] and all(info["state_checks"])


def test_an_event_moved_to_the_wrong_time_fails():
    """Instruction 3 cancels the event, so the final state is the gold's: the instructions before fail."""
    info = play("calendar", 0, {1: _create_then_move("15:00")})
    assert info["state_checks"] == [True, False, False, True] and not info["success"]


def test_an_event_edited_after_creation_passes():
    (create,) = gold(*SCHEDULE)
    args = create["arguments"]
    eid = item_id("ev", args["title"])
    plan = [call("create_event", **{**args, "attendees": []}),
            *(call("add_attendee", event_id=eid, person=p) for p in reversed(args["attendees"]))]  # fmt: skip
    assert play("calendar", 0, {1: lambda w: plan})["success"]


def test_event_ids_do_not_depend_on_the_time_and_survive_a_move():
    one, two = Calendar("2026-03-02", {}, {}), Calendar("2026-03-02", {}, {})
    a = one.create_event("Dentist", "2026-03-03", "09:00")["id"]
    b = two.create_event("Dentist", "2026-03-05", "15:00")["id"]
    assert a == b == item_id("ev", "Dentist")
    assert one.move_event(a, "2026-03-05", "15:00")["id"] == a
    assert Calendar.outcome(one.state()) == Calendar.outcome(two.state())
    c = one.create_event("Dentist", "2026-03-03", "09:00")["id"]  # a second event of the same title
    assert c != a and set(one.events) == {a, c}
    one.cancel_event(a)
    assert one.create_event("Dentist", "2026-03-06", "09:00")["id"] == a  # the first free ordinal


def test_no_instruction_is_about_the_history():
    """The bank's history is left out of the outcome because no task asks about it; an instruction that did would
    need its own check (this test says so when one appears)."""
    for i in range(300):
        for ins in make_task("bank", i)["instructions"]:
            assert all(c["name"] != "get_statement" for c in ins["calls"]), (i, ins["text"])
            assert not any(w in ins["text"].lower() for w in ("statement", "history", "movements")), ins["text"]


# -- the class: path changes pass, outcome changes fail ----------------------------------------------------------
MONEY = ("deposit", "withdraw", "transfer")
READ_ONLY = {
    "bank": ["list_accounts"],
    "filesystem": ["pwd", "ls"],
    "calendar": ["list_todos"],
}


def resources(world: World, c: Call) -> set[str]:
    """What a call changes or depends on, by name (read-only calls: nothing)."""
    a = c["arguments"]
    if isinstance(world, Bank):
        return {a[k] for k in ("account", "source", "target", "name") if k in a} if c["name"] not in (
            "get_balance", "list_accounts", "get_statement") else set()  # fmt: skip
    if isinstance(world, FileSystem):
        if c["name"] in ("ls", "pwd", "find", "cat"):
            return set()
        if c["name"] == "mv":
            return {a["source"], a["destination"], posixpath.join(a["destination"], posixpath.basename(a["source"]))}
        return {a["path"]}
    assert isinstance(world, Calendar)
    if c["name"] in ("list_events", "find_events", "free_slots", "list_todos"):
        return set()
    if "event_id" in a:
        return {a["event_id"], world.events.get(a["event_id"], {}).get("title", "")}
    return {a.get("todo_id") or a["title"]}


def trace(world: World, plan: list[Call]) -> list[set[str]] | None:
    """Each call's resources while the plan runs on a copy of ``world``, or None if a call fails."""
    sim, out = world.copy(), []
    for c in plan:
        out.append(resources(sim, c))
        try:
            getattr(sim, c["name"])(**copy.deepcopy(c["arguments"]))
        except ToolError:
            return None
    return out


def undo_pair(data: st.DataObject, w: World) -> list[Call]:
    """A change the user did not ask for and its undoing (possibly nothing, when none applies)."""
    if isinstance(w, Bank):
        a = data.draw(st.sampled_from(sorted(w.balances)))
        b = data.draw(st.sampled_from(sorted(w.balances)))
        x = data.draw(st.integers(1, 50_000)) / 100
        if data.draw(st.booleans()) or a == b or w.balances[a] < x:
            return [call("deposit", account=a, amount=x), call("withdraw", account=a, amount=x)]
        return [call("transfer", source=a, target=b, amount=x), call("transfer", source=b, target=a, amount=x)]
    if isinstance(w, FileSystem):
        d = data.draw(st.sampled_from(w.dirs[1:]))
        kind = data.draw(st.sampled_from(["mkdir", "write", "edit", "mv"]))
        if kind in ("edit", "mv") and w.files:
            f = data.draw(st.sampled_from(sorted(w.files)))
            if kind == "edit":
                return [call("write", path=f, content="scratch"), call("write", path=f, content=w.files[f])]
            moved = posixpath.join(d, posixpath.basename(f))
            if posixpath.dirname(f) != d and moved not in w.files and moved not in w.dirs:
                return [call("mv", source=f, destination=d), call("mv", source=moved, destination=f)]
        new = posixpath.join(d, "scratch_zz")
        if new in w.files or new in w.dirs:
            return []
        return [call("mkdir" if kind == "mkdir" else "write", path=new, **({} if kind == "mkdir" else
                {"content": "x"})), call("rm", path=new)]  # fmt: skip
    assert isinstance(w, Calendar)
    day = (w.today[:8] + "%02d") % data.draw(st.integers(1, 28))
    slots = w.free_slots(day, 30)
    if data.draw(st.booleans()) and w.events:
        eid = data.draw(st.sampled_from(sorted(w.events)))
        ev = w.events[eid]
        length = int(ev["end"][:2]) * 60 + int(ev["end"][3:]) - int(ev["start"][:2]) * 60 - int(ev["start"][3:])
        fits = [s for s in w.free_slots(day, length) if (day, s) != (ev["date"], ev["start"])]
        if fits:
            to = data.draw(st.sampled_from(fits))
            return [call("move_event", event_id=eid, date=day, start=to),
                    call("move_event", event_id=eid, date=ev["date"], start=ev["start"])]  # fmt: skip
    if not slots:
        return []
    start = data.draw(st.sampled_from(slots))
    title = data.draw(st.sampled_from(["Scratch", "Dentist", "Book club"]))
    probe = w.copy()
    eid = probe.create_event(title, day, start, 30)["id"]  # type: ignore[attr-defined]
    return [call("create_event", title=title, date=day, start=start, duration_minutes=30),
            call("cancel_event", event_id=eid)]  # fmt: skip


def split(data: st.DataObject, c: Call) -> list[Call]:
    """A money move as 2-3 moves that add up to it (in whole cents)."""
    if c["name"] not in MONEY or (cents := round(c["arguments"]["amount"] * 100)) < 3:
        return [c]
    cuts = sorted(data.draw(st.sets(st.integers(1, cents - 1), min_size=1, max_size=2)))
    parts = [b - a for a, b in zip([0, *cuts], [*cuts, cents], strict=True)]
    return [{"name": c["name"], "arguments": {**c["arguments"], "amount": p / 100}} for p in parts]


def rewrite(data: st.DataObject, world: World, calls: list[Call]) -> list[Call]:
    """The gold calls of one instruction with money moves split, do-and-undo pairs and read-only calls added, and
    independent neighbours swapped (disjoint resources, or two money moves; both orders succeed)."""
    sim, plan = world.copy(), []
    for c in [*calls, None]:
        if data.draw(st.booleans()):
            pair = undo_pair(data, sim)
            if trace(sim, pair) is not None:
                plan += pair
                for p in pair:
                    getattr(sim, p["name"])(**copy.deepcopy(p["arguments"]))
        if data.draw(st.booleans()):
            plan.append(call(data.draw(st.sampled_from(READ_ONLY[world.name]))))
        if c is not None:
            parts = split(data, c) if data.draw(st.booleans()) else [c]
            plan += parts
            for p in parts:
                getattr(sim, p["name"])(**copy.deepcopy(p["arguments"]))
    for _ in range(data.draw(st.integers(0, 3 * len(plan)))):
        if len(plan) < 2:
            break
        i = data.draw(st.integers(0, len(plan) - 2))
        swapped = [*plan[:i], plan[i + 1], plan[i], *plan[i + 2 :]]
        res = trace(world, swapped)
        if res is None:
            continue
        money = plan[i]["name"] in MONEY and plan[i + 1]["name"] in MONEY
        if money or not (res[i] & res[i + 1]):
            plan = swapped
    assert trace(world, plan) is not None
    return plan


TASKS = st.tuples(st.sampled_from(list(WORLDS)), st.integers(0, 9_999))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=TASKS, data=st.data())
def test_property_the_gold_reached_another_way_passes(task, data):
    world, index = task
    n = len(make_task(world, index)["instructions"])
    plans = {k: (lambda w, k=k: rewrite(data, w, gold(world, index, k))) for k in range(n)}
    info = play(world, index, plans)
    assert info["success"] and all(info["state_checks"]), info["state_check"]


def perturb(data: st.DataObject, w: World) -> list[str]:
    """Change one field of the outcome of ``w`` in place (or add or drop one item); returns the attributes
    changed."""
    if isinstance(w, Bank):
        a = data.draw(st.sampled_from(sorted(w.balances)))
        what = data.draw(st.sampled_from(["balance", "kind", "extra", "gone"]))
        if what == "balance" or (what == "gone" and len(w.balances) == 1):
            w.balances[a] = round(w.balances[a] + data.draw(st.sampled_from([-1, 1])) * data.draw(
                st.integers(1, 10_000)) / 100, 2)  # fmt: skip
            return ["balances"]
        if what == "kind":
            w.kinds[a] = "savings" if w.kinds[a] == "checking" else "checking"
            return ["kinds"]
        if what == "extra":
            w.balances["stray"], w.kinds["stray"] = 0.0, "checking"
        else:
            del w.balances[a], w.kinds[a]
        return ["balances", "kinds"]
    if isinstance(w, FileSystem):
        what = data.draw(st.sampled_from(["content", "rename", "stray", "dir", "nodir"]))
        if what in ("content", "rename") and w.files:
            f = data.draw(st.sampled_from(sorted(w.files)))
            if what == "content":
                w.files[f] += data.draw(st.sampled_from([" ", "x", "\n"]))
            else:
                w.files[f + ".bak"] = w.files.pop(f)
            return ["files"]
        if what == "dir":
            w.dirs = sorted([*w.dirs, "/stray"])
            return ["dirs"]
        if what == "nodir":
            w.dirs.remove(data.draw(st.sampled_from(w.dirs[1:])))
            return ["dirs"]
        w.files[w.dirs[-1] + "/stray.txt"] = ""
        return ["files"]
    assert isinstance(w, Calendar)
    what = data.draw(st.sampled_from(["event", "todo", "new event", "no event"]))
    if what == "todo" and w.todos:
        t = w.todos[data.draw(st.sampled_from(sorted(w.todos)))]
        field = data.draw(st.sampled_from(["title", "due", "priority", "done"]))
        t[field] = {"title": t["title"] + "!", "due": "2027-01-01" if t["due"] != "2027-01-01" else None,
                    "priority": "low" if t["priority"] != "low" else "high", "done": not t["done"]}[field]  # fmt: skip
        return ["todos"]
    if what == "event" and w.events:
        ev = w.events[data.draw(st.sampled_from(sorted(w.events)))]
        field = data.draw(st.sampled_from(["title", "date", "start", "end", "attendees"]))
        ev[field] = {"title": ev["title"] + "!", "date": "2027-01-01", "start": "07:45", "end": "20:15",
                     "attendees": sorted([*ev["attendees"], "Zed"])}[field]  # fmt: skip
        return ["events"]
    if what == "no event" and w.events:
        del w.events[data.draw(st.sampled_from(sorted(w.events)))]
        return ["events"]
    w.events["evstray"] = {"title": "Stray", "date": "2027-01-01", "start": "08:00", "end": "09:00", "attendees": []}
    return ["events"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=TASKS, data=st.data())
def test_property_one_field_of_the_final_state_changed_fails(task, data):
    world, index = task
    last = len(make_task(world, index)["instructions"]) - 1
    changed: list[str] = []
    info = play(world, index, before_reply={last: lambda w: changed.extend(perturb(data, w))})
    assert not info["success"] and info["state_check"]["mismatched"] == changed


def relabel(w: World) -> None:
    """Change the path alone: another bank history, other ids for the events and to-dos, another order of the
    files and folders."""
    if isinstance(w, Bank):
        w.history = [["elsewhere", "deposit", 1.0, 1.0]]
    if isinstance(w, Calendar):
        w.events = {"x" + e: v for e, v in reversed(w.events.items())}
        w.todos = {"x" + t: v for t, v in w.todos.items()}
    if isinstance(w, FileSystem):
        w.files = dict(reversed(w.files.items()))
        w.dirs = [w.dirs[0], *reversed(w.dirs[1:])]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=TASKS)
def test_property_the_path_alone_changed_passes(task):
    world, index = task
    last = len(make_task(world, index)["instructions"]) - 1  # later gold calls use the gold's ids
    info = play(world, index, before_reply={last: relabel})
    assert info["success"] and all(info["state_checks"]), info["state_check"]


def test_outcome_is_json_and_ignores_key_order():
    for world in WORLDS.values():
        w = world.from_init(make_task(world.name, 5)["init"])
        assert json.dumps(world.outcome(w.state()))
        assert world.outcome(w.state()) == world.outcome(dict(reversed(w.state().items())))
