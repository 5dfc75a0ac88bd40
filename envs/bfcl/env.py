"""BFCL-v0: the real BFCL v4 multi-turn benchmark (base, miss_func, miss_param, long_context; 200 tasks each), offline.

Tasks, gold calls, function docs, the API classes (``GorillaFileSystem``, ``TwitterAPI``, ``TradingBot``, ...) and
the state/response checkers all come from the installed ``bfcl-eval`` wheel (see ``agentgym.envs.bfcl.data``). The
protocol is ToolUse-v0's: the system prompt lists the functions as OpenAI tool schemas between ``<tools>`` tags;
BFCL's user turns come one at a time; an agent turn either calls functions (Hermes ``<tool_call>`` blocks or an
OpenAI assistant message as JSON) and gets one ``tool`` message per call, or replies in plain text, which ends the
user turn. Calls run on live instances of the task's classes, built as BFCL builds them; a result is the text BFCL
feeds back (a ``str`` as is, a ``dict`` as JSON, else ``str()``; an exception as ``"Error during execution: ..."``).

Calls run as BFCL's runner runs them (``execute_multi_turn_func_call``): any public method of the task's classes,
offered or not (a ``miss_func`` function before its turn runs too: BFCL only leaves it out of the prompt), with the
arguments as given (no check against the doc, no coercion: ``close_ticket(ticket_id='ticket_001')`` runs); a Python
error is the result text and the state keeps what the call changed before it raised, as in BFCL. Calls that do not
fit the docs are listed in ``info["doc_mismatches"]`` (they ran anyway). Only a call that would hang or exhaust
memory is refused (``HANG_GUARDS``; BFCL would try to run it). BFCL ``eval``s each call as Python text; the env calls
the method with the JSON arguments, which is the same for every call of a known function (JSON values survive
``repr``); a name that is no method gets BFCL's ``NameError`` text (BFCL would also run Python builtins by such a name,
and rewrites ``name(`` inside a string argument when ``name`` is a method: neither is reproduced). An action that is
not a well-formed call or reply is an invalid step and runs nothing (the agent gets a message and may retry; BFCL
would end the user turn).

At the end of each user turn the env runs BFCL's checks for that turn (``info["turn_check"]``): the gold calls of
turns 0..k replayed on fresh instances give the gold state and results; BFCL's ``state_checker`` (every public
attribute equal) and ``response_checker`` (this turn's gold results an unordered sub-multiset of all the agent's
results so far) must pass and the agent must have called something when the gold turn has calls; a turn whose gold
has no calls is not checked (``multi_turn_checker`` skips it). The reward and ``success`` are BFCL's verdict: every
turn passes and no turn was force-quit. ``irrelevance_check=True`` adds BFCL's ``multi_turn_irrelevance_checker``,
which BFCL v4's runner never calls: no call in a turn whose gold has none (``info["metrics"]["irrelevance"]`` reports
it either way). Limits are BFCL's: ``max_steps_per_turn`` (20) steps per user turn, the next one force-quits the task;
every step counts, invalid ones too. ``max_turns`` defaults to the most steps those limits allow in the longest task
(user turns x (max_steps_per_turn + 1)), so truncation never comes before BFCL's own limit.

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/BFCL-v0", category="base")                      # doctest: +SKIP
>>> obs, info = env.reset(options={"task_id": "multi_turn_base_0"})          # doctest: +SKIP
>>> obs[1]["content"][:45]                                                   # doctest: +SKIP
'Move \\'final_report.pdf\\' within document directory'
"""

from __future__ import annotations

import copy
import datetime
import decimal
import functools
import hashlib
import importlib
import json
import math
import pickle
import random
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from agentgym.contract.env import AgentEnv, StepResult
from agentgym.contract.parsing import ParseError, ToolCall, is_blank, parse_tool_turn
from agentgym.contract.spaces import Chat
from agentgym.contract.trust import declare, flag, integer, one_of
from agentgym.envs.bfcl import data
from agentgym.envs.bfcl.agents import OracleAgent, RandomAgent
from agentgym.envs.bfcl.data import Task
from agentgym.envs.tool_use.limits import MAX_OBSERVATION_CHARS, MAX_WORLD_CHARS, cap_observation
from agentgym.envs.tool_use.tools import ArgumentError

#: BFCL's MAXIMUM_STEP_LIMIT (``bfcl_eval/constants/default_prompts.py``): more call steps in one user turn and
#: BFCL force-quits the task, which then fails.
MAX_STEPS_PER_TURN = 20
#: Tool calls one step may make (one ``tool`` message each; the env's observation space allows as many messages):
#: BFCL's gold makes up to 34 in one user turn, which the oracle sends in one step. A step with more is invalid and
#: runs none of them.
MAX_CALLS_PER_STEP = 64
#: The deepest the instances' state may nest, in dicts, lists and objects (``measure_state``; a directory of the file
#: system takes three levels): the gold's deepest state nests 17. Together with ``MAX_WORLD_CHARS`` (the gold's largest
#: state takes about 43,000 characters) it bounds what a step may leave behind: a step whose calls go past either is
#: undone and invalid, and every walk over the state (copies, snapshots, BFCL's checkers) stays shallow.
MAX_STATE_DEPTH = 64
#: Arguments that would make a call run long, by name and the largest magnitude run: an mpmath or decimal precision
#: (1,000 digits take about 2 ms, 10,000 take 0.1 s: a step of ``MAX_CALLS_PER_STEP`` such calls would take seconds;
#: the gold asks for at most 10). BFCL has no such limit (it would run them slowly); the env refuses them as invalid
#: calls, the one place where its verdict can differ from BFCL's. Two other calls that would hang (an integer power
#: with millions of digits, an integer rounded to -2**63 places) get BFCL's result without being computed
#: (``shortcut``).
HANG_GUARDS = {"precision": 1_000}
#: Serialises tool calls across threads: ``MathAPI.logarithm`` sets mpmath's process-wide precision before computing.
_CALL_LOCK = threading.Lock()
#: How much of each missing gold result ``turn_check`` repeats.
MAX_REPORTED_CHARS = 300

SYSTEM = (
    "You are an assistant that carries out the user's requests through function calls. The functions you may call "
    "are listed as JSON schemas between <tools> and </tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call functions, put one JSON object per call in your turn, each inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>\n'
    '(or answer with an OpenAI assistant message as JSON: {{"tool_calls": [{{"type": "function", "function": '
    '{{"name": ..., "arguments": "<JSON string>"}}}}]}}). Each result comes back as a tool message. Keep calling '
    "functions until the request is done, then reply to the user in plain text (no tool call): that reply ends your "
    "turn and brings the user's next request. If a request lacks a value you need, or needs a function you do not "
    "have, say so in plain text instead of calling anything."
)
ADDED = "You can now also call these functions:\n<tools>\n{tools}\n</tools>\nPlease go on with what I asked before."


def _magnitude(value: Any) -> float | None:
    """How large a number-like argument is as the tools read it (mpmath also takes a float or a numeric string as a
    precision); None for anything else."""
    if isinstance(value, int | float):
        return abs(float(value)) if not isinstance(value, int) or value.bit_length() < 1000 else math.inf
    if isinstance(value, str):
        try:
            return abs(float(value))
        except ValueError:
            return None
    return None


def hang_guard(name: str, arguments: Mapping[str, Any]) -> str | None:
    """Why a call must not run here (it would hang or exhaust memory), or None (``HANG_GUARDS``)."""
    for key, limit in HANG_GUARDS.items():
        size = _magnitude(arguments.get(key))
        if size is not None and not size <= limit:
            return f"Argument {key!r} of {name} must be at most {limit} here."
    return None


def _plain_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def shortcut(name: str, arguments: Mapping[str, Any]) -> str | None:
    """BFCL's result text for a MathAPI call whose result is certain but would take long to compute, or None:
    ``power`` of integers with far more digits than Python prints (the result is the printing error) and
    ``round_number`` of an integer to more negative places than it has digits (0; Python builds ``10**-places``)."""
    if name == "power" and set(arguments) == {"base", "exponent"}:
        base, exponent = arguments["base"], arguments["exponent"]
        limit = sys.get_int_max_str_digits()
        huge = _plain_int(base) and _plain_int(exponent) and abs(base) >= 2 and exponent > 0 and limit > 0
        if huge and exponent * math.log10(abs(base)) > limit + 10:  # clearly past the limit
            return f"Error during execution: {_int_print_error(limit)}"
    if name == "round_number" and set(arguments) == {"number", "decimal_places"}:
        number, places = arguments["number"], arguments["decimal_places"]
        if isinstance(number, int) and _plain_int(places) and places < -(len(str(abs(number))) + 1):
            return format_result({"result": 0})
    return None


@functools.cache
def _int_print_error(limit: int) -> str:
    """The message Python gives when it cannot print an integer of more than ``limit`` digits."""
    try:
        str(10 ** (limit + 1))
    except ValueError as e:
        return str(e)
    raise AssertionError("unreachable: the integer printed")  # pragma: no cover


def format_result(value: Any) -> str:
    """A function's return value as the text BFCL feeds back (``execute_multi_turn_func_call`` in
    ``bfcl_eval/eval_checker/multi_turn_eval/multi_turn_utils.py``): a ``str`` as is, a ``dict`` as JSON (``str``
    when it does not serialise), anything else through ``str``.

    >>> format_result({"a": 1}), format_result([1]), format_result("ok")
    ('{"a": 1}', '[1]', 'ok')
    """
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def make_instances(task: Task) -> dict[str, Any]:
    """Fresh instances of the task's API classes, set up as BFCL's ``execute_multi_turn_func_call`` does: built with
    no arguments, then (unless stateless) ``_load_scenario(deepcopy(initial_config[name]), long_context=...)``."""
    out = {}
    for name in task.involved_classes:
        instance = data.function_class(name)()
        if not data.is_stateless(name):
            instance._load_scenario(copy.deepcopy(task.initial_config.get(name, {})), long_context=task.long_context)
        out[name] = instance
    return out


def execute(instances: dict[str, Any], owner: str, name: str, arguments: Mapping[str, Any]) -> str:
    """Run one call on ``instances[owner]`` as BFCL's ``execute_multi_turn_func_call`` does (keyword arguments as
    given; a raising call's result is ``"Error during execution: ..."`` and what it changed before raising stays)
    and return its result text. mpmath's and decimal's precision, which MathAPI sets process- or thread-wide, are
    put back afterwards (every BFCL function that reads them sets them first)."""
    known = shortcut(name, arguments)
    if known is not None:
        return known
    with _CALL_LOCK, decimal.localcontext():
        mp = importlib.import_module("mpmath").mp
        dps = mp.dps
        try:
            return format_result(getattr(instances[owner], name)(**copy.deepcopy(dict(arguments))))
        except Exception as e:  # a tool bug or a domain error must not end the episode
            return f"Error during execution: {e}"
        finally:
            mp.dps = dps


@dataclass(frozen=True)
class GoldTurn:
    """The gold replay after one user turn: the results of its gold calls and the instances' state."""

    results: tuple[str, ...]
    instances: dict[str, Any]


@functools.lru_cache(maxsize=16)
def gold_replay(category: str, index: int) -> tuple[GoldTurn, ...]:
    """Replay the gold calls turn by turn on fresh instances (BFCL's gold instances; cached, never mutated)."""
    task = data.load_tasks(category)[index]
    owners = data.method_owners(task.involved_classes)
    instances = make_instances(task)
    out = []
    for turn in task.ground_truth:
        results = []
        for text in turn:
            call = data.call_dict(text, owners)
            results.append(execute(instances, owners[call["name"]], call["name"], call["arguments"]))
        out.append(GoldTurn(tuple(results), copy.deepcopy(instances)))
    return tuple(out)


@functools.lru_cache(maxsize=16)
def gold_results(category: str, index: int) -> frozenset[str]:
    """Every result of the task's gold calls, all turns together: the only results BFCL's response checker can
    match (it compares them by equality), so the env keeps the agent's other results as short stand-ins."""
    return frozenset(r for turn in gold_replay(category, index) for r in turn.results)


def _result_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class StateMeasure:
    """One walk over the instances' whole state (``measure_state``): its digest, its size and its depth, or the
    limit the walk stopped at."""

    digest: str
    chars: int
    depth: int
    over: str | None = None


_EMIT, _VALUE = 0, 1


def measure_state(
    instances: Mapping[str, Any], max_chars: int = MAX_WORLD_CHARS, max_depth: int = MAX_STATE_DEPTH
) -> StateMeasure:
    """Walk the instances' state (private attributes included, clock values left out, dict keys sorted, shared
    objects and cycles as references) without recursion, so that any nesting is safe: its digest, its size in
    characters of the canonical text and its nesting depth; or, at the first limit it passes, why it stopped
    (``over``, the digest then empty)."""
    parts: list[str] = []
    chars = deepest = 0
    refs: dict[int, tuple[int, Any]] = {}  # id -> (order seen, the object: kept alive so no id is reused)
    stack: list[tuple[int, Any, int]] = [(_VALUE, dict(instances), 1)]
    while stack:
        kind, value, depth = stack.pop()
        if kind == _EMIT:
            text = value
        elif value is None or isinstance(value, bool | str | float):
            text = json.dumps(value)
        elif isinstance(value, int):
            text = f"i{value:x}"  # hexadecimal: no length limit on printing an integer
        elif isinstance(value, datetime.datetime | datetime.date):
            text = '"<time>"'  # e.g. a file's last-modified time: wall-clock, not state
        elif id(value) in refs:
            text = f"&{refs[id(value)][0]}"
        else:
            if depth > max_depth:
                return StateMeasure("", chars, depth, f"its state is nested more than {max_depth} levels deep")
            deepest = max(deepest, depth)
            refs[id(value)] = (len(refs), value)
            children: list[tuple[int, Any, int]] = []
            if isinstance(value, dict):
                items = sorted(((repr(k), v) for k, v in value.items()), key=lambda kv: kv[0])
                children.append((_EMIT, "{", 0))
                for key, item in items:
                    children += [(_EMIT, json.dumps(key) + ":", 0), (_VALUE, item, depth + 1), (_EMIT, ",", 0)]
                children.append((_EMIT, "}", 0))
            elif isinstance(value, list | tuple):
                children.append((_EMIT, "[", 0))
                for item in value:
                    children += [(_VALUE, item, depth + 1), (_EMIT, ",", 0)]
                children.append((_EMIT, "]", 0))
            elif isinstance(value, set | frozenset):
                children.append((_EMIT, json.dumps(sorted(repr(v) for v in value)), 0))
            elif isinstance(value, random.Random):
                children.append((_EMIT, json.dumps(repr(value.getstate())), 0))
            elif hasattr(value, "__dict__"):
                children += [(_EMIT, f"<{type(value).__name__}>", 0), (_VALUE, vars(value), depth + 1)]
            else:
                children.append((_EMIT, json.dumps(repr(value)), 0))
            stack.extend(reversed(children))
            continue
        chars += len(text)
        if chars > max_chars:
            return StateMeasure("", chars, deepest, f"its state would take more than {max_chars:,} characters")
        parts.append(text)
    digest = hashlib.blake2b("".join(parts).encode(), digest_size=8).hexdigest()
    return StateMeasure(digest, chars, deepest)


def state_digest(instances: Mapping[str, Any]) -> str:
    """A short digest of the instances' whole state (private attributes included, clock values excluded); a state
    past the limits of ``measure_state`` gets the digest of its limit."""
    measure = measure_state(instances)
    return measure.digest or hashlib.blake2b(str(measure.over).encode(), digest_size=8).hexdigest()


class BFCLEnv(AgentEnv):
    """BFCL v4 multi-turn tasks (see the module docstring).

    Args:
        category: ``"base"``, ``"miss_func"``, ``"miss_param"``, ``"long_context"`` (200 tasks each) or ``"all"``
            (800, interleaved: base 0, miss_func 0, miss_param 0, long_context 0, base 1, ...).
        max_steps_per_turn: agent steps allowed within one user turn (BFCL's limit is 20); one more and the task is
            force-quit and failed, as in BFCL.
        irrelevance_check: also require no call in a turn whose gold has none (BFCL's
            ``multi_turn_irrelevance_checker``, which BFCL v4's runner does not apply; off by default, so that the
            reward is BFCL's verdict).
        max_turns: agent steps in the whole episode before truncation; None (the default): the longest task's user
            turns x (``max_steps_per_turn`` + 1), which BFCL's per-turn limit reaches first.
        invalid_action_penalty: subtracted (component ``format``) for each invalid step.
    """

    agents: ClassVar[Mapping[str, Any]] = {"oracle": OracleAgent, "random": RandomAgent}

    public_args = declare(AgentEnv.public_args, category=one_of("all", *data.CATEGORIES),
                          max_steps_per_turn=integer(1, 100), irrelevance_check=flag())  # fmt: skip

    def __init__(
        self,
        *,
        category: str = "all",
        max_steps_per_turn: int = MAX_STEPS_PER_TURN,
        irrelevance_check: bool = False,
        max_turns: int | None = None,
        invalid_action_penalty: float = 0.0,
        render_mode: str | None = None,
    ):
        if category != "all" and category not in data.CATEGORIES:
            raise ValueError(f"category must be 'all' or one of {data.CATEGORIES}, got {category!r}")
        if max_steps_per_turn < 1:
            raise ValueError(f"max_steps_per_turn must be >= 1, got {max_steps_per_turn}")
        self.category = category
        self.max_steps_per_turn = max_steps_per_turn
        self.irrelevance_check = bool(irrelevance_check)
        self.categories = list(data.CATEGORIES) if category == "all" else [category]
        self.unavailable_reason = data.unavailable_reason()
        self._tasks: list[tuple[str, int]] = []  # (category, index within it)
        if self.unavailable_reason is None:
            # Categories interleave (task i: category i % n), so any first N tasks cover every category.
            sizes = {c: len(data.load_tasks(c)) for c in self.categories}
            rounds = max(sizes.values())
            self._tasks = [(c, i) for i in range(rounds) for c in self.categories if i < sizes[c]]
        self._ids = {self._task(i).id: i for i in range(len(self._tasks))}
        self.num_tasks = len(self._tasks)
        if max_turns is None:  # BFCL's limits: each user turn ends by its 21st step (a reply or the force-quit)
            longest = max((len(self._task(i).turns) for i in range(self.num_tasks)), default=1)
            max_turns = longest * (max_steps_per_turn + 1)
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)
        self.observation_space = Chat(max_messages=MAX_CALLS_PER_STEP)
        self._ep: dict[str, Any] = {}
        self._instances: dict[str, Any] = {}
        self._keys = ("", "")  # digests of the instances' state and of the dialogue's progress (``anchor``)
        self._before_step = b""  # the episode as it was before the step being played (pickled)

    # -- tasks --------------------------------------------------------------------------------------------------
    def _task(self, index: int) -> Task:
        category, local = self._tasks[index]
        return data.load_tasks(category)[local]

    def task_index_of(self, task_id: str) -> int:
        if task_id not in self._ids:
            example = next(iter(self._ids), "multi_turn_base_0")
            raise ValueError(f"unknown task_id {task_id!r} for category {self.category!r}: ids look like {example!r}")
        return self._ids[task_id]

    @property
    def task(self) -> Task | None:
        """The task being played (None before the first ``reset``)."""
        return None if self._task_index is None or not self._tasks else self._task(self._task_index)

    @property
    def instances(self) -> dict[str, Any]:
        """The live API instances (class name -> instance); their public attributes are the checked state."""
        return self._instances

    def offered_tools(self) -> dict[str, dict[str, Any]]:
        """The tool schemas offered at the current user turn (name -> schema; withheld functions left out)."""
        task = self.task
        return {} if task is None else dict(self._schemas(task, self._ep.get("user_turn", 0)))

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
        task = self._task(task_index)
        self._instances = make_instances(task)
        self._ep = {"user_turn": 0, "steps": 0, "turn_calls": 0, "calls": 0, "results": [], "results_digest": 0,
                    "checks": []}  # fmt: skip
        self._gold = self._make_gold(task)
        self._keys = (state_digest(self._instances), self._progress_digest())
        tools = "\n".join(json.dumps(s) for s in self._schemas(task, 0).values())
        obs = [{"role": "system", "content": SYSTEM.format(tools=tools)}, *self._user_messages(task, 0)]
        return obs, {"task_id": task.id, "gold": self._gold, **self._info()}

    @staticmethod
    def _withheld(task: Task, k: int) -> set[str]:
        """Functions still withheld at user turn ``k`` (``missed_function``: withheld until the listed turn)."""
        return {f for turn, names in task.missed_function.items() if turn > k for f in names}

    @staticmethod
    @functools.cache
    def _all_schemas(classes: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        return {d["name"]: data.tool_schema(d) for c in classes for d in data.function_docs(c)}

    def _schemas(self, task: Task, k: int) -> dict[str, dict[str, Any]]:
        """The tool schemas offered at user turn ``k``, in BFCL's order (by involved class)."""
        withheld = self._withheld(task, k)
        return {n: s for n, s in self._all_schemas(task.involved_classes).items() if n not in withheld}

    def _user_messages(self, task: Task, k: int) -> list[dict[str, str]]:
        out = []
        added = task.missed_function.get(k, ())
        if added:  # BFCL gives the withheld functions back at this turn (its user message there is empty)
            schemas = self._all_schemas(task.involved_classes)
            tools = "\n".join(json.dumps(schemas[n]) for n in added if n in schemas)
            out.append({"role": "user", "content": ADDED.format(tools=tools)})
        out += [{"role": m["role"], "content": m["content"]} for m in task.turns[k]]
        return out

    def _make_gold(self, task: Task) -> dict[str, Any]:
        """Gold in ToolUse-v0's shape: ``calls`` (one list per oracle turn, as ``ToolCallMatching`` reads) and
        ``turns`` (the oracle's turns: each user turn's gold calls in one step, then a plain reply), plus BFCL's own
        ``ground_truth`` strings and the task's metadata."""
        owners = data.method_owners(task.involved_classes)
        turns: list[dict[str, Any]] = []
        for k, truth in enumerate(task.ground_truth):
            calls = [data.call_dict(t, owners) for t in truth]
            if calls:
                turns.append({"calls": calls, "reply": None, "user_turn": k})
            if calls:
                reply = "Done."
            elif task.category == "miss_func":
                reply = "I cannot do that with the functions I have. Could you give me a function for it?"
            else:
                reply = "I cannot do that yet: a value I need is missing. Could you tell me?"
            turns.append({"calls": [], "reply": reply, "user_turn": k})
        return {
            "calls": [t["calls"] for t in turns],
            "turns": turns,
            "ground_truth": [list(t) for t in task.ground_truth],
            "category": task.category,
            "involved_classes": list(task.involved_classes),
            "missed_function": {str(k): list(v) for k, v in task.missed_function.items()},
        }

    # -- steps --------------------------------------------------------------------------------------------------
    def _step(self, action: str) -> StepResult:
        """Play one step; if anything raises, put the episode back as it was before the step (state included)."""
        saved = pickle.dumps((self._instances, self._ep, self._keys), protocol=pickle.HIGHEST_PROTOCOL)
        self._before_step = saved
        try:
            result = self._play(action)
            self._keys = (self._keys[0], self._progress_digest())
        except BaseException:
            self._instances, self._ep, self._keys = pickle.loads(saved)
            raise
        return result

    def _play(self, action: str) -> StepResult:
        self._ep["steps"] += 1
        try:
            turn = parse_tool_turn(action)
        except ParseError as e:
            return self._limit(self._invalid(f"Error: {e}"))
        if turn.calls is not None:
            return self._limit(self._run_calls(list(turn.calls)))
        assert turn.text is not None
        if is_blank(turn.text):
            error = "Error: empty reply. Call a function or answer the user in plain text."
            return self._limit(self._invalid(error, role="user"))
        return self._end_turn(forced=False)

    def _limit(self, result: StepResult) -> StepResult:
        """Force-quit the task when the user turn has taken more than ``max_steps_per_turn`` steps (BFCL fails it)."""
        if self._ep["steps"] <= self.max_steps_per_turn:
            return result
        end = self._end_turn(forced=True)
        return StepResult(result.observation, end.reward_components, terminated=True, action_valid=result.action_valid,
                          parse_error=result.parse_error, success=False, info=end.info)  # fmt: skip

    def _invalid(self, message: str, role: str = "tool") -> StepResult:
        return StepResult([{"role": role, "content": message}], action_valid=False, parse_error=message,
                          info=self._info())  # fmt: skip

    def _run_calls(self, calls: list[ToolCall]) -> StepResult:
        """Run each call as BFCL does (see the module docstring); ``hang_guard`` refuses one, and a step whose calls
        take the state past its limits (``MAX_WORLD_CHARS``, ``MAX_STATE_DEPTH``) is undone."""
        if len(calls) > MAX_CALLS_PER_STEP:
            return self._invalid(f"Error: too many calls in one turn ({len(calls)}); at most {MAX_CALLS_PER_STEP}.")
        result = self._run(calls)
        measure = measure_state(self._instances)
        if measure.over is None:
            self._keys = (measure.digest, self._keys[1])
            return result
        self._instances, self._ep, self._keys = pickle.loads(self._before_step)  # as before the step, which counts
        self._ep["steps"] += 1
        error = (f"Error: this turn's calls were undone, since after them {measure.over} (at most "
                 f"{MAX_WORLD_CHARS:,} characters, {MAX_STATE_DEPTH} levels); nothing they did was kept.")  # fmt: skip
        out = [{**m, "content": error} for m in result.observation]
        return StepResult(out, action_valid=False, parse_error=error, info={**self._info(), "doc_mismatches": []})

    def _run(self, calls: list[ToolCall]) -> StepResult:
        task = self.task
        assert task is not None
        schemas = self.offered_tools()
        owners = data.method_owners(task.involved_classes)
        out, errors, mismatches = [], [], []
        for call in calls:
            self._ep["calls"] += 1
            self._ep["turn_calls"] += 1
            msg: dict[str, Any] = {"role": "tool", "name": call.name}
            if call.id is not None:
                msg["tool_call_id"] = call.id
            refused = hang_guard(call.name, call.arguments)
            if refused is not None:
                errors.append(f"Error: {refused}")
                out.append({**msg, "content": f"Error: {refused}"})
                continue
            mismatch = self._doc_mismatch(call, schemas)
            if mismatch is not None:
                mismatches.append(mismatch)
            if call.name in owners:
                result = execute(self._instances, owners[call.name], call.name, call.arguments)
            else:  # BFCL evaluates the call text, where an unknown name is a NameError
                result = f"Error during execution: name {call.name!r} is not defined"
            self._keep_result(result)
            out.append({**msg, "content": result})
        out = cap_observation(out, MAX_OBSERVATION_CHARS)
        info = {**self._info(), "doc_mismatches": mismatches}
        if errors:
            return StepResult(out, action_valid=False, parse_error=" ".join(errors)[:2000], info=info)
        return StepResult(out, info=info)

    def _keep_result(self, result: str) -> None:
        """Add a result to those the response checker reads: as it is when some gold result equals it, else as a
        short stand-in that equals no gold result (memory stays bounded, the verdict is the same)."""
        ep = self._ep
        digest = _result_hash(result)
        ep["results_digest"] = (ep["results_digest"] + digest) % 2**64  # order-free, as the checker is
        gold = gold_results(*self._tasks[self._task_index])  # type: ignore[index]
        ep["results"].append(result if result in gold else f"<a result of {len(result)} characters, {digest:016x}>")

    def _doc_mismatch(self, call: ToolCall, schemas: Mapping[str, dict[str, Any]]) -> str | None:
        """Why a call does not fit the functions offered at this turn (it runs anyway, as in BFCL), or None."""
        if call.name not in schemas:
            task = self.task
            assert task is not None
            if call.name in self._all_schemas(task.involved_classes):
                return f"{call.name} is not offered at this turn"
            return f"unknown function {call.name!r}"
        try:
            data.check_arguments(schemas[call.name]["function"], call.arguments)
        except ArgumentError as e:
            return str(e)
        return None

    def _check_turn(self, k: int, forced: bool) -> dict[str, Any]:
        """BFCL's checks of user turn ``k`` (``multi_turn_checker`` in
        ``bfcl_eval/eval_checker/multi_turn_eval/multi_turn_checker.py``, whose ``state_checker`` and
        ``response_checker`` are called here); with ``irrelevance_check``, also no call where the gold has none."""
        task = self.task
        assert task is not None
        checker = data.bfcl_module(data.CHECKER)
        gold = gold_replay(*self._tasks[self._task_index])[k]  # type: ignore[index]
        made = self._ep["turn_calls"]
        check: dict[str, Any] = {"turn": k, "passed": False, "bfcl_passed": False, "state_match": True,
                                 "response_match": True, "calls": made, "gold_calls": len(task.ground_truth[k]),
                                 "mismatched": [], "missing_results": [], "forced_quit": forced}  # fmt: skip
        if task.ground_truth[k]:
            for name, gold_instance in gold.instances.items():
                verdict = checker.state_checker({name: self._instances[name]}, {name: gold_instance})
                if not verdict["valid"]:
                    check["mismatched"] += [f"{name}.{a}" for a in verdict["details"]["differences"]]
            check["state_match"] = not check["mismatched"]
            verdict = checker.response_checker(list(self._ep["results"]), list(gold.results), k)
            check["response_match"] = verdict["valid"]
            if not verdict["valid"]:
                check["missing_results"] = [r[:MAX_REPORTED_CHARS] for r in verdict["details"]["missing_items"]]
            check["bfcl_passed"] = made > 0 and check["state_match"] and check["response_match"] and not forced
            check["irrelevance_passed"] = True
        else:  # BFCL skips the state and response checks here (the agent should ask instead of calling)
            check["bfcl_passed"] = not forced
            check["irrelevance_passed"] = made == 0
        check["passed"] = check["bfcl_passed"] and (check["irrelevance_passed"] or not self.irrelevance_check)
        return check

    def _end_turn(self, forced: bool) -> StepResult:
        """End the current user turn (a plain reply, or the step limit): check it, then bring the next user turn."""
        task = self.task
        assert task is not None
        ep = self._ep
        k = ep["user_turn"]
        check = self._check_turn(k, forced)
        ep["checks"].append(check)
        ep["user_turn"], ep["steps"], ep["turn_calls"] = k + 1, 0, 0
        info = {**self._info(), "turn_check": check}
        if not forced and k + 1 < len(task.turns):
            return StepResult(self._user_messages(task, k + 1), info=info)
        success = not forced and all(c["passed"] for c in ep["checks"])
        info["metrics"] = self._metrics(success)
        return StepResult([], {"outcome": float(success)}, terminated=True, success=success, info=info)

    def _metrics(self, success: bool) -> dict[str, float]:
        task = self.task
        assert task is not None
        checks = self._ep["checks"]
        n = len(task.turns)
        bfcl = len(checks) == n and all(c["bfcl_passed"] for c in checks)
        return {
            "success": float(success),
            "bfcl_success": float(bfcl),
            "irrelevance": float(all(c["irrelevance_passed"] for c in checks)),
            "turns_passed": sum(c["passed"] for c in checks) / n,
            "calls": float(self._ep["calls"]),
        }

    def _truncated_info(self) -> dict[str, Any]:
        return {"metrics": self._metrics(False)}

    def _info(self) -> dict[str, Any]:
        ep = self._ep
        return {"user_turn": ep["user_turn"], "turn_checks": [c["passed"] for c in ep["checks"]],
                "category": self.task.category if self.task else None}  # fmt: skip

    def anchor(self) -> str:
        """The task and dialogue progress plus a digest of every instance's whole state: histories that reach the
        same state at the same point of the dialogue share it. Both digests are taken inside the step (and undone
        with it), so this never fails; each step's work on them is bounded (the state's limits, the results as one
        running, order-free digest)."""
        return f"{self._task_id}:{self._keys[0]}:{self._keys[1]}"

    def _progress_digest(self) -> str:
        ep = self._ep
        progress = [ep["user_turn"], ep["steps"], ep["turn_calls"], ep["results_digest"], ep["checks"]]
        return hashlib.blake2b(json.dumps(progress, sort_keys=True).encode(), digest_size=8).hexdigest()

    # -- branching ----------------------------------------------------------------------------------------------
    def _snapshot_state(self) -> Any:
        return copy.deepcopy((self._instances, self._ep, self._gold, self._keys))

    def _restore_state(self, state: Any) -> None:
        self._instances, self._ep, self._gold, self._keys = copy.deepcopy(state)
