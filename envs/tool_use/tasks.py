"""Seeded task generation: task ``i`` of a world comes from its own RNG (``random.Random("world:i")``).

A task is an initial state and 2-4 user instructions, each with its gold calls grouped in ``steps`` (a later step
needs an earlier one's result: an event id found by title, a balance, a file's content), the facts the agent must
tell the user, and (when the instruction can be asked without one of its values) a version missing a parameter plus
the user's follow-up. Instructions are generated on a simulated world, so every gold call succeeds.

>>> task = make_task("bank", 7)
>>> [len(i["calls"]) >= 1 for i in task["instructions"]]
[True, True, True]
>>> replay(task)[-1] == replay(task)[-1]
True
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from typing import Any

from agentgym.envs.tool_use.worlds import WORLDS, Bank, Calendar, FileSystem, World, fmt_money, to_minutes

USERS = ("ann", "bo", "cy", "dee", "eli", "fay", "gus", "hal")
DIRS = ("docs", "photos", "music", "projects", "notes", "backup", "work", "travel")
FILES = ("todo", "report", "draft", "ideas", "budget", "plan", "readme", "log", "list", "memo")
EXTS = (".txt", ".md", ".csv")
WORDS = ("alpha", "river", "stone", "maple", "cloud", "ember", "falcon", "harbor", "lemon", "orbit", "pixel", "quartz")
ACCOUNTS = ("checking", "savings", "vacation", "rent", "emergency", "groceries", "car", "gifts")
EVENTS = (
    "Budget review",
    "Team standup",
    "Dentist",
    "Lunch with Sam",
    "Project kickoff",
    "Yoga class",
    "Design critique",
    "Quarterly planning",
    "Car service",
    "Book club",
    "Parent meeting",
    "Code review",
)
PEOPLE = ("Sam", "Lee", "Ana", "Raj", "Mia", "Tom", "Ivy", "Noor")
TODOS = (
    "file taxes",
    "renew passport",
    "buy groceries",
    "call plumber",
    "water plants",
    "pay rent",
    "send invoice",
    "book flights",
    "return library books",
    "update resume",
)


def _text(rng: random.Random, n: int = 3) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _call(fn: str, /, **arguments: Any) -> dict[str, Any]:
    return {"name": fn, "arguments": arguments}


def _ins(
    text: str,
    steps: list[list[dict[str, Any]]],
    facts: list[str] | None = None,
    missing_text: str | None = None,
    followup: str | None = None,
) -> dict[str, Any]:
    """An instruction record: ``calls`` is ``steps`` flattened (what a replay runs)."""
    return {
        "text": text,
        "calls": [c for step in steps for c in step],
        "steps": steps,
        "facts": facts or [],
        "missing_text": missing_text,
        "followup": followup,
    }


def build_world(task: dict[str, Any]) -> World:
    """A fresh world in the task's initial state."""
    return WORLDS[task["world"]].from_init(task["init"])


def run_calls(world: World, calls: list[dict[str, Any]]) -> list[Any]:
    """Apply calls to ``world`` (they must succeed: the gold trace)."""
    return [getattr(world, c["name"])(**c["arguments"]) for c in calls]


def replay(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The gold state after each instruction (replaying the gold calls on a fresh world)."""
    world = build_world(task)
    states = []
    for ins in task["instructions"]:
        run_calls(world, ins["calls"])
        states.append(world.state())
    return states


# -- file system ------------------------------------------------------------------------------------------
def _fs_init(rng: random.Random) -> dict[str, Any]:
    home = f"/home/{rng.choice(USERS)}"
    tree: dict[str, str | None] = {home: None}
    for d in rng.sample(DIRS, rng.randint(2, 4)):
        tree[f"{home}/{d}"] = None
        for f in rng.sample(FILES, rng.randint(1, 3)):
            tree[f"{home}/{d}/{f}{rng.choice(EXTS)}"] = _text(rng)
    return {"tree": tree, "cwd": home}


def _fs_instruction(rng: random.Random, fs: FileSystem) -> dict[str, Any] | None:
    home = fs.pwd()
    kind = rng.choice(("mkdir", "write", "append", "mv", "rm", "cat", "find", "copy"))
    files = sorted(fs.files)
    dirs = [d for d in fs.dirs if d.startswith(home)]
    if kind == "mkdir":
        parent = rng.choice(dirs)
        name = rng.choice(DIRS) + rng.choice(("", "_old", "_new", "2"))
        path = f"{parent}/{name}"
        if path in fs.dirs or path in fs.files:
            return None
        return _ins(
            f"Create a folder called {name} inside {parent}.",
            [[_call("mkdir", path=path)]],
            missing_text=f"Create a new folder inside {parent}.",
            followup=f"Call it {name}.",
        )
    if kind == "write":
        path = rng.choice([*files, f"{rng.choice(dirs)}/{rng.choice(FILES)}.txt"])
        content = _text(rng, 4)
        return _ins(
            f"Write exactly '{content}' into {path}, replacing what is there.",
            [[_call("write", path=path, content=content)]],
            missing_text=f"Replace the content of {path} with some new text.",
            followup=f"The new text is exactly '{content}'.",
        )
    if not files:
        return None
    path = rng.choice(files)
    folder, name = path.rsplit("/", 1)
    if kind == "append":
        content = " " + _text(rng, 2)
        return _ins(
            f"Append the text '{content.strip()}' to the end of {path}, preceded by one space.",
            [[_call("write", path=path, content=content, append=True)]],
            missing_text=f"Add some words to the end of {path}.",
            followup=f"Append '{content.strip()}', preceded by one space.",
        )
    if kind == "mv":
        target = rng.choice([d for d in dirs if d != folder] or [None])
        if target is None or f"{target}/{name}" in fs.files:
            return None
        return _ins(
            f"Move {path} into the folder {target}.",
            [[_call("mv", source=path, destination=target)]],
            missing_text=f"Move {path} elsewhere.",
            followup=f"Move it into {target}.",
        )
    if kind == "rm":
        return _ins(
            f"Delete the file {path}.",
            [[_call("rm", path=path)]],
            missing_text=f"Delete one of the files in {folder}.",
            followup=f"Delete {name}.",
        )
    if kind == "cat":
        facts = [fs.files[path]] if fs.files[path].strip() else []
        return _ins(f"What does {path} say? Quote its content.", [[_call("cat", path=path)]], facts)
    if kind == "copy":  # the write needs the content the cat returns
        copy = f"{folder}/{name.split('.')[0]}_copy.txt"
        if copy in fs.files or not fs.files[path]:
            return None
        steps = [[_call("cat", path=path)], [_call("write", path=copy, content=fs.files[path])]]
        return _ins(
            f"Copy the content of {path} into a new file {copy}.",
            steps,
            missing_text=f"Copy the content of {path} into a new file in the same folder.",
            followup=f"Name the copy {copy}.",
        )
    found = fs.find(name)
    return _ins(f"Where is the file named {name}? Tell me its full path.", [[_call("find", name=name)]], found)


# -- bank -------------------------------------------------------------------------------------------------
def _money(rng: random.Random, low: float, high: float) -> float:
    """A multiple of 0.25 in [low, high] (exact in binary floating point)."""
    return rng.randint(int(low * 4), max(int(low * 4), int(high * 4))) / 4


def _bank_init(rng: random.Random) -> dict[str, Any]:
    names = rng.sample(ACCOUNTS[2:], rng.randint(0, 2))
    accounts = {"checking": ["checking", _money(rng, 200, 3000)], "savings": ["savings", _money(rng, 100, 5000)]}
    for n in names:
        accounts[n] = ["savings", _money(rng, 0, 800)]
    return {"accounts": accounts}


def _bank_instruction(rng: random.Random, bank: Bank) -> dict[str, Any] | None:
    kind = rng.choice(("balance", "transfer", "deposit", "withdraw", "open", "sweep"))
    accounts = sorted(bank.balances)
    a = rng.choice(accounts)
    if kind == "balance":
        return _ins(
            f"What is the balance of my {a} account?",
            [[_call("get_balance", account=a)]],
            [fmt_money(bank.balances[a])],
        )
    if kind == "open":
        name = rng.choice([n for n in ACCOUNTS if n not in bank.balances] or [None])
        if name is None:
            return None
        k = rng.choice(("checking", "savings"))
        return _ins(
            f"Open a new {k} account named {name}.",
            [[_call("open_account", name=name, kind=k)]],
            missing_text=f"Open a new account named {name}.",
            followup=f"Make it a {k} account.",
        )
    if kind == "deposit":
        x = _money(rng, 5, 900)
        return _ins(
            f"Deposit {fmt_money(x)} into {a}.",
            [[_call("deposit", account=a, amount=x)]],
            missing_text=f"Deposit my paycheck into {a}.",
            followup=f"The paycheck is {fmt_money(x)}.",
        )
    if bank.balances[a] < 1:
        return None
    b = rng.choice([n for n in accounts if n != a])
    if kind == "sweep":  # the transfer needs the balance the lookup returns
        if a in ACCOUNTS[:2]:
            return None
        steps = [
            [_call("get_balance", account=a)],
            [_call("transfer", source=a, target=b, amount=bank.balances[a]), _call("close_account", account=a)],
        ]
        return _ins(
            f"Move all the money in {a} to {b}, then close {a}.",
            steps,
            missing_text=f"Move all the money in {a} to another account, then close {a}.",
            followup=f"Put it in {b}.",
        )
    x = _money(rng, 0.25, min(bank.balances[a], 1500))
    if kind == "withdraw":
        return _ins(
            f"Withdraw {fmt_money(x)} from {a}.",
            [[_call("withdraw", account=a, amount=x)]],
            missing_text=f"Withdraw some cash from {a}.",
            followup=f"Withdraw {fmt_money(x)}.",
        )
    tell = rng.random() < 0.5
    after = fmt_money(round(bank.balances[b] + x, 2))
    suffix = f" Then tell me the new balance of {b}." if tell else ""
    return _ins(
        f"Transfer {fmt_money(x)} from {a} to {b}.{suffix}",
        [[_call("transfer", source=a, target=b, amount=x)]],
        [after] if tell else [],
        missing_text=f"Transfer some money from {a} to {b}.{suffix}",
        followup=f"The amount is {fmt_money(x)}.",
    )


# -- calendar -------------------------------------------------------------------------------------------
def _day(today: str, offset: int) -> str:
    return (dt.date.fromisoformat(today) + dt.timedelta(days=offset)).isoformat()


def _say(date: str) -> str:
    return f"{dt.date.fromisoformat(date).strftime('%A')} {date}"


def _cal_init(rng: random.Random) -> dict[str, Any]:
    today = (dt.date(2026, 1, 5) + dt.timedelta(days=rng.randrange(300))).isoformat()
    cal = Calendar(today, {}, {})
    for title in rng.sample(EVENTS, rng.randint(3, 7)):
        for _ in range(20):  # a free slot on one of the next days
            date = _day(today, rng.randrange(7))
            length = rng.choice((30, 45, 60, 90))
            slots = cal.free_slots(date, length)
            if slots:
                cal.create_event(title, date, rng.choice(slots), length, rng.sample(PEOPLE, rng.randint(0, 2)))
                break
    for title in rng.sample(TODOS, rng.randint(2, 5)):
        due = _day(today, rng.randrange(1, 14)) if rng.random() < 0.8 else None
        tid = cal.add_todo(title, due, rng.choice(("low", "normal", "high")))
        if rng.random() < 0.25:
            cal.complete_todo(tid)
    return {"today": today, "events": cal.events, "todos": cal.todos}


def _unique_event(rng: random.Random, cal: Calendar) -> tuple[str, dict[str, Any]] | None:
    """An event whose title finds only itself, as (id, event); candidates in date and time order."""
    by_time = sorted(cal.events.items(), key=lambda item: (item[1]["date"], item[1]["start"]))
    ok = [(e, ev) for e, ev in by_time if len(cal.find_events(ev["title"])) == 1]
    return rng.choice(ok) if ok else None


def _cal_instruction(rng: random.Random, cal: Calendar) -> dict[str, Any] | None:
    kind = rng.choice(("agenda", "move", "cancel", "schedule", "first_free", "invite", "todo", "todo_done", "due"))
    today = cal.today
    date = _day(today, rng.randrange(7))
    if kind == "agenda":
        titles = [e["title"] for e in cal.list_events(date)]
        if not titles:
            return None
        return _ins(
            f"What is on my calendar on {_say(date)}? Tell me the titles.", [[_call("list_events", date=date)]], titles
        )
    if kind in ("move", "cancel", "invite"):  # the change needs the id the lookup returns
        picked = _unique_event(rng, cal)
        if picked is None:
            return None
        eid, ev = picked
        find = [_call("find_events", query=ev["title"])]
        if kind == "cancel":
            return _ins(
                f"Cancel '{ev['title']}'.",
                [find, [_call("cancel_event", event_id=eid)]],
                missing_text="Cancel one of my events.",
                followup=f"The '{ev['title']}' one.",
            )
        if kind == "invite":
            person = rng.choice([p for p in PEOPLE if p not in ev["attendees"]])
            return _ins(
                f"Invite {person} to '{ev['title']}'.",
                [find, [_call("add_attendee", event_id=eid, person=person)]],
                missing_text=f"Invite someone to '{ev['title']}'.",
                followup=f"Invite {person}.",
            )
        length = to_minutes(ev["end"]) - to_minutes(ev["start"])
        probe = Calendar(cal.today, {e: v for e, v in cal.events.items() if e != eid}, cal.todos)
        slots = [s for s in probe.free_slots(date, length) if (date, s) != (ev["date"], ev["start"])]
        if not slots:
            return None
        start = rng.choice(slots)
        return _ins(
            f"Move '{ev['title']}' to {_say(date)} at {start}.",
            [find, [_call("move_event", event_id=eid, date=date, start=start)]],
            missing_text=f"Move '{ev['title']}' to {_say(date)}.",
            followup=f"Make it start at {start}.",
        )
    if kind in ("schedule", "first_free"):
        title = rng.choice([t for t in EVENTS if not cal.find_events(t)] or [None])
        length = rng.choice((30, 60, 90))
        slots = cal.free_slots(date, length)
        if title is None or not slots:
            return None
        if kind == "first_free":  # the booking needs the slot the lookup returns
            steps = [
                [_call("free_slots", date=date, duration_minutes=length)],
                [_call("create_event", title=title, date=date, start=slots[0], duration_minutes=length)],
            ]
            return _ins(
                f"Book '{title}' for {length} minutes on {_say(date)} at the earliest free time, and tell "
                "me when it starts.",
                steps,
                [slots[0]],
            )
        start, people = rng.choice(slots), sorted(rng.sample(PEOPLE, rng.randint(1, 2)))
        call = _call("create_event", title=title, date=date, start=start, duration_minutes=length, attendees=people)
        return _ins(
            f"Schedule '{title}' on {_say(date)} at {start} for {length} minutes with {' and '.join(people)}.",
            [[call]],
            missing_text=f"Schedule '{title}' on {_say(date)} for {length} minutes with {' and '.join(people)}.",
            followup=f"Start it at {start}.",
        )
    open_items = cal.list_todos()
    if kind == "todo":
        title = rng.choice([t for t in TODOS if not any(x["title"] == t for x in cal.list_todos("all"))] or [None])
        if title is None:
            return None
        due, priority = _day(today, rng.randrange(1, 14)), rng.choice(("low", "normal", "high"))
        return _ins(
            f"Add a {priority}-priority to-do '{title}' due {_say(due)}.",
            [[_call("add_todo", title=title, due=due, priority=priority)]],
            missing_text=f"Add a {priority}-priority to-do '{title}'.",
            followup=f"It is due {_say(due)}.",
        )
    if kind == "todo_done":  # completing needs the id the listing returns
        if not open_items:
            return None
        item = rng.choice(open_items)
        return _ins(
            f"Mark my to-do '{item['title']}' as done.",
            [[_call("list_todos")], [_call("complete_todo", todo_id=item["id"])]],
        )
    dated = [x for x in open_items if x["due"]]
    if not dated or (len(dated) > 1 and dated[0]["due"] == dated[1]["due"]):
        return None
    return _ins("Which open to-do is due first? Tell me its title.", [[_call("list_todos")]], [dated[0]["title"]])


_GENERATORS: dict[str, tuple[Callable[[random.Random], dict[str, Any]], Callable[..., dict[str, Any] | None]]] = {
    "filesystem": (_fs_init, _fs_instruction),
    "bank": (_bank_init, _bank_instruction),
    "calendar": (_cal_init, _cal_instruction),
}


def make_task(world: str, index: int) -> dict[str, Any]:
    """Task ``index`` of ``world`` (a JSON record); it depends only on the two."""
    if world not in WORLDS:
        raise ValueError(f"unknown world {world!r}; worlds: {list(WORLDS)}")
    rng = random.Random(f"{world}:{index}")
    make_init, make_instruction = _GENERATORS[world]
    init = make_init(rng)
    task: dict[str, Any] = {"world": world, "index": index, "init": init, "instructions": []}
    sim = build_world(task)
    n = rng.randint(2, 4)
    while len(task["instructions"]) < n or not any(i["missing_text"] for i in task["instructions"]):
        ins = make_instruction(rng, sim)
        if ins is None or (len(task["instructions"]) >= n and not ins["missing_text"]):
            continue
        run_calls(sim, ins["calls"])
        task["instructions"].append(ins)
    # The instruction held back by the miss_param / miss_func variants (chosen here so it is part of the task).
    param_ok = [k for k, i in enumerate(task["instructions"]) if i["missing_text"]]
    task["miss_param"] = rng.choice(param_ok)
    k = rng.randrange(len(task["instructions"]))
    used_before = {c["name"] for i in task["instructions"][:k] for c in i["calls"]}
    fresh = [c["name"] for c in task["instructions"][k]["calls"] if c["name"] not in used_before]
    if not fresh:  # the first instruction always has a fresh function
        k, fresh = 0, [task["instructions"][0]["calls"][0]["name"]]
    task["miss_func"] = {"instruction": k, "function": fresh[0]}
    task["mixed_variant"] = rng.choice(("base", "miss_func", "miss_param"))  # what variant="mixed" plays
    return task
