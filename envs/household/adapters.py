"""Shared machinery of the adapters that play real TextWorld / ALFWorld games with the Household protocol.

``TextGameEnv`` wraps any ``textworld.Environment``: the same prompts (``plain`` / ``verl``), the same ``info``
keys as Household-v0 (``admissible_commands``, ``won``, ``task_type``, ``anchor``, and with ``expert_plan=True``
``expert_plan`` / ``plan_length`` / ``progress`` from TextWorld's ``policy_commands``), the same rewards. A
command is valid when it is one of the admissible commands of the previous state. Commands that are not short
printable ASCII are not sent to the game (its interpreters expect plain text); they get ``Nothing happens.``.
Interpreter meta-commands (``save``, ``restore``, ``restart``, ``undo``, ``quit``, ``script``, ... see
``meta_command``) are refused as invalid actions and never sent either: they write files into the working directory
or roll the game back behind the adapter's back, so ``won``, ``progress`` and validity would no longer follow.

Adapters construct lazily: when their package, game files or data are missing, construction still succeeds (so
``agentgym list`` and ``agentgym bench`` can probe every registered env), the env has no built-in agents and its
``unavailable_reason`` says what to install or download, and ``reset`` raises
``agentgym.contract.env.EnvUnavailableError`` with that message. Game paths given explicitly that do not exist raise at
construction.

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/ALFWorld-v0", data_dir="/nonexistent")
>>> env.unwrapped.unavailable_reason.startswith("agentgym/ALFWorld-v0 is unavailable here"), env.unwrapped.agents
(True, {})
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from agentgym.contract.env import AgentEnv, StepResult
from agentgym.contract.parsing import ParseError, TruncatedActionError, parse_tag_action
from agentgym.contract.trust import declare, flag, number, one_of
from agentgym.envs.household.agents import OracleAgent, RandomAgent
from agentgym.envs.household.engine import NOTHING
from agentgym.envs.household.prompts import PROMPTS, first_message, step_message

#: Longest command forwarded to a game.
MAX_COMMAND_CHARS = 200
GAME_INSTRUCTIONS = (
    "You are playing a text-based game. Each turn, reply with exactly one command, such as 'look', "
    "'inventory', 'go east', 'open door' or 'take key'. Type 'help' for the list of commands.\n\n"
)


#: Verbs (and phrases) that the interpreter handles outside the game world, changing files or the game's history:
#: Inform 7's out-of-world actions ``save``, ``restore``, ``restart``, ``quit``/``q`` (Inform 6 also ``die``),
#: ``script``/``transcript`` (on/off; Inform 6 ``noscript``/``unscript``), the parser's ``undo``, and ``again``/``g``
#: and ``oops``/``o``, which replay or rewrite the previous command; and TextWorld's framework commands, which print
#: the hidden state or change what the game prints (``tw-*``, ``print_state``, ...). Harmless out-of-world verbs
#: (``score``, ``version``, ``verify``, ``brief``/``verbose``, ``notify``, ``pronouns``) still reach the game.
META_COMMANDS: tuple[tuple[str, ...], ...] = (
    *((verb,) for verb in ("save", "restore", "restart", "quit", "q", "die", "undo", "again", "g", "oops", "o")),
    *((verb,) for verb in ("script", "transcript", "unscript", "noscript", "print_state")),
    ("enable", "print", "state", "option"),
    ("disable", "print", "state", "option"),
    ("restrict", "commands"),
)
#: Interpreters match only a word's first 9 characters against their dictionary ("transcripts" is "transcript").
DICT_WORD_CHARS = 9
#: Several commands on one line: Inform runs each ``.``-, ``,``- or ``then``-separated clause in turn.
_CLAUSES = re.compile(r"[.,]|\bthen\b")
_META_KEYS = {tuple(w[:DICT_WORD_CHARS] for w in phrase) for phrase in META_COMMANDS}
META_REFUSAL = (
    "{word!r} is an interpreter command, not a move in the game: save, restore, restart, undo, quit, again, oops, "
    "script and TextWorld's own commands (tw-*) would write files or change the game's history, so they are not "
    "available here. Reply with a game command, such as one of the admissible commands."
)


def sendable(command: str) -> bool:
    """Whether ``command`` may be forwarded to a game interpreter (short, printable ASCII, one line)."""
    return 0 < len(command) <= MAX_COMMAND_CHARS and command.isascii() and command.isprintable()


def meta_command(command: str) -> str | None:
    """The interpreter meta-command that ``command`` (any of its clauses) starts with, or None (see ``META_COMMANDS``).

    >>> meta_command("save"), meta_command("look. RESTORE"), meta_command("take teacup then q"), meta_command("look")
    ('save', 'restore', 'q', None)
    """
    for clause in _CLAUSES.split(command.lower()):
        words = [w[:DICT_WORD_CHARS] for w in re.split(r'[\s"]+', clause) if w]
        if not words:
            continue
        if words[0].startswith("tw-") or any(tuple(words[: len(key)]) == key for key in _META_KEYS):
            return " ".join(clause.split())
    return None


class TextGameEnv(AgentEnv):
    """Base class of the TextWorld / ALFWorld adapters; subclasses pass ``games`` (or ``unavailable``, the reason
    they cannot play here) and implement ``_load``."""

    agents: ClassVar[Mapping[str, Any]] = {"oracle": OracleAgent, "random": RandomAgent}
    env_name = "text-based game"
    instructions = GAME_INSTRUCTIONS

    #: ``games`` and ``unavailable`` are the operator's (file paths, a message).
    public_args = declare(AgentEnv.public_args, prompt=one_of(*PROMPTS), success_reward=number(-1e6, 1e6),
                   expert_plan=flag())  # fmt: skip

    def __init__(
        self,
        *,
        games: Sequence[str] = (),
        unavailable: str | None = None,
        prompt: str = "plain",
        success_reward: float = 1.0,
        invalid_action_penalty: float = 0.0,
        expert_plan: bool = True,
        max_turns: int = 50,
        render_mode: str | None = None,
    ):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)
        if prompt not in PROMPTS:
            raise ValueError(f"prompt must be one of {PROMPTS}, got {prompt!r}")
        if not games and unavailable is None:
            unavailable = f"{type(self).__name__}: no game files to play"
        #: Why this env cannot be played here (None when it can); ``reset`` raises it.
        self.unavailable_reason = unavailable
        if unavailable is not None:
            self.agents = {}  # nothing to benchmark: ``agentgym bench`` plays no agent on it
        self.games = list(games)
        self.prompt = prompt
        self.success_reward = float(success_reward)
        self.num_tasks = len(self.games)
        self.expert_plan = bool(expert_plan)
        self._game: Any = None
        self._game_path: str | None = None
        self._state: Any = None
        self._admissible: list[str] = []
        self._plan0 = 1
        self._objective = ""

    # -- to implement -----------------------------------------------------------------------------------------
    def _load(self, path: str) -> Any:
        """Start the game at ``path``; returns a ``textworld.Environment``."""
        raise NotImplementedError

    def task_type_of(self, path: str) -> str:
        return "textworld"

    def task_id_of(self, path: str) -> str:
        return path

    # -- episode --------------------------------------------------------------------------------------------------
    def task_index_of(self, task_id: str) -> int:
        ids = [self.task_id_of(g) for g in self.games]
        if task_id not in ids:
            raise ValueError(f"unknown task_id {task_id!r}; this env has {ids[:3]}{'...' if len(ids) > 3 else ''}")
        return ids.index(task_id)

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
        path = self.games[task_index]
        if path != self._game_path:
            self.close()
            self._game = self._load(path)
            self._game_path = path
        state = self._state = self._game.reset()
        self._admissible = list(state.get("admissible_commands") or [])
        intro = str(state.get("feedback") or "")
        self._objective = intro.rsplit("Your task is to: ", 1)[-1].strip() if "Your task is to: " in intro else ""
        content = first_message(self.prompt, intro.strip("\n"), self._admissible, instructions=self.instructions,
                                env_name=self.env_name)  # fmt: skip
        info = self._info()
        info["gold"] = {"task_type": self.task_type_of(path), "game_file": path, "task_id": self.task_id_of(path)}
        if self.expert_plan:
            self._plan0 = max(1, info["plan_length"])
            info["progress"] = 0.0
        return [{"role": "user", "content": content}], info

    def _step(self, action: str) -> StepResult:
        command, error = self._command(action)
        meta = meta_command(command) if command is not None else None
        if meta is not None:
            error = META_REFUSAL.format(word=meta[:50])
            feedback, valid = f"{NOTHING} ({error})", False
        elif command is None or not sendable(command):
            feedback, valid = NOTHING, False
            error = error or "The command must be one line of printable ASCII of at most 200 characters."
        else:
            valid = " ".join(command.lower().split()) in {c.lower() for c in self._admissible}
            if not valid:
                error = f"{command[:100]!r} is not an admissible command here."
            self._state, _, _ = self._game.step(command)
            self._admissible = list(self._state.get("admissible_commands") or [])
            feedback = str(self._state.get("feedback") or "").strip("\n")
        won, lost = bool(self._state.get("won")), bool(self._state.get("lost"))
        components = {"outcome": self.success_reward} if won else {}
        content = step_message(self.prompt, feedback, self._admissible, self._objective, self.turn)
        return StepResult(
            observation=[{"role": "user", "content": content}],
            reward_components=components,
            terminated=won or lost,
            action_valid=valid,
            parse_error=None if valid else error,
            success=won,
            info=self._info(),
        )

    def _command(self, action: str) -> tuple[str | None, str | None]:
        if self.prompt == "verl" or "<action>" in action.lower():
            try:
                return parse_tag_action(
                    action, ("action",), truncated_at=self.truncated_at, require_visible=True
                ).content, None
            except ParseError as e:
                if self.prompt == "verl" or isinstance(e, TruncatedActionError):
                    return None, str(e)
        return action.strip(), None

    def anchor(self) -> str:
        # An observation-level anchor: the game and its admissible commands (TextWorld exposes no cheap state key).
        won = bool(self._state.get("won"))
        digest = hashlib.blake2b(("\n".join(self._admissible) + f"|{won}").encode(), digest_size=8).hexdigest()
        return f"{self.task_id_of(self._game_path or '')}#{digest}"

    def _info(self) -> dict[str, Any]:
        path = self._game_path or ""
        info: dict[str, Any] = {
            "task_id": self.task_id_of(path),
            "task_type": self.task_type_of(path),
            "won": bool(self._state.get("won")),
            "admissible_commands": list(self._admissible),
        }
        if self.expert_plan:
            plan = list(self._state.get("policy_commands") or [])
            info.update(expert_plan=plan, plan_length=len(plan), progress=1.0 - len(plan) / self._plan0)
        return info

    def close(self) -> None:
        if self._game is not None:
            self._game.close()
            self._game = None
            self._game_path = None
