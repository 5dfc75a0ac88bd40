"""What the credit-assignment diagnostics share: stages, the choice parser, the outcome, progress and anchors.

An episode is a fixed sequence of ``horizon`` stages, one per turn, so every episode lasts exactly ``horizon`` turns.
A stage shows one short line (``Turn 2/4. Signal: red. Options: blue red.``) and the agent replies with one option
word, as ``<answer> red </answer>`` (three tokens for the tiny model's vocabulary) or the bare word; text around the
tag (``<think>``) is ignored, case and a final period do not matter. A stage is either

* *decisive*: it has a right option (the one matching the signal, or the key of KeyDoor's clue); the reward
  component ``outcome``, paid on the last turn, is 1 if every decisive choice of the episode was right, else 0; or
* a *distractor*: its choice earns an immediate reward component ``distractor`` from a per-option table and never
  affects the outcome.

A malformed reply, or a word that is not one of the options, is invalid (``action_valid=False``, ``parse_error``
says why, the env's ``invalid_action_penalty`` applies as component ``format``); it counts as a miss (a wrong
decisive choice, no distractor reward) and the episode moves on to the next stage, so the horizon stays exact. The
observation then starts with the explanation.

Knobs: ``horizon`` (H), ``num_options`` (k, 2..8), ``noise`` (the probability that a shown signal or clue names a
wrong option: drawn per task and stage, recorded in ``gold["misleading"]``; the best honest policy then fails those
stages, the oracle does not), ``num_tasks``, ``anchor_by``. Task ``i`` comes from its own RNG
(``random.Random("<salt>:<i>")``) and the env's knobs only; the RNG makes the same draws whatever ``noise`` is, so a
noisy task is the clean task with some signals corrupted. Options are listed in alphabetical order, so an
observation depends on the option set and the signal only, never on which option is right.

``info``: ``progress`` (after ``reset`` and every step), ``correct`` (whether the step's choice was right; None on a
distractor stage), ``gold`` after ``reset`` (``choices``: the right option of each decisive stage and the best-paying
option of each distractor stage; ``decisive``; ``misleading``).

**Progress** is ``d / D`` while every decisive choice so far was right and 0 after a mistake, where ``d`` counts the
decisive stages played and ``D`` those of the task. It is a potential: a function of the env state (stage, whether a
mistake was made), 0 at reset, in [0, 1], non-decreasing under the optimal policy, and equal to the outcome on the
last turn, so ``ProgressReward``'s terms over an episode sum to exactly the outcome, and ``PotentialShaping``'s (gamma
1, Phi(terminal) = 0) to -Phi(s_0) = 0. It drops to 0 after a mistake because the outcome needs every decisive
choice: a potential that kept counting right choices would pay episodes whose outcome is already lost.

**Anchors** (``anchor_by="state"``, the default): ``"<task_id>:<stage>:ok"`` or ``":x"`` after a mistake: the whole
env state (the next stage is fixed by the task, and the future rewards depend on nothing else), so identical states
share a key across episodes, seeds and group members, and different states never do. ``anchor_by="observation"``
drops the hidden mistake flag (``"<task_id>:<stage>"``): the key of what the agent is shown, for comparing methods
that group by observations.

>>> parse_choice("<think>the signal says red</think><answer> Red </answer>", ("blue", "red"))
('red', None)
>>> parse_choice("green", ("blue", "red"))
(None, "'green' is not one of the options (blue red).")
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from agentgym.contract.env import AgentEnv, StepResult
from agentgym.contract.parsing import ParseError, parse_tag_action
from agentgym.contract.trust import declare, integer, number, one_of
from agentgym.envs.diagnostics.agents import OPTIONS_MARK, OracleAgent, RandomAgent

#: Option vocabularies: each word is one token of the tiny model's (MiniLM WordPiece) vocabulary.
COLOURS: tuple[str, ...] = ("red", "blue", "green", "yellow", "black", "white", "brown", "pink", "orange", "purple",
                            "gray", "gold")  # fmt: skip
FRUITS: tuple[str, ...] = ("apple", "pear", "plum", "grape", "lemon", "lime", "peach", "cherry", "mango", "fig",
                           "berry")  # fmt: skip
ANIMALS: tuple[str, ...] = ("cat", "dog", "fish", "bird", "horse", "cow", "pig", "goat", "sheep", "duck", "bear",
                            "wolf")  # fmt: skip
MAX_OPTIONS = 8
AnchorMode = Literal["state", "observation"]
ANCHOR_MODES: tuple[str, ...] = ("state", "observation")
#: The instructions, at the start of the first observation.
INTRO = "Reply <answer> option </answer> each turn. Pick the option that matches the signal, if any."
_STRIP = " \t\r\n.,;:!?\"'`"


def parse_choice(action: str, options: Sequence[str], truncated_at: int | None = None) -> tuple[str | None, str | None]:
    """``(option, None)`` for a turn that names one of ``options``, else ``(None, why)`` (a message for the model).

    The turn is ``<answer> word </answer>`` (the leftmost complete tag pair, lenient) or, without any ``<``, the
    bare word; case and surrounding punctuation do not matter.
    """
    i = action.find("<answer>")
    if i >= 0 and action.isascii():  # fast path for a well-formed turn: parse_tag_action's leftmost pair
        j = action.find("</answer>", i + 8)
        if j >= 0 and "<answer>" not in action[:i].lower() and "</answer>" not in action[i + 8 : j].lower():
            word = action[i + 8 : j].strip(_STRIP).lower()
            if word in options:
                return word, None
    return _parse_choice(action, options, truncated_at)


def _parse_choice(action: str, options: Sequence[str], truncated_at: int | None) -> tuple[str | None, str | None]:
    """``parse_choice`` without its fast path (the reference the fast path agrees with)."""
    if "<" in action:
        try:
            word = parse_tag_action(action, ("answer",), truncated_at=truncated_at, require_visible=True).content
        except ParseError as e:
            return None, str(e)
    else:
        word = action
    word = word.strip(_STRIP).lower()
    if word in options:
        return word, None
    listed = " ".join(options)
    if not word:
        return None, f"The action is empty. Reply <answer> option </answer> with one of: {listed}."
    return None, f"{word[:30]!r} is not one of the options ({listed})."


@dataclass(frozen=True)
class Stage:
    """One turn: its ``text``, its ``options``, and the ``answer`` (decisive) or ``payoffs`` (distractor, one
    reward per option); ``misleading`` when noise corrupted the signal or clue the stage is decided by."""

    text: str
    options: tuple[str, ...]
    answer: str | None = None
    payoffs: tuple[float, ...] = ()
    misleading: bool = False

    @property
    def best(self) -> str:
        """The right option, or the first best-paying one of a distractor stage."""
        if self.answer is not None:
            return self.answer
        return self.options[max(range(len(self.options)), key=lambda i: self.payoffs[i])]

    def payoff(self, choice: str | None) -> float:
        """The distractor reward of ``choice`` (0 for a miss)."""
        return self.payoffs[self.options.index(choice)] if choice in self.options else 0.0


@dataclass(frozen=True)
class Task:
    """A task: ``intro`` (the start of the first observation) and one ``Stage`` per turn."""

    intro: str
    stages: tuple[Stage, ...]
    #: ``decisive_before[t]``: decisive stages among the first ``t`` (computed).
    decisive_before: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        counts = [0]
        for s in self.stages:
            counts.append(counts[-1] + (s.answer is not None))
        if counts[-1] == 0:
            raise ValueError("a task needs at least one decisive stage")
        object.__setattr__(self, "decisive_before", tuple(counts))

    def gold(self) -> dict[str, Any]:
        return {"choices": [s.best for s in self.stages], "decisive": [s.answer is not None for s in self.stages],
                "misleading": [s.misleading for s in self.stages]}  # fmt: skip


class DiagnosticEnv(AgentEnv):
    """Base class of the diagnostics (see the module docstring): a subclass sets ``salt`` and writes ``_make_task``
    with the helpers ``stage_text``, ``draw_options``, ``draw_signal`` and ``signal_stage``.

    Args:
        horizon: turns per episode (H), >= 1.
        num_options: options per stage (k), 2..8.
        noise: probability that a shown signal or clue names a wrong option, per task and stage.
        num_tasks: tasks that seeds draw from (``options={"task_index": i}`` picks one).
        anchor_by: ``"state"`` (task, stage and the hidden mistake flag) or ``"observation"`` (task and stage).
        invalid_action_penalty: subtracted (component ``format``) for each invalid action.
    """

    agents: ClassVar[Mapping[str, Any]] = {"oracle": OracleAgent, "random": RandomAgent}
    #: Prefix of the task RNG's seed: tasks of different envs are independent.
    salt: ClassVar[str] = ""

    public_args = declare(
        AgentEnv.public_args, horizon=integer(1, 1000), num_options=integer(2, MAX_OPTIONS),
        noise=number(0, 1), num_tasks=integer(1, 1_000_000_000), anchor_by=one_of(*ANCHOR_MODES),
    )  # fmt: skip

    def __init__(
        self,
        *,
        horizon: int = 4,
        num_options: int = 2,
        noise: float = 0.0,
        num_tasks: int = 1_000_000,
        anchor_by: AnchorMode = "state",
        invalid_action_penalty: float = 0.0,
        render_mode: str | None = None,
    ):
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        super().__init__(max_turns=horizon, invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)
        if not 2 <= num_options <= MAX_OPTIONS:
            raise ValueError(f"num_options must be in 2..{MAX_OPTIONS}, got {num_options}")
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"noise must be in [0, 1], got {noise}")
        if num_tasks < 1:
            raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")
        if anchor_by not in ANCHOR_MODES:
            raise ValueError(f"anchor_by must be one of {ANCHOR_MODES}, got {anchor_by!r}")
        self.horizon = int(horizon)
        self.num_options = int(num_options)
        self.noise = float(noise)
        self.num_tasks = int(num_tasks)
        self.anchor_by = anchor_by
        self._task: Task | None = None
        self._built = -1  # the index of ``_task``
        self._stage = 0
        self._failed = False

    # -- tasks ----------------------------------------------------------------------------------------------
    def _make_task(self, rng: random.Random) -> Task:
        """The task drawn from ``rng`` (the task's own generator)."""
        raise NotImplementedError

    def task(self, index: int) -> Task:
        """Task ``index``: a function of the index and the env's knobs."""
        return self._make_task(random.Random(f"{self.salt}:{index}"))

    def stage_text(self, turn: int, options: Sequence[str], signal: str | None = None, label: str = "") -> str:
        """``Turn t/H. [label ][Signal: s. ]Options: a b.``"""
        head = f"Turn {turn}/{self.horizon}. {label + ' ' if label else ''}"
        return f"{head}{f'Signal: {signal}. ' if signal else ''}{OPTIONS_MARK}{' '.join(options)}."

    def draw_options(self, rng: random.Random, vocab: Sequence[str]) -> tuple[str, ...]:
        """``num_options`` distinct words of ``vocab``, in alphabetical order."""
        return tuple(sorted(rng.sample(vocab, self.num_options)))

    def draw_signal(self, rng: random.Random, vocab: Sequence[str]) -> tuple[tuple[str, ...], str, str, bool]:
        """``(options, right option, shown signal, misleading)``; the draws do not depend on ``noise``."""
        options = self.draw_options(rng, vocab)
        k = len(options)
        right = rng.randrange(k)
        wrong = (right + 1 + rng.randrange(k - 1)) % k
        misleading = rng.random() < self.noise
        return options, options[right], options[wrong if misleading else right], misleading

    def signal_stage(self, rng: random.Random, turn: int, vocab: Sequence[str], payoff: float | None = None) -> Stage:
        """A stage whose signal names the right option: decisive, or (``payoff`` given) a distractor paying
        ``payoff`` for the right option and 0 for the others."""
        options, right, shown, misleading = self.draw_signal(rng, vocab)
        text = self.stage_text(turn, options, signal=shown)
        if payoff is None:
            return Stage(text, options, answer=right, misleading=misleading)
        return Stage(text, options, payoffs=tuple(payoff * (o == right) for o in options), misleading=misleading)

    # -- episode --------------------------------------------------------------------------------------------
    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        if self._task is None or self._built != task_index:
            self._task, self._built = self.task(task_index), task_index
        self._stage, self._failed = 0, False
        content = f"{self._task.intro} {self._task.stages[0].text}"
        return [{"role": "user", "content": content}], {"gold": self._task.gold(), "progress": 0.0}

    def _step(self, action: str) -> StepResult:
        task = self._task
        assert task is not None
        stage = task.stages[self._stage]
        choice, error = parse_choice(action, stage.options, self.truncated_at)
        components: dict[str, float] = {}
        correct = None
        if stage.answer is not None:
            correct = choice == stage.answer
            self._failed = self._failed or not correct
        else:
            components["distractor"] = stage.payoff(choice)
        self._stage += 1
        done = self._stage == len(task.stages)
        if done:
            components["outcome"] = 0.0 if self._failed else 1.0
        parts = [] if error is None else [f"Invalid action: {error} This turn counts as a miss."]
        if not done:
            parts.append(task.stages[self._stage].text)
        return StepResult(
            [{"role": "user", "content": " ".join(parts)}] if parts else [],
            components,
            terminated=done,
            action_valid=error is None,
            parse_error=error,
            success=done and not self._failed,
            info={"progress": self.progress(), "correct": correct},
        )

    def progress(self) -> float:
        """Verified progress (see the module docstring): decisive stages passed / all, 0 after a mistake."""
        assert self._task is not None
        marks = self._task.decisive_before
        return 0.0 if self._failed else marks[self._stage] / marks[-1]

    def anchor(self) -> str:
        key = f"{self._task_id}:{self._stage}"
        return key if self.anchor_by == "observation" else f"{key}:{'x' if self._failed else 'ok'}"

    # -- branching ------------------------------------------------------------------------------------------
    def _snapshot_state(self) -> tuple[Task | None, int, int, bool]:
        return self._task, self._built, self._stage, self._failed  # a Task is immutable

    def _restore_state(self, state: tuple[Task | None, int, int, bool]) -> None:
        self._task, self._built, self._stage, self._failed = state


class DistractorEnv(DiagnosticEnv):
    """A ``DiagnosticEnv`` whose distractor stages pay up to ``distractor_reward`` (Umbrella, KeyDoor); the other
    arguments are ``DiagnosticEnv``'s."""

    public_args = declare(DiagnosticEnv.public_args, distractor_reward=number(0, 1e6))

    def __init__(
        self,
        *,
        horizon: int = 4,
        num_options: int = 2,
        noise: float = 0.0,
        distractor_reward: float = 0.1,
        num_tasks: int = 1_000_000,
        anchor_by: AnchorMode = "state",
        invalid_action_penalty: float = 0.0,
        render_mode: str | None = None,
    ):
        super().__init__(horizon=horizon, num_options=num_options, noise=noise, num_tasks=num_tasks,
                         anchor_by=anchor_by, invalid_action_penalty=invalid_action_penalty,
                         render_mode=render_mode)  # fmt: skip
        if not (math.isfinite(distractor_reward) and distractor_reward >= 0):
            raise ValueError(f"distractor_reward must be finite and >= 0, got {distractor_reward}")
        self.distractor_reward = float(distractor_reward)
