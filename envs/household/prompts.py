"""Prompt templates: ``plain`` (ALFWorld's text, one command per turn) and ``verl`` (verl-agent's ALFWorld prompt).

``plain``: the first message explains the command format and shows ALFWorld's intro (banner, room, task); every
later message is the game's feedback exactly as ALFWorld prints it. The agent replies with a bare command.

``verl``: verl-agent's ``ALFWORLD_TEMPLATE_NO_HIS`` for the first turn (the intro and the admissible actions,
``'go to cabinet 1'`` one per line, ``help`` left out) and, since the chat already carries the history, a short
per-turn form that restates the task, the step number, the feedback and the admissible actions. The agent thinks
inside ``<think>...</think>`` and answers inside ``<action>...</action>``.

>>> render_admissible(["go to cabinet 1", "help", "look"])
"'go to cabinet 1'\\n 'look'"
>>> first_message("plain", "You are in the middle of a room.", ["look"]).endswith("middle of a room.")
True
"""

from __future__ import annotations

from collections.abc import Sequence

PROMPTS: tuple[str, ...] = ("plain", "verl")

PLAIN_INSTRUCTIONS = (
    "You are playing a household text game. Each turn, reply with exactly one command, such as 'go to "
    "countertop 1', 'open fridge 1', 'take apple 1 from countertop 1', '{put}', 'heat apple 1 with microwave 1', "
    "'clean apple 1 with sinkbasin 1', 'cool apple 1 with fridge 1', 'use desklamp 1', 'examine apple 1', "
    "'inventory' or 'look'. Type 'help' for the full list of commands.\n\n"
)
PUT_EXAMPLES = {"put": "put apple 1 in/on diningtable 1", "move": "move apple 1 to diningtable 1"}

VERL_FIRST = (
    "You are an expert agent operating in the {env_name}.\n"
    "Your current observation is: {observation}\n"
    "Your admissible actions of the current situation are: [{admissible}].\n\n"
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed "
    "within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step and present it "
    "within <action> </action> tags."
)
VERL_STEP = (
    "Your task is to: {task}\n"
    "You are now at step {step} and your current observation is: {observation}\n"
    "Your admissible actions of the current situation are: [{admissible}].\n\n"
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed "
    "within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step and present it "
    "within <action> </action> tags."
)


class VerlStep:
    """``step_message("verl", ...)`` for one task, with the constant parts joined once (a hot path: about 3x
    faster than formatting ``VERL_STEP`` every turn).

    >>> VerlStep("put a mug in sofa.")("Nothing happens.", "'look'", 2) == step_message(
    ...     "verl", "Nothing happens.", ["look"], "put a mug in sofa.", 2)
    True
    """

    __slots__ = ("_head", "_middle", "_tail")

    def __init__(self, task: str):
        marker = "\x00"
        head, rest = VERL_STEP.format(task=task, step=marker, observation=marker, admissible=marker).split(marker, 1)
        middle, rest = rest.split(marker, 1)
        self._head, (self._middle, self._tail) = head, (middle, tuple(rest.split(marker, 1)))

    def __call__(self, feedback: str, admissible_text: str, step: int) -> str:
        """The message after the agent's ``step``-th action; ``admissible_text`` from ``render_admissible``."""
        between, tail = self._tail
        return f"{self._head}{step + 1}{self._middle}{feedback}{between}{admissible_text}{tail}"


def render_admissible(commands: Sequence[str]) -> str:
    """verl-agent's rendering of the admissible actions: quoted, one per line, without ``help``."""
    return "\n ".join(f"'{c}'" for c in commands if c != "help")


def first_message(
    prompt: str,
    intro: str,
    admissible: Sequence[str],
    put_style: str = "put",
    *,
    instructions: str | None = None,
    env_name: str = "ALFRED Embodied Environment",
) -> str:
    """The first user message of an episode (``instructions`` replaces the plain prompt's preamble)."""
    if prompt == "plain":
        preamble = PLAIN_INSTRUCTIONS.format(put=PUT_EXAMPLES[put_style]) if instructions is None else instructions
        return preamble + intro
    return VERL_FIRST.format(env_name=env_name, observation=intro, admissible=render_admissible(admissible))


def step_message(prompt: str, feedback: str, admissible: Sequence[str], task: str, step: int) -> str:
    """The user message after the agent's ``step``-th action (``step`` counts from 1)."""
    if prompt == "plain":
        return feedback
    return VERL_STEP.format(task=task, step=step + 1, observation=feedback, admissible=render_admissible(admissible))
