"""The whole method catalogue and the ``agentgym methods`` command.

The catalogue is the reward modules' cards (``agentgym.rewards.catalogue``), the trainer's own (branch, loss and
schedule modes, from the modules in ``TRAINER_MODULES``) and the planned ones: systems of the reference papers not
built yet. ``agentgym train --method NAME`` starts from a card's ``train`` settings (:func:`method_overrides`).

agentgym methods                      # every method: kind, status, needs, paper
agentgym methods --need group --kind estimator --status built
agentgym methods gigpo                # one card: paper, code, knobs and defaults, choices, how to train it
agentgym methods --json               # the registry, for tools
agentgym methods --markdown           # the catalogue as a Markdown table
python -m agentgym.baselines.methods README.md docs/methods.md   # regenerate their tables (tests keep them equal)

>>> get_method("grpo").kind
'estimator'
>>> method_overrides(get_method("gigpo"), {"omega": 0.5, "iterations": 3})["estimator_kwargs"]
{'omega': 0.5}
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym.rewards.catalogue import KINDS, NEEDS, STATUSES, Method, collect, merge, reward_methods

#: The trainer (and env) modules that hold cards (imported only when the catalogue is read).
TRAINER_MODULES: tuple[str, ...] = (
    "agentgym.baselines.trainer_methods",
    "agentgym.baselines.branches",
    "agentgym.baselines.ipr",
    "agentgym.baselines.archer",
    "agentgym.baselines.reward_conditioning",
    "agentgym.baselines.learned_critics",
    "agentgym.baselines.hindsight",
    "agentgym.baselines.self_distill",
    "agentgym.envs.search_qa.roles",  # an env whose wrapper is the method (M-ASK)
)


def catalogue() -> tuple[Method, ...]:
    """Every card: the reward modules', the trainer's, then the planned systems no built card replaces."""
    from agentgym.rewards.planned import PLANNED

    built = reward_methods() + collect(importlib.import_module(name) for name in TRAINER_MODULES)
    return merge(built, PLANNED)


def get_method(name: str) -> Method:
    """The card named ``name``; ``KeyError`` says which names are close."""
    cards = {card.name: card for card in catalogue()}
    if name in cards:
        return cards[name]
    close = difflib.get_close_matches(name, list(cards), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else " (agentgym methods lists them)"
    raise KeyError(f"unknown method {name!r}{hint}")


def method_overrides(card: Method, sets: Mapping[str, Any]) -> dict[str, Any]:
    """The ``TrainConfig`` overrides of ``agentgym train --method NAME --set k=v ...``: the card's ``train``
    settings, then each ``--set``. A key that is one of the method's knobs goes where the card says its knobs go
    (``estimator_kwargs``, ``scorer_kwargs``, the method's ``reward_wrappers`` entry); any other key is a
    ``TrainConfig`` field as usual."""
    if card.status == "missing" or not card.train:
        raise ValueError(f"method {card.name!r} ({card.system}) is not built yet: {card.missing}"
                         if card.status == "missing" else
                         f"method {card.name!r} ({card.system}) cannot train yet: {card.missing}")  # fmt: skip
    out: dict[str, Any] = json.loads(json.dumps(dict(card.train)))  # a deep copy: the card stays as it is
    knobs = card.knobs() if card.knobs_into != "config" else {}
    for key, value in sets.items():
        if key not in knobs:
            out[key] = value
        elif card.knobs_into == "wrapper":
            entries = out.setdefault("reward_wrappers", [])
            entry = next((e for e in entries if e.get("name") == card.name), None)
            if entry is None:
                entries.append(entry := {"name": card.name})
            entry[key] = value
        else:
            out.setdefault(card.knobs_into, {})[key] = value
    return out


# ----------------------------------------------------------------------------------------------------------------
# the command


def _paper(card: Method) -> str:
    if card.paper is None:
        return ""
    return f"{card.paper.year} arXiv:{card.paper.arxiv}" if card.paper.arxiv else str(card.paper.year)


def rows(cards: Sequence[Method]) -> list[dict[str, str]]:
    """One table row per card: what ``agentgym methods`` prints."""
    return [{"name": c.name, "system": c.system, "kind": c.kind, "status": c.status, "needs": ", ".join(c.needs),
             "paper": _paper(c)} for c in cards]  # fmt: skip


def markdown(cards: Sequence[Method]) -> str:
    """The catalogue as the Markdown table of docs/methods.md (names link to arXiv where there is an id)."""
    lines = ["| method | system | kind | status | needs | paper |", "|---|---|---|---|---|---|"]
    for c in cards:
        paper = "" if c.paper is None else f"{c.paper.title} ({c.paper.year})"
        if c.paper is not None and c.paper.url:
            paper = f"[{paper}]({c.paper.url})"
        lines.append(f"| `{c.name}` | {c.system} | {c.kind} | {c.status} | {', '.join(c.needs)} | {paper} |")
    return "\n".join(lines)


def kinds_markdown(cards: Sequence[Method]) -> str:
    """The catalogue by kind as the README's Markdown table: the built methods' names, how many are partial or
    missing."""
    lines = ["| kind | built | partial | missing |", "|---|---|---:|---:|"]
    for kind in KINDS:
        of_kind = [c for c in cards if c.kind == kind]
        built = ", ".join(f"`{c.name}`" for c in of_kind if c.status == "built") or "-"
        counts = Counter[str](c.status for c in of_kind)
        lines.append(f"| {kind} | {built} | {counts['partial']} | {counts['missing']} |")
    return "\n".join(lines)


def needs_markdown() -> str:
    """The words a card's ``needs`` uses, as the Markdown table of docs/methods.md."""
    return "\n".join(["| need | meaning |", "|---|---|", *(f"| `{k}` | {v} |" for k, v in NEEDS.items())])


def fill_docs(text: str, cards: Sequence[Method]) -> str:
    """``text`` (docs/methods.md, README.md) with the generated blocks it has (between ``<!-- NAME:begin -->`` and
    ``<!-- NAME:end -->``; NAME one of methods, needs, kinds, coverage) made from the registry."""
    blocks = {"methods": markdown(cards), "needs": needs_markdown(), "kinds": kinds_markdown(cards),
              "coverage": f"`agentgym methods` ends with: {coverage(cards)}."}  # fmt: skip
    for block, body in blocks.items():
        if f"<!-- {block}:begin -->" not in text:
            continue
        start, end = f"<!-- {block}:begin -->", f"<!-- {block}:end -->"
        head, rest = text.split(start)
        text = f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}"
    return text


def coverage(cards: Sequence[Method]) -> str:
    """One line: how many methods are built, partial and missing."""
    counts = Counter[str](c.status for c in cards)
    return f"{len(cards)} methods: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES)


def describe(card: Method) -> str:
    """One card in full, as ``agentgym methods NAME`` prints it."""
    out = [f"{card.name}: {card.system} ({card.kind}, {card.status})", f"  {card.summary}"]
    if card.paper is not None:
        out.append(f"paper: {card.paper.title} ({card.paper.year})" + (f" {card.paper.url}" if card.paper.url else ""))
    if card.needs:
        out.append("needs:")
        out += [f"  {n}: {NEEDS[n]}" for n in card.needs]
    if card.code is not None:
        obj = card.load()
        root = Path(importlib.import_module("agentgym").__file__ or ".").parent.parent
        where = os.path.relpath(inspect.getsourcefile(obj) or "?", root)
        out.append(f"code: {card.code} ({where}:{inspect.getsourcelines(obj)[1]})")
        knobs = card.knobs()
        if knobs:
            into = f" (set with --set KNOB=VALUE; they go into {card.knobs_into})" if card.knobs_into else ""
            out.append(f"knobs{into}:")
            out += [f"  {k} = {json.dumps(v)}" for k, v in knobs.items()]
    if card.choices:
        out.append("choices where the paper is silent:")
        out += [f"  - {c}" for c in card.choices]
    if card.train and card.status != "missing":
        out.append(f"train: agentgym train --preset tiny --method {card.name}   # sets {json.dumps(dict(card.train))}")
    if card.missing:
        out.append(f"missing: {card.missing}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """``agentgym methods``: list the catalogue (filtered), or show one method."""
    from agentgym.cli import OneLineParser, UserError
    from agentgym.running.runner import format_table

    parser = OneLineParser(prog="agentgym methods", description="the credit-assignment methods and their status")
    parser.add_argument("name", nargs="?", help="show this method's card")
    parser.add_argument("--kind", choices=KINDS)
    parser.add_argument("--need", action="append", default=[], choices=sorted(NEEDS),
                        help="only methods that need this (repeat for several)")  # fmt: skip
    parser.add_argument("--status", choices=STATUSES)
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print the cards as JSON")
    form.add_argument("--markdown", action="store_true", help="print the docs table")
    args = parser.parse_args(argv)
    if args.name is not None:
        try:
            card = get_method(args.name)
        except KeyError as exc:
            raise UserError(str(exc.args[0])) from None
        print(json.dumps(card.row(), indent=2) if args.json else describe(card))
        return 0
    cards = [c for c in catalogue() if (args.kind is None or c.kind == args.kind)
             and (args.status is None or c.status == args.status) and set(args.need) <= set(c.needs)]  # fmt: skip
    if args.json:
        print(json.dumps([c.row() for c in cards], indent=2))
    elif args.markdown:
        print(markdown(cards))
    else:
        print(format_table(rows(cards)) if cards else "no method matches")
        print(coverage(cards))
    return 0


if __name__ == "__main__":  # python -m agentgym.baselines.methods README.md docs/methods.md: regenerate their tables
    import sys

    for name in sys.argv[1:]:
        page = Path(name)
        page.write_text(fill_docs(page.read_text(), catalogue()))
