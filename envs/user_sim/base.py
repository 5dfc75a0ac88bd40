"""The shared machinery of the user-simulation envs: two action styles, the user loop, simulator failures, metrics.

An agent turn is one interaction, in either style (both always accepted):

* a prefix, UserRL style: ``[action] <message to the user>``, ``[search] <query>``, ``[answer] <final answer>``,
  ``[finish]`` (the leftmost prefix counts; its content runs to the end of the turn);
* one call of the tool ``interact_with_env(choice, content)``, as a Hermes ``<tool_call>`` block or an OpenAI
  ``tool_calls`` message: the reply then comes back as a ``tool`` message carrying the call's id.

``action`` messages go to the simulated user (``agentgym.envs.user_sim.users``), whose reply is the observation;
``search`` and ``answer`` are the env's own (a catalog query, the final answer, which ends the episode). A user that
fails raises ``SimulatorError``: the episode is then *truncated* as a simulator failure (``info["simulator_failure"]``
and ``metrics["simulator_failure"] = 1``), never scored as the agent's failure. A user who ends the conversation
(``###STOP###`` and the other markers) ends the episode without success.

``info["elicited"]`` lists the details of the task's ``goal`` the user has stated so far (a detail counts when its
value appears in one of the user's messages), and each ``action`` that draws out new ones earns ``elicit_reward``
per detail (reward component ``elicit``). ``info["metrics"]`` at the end: ``success``, ``simulator_failure``,
``questions`` (``action`` turns), ``elicited`` (the share of the details the opening message left out that the user
then stated), ``elicited_per_question`` (those details per question).

``info["satisfaction"]`` (every step) is the simulated user's satisfaction with that turn, in [0, 1], from the
simulator's own state: on the turn that ends the episode, the user's grade of the result (the ``outcome`` reward
component, clipped to [0, 1]: 1 for a right answer, 0 for a wrong one, no answer or a user who left); on every other
turn, the share of the task's goal details the user stated for the first time in reply to it (0 for a search, an
invalid action or a message that drew nothing new; always 0 where the goal has no details, as in TwentyQuestions).
Over an episode the non-final turns' satisfactions sum to the share of the goal the user stated after the opening.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from agentgym.contract.env import AgentEnv, SnapshotError, StepResult
from agentgym.contract.parsing import InvalidToolCallError, NoActionError, ParseError, is_blank, parse_tool_turn
from agentgym.contract.trust import declare, integer, number, one_of, record
from agentgym.envs.tool_use.tools import ArgumentError, validate_arguments
from agentgym.envs.user_sim.users import SimulatorError, User, find_word, split_marker

CHOICES: tuple[str, ...] = ("action", "search", "answer", "finish")
#: Scripted-user settings an env's ``user_knobs`` may override for every task (``ScriptedUser``'s arguments).
USER_KNOBS: tuple[str, ...] = ("cooperativeness", "volunteer_after", "patience")
TOOL_NAME = "interact_with_env"
#: The longest content one interaction may carry (a message to the user, a query, an answer): what a simulated user
#: reads per step, so that its cost per step is bounded whatever the agent writes (a scripted user reads this much in
#: tens of milliseconds; the built-in agents' longest message, TwentyQuestions' oracle listing candidates, has 2,260
#: characters). A longer one is an invalid step that reaches no one.
MAX_USER_MESSAGE_CHARS = 4_096
_PREFIX = re.compile(r"\[(action|search|answer|finish)\]", re.IGNORECASE)
#: What each choice does, for the system prompt.
CHOICE_HELP = {
    "action": "send a message to the user (ask a question, confirm, explain)",
    "search": "query the catalog",
    "answer": "give your final answer; this ends the episode",
    "finish": "end the conversation without an answer",
}


@dataclass(frozen=True)
class Interaction:
    """One parsed agent turn: the ``choice``, its ``content`` and the tool call's id (None in prefix style)."""

    choice: str
    content: str
    call_id: str | None = None
    tool_style: bool = False


def chain_digest(digest: str, messages: Sequence[Mapping[str, Any]]) -> str:
    """A running digest of a dialogue: the digest of the dialogue so far followed by ``messages`` (each step hashes
    only its new messages, so an anchor costs the same at turn 1 and at turn 999).

    >>> chain_digest("", [{"role": "user", "content": "hi"}]) == chain_digest("", [{"role": "user", "content": "hi"}])
    True
    """
    text = digest + json.dumps(list(messages), sort_keys=True)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def interact_schema(choices: Sequence[str]) -> dict[str, Any]:
    """The OpenAI schema of ``interact_with_env`` restricted to ``choices``.

    >>> interact_schema(["action", "answer"])["function"]["parameters"]["properties"]["choice"]["enum"]
    ['action', 'answer']
    """
    lines = "; ".join(f"{c}: {CHOICE_HELP[c]}" for c in choices)
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": f"Interact with the environment. Choices: {lines}.",
            "parameters": {
                "type": "object",
                "properties": {
                    "choice": {"type": "string", "enum": list(choices), "description": "what to do"},
                    "content": {"type": "string", "description": "the message, query or answer", "default": ""},
                },
                "required": ["choice"],
                "additionalProperties": False,
            },
        },
    }


def parse_interaction(action: str, choices: Sequence[str]) -> Interaction:
    """Read one agent turn in either style (see the module docstring); raises ``ParseError`` with a message for
    the model.

    >>> parse_interaction("Let me ask. [action] Which day suits you?", ["action", "answer"])
    Interaction(choice='action', content='Which day suits you?', call_id=None, tool_style=False)
    >>> parse_interaction('<tool_call>{"name": "interact_with_env", "arguments": {"choice": "answer", '
    ...                   '"content": "42"}}</tool_call>', ["action", "answer"]).content
    '42'
    """
    allowed = " ".join(f"[{c}]" for c in choices)
    turn = parse_tool_turn(action)
    if turn.calls is not None:
        if len(turn.calls) != 1:
            raise InvalidToolCallError(f"Make exactly one {TOOL_NAME} call per turn, not {len(turn.calls)}.")
        call = turn.calls[0]
        if call.name != TOOL_NAME:
            raise InvalidToolCallError(f"Unknown function {call.name!r}: the only function is {TOOL_NAME}.")
        try:
            args = validate_arguments(interact_schema(choices)["function"], call.arguments)
        except ArgumentError as e:
            raise InvalidToolCallError(str(e)) from None
        return Interaction(args["choice"], (args["content"] or "").strip(), call.id, True)
    text = turn.text or ""
    m = _PREFIX.search(text)
    if m is None:
        raise NoActionError(f"Start your turn with one of {allowed} (or call {TOOL_NAME}).")
    choice = m.group(1).lower()
    if choice not in choices:
        raise NoActionError(f"[{choice}] is not available here; use one of {allowed}.")
    return Interaction(choice, text[m.end() :].strip())


class UserSimEnv(AgentEnv):
    """Base class of the user-simulation envs: a subclass writes its tasks, its user and its answer check.

    Hooks: ``_make_task(level, index) -> dict`` (task ``index`` of a difficulty level: a JSON record with ``id``
    ``"<level>/<index>"``, ``goal`` ``{detail: value}`` and whatever else the env needs); ``_make_user(task) ->
    User``; ``_intro(task) -> str`` (the system prompt's description of the job); ``_answer(content) ->
    (components, success, info)``; optionally ``_search(content) -> str``, ``_gold(task) -> dict``,
    ``_extra_info()``. The base does the levels (``difficulty``), task ids and indices, the user loop and metrics.
    """

    choices: ClassVar[tuple[str, ...]] = ("action", "answer")
    #: The difficulty levels; ``difficulty="mixed"`` interleaves them (task ``i`` is task ``i // n`` of level
    #: ``i % n``), so any first N tasks cover every level.
    difficulties: ClassVar[tuple[str, ...]] = ("easy", "medium", "hard")
    tasks_per_level: ClassVar[int] = 10_000

    #: ``user="llm"`` is public, its endpoint (``user_llm``: a URL, an environment variable) the operator's.
    public_args = declare(
        AgentEnv.public_args, difficulty=one_of("mixed", *difficulties), user=one_of("scripted", "llm"),
        user_knobs=record(cooperativeness=number(0, 1), volunteer_after=integer(0, 1000, optional=True),
                          patience=integer(1, 1000)),
        elicit_reward=number(-1e6, 1e6),
    )  # fmt: skip

    def __init__(
        self,
        *,
        difficulty: str = "mixed",
        user: Literal["scripted", "llm"] = "scripted",
        user_llm: Mapping[str, Any] | None = None,
        user_knobs: Mapping[str, Any] | None = None,
        elicit_reward: float = 0.1,
        max_turns: int = 20,
        invalid_action_penalty: float = 0.0,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)
        unknown = set(user_knobs or {}) - set(USER_KNOBS)
        if unknown:
            raise ValueError(f"unknown user_knobs {sorted(unknown)}; accepted: {list(USER_KNOBS)}")
        self.user_knobs = dict(user_knobs or {})
        if difficulty != "mixed" and difficulty not in self.difficulties:
            raise ValueError(f"difficulty must be 'mixed' or one of {self.difficulties}, got {difficulty!r}")
        self.difficulty = difficulty
        self.levels = list(self.difficulties) if difficulty == "mixed" else [difficulty]
        self.num_tasks = self.tasks_per_level * len(self.levels)
        if user not in ("scripted", "llm"):
            raise ValueError(f"user must be 'scripted' or 'llm', got {user!r}")
        if user == "llm" and not (user_llm and user_llm.get("base_url")):
            raise ValueError("user='llm' needs user_llm={'base_url': ..., 'model': ...} (LLMUser's arguments)")
        self.user_kind = user
        self.user_llm = dict(user_llm or {})
        self.elicit_reward = float(elicit_reward)
        self._user: User | None = None
        self._ep: dict[str, Any] = {}

    # -- tasks --------------------------------------------------------------------------------------------------
    def task_index_of(self, task_id: str) -> int:
        level, _, local = task_id.partition("/")
        if level not in self.levels or not local.isdigit() or int(local) >= self.tasks_per_level:
            raise ValueError(f"unknown task_id {task_id!r}: ids look like '{self.levels[0]}/17'")
        return int(local) * len(self.levels) + self.levels.index(level)

    def _task(self, task_index: int) -> dict[str, Any]:
        return self._make_task(self.levels[task_index % len(self.levels)], task_index // len(self.levels))

    # -- hooks --------------------------------------------------------------------------------------------------
    def _make_task(self, level: str, index: int) -> dict[str, Any]:
        raise NotImplementedError

    def _make_user(self, task: dict[str, Any]) -> User:
        raise NotImplementedError

    def _intro(self, task: dict[str, Any]) -> str:
        raise NotImplementedError

    def _answer(self, content: str) -> tuple[dict[str, float], bool, dict[str, Any]]:
        raise NotImplementedError

    def _search(self, content: str) -> str:
        return "Error: there is no search here."

    def _gold(self, task: dict[str, Any]) -> dict[str, Any]:
        return {"goal": task["goal"]}

    def _extra_info(self) -> dict[str, Any]:
        return {}

    def _knobs(self, task: dict[str, Any]) -> dict[str, Any]:
        """The scripted user's settings for ``task``: the task's level, overridden by ``user_knobs``."""
        level = {k: task[k] for k in USER_KNOBS if k in task}
        return {**level, **self.user_knobs}

    def _llm_user(self, instructions: str) -> User:
        """An ``LLMUser`` with the env's ``user_llm`` arguments and these instructions."""
        from agentgym.envs.user_sim.llm_user import LLMUser

        return LLMUser(instructions=instructions, **self.user_llm)

    # -- episode ------------------------------------------------------------------------------------------------
    def step(self, action: str) -> tuple[list, float, bool, bool, dict]:
        """``AgentEnv.step``, plus ``info["satisfaction"]`` (see the module docstring)."""
        before = len(self._ep.get("elicited", ()))
        obs, reward, terminated, truncated, info = super().step(action)
        if terminated:
            info["satisfaction"] = min(1.0, max(0.0, float(info["reward_components"].get("outcome", 0.0))))
        else:
            goal = self._ep["task"]["goal"] if "task" in self._ep else {}
            info["satisfaction"] = (len(self._ep["elicited"]) - before) / len(goal) if goal else 0.0
        return obs, reward, terminated, truncated, info

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
        if self._user is not None:
            self._user.close()
        task = self._task(task_index)
        self._user = self._make_user(task)
        seed = int.from_bytes(hashlib.blake2b(f"{task['id']}".encode(), digest_size=4).digest(), "big")
        self._user.reset(seed=seed)
        self._ep = {"task": task, "dialogue": [], "dialogue_digest": "", "elicited": [], "questions": 0, "searches": 0}
        system = {"role": "system", "content": self._system_prompt(task)}
        try:
            opening, _ = self._user.respond([], "")
        except SimulatorError as e:
            self._ep["opening_failure"] = {"kind": e.kind, "message": str(e)}
            opening = "(the simulated user could not start the conversation)"
        self._add_dialogue([{"role": "user", "content": opening}])
        self._ep["opening"] = len(self._note_elicited(opening))
        return [system, {"role": "user", "content": opening}], {"task_id": task["id"], "gold": self._gold(task),
                                                                **self._info()}  # fmt: skip

    def _system_prompt(self, task: dict[str, Any]) -> str:
        styles = "\n".join(f"[{c}] ...: {CHOICE_HELP[c]}" for c in self.choices)
        tools = json.dumps(interact_schema(self.choices))
        return (
            f"{self._intro(task)}\n\nEach turn, do exactly one thing, written as one of:\n{styles}\n"
            f"or as one call of this function:\n<tools>\n{tools}\n</tools>\n"
            '(<tool_call>{"name": "interact_with_env", "arguments": {"choice": ..., "content": ...}}</tool_call>, '
            "or an OpenAI assistant message with tool_calls)."
        )

    def _add_dialogue(self, messages: list[dict[str, Any]]) -> None:
        """Append messages to the dialogue and to its running digest."""
        self._ep["dialogue"] += messages
        self._ep["dialogue_digest"] = chain_digest(self._ep["dialogue_digest"], messages)

    def _too_long(self, inter: Interaction) -> StepResult | None:
        """The invalid step for an interaction longer than ``MAX_USER_MESSAGE_CHARS`` (nothing is sent), or None."""
        if len(inter.content) <= MAX_USER_MESSAGE_CHARS:
            return None
        return self._invalid(
            f"Error: the {inter.choice} has {len(inter.content):,} characters; at most {MAX_USER_MESSAGE_CHARS:,} "
            "are read. Nothing was sent: write a shorter one."
        )

    def _note_elicited(self, text: str) -> list[str]:
        """Hidden details whose value ``text`` states for the first time."""
        said = text.lower()
        new = [k for k, v in self._ep["task"]["goal"].items() if k not in self._ep["elicited"] and _says(said, v)]
        self._ep["elicited"] += new
        return new

    def _reply(self, inter: Interaction, text: str, name: str = TOOL_NAME) -> dict[str, Any]:
        if inter.tool_style:
            msg: dict[str, Any] = {"role": "tool", "name": name, "content": text}
            if inter.call_id is not None:
                msg["tool_call_id"] = inter.call_id
            return msg
        return {"role": "user", "content": text}

    def _invalid(self, message: str) -> StepResult:
        return StepResult([{"role": "user", "content": message}], action_valid=False, parse_error=message,
                          info=self._info())  # fmt: skip

    def _step(self, action: str) -> StepResult:
        if "opening_failure" in self._ep:
            return self._simulator_failure(self._ep["opening_failure"])
        try:
            inter = parse_interaction(action, self.choices)
        except ParseError as e:
            return self._invalid(f"Error: {e}")
        if (refused := self._too_long(inter)) is not None:
            return refused
        if inter.choice == "action":
            if is_blank(inter.content):
                return self._invalid("Error: the message to the user is empty.")
            return self._talk(inter)
        if inter.choice == "search":
            self._ep["searches"] += 1
            return StepResult([self._reply(inter, self._search(inter.content))], info=self._info())
        if inter.choice == "finish":
            return self._end({}, False, {}, [self._reply(inter, "The conversation is over.")])
        if is_blank(inter.content):
            return self._invalid("Error: the answer is empty.")
        components, success, info = self._answer(inter.content)
        return self._end(components, success, info, [])

    def _talk(self, inter: Interaction) -> StepResult:
        assert self._user is not None
        ep = self._ep
        ep["questions"] += 1
        try:
            reply, done = self._user.respond(list(ep["dialogue"]), inter.content)
        except SimulatorError as e:
            return self._simulator_failure({"kind": e.kind, "message": str(e)})
        self._add_dialogue([{"role": "assistant", "content": inter.content}, {"role": "user", "content": reply}])
        text, marker = split_marker(reply)
        new = self._note_elicited(text)
        components = {"elicit": self.elicit_reward * len(new)} if new and self.elicit_reward else {}
        obs = [self._reply(inter, text or marker or "")]
        if done or marker is not None:  # the user left: the episode ends without an answer
            return self._end(components, False, {"user_ended": marker or "done"}, obs)
        return StepResult(obs, components, info={**self._info(), "newly_elicited": new})

    def _end(
        self, components: dict[str, float], success: bool, extra: dict[str, Any], obs: list[dict[str, Any]]
    ) -> StepResult:
        info = {**self._info(), **extra, "metrics": self._metrics(success, False)}
        return StepResult(obs, {"outcome": float(success), **components}, terminated=True, success=success,
                          info=info)  # fmt: skip

    def _simulator_failure(self, failure: dict[str, str]) -> StepResult:
        info = {**self._info(), "simulator_failure": failure, "metrics": self._metrics(False, True)}
        note = {"role": "user", "content": f"(the simulated user failed: {failure['message']})"}
        return StepResult([note], truncated=True, info=info)

    def _metrics(self, success: bool, simulator_failure: bool) -> dict[str, float]:
        ep = self._ep
        hidden = len(ep["task"]["goal"]) - ep["opening"]  # the details the opening message did not state
        drawn = len(ep["elicited"]) - ep["opening"]
        return {
            "success": float(success),
            "simulator_failure": float(simulator_failure),
            "questions": float(ep["questions"]),
            "elicited": drawn / hidden if hidden else 1.0,
            "elicited_per_question": drawn / ep["questions"] if ep["questions"] else 0.0,
        }

    def _truncated_info(self) -> dict[str, Any]:
        return {"metrics": self._metrics(False, False)}

    def _info(self) -> dict[str, Any]:
        return {"elicited": list(self._ep.get("elicited", [])), **self._extra_info()}

    def anchor(self) -> str:
        """The task plus the dialogue so far (the user's replies depend on it, and on nothing else), as its running
        digest."""
        key = json.dumps([self._ep["dialogue_digest"], self._ep["elicited"], self._extra_info()], sort_keys=True)
        return f"{self._task_id}:{hashlib.blake2b(key.encode(), digest_size=8).hexdigest()}"

    # -- branching ----------------------------------------------------------------------------------------------
    def _snapshot_state(self) -> Any:
        if self.user_kind != "scripted":
            raise SnapshotError("an episode with an LLM user cannot be snapshotted: its replies come from a server")
        return copy.deepcopy((self._user, self._ep))

    def _restore_state(self, state: Any) -> None:
        self._user, self._ep = copy.deepcopy(state)

    def close(self) -> None:
        if self._user is not None:
            self._user.close()
        super().close()


def _says(text: str, value: Any) -> bool:
    """Whether ``text`` (lower case) states ``value`` as a whole word or phrase."""
    return find_word(str(value), text) is not None
