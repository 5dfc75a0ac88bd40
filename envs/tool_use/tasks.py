"""Seeded task generation: task ``i`` of a world comes from its own RNG (``random.Random("world:i")``).

A task is an initial state and 2-4 user instructions, each with its gold calls, the facts the agent must tell the
user, and (when the instruction can be asked without one of its values) a version missing a parameter plus the
user's follow-up. Instructions are generated on a simulated world, so every gold call succeeds.

>>> task = make_task("bank", 7)
>>> [len(i["calls"]) >= 1 for i in task["instructions"]]
[True, True, True]
>>> replay(task)[-1] == replay(task)[-1]
True
"""

from __future__ import annotations

import random
from typing import Any

from agentgym.envs.tool_use.worlds import WORLDS, Bank, FileSystem, World, fmt_money

USERS = ("ann", "bo", "cy", "dee", "eli", "fay", "gus", "hal")
DIRS = ("docs", "photos", "music", "projects", "notes", "backup", "work", "travel")
FILES = ("todo", "report", "draft", "ideas", "budget", "plan", "readme", "log", "list", "memo")
EXTS = (".txt", ".md", ".csv")
WORDS = ("alpha", "river", "stone", "maple", "cloud", "ember", "falcon", "harbor", "lemon", "orbit", "pixel", "quartz")
ACCOUNTS = ("checking", "savings", "vacation", "rent", "emergency", "groceries", "car", "gifts")


def _text(rng: random.Random, n: int = 3) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _call(fn: str, /, **arguments: Any) -> dict[str, Any]:
    return {"name": fn, "arguments": arguments}


def build_world(task: dict[str, Any]) -> World:
    """A fresh world in the task's initial state."""
    init = task["init"]
    if task["world"] == "filesystem":
        return FileSystem(dict(init["tree"]), cwd=init["cwd"])
    return Bank({k: (v[0], v[1]) for k, v in init["accounts"].items()})


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


def _fs_instruction(rng: random.Random, fs: FileSystem, home: str) -> dict[str, Any] | None:
    kind = rng.choice(("mkdir", "write", "append", "mv", "rm", "cat", "find"))
    files = sorted(fs.files)
    dirs = [d for d in fs.dirs if d.startswith(home)]
    if kind == "mkdir":
        parent = rng.choice(dirs)
        name = rng.choice(DIRS) + rng.choice(("", "_old", "_new", "2"))
        path = f"{parent}/{name}"
        if path in fs.dirs or path in fs.files:
            return None
        return {"text": f"Create a folder called {name} inside {parent}.", "calls": [_call("mkdir", path=path)],
                "facts": [], "missing_text": f"Create a new folder inside {parent}.",
                "followup": f"Call it {name}."}  # fmt: skip
    if kind == "write":
        path = rng.choice([*files, f"{rng.choice(dirs)}/{rng.choice(FILES)}.txt"])
        content = _text(rng, 4)
        return {"text": f"Write exactly '{content}' into {path}, replacing what is there.",
                "calls": [_call("write", path=path, content=content)], "facts": [],
                "missing_text": f"Replace the content of {path} with some new text.",
                "followup": f"The new text is exactly '{content}'."}  # fmt: skip
    if not files:
        return None
    path = rng.choice(files)
    if kind == "append":
        content = " " + _text(rng, 2)
        return {"text": f"Append the text '{content.strip()}' to the end of {path}, preceded by one space.",
                "calls": [_call("write", path=path, content=content, append=True)], "facts": [],
                "missing_text": f"Add some words to the end of {path}.",
                "followup": f"Append '{content.strip()}', preceded by one space."}  # fmt: skip
    if kind == "mv":
        target = rng.choice([d for d in dirs if d != path.rsplit("/", 1)[0]] or [None])
        if target is None or f"{target}/{path.rsplit('/', 1)[1]}" in fs.files:
            return None
        return {"text": f"Move {path} into the folder {target}.", "facts": [],
                "calls": [_call("mv", source=path, destination=target)], "missing_text": f"Move {path} elsewhere.",
                "followup": f"Move it into {target}."}  # fmt: skip
    if kind == "rm":
        return {"text": f"Delete the file {path}.", "calls": [_call("rm", path=path)], "facts": [],
                "missing_text": f"Delete one of the files in {path.rsplit('/', 1)[0]}.",
                "followup": f"Delete {path.rsplit('/', 1)[1]}."}  # fmt: skip
    if kind == "cat":
        return {
            "text": f"What does {path} say? Quote its content.",
            "calls": [_call("cat", path=path)],
            "facts": [fs.files[path]] if fs.files[path].strip() else [],
            "missing_text": None,
            "followup": None,
        }
    name = path.rsplit("/", 1)[1]
    found = fs.find(name)
    return {"text": f"Where is the file named {name}? Tell me its full path.", "calls": [_call("find", name=name)],
            "facts": found, "missing_text": None, "followup": None}  # fmt: skip


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
    kind = rng.choice(("balance", "transfer", "deposit", "withdraw", "open"))
    accounts = sorted(bank.balances)
    a = rng.choice(accounts)
    if kind == "balance":
        return {"text": f"What is the balance of my {a} account?", "calls": [_call("get_balance", account=a)],
                "facts": [fmt_money(bank.balances[a])], "missing_text": None, "followup": None}  # fmt: skip
    if kind == "open":
        name = rng.choice([n for n in ACCOUNTS if n not in bank.balances] or [None])
        if name is None:
            return None
        k = rng.choice(("checking", "savings"))
        return {"text": f"Open a new {k} account named {name}.", "calls": [_call("open_account", name=name, kind=k)],
                "facts": [], "missing_text": f"Open a new account named {name}.",
                "followup": f"Make it a {k} account."}  # fmt: skip
    if kind == "deposit":
        x = _money(rng, 5, 900)
        return {"text": f"Deposit {fmt_money(x)} into {a}.", "calls": [_call("deposit", account=a, amount=x)],
                "facts": [], "missing_text": f"Deposit my paycheck into {a}.",
                "followup": f"The paycheck is {fmt_money(x)}."}  # fmt: skip
    if bank.balances[a] < 1:
        return None
    x = _money(rng, 0.25, min(bank.balances[a], 1500))
    if kind == "withdraw":
        return {"text": f"Withdraw {fmt_money(x)} from {a}.", "calls": [_call("withdraw", account=a, amount=x)],
                "facts": [], "missing_text": f"Withdraw some cash from {a}.",
                "followup": f"Withdraw {fmt_money(x)}."}  # fmt: skip
    b = rng.choice([n for n in accounts if n != a])
    tell = rng.random() < 0.5
    after = fmt_money(round(bank.balances[b] + x, 2))
    suffix = f" Then tell me the new balance of {b}." if tell else ""
    return {"text": f"Transfer {fmt_money(x)} from {a} to {b}.{suffix}",
            "calls": [_call("transfer", source=a, target=b, amount=x)], "facts": [after] if tell else [],
            "missing_text": f"Transfer some money from {a} to {b}.{suffix}",
            "followup": f"The amount is {fmt_money(x)}."}  # fmt: skip


def make_task(world: str, index: int) -> dict[str, Any]:
    """Task ``index`` of ``world`` (a JSON record); it depends only on the two."""
    if world not in WORLDS:
        raise ValueError(f"unknown world {world!r}; worlds: {list(WORLDS)}")
    rng = random.Random(f"{world}:{index}")
    init = _fs_init(rng) if world == "filesystem" else _bank_init(rng)
    task: dict[str, Any] = {"world": world, "index": index, "init": init, "instructions": []}
    sim = build_world(task)
    n = rng.randint(2, 4)
    while len(task["instructions"]) < n or not any(i["missing_text"] for i in task["instructions"]):
        if isinstance(sim, FileSystem):
            ins = _fs_instruction(rng, sim, init["cwd"])
        else:
            assert isinstance(sim, Bank)
            ins = _bank_instruction(rng, sim)
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
    return task
