"""HiPER's planner/executor turn format as a step wrapper (docs/rewards.md, 'HiPER').

A turn that starts a new subgoal opens with ``<subgoal>...</subgoal>`` (the planner's part) and then gives the
env's action (the executor's part); the turns until the next subgoal carry it out. :class:`SubgoalFormat` checks
that format, hands the env the turn without the subgoal block, and marks a malformed turn ``action_valid=False``
with the reason in ``info["parse_error"]`` (the env's own verdict on the action is kept: an action the env refuses
stays invalid). ``agentgym.rewards.advantages.hiper.subgoal_segments`` reads the same tags to split a trajectory.

>>> import gymnasium as gym, agentgym
>>> env = SubgoalFormat(gym.make("agentgym/SearchQA-v0", dataset="tiny"))
>>> obs, _ = env.reset(seed=0)
>>> obs[0]["content"].startswith(SUBGOAL_NOTE)
True
>>> info = env.step("<search> x </search>")[-1]
>>> info["action_valid"], info["parse_error"], info["reward_components"]["format"]
(False, 'The first turn must open a subgoal with <subgoal> ... </subgoal> before the action.', -0.1)
>>> _ = env.reset(seed=0)
>>> info = env.step("<subgoal>find the author</subgoal> <search> x </search>")[-1]
>>> info["action_valid"], info["parse_error"]
(True, None)
"""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

import gymnasium as gym

from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.wrappers import StepReturn, add_component

#: The instruction :class:`SubgoalFormat` puts before the task's first message (``note=True``).
SUBGOAL_NOTE = (
    "Work in subgoals. Whenever you start a new subgoal, open your reply with <subgoal> the subgoal in a few words "
    "</subgoal>, then give your action as usual; the replies that carry out the current subgoal give the action "
    "alone. Your first reply must open a subgoal."
)


def subgoal_format_error(text: str, first: bool, tag: str = "subgoal") -> str | None:
    """Why ``text`` breaks the planner/executor format, or None when it keeps it: at most one
    ``<tag>...</tag>`` block, not empty, at the start of the turn (only whitespace before it), no unpaired tag, and
    on the episode's first turn (``first``) a block is required.

    >>> subgoal_format_error("<subgoal>open the door</subgoal> go to door 1", first=True) is None
    True
    >>> subgoal_format_error("go to door 1 <subgoal>open it</subgoal>", first=False)
    'The <subgoal> ... </subgoal> block must open the turn, before the action.'
    """
    opens = len(re.findall(rf"<{re.escape(tag)}>", text))
    closes = len(re.findall(rf"</{re.escape(tag)}>", text))
    block = f"<{tag}> ... </{tag}>"
    if opens != closes:
        return f"Unpaired <{tag}> tag: write the subgoal as {block}."
    if opens > 1:
        return f"Open at most one subgoal per turn (one {block} block)."
    if opens == 0:
        return f"The first turn must open a subgoal with {block} before the action." if first else None
    m = re.search(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, re.DOTALL)
    if m is None:
        return f"Unpaired <{tag}> tag: write the subgoal as {block}."
    if text[: m.start()].strip():
        return f"The {block} block must open the turn, before the action."
    if not m.group(1).strip():
        return f"The subgoal is empty: say it inside {block}."
    return None


def strip_subgoal(text: str, tag: str = "subgoal") -> str:
    """``text`` without its ``<tag>...</tag>`` blocks (what the env parses as the action).

    >>> strip_subgoal("<subgoal>open the door</subgoal> go to door 1")
    'go to door 1'
    """
    pattern = rf"<{re.escape(tag)}>.*?</{re.escape(tag)}>"
    return re.sub(pattern, "", text, flags=re.DOTALL).strip()


def _with_note(obs: Any, note: str) -> Any:
    """The reset observation with ``note`` before the first message's text (a chat message list) or the text."""
    if isinstance(obs, str):
        return f"{note}\n\n{obs}"
    if isinstance(obs, list) and obs and isinstance(obs[0], dict) and isinstance(obs[0].get("content"), str):
        return [{**obs[0], "content": f"{note}\n\n{obs[0]['content']}"}, *obs[1:]]
    return obs


class SubgoalFormat(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """The planner/executor format of HiPER: each turn is checked by :func:`subgoal_format_error`, the env gets it
    without the subgoal block (:func:`strip_subgoal`), and a malformed turn has ``info["action_valid"] = False``,
    its reason in ``info["parse_error"]`` (the env's own message first when it also refused the action) and
    ``-penalty`` added to the reward under component ``name`` (0 on the other turns). ``note``: put
    :data:`SUBGOAL_NOTE` before the task's first message at reset."""

    #: Episode state, for ``agentgym.contract.branching`` (snapshots and branches copy these attributes).
    snapshot_attrs: ClassVar[tuple[str, ...]] = ("_turn",)

    def __init__(self, env: gym.Env, penalty: float = 0.1, note: bool = True, name: str = "format"):
        gym.utils.RecordConstructorArgs.__init__(self, penalty=penalty, note=note, name=name)
        gym.Wrapper.__init__(self, env)
        if not math.isfinite(penalty):
            raise ValueError(f"penalty must be finite, got {penalty}")
        self.penalty = float(penalty)
        self.note = bool(note)
        self.tag = "subgoal"  # the tag hiper's trainer segments on (subgoal_segments' default)
        self.name = name
        self._turn = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._turn = 0
        return (_with_note(obs, SUBGOAL_NOTE) if self.note else obs), info

    def step(self, action: Any) -> StepReturn:
        text = action if isinstance(action, str) else str(action)
        error = subgoal_format_error(text, self._turn == 0, self.tag)
        self._turn += 1
        obs, reward, terminated, truncated, info = self.env.step(strip_subgoal(text, self.tag))
        if error is not None:
            # the env's verdict is kept: its own parse error comes first, the format's is added after it
            env_error = info.get("parse_error")
            info = {**info, "action_valid": False, "parse_error": f"{env_error} {error}" if env_error else error}
        reward, info = add_component(reward, info, self.name, -self.penalty if error is not None else 0.0)
        return obs, reward, terminated, truncated, info


METHODS: tuple[Method, ...] = (
    Method("subgoal_format", "HiPER subgoal format", "wrapper",
           "HiPER's planner/executor turn format: a turn opening a new subgoal starts with <subgoal>...</subgoal>; "
           "a malformed turn is an invalid action",
           needs=("segments",), paper=cite("HiPER"), code=f"{__name__}:SubgoalFormat",
           choices=("a turn keeps the format with at most one non-empty subgoal block, at its start, and the first "
                    "turn must open one; the env sees the turn without the block",
                    "a malformed turn is still played (its action stripped of the block) and marked "
                    "action_valid=False with a parse_error; knob penalty (0.1, component 'format')",
                    "the instruction goes before the task's first message at reset; knob note"),
           train={"algo": "grpo", "estimator": "hiper", "reward_wrappers": [{"name": "subgoal_format"}]},
           knobs_into="wrapper"),
)  # fmt: skip
