"""ToolUse-v0: multi-turn function calling over stateful worlds (a file system, a bank, a calendar with a to-do
list), BFCL-style.

An episode is one task: a world in an initial state and 2-4 user instructions, given one per user turn. Many need
several agent steps, because a call needs an earlier call's result (the id of an event found by its title, the
balance of an account to empty, the content of a file to copy). Each agent turn either calls tools (Hermes
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, or an OpenAI assistant message as JSON:
``{"tool_calls": [{"type": "function", "function": {"name", "arguments"}}]}``) and gets one ``tool`` message per
call back, or replies in plain text, which ends the instruction and brings the next one. Arguments are checked
against the tool's JSON schema before the tool runs; a rejected call (bad JSON, unknown tool, missing, extra or
wrongly typed argument) changes nothing, comes back as a ``tool`` message and makes the step invalid; a tool's
domain error ("insufficient funds") comes back the same way on a valid step.

Variants (constructor ``variant`` or reset option ``variant``): ``"base"``; ``"miss_param"``: one instruction
leaves out a value; ``"miss_func"``: a function one instruction needs is withheld from the tool list; ``"mixed"``:
each task plays the variant its generator drew for it (a third each). In the two held variants the right move is
to ask the user (a plain-text reply); the simulated user then gives the value or re-enables the function. Success:
the outcome after every instruction equals the gold replay's, and the agent's replies state the required facts (a
balance, a path, a file's content, an event's start time). The outcome (``World.outcome``) is what the user asked
for, not the path: balances and accounts, files and their contents, events and to-dos by their fields; not the
bank's history, the order of the calls or the ids handed out.

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/ToolUse-v0", world="bank")
>>> obs, info = env.reset(options={"task_index": 3})
>>> obs[-1]["content"]
'Transfer 302.50 from savings to checking. Then tell me the new balance of checking.'
>>> call = '<tool_call>{"name": "transfer", "arguments": {"source": "savings", "target": "checking", "amount": 302.5}}'
>>> obs, *_ = env.step(call + '</tool_call>')
>>> obs[0]["role"], obs[0]["content"]
('tool', '"moved 302.50 from savings to checking"')
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any, ClassVar

from agentgym.contract.env import AgentEnv, StepResult
from agentgym.contract.parsing import ParseError, ToolCall, is_blank, parse_tool_turn
from agentgym.contract.trust import declare, flag, one_of
from agentgym.envs.tool_use.agents import OracleAgent, RandomAgent
from agentgym.envs.tool_use.facts import outcome_facts
from agentgym.envs.tool_use.limits import (
    MAX_CALLS_PER_STEP,
    MAX_RESULT_CHARS,
    MAX_WORLD_CHARS,
    cut,
    json_chars,
    world_limit_error,
)
from agentgym.envs.tool_use.tasks import build_world, make_task, replay
from agentgym.envs.tool_use.tools import ArgumentError, LimitError, ToolError, validate_arguments
from agentgym.envs.tool_use.worlds import WORLDS, World
from agentgym.grading.facts import states

VARIANTS = ("base", "miss_func", "miss_param")
#: What the ``variant`` argument accepts: a variant, or ``"mixed"`` (each task plays the one drawn for it).
VARIANT_CHOICES = (*VARIANTS, "mixed")
TASKS_PER_WORLD = 10_000
#: Calls one agent turn may make (``agentgym.envs.tool_use.limits.MAX_CALLS_PER_STEP``).
MAX_CALLS_PER_TURN = MAX_CALLS_PER_STEP

SYSTEM = (
    "You are an assistant that acts on the user's {world} through function calls. The functions you may call are "
    "listed as JSON schemas between <tools> and </tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call functions, put one JSON object per call in your turn, each inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>\n'
    '(or answer with an OpenAI assistant message as JSON: {{"tool_calls": [{{"type": "function", "function": '
    '{{"name": ..., "arguments": "<JSON string>"}}}}]}}). Each result comes back as a tool message. When the '
    "request is done, reply to the user in plain text (no tool call), including any information they asked for. "
    "If a request lacks a value you need, or needs a function you do not have, ask the user instead of guessing."
)


def world_state_diff(state: Mapping[str, Any], gold: Mapping[str, Any], world: type[World] = World) -> list[str]:
    """The attributes whose outcomes (``world.outcome``: what the user asked for, not the path) differ between two
    world states."""
    if state == gold:  # the same state has the same outcome
        return []
    mine, theirs = world.outcome(state), world.outcome(gold)
    return sorted(k for k in {*mine, *theirs} if mine.get(k) != theirs.get(k))


def facts_stated(text: str, facts: list[str]) -> bool:
    """Whether a reply states every fact, each compared by value (``agentgym.grading.facts.states``; its kind read from
    its canonical form: ``2610.50`` is money, so ``$2,610.5`` states it; ``08:00`` a time, so ``8am`` does; anything
    else a whole phrase, any case)."""
    return all(states(text, f) for f in facts)


class ToolUseEnv(AgentEnv):
    """Multi-turn tool use over stateful worlds (see the module docstring).

    Args:
        world: a name of ``WORLDS`` (``"filesystem"``, ``"bank"``, ``"calendar"``) or ``"all"`` (every world's
            tasks, 10,000 each, interleaved: task ``i`` is task ``i // 3`` of world ``i % 3``).
        variant: ``"base"``, ``"miss_func"``, ``"miss_param"`` or ``"mixed"`` (the reset option ``variant``
            overrides it).
        state_facts: add ``state_facts`` (the world's outcome as object -> attribute facts, ``facts``) to ``info``
            on every turn and ``goal_facts`` (the gold final state's) to ``info["gold"]``.
        max_turns: agent turns before truncation.
        invalid_action_penalty: subtracted (component ``format``) for each malformed call.
    """

    agents: ClassVar[Mapping[str, Any]] = {"oracle": OracleAgent, "random": RandomAgent}
    reset_options: tuple[str, ...] = ("variant",)

    public_args = declare(AgentEnv.public_args, world=one_of("all", *WORLDS), variant=one_of(*VARIANT_CHOICES),
                          state_facts=flag())  # fmt: skip

    def __init__(
        self,
        *,
        world: str = "all",
        variant: str = "base",
        state_facts: bool = False,
        max_turns: int = 30,
        invalid_action_penalty: float = 0.0,
        render_mode: str | None = None,
    ):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)
        if world != "all" and world not in WORLDS:
            raise ValueError(f"world must be 'all' or one of {list(WORLDS)}, got {world!r}")
        if variant not in VARIANT_CHOICES:
            raise ValueError(f"variant must be one of {VARIANT_CHOICES}, got {variant!r}")
        self.worlds = list(WORLDS) if world == "all" else [world]
        self.variant = variant
        self.state_facts = bool(state_facts)
        self.num_tasks = TASKS_PER_WORLD * len(self.worlds)
        self._ep: dict[str, Any] = {}
        self._world: World | None = None

    # -- tasks --------------------------------------------------------------------------------------
    def task_index_of(self, task_id: str) -> int:
        world, _, local = task_id.partition("/")
        if world not in self.worlds or not local.isdigit() or int(local) >= TASKS_PER_WORLD:
            raise ValueError(f"unknown task_id {task_id!r}: ids look like '{self.worlds[0]}/17'")
        return int(local) * len(self.worlds) + self.worlds.index(world)

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
        variant = options.get("variant", self.variant)
        if variant not in VARIANT_CHOICES:
            raise ValueError(f"variant must be one of {VARIANT_CHOICES}, got {variant!r}")
        # Worlds interleave (index i: world i % n, its task i // n), so any first N tasks cover every world.
        name, local = self.worlds[task_index % len(self.worlds)], task_index // len(self.worlds)
        task = make_task(name, local)
        if variant == "mixed":
            variant = task["mixed_variant"]
        self._world = build_world(task)
        hold = None
        if variant == "miss_param":
            hold = {"kind": "param", "instruction": task["miss_param"]}
        elif variant == "miss_func":
            hold = {"kind": "func", **task["miss_func"]}
        self._ep = {
            "task": task,
            "variant": variant,
            "hold": hold,
            "gold_states": replay(task),
            "instruction": 0,
            "asked": False,  # whether the held instruction's missing piece was asked for and given
            "disabled": [hold["function"]] if hold and hold["kind"] == "func" else [],
            "replies": [],
            "checks": [],
            "calls": 0,
            # whether the agent asked before changing the world during the held instruction (None: not yet asked)
            "asked_first": None,
            "instruction_start": self._world.state(),
        }
        schemas = self._schemas()
        tools = "\n".join(json.dumps(s) for n, s in schemas.items() if n not in self._ep["disabled"])
        system = SYSTEM.format(world=self._world.description, tools=tools)
        if self._world.context():
            system += " " + self._world.context()
        obs = [{"role": "system", "content": system}, {"role": "user", "content": self._instruction_text(0)}]
        self._gold = self._make_gold()
        if self.state_facts:
            self._gold["goal_facts"] = outcome_facts(type(self._world).outcome(self._gold["final_state"]))
        return obs, {"task_id": f"{name}/{local}", "gold": self._gold, **self._info()}

    def _schemas(self) -> dict[str, dict[str, Any]]:
        assert self._world is not None
        return type(self._world).schemas()

    def _instruction_text(self, k: int) -> str:
        ins = self._ep["task"]["instructions"][k]
        hold = self._ep["hold"]
        if hold and hold["kind"] == "param" and hold["instruction"] == k:
            return ins["missing_text"]
        return ins["text"]

    def _make_gold(self) -> dict[str, Any]:
        """Gold for reward shapers: ``calls`` (one list per oracle turn, as ``ToolCallMatching`` reads), ``turns``
        (the oracle's turns: calls and reply), the task record, the variant and the gold states."""
        task, hold = self._ep["task"], self._ep["hold"]
        turns: list[dict[str, Any]] = []
        for k, ins in enumerate(task["instructions"]):
            if hold and hold["instruction"] == k:
                what = "value" if hold["kind"] == "param" else f"function {hold['function']}"
                turns.append({"calls": [], "reply": f"Before I can do that, could you give me the missing {what}?"})
            turns += [{"calls": step, "reply": None} for step in ins["steps"]]
            reply = "Done." + "".join(f" {f}" for f in ins["facts"])
            turns.append({"calls": [], "reply": reply})
        return {
            "calls": [t["calls"] for t in turns],
            "turns": turns,
            "category": task["world"],  # summaries break results down by world
            "task": task,
            "variant": self._ep["variant"],
            "hold": hold,
            "final_state": self._ep["gold_states"][-1],
        }

    # -- steps --------------------------------------------------------------------------------------
    def _step(self, action: str) -> StepResult:
        try:
            turn = parse_tool_turn(action)
            calls, text = (list(turn.calls) if turn.calls is not None else None), turn.text
            if calls is not None and len(calls) > MAX_CALLS_PER_TURN:
                raise ParseError(f"Too many calls in one turn ({len(calls)}); at most {MAX_CALLS_PER_TURN}.")
        except ParseError as e:
            return self._invalid(f"Error: {e}")
        if calls is not None:
            return self._run_calls(calls)
        assert text is not None
        if is_blank(text):
            return self._invalid("Error: empty reply. Call a tool or answer the user in plain text.", role="user")
        return self._reply(text)

    def _invalid(self, message: str, role: str = "tool") -> StepResult:
        return StepResult([{"role": role, "content": message}], action_valid=False, parse_error=message,
                          info=self._info())  # fmt: skip

    def _run_calls(self, calls: list[ToolCall]) -> StepResult:
        assert self._world is not None
        schemas = self._schemas()
        out, errors = [], []
        for call in calls:
            self._ep["calls"] += 1
            msg: dict[str, Any] = {"role": "tool", "name": call.name}
            if call.id is not None:
                msg["tool_call_id"] = call.id
            if call.name not in schemas or call.name in self._ep["disabled"]:
                available = [n for n in schemas if n not in self._ep["disabled"]]
                error = f"Error: unknown function {call.name!r}; available functions: {available}."
                errors.append(error)
                out.append({**msg, "content": error})
                continue
            try:
                args = validate_arguments(schemas[call.name]["function"], call.arguments)
            except ArgumentError as e:
                errors.append(f"Error: {e}")
                out.append({**msg, "content": f"Error: {e}"})
                continue
            trial = self._world.copy()  # a tool that fails leaves the world as it was
            try:
                result = getattr(trial, call.name)(**args)
                if (size := json_chars(vars(trial))) > MAX_WORLD_CHARS:
                    raise LimitError(world_limit_error(size))
            except LimitError as e:  # the call itself went past a limit: an invalid call, as a bad argument is
                errors.append(f"Error: {e}")
                out.append({**msg, "content": f"Error: {e}"})
                continue
            except ToolError as e:
                out.append({**msg, "content": f"Error: {e}"})
                continue
            except Exception as e:  # a tool bug must not end the episode
                out.append({**msg, "content": f"Error: {call.name} failed ({type(e).__name__})."})
                continue
            self._world = trial
            out.append({**msg, "content": json.dumps(result, ensure_ascii=False)})
        out = [{**m, "content": cut(m["content"], MAX_RESULT_CHARS)} for m in out]
        if errors:
            return StepResult(out, action_valid=False, parse_error=" ".join(errors)[:2000], info=self._info())
        return StepResult(out, info=self._info())

    def _reply(self, text: str) -> StepResult:
        assert self._world is not None
        ep = self._ep
        k = ep["instruction"]
        hold = ep["hold"]
        if hold and hold["instruction"] == k and not ep["asked"]:
            ep["asked"] = True
            ep["asked_first"] = self._world.state() == ep["instruction_start"]
            ins = ep["task"]["instructions"][k]
            if hold["kind"] == "param":
                answer = ins["followup"] + " " + ins["text"]
            else:
                ep["disabled"] = []
                schema = json.dumps(self._schemas()[hold["function"]])
                answer = f"I have enabled {hold['function']} for you:\n<tools>\n{schema}\n</tools>\nGo ahead."
            return StepResult([{"role": "user", "content": answer}], info=self._info())
        ep["replies"].append(text)
        state = self._world.state()
        diff = world_state_diff(state, ep["gold_states"][k], type(self._world))
        facts = ep["task"]["instructions"][k]["facts"]
        told = facts_stated(text, facts)
        check = {"instruction": k, "state_match": not diff, "mismatched": diff, "facts_told": told}
        ep["checks"].append(check)
        ep["instruction"] = k + 1
        ep["instruction_start"] = state
        info = {**self._info(), "state_check": check}
        if k + 1 < len(ep["task"]["instructions"]):
            return StepResult([{"role": "user", "content": self._instruction_text(k + 1)}], info=info)
        # Every instruction's outcome was the gold replay's (a wrong effect undone by a later instruction still
        # failed its own), every fact was told, and a held instruction was asked about before the agent acted.
        outcomes = all(c["state_match"] for c in ep["checks"])
        success = outcomes and all(c["facts_told"] for c in ep["checks"]) and ep["asked_first"] is not False
        info["metrics"] = self._metrics(success)
        return StepResult([], {"outcome": float(success)}, terminated=True, success=success, info=info)

    def _metrics(self, success: bool) -> dict[str, float]:
        checks = self._ep["checks"]
        n = len(self._ep["task"]["instructions"])
        return {
            "success": float(success),
            "state_checks_passed": sum(c["state_match"] for c in checks) / n,
            "facts_told": sum(c["facts_told"] for c in checks) / n,
            "calls": float(self._ep["calls"]),
        }

    def _truncated_info(self) -> dict[str, Any]:
        return {"metrics": self._metrics(False)}

    def _info(self) -> dict[str, Any]:
        ep = self._ep
        info = {
            "instruction": ep["instruction"],
            "state_checks": [c["state_match"] for c in ep["checks"]],
            "variant": ep["variant"],
            "asked_first": ep["asked_first"],
        }
        if self.state_facts:
            assert self._world is not None
            info["state_facts"] = outcome_facts(type(self._world).outcome(self._world.state()))
        return info

    def anchor(self) -> str:
        """The task, variant and progress plus a digest of the whole world (private attributes included): histories
        that reach the same world at the same point of the dialogue share it."""
        ep = self._ep
        key = [vars(self._world), ep["instruction"], ep["asked"], ep["disabled"], ep["checks"]]
        digest = hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=8).hexdigest()
        return f"{self._task_id}:{ep['variant']}:{digest}"

    # -- branching ----------------------------------------------------------------------------------
    def _snapshot_state(self) -> Any:
        return copy.deepcopy((self._world, self._ep, self._gold))

    def _restore_state(self, state: Any) -> None:
        self._world, self._ep, self._gold = copy.deepcopy(state)

    @property
    def world(self) -> World | None:
        """The live world (its public attributes are the state)."""
        return self._world
