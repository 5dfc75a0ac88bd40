"""Built-in Shop-v0 agents: ``oracle`` (privileged: searches the goal product's title, pages to it, selects the
goal's options, buys), ``heuristic`` (an honest baseline: searches the instruction's words, opens the first result
within the price cap, selects every option value the instruction names, buys), ``rule`` (the rule baseline of the
WebShop paper: searches the instruction, opens the first result, buys it with no option selected) and ``random``
(random clicks and searches, now and then malformed).
"""

from __future__ import annotations

import re
from typing import Any

from agentgym.contract.agent import Agent, GoldAgent

Message = dict[str, Any]
_ACTIONS = re.compile(r"Available actions: (.*)$")
_CAP = re.compile(r"price lower than ([\d.]+) dollars")
_ASIN = re.compile(r"B0[A-Z0-9]{8}")
_PRICE = re.compile(r"^\$([\d.]+)")
_BUTTONS = {"back to search", "< prev", "description", "features", "reviews", "attributes", "buy now"}


def page_parts(messages: list[Message]) -> list[str]:
    """The last observation's page, split at ``[SEP]`` (an ``Invalid action`` note and the actions line dropped)."""
    text = messages[-1]["content"] if messages else ""
    text = text.rsplit("\n\n", 1)[-1].split("\nAvailable actions:", 1)[0]
    return [p.strip() for p in text.split(" [SEP] ")]


def shown_asins(parts: list[str]) -> list[str]:
    """The ASINs a results page shows (generated ones: ``B0`` and eight letters or digits), in order."""
    return [p for p in parts if _ASIN.fullmatch(p)]


def instruction_of(messages: list[Message]) -> str:
    parts = page_parts(messages)
    return parts[parts.index("Instruction:") + 1] if "Instruction:" in parts else ""


class OracleAgent(GoldAgent):
    """Searches ``gold["search"]`` (the goal product's title), clicks ``Next >`` until the product is shown, selects
    ``gold["select"]`` one option a turn, then buys."""

    name = "oracle"

    def play(self, turn: int, messages: list[Message]) -> str:
        parts = page_parts(messages)
        if parts[:1] == ["WebShop"]:
            return f"search[{self.gold['search']}]"
        asin = self.gold["asin"]
        if parts and parts[-1] != "Buy Now" and "Description" not in parts:  # a results page
            return f"click[{asin.lower()}]" if asin in parts else "click[next >]"
        chosen = set(self._selected(messages))
        for value in self.gold["select"].values():
            if value not in chosen:
                return f"click[{value}]"
        return "click[buy now]"

    @staticmethod
    def _selected(messages: list[Message]) -> list[str]:
        """The option clicks since the last product was opened."""
        out: list[str] = []
        for m in messages:
            if m.get("role") != "assistant":
                continue
            act = (m.get("content") or "").strip()
            if act.startswith("click[b0") or act.startswith("search["):
                out = []
            elif act.startswith("click[") and act not in ("click[next >]", "click[buy now]"):
                out.append(act[6:-1])
        return out


class HeuristicAgent(Agent):
    """Search-then-click (see the module docstring)."""

    name = "heuristic"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        parts = page_parts(messages)
        instruction = instruction_of(messages)
        if parts[:1] == ["WebShop"]:
            words = _CAP.sub("", instruction).replace(",", " ")
            return f"search[{' '.join(words.split()[:20])}]"
        if parts and parts[-1] == "Buy Now":  # an item page: select what the instruction names, then buy
            text = " " + re.sub(r"[,.]", " ", instruction.lower()) + " "
            clicks = [c[6:-1] for c in info.get("admissible_commands", []) if c.startswith("click[")]
            wanted = sorted((c for c in clicks if c not in _BUTTONS and f" {c} " in text), key=lambda v: (-len(v), v))
            done = {(m.get("content") or "")[6:-1] for m in messages[-8:] if m.get("role") == "assistant"}
            todo = [v for v in wanted if v not in done]
            return f"click[{todo[0]}]" if todo else "click[buy now]"
        cap = float(m[1]) if (m := _CAP.search(instruction)) else float("inf")
        asins = shown_asins(parts)
        for asin in asins:
            i = parts.index(asin)
            price = _PRICE.match(parts[i + 2]) if i + 2 < len(parts) else None
            if price is None or float(price[1]) <= cap:
                return f"click[{asin.lower()}]"
        return f"click[{asins[0].lower()}]" if asins else "click[back to search]"


class RuleAgent(Agent):
    """WebShop's rule baseline: ``search[<instruction>]``, the first result, ``Buy Now``."""

    name = "rule"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        parts = page_parts(messages)
        if parts[:1] == ["WebShop"]:
            return f"search[{instruction_of(messages)}]"
        if parts and parts[-1] == "Buy Now":
            return "click[buy now]"
        asins = shown_asins(parts)
        return f"click[{asins[0].lower()}]" if asins else "click[back to search]"


class RandomAgent(Agent):
    """Random actions among the page's available ones; one in ten is malformed."""

    name = "random"

    def act(self, messages: list[Message], info: dict[str, Any]) -> str:
        rng = self.np_random
        if rng.random() < 0.1:
            return str(rng.choice(["buy", "click[", "search[]", "click[nothing here]"]))
        commands = info.get("admissible_commands") or ["search[<keywords>]"]
        pick = str(commands[int(rng.integers(len(commands)))])
        if pick.startswith("search["):
            words = instruction_of(messages).split()
            k = int(rng.integers(1, 6))
            return f"search[{' '.join(str(w) for w in rng.choice(words, size=min(k, len(words)), replace=False))}]"
        return pick
