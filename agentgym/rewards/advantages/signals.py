"""What the turn-level estimators read from trajectories besides rewards: the verified per-turn signal each env
reports (:class:`TurnSignal`, ``TURN_SIGNALS``; ``mt_grpo``) and the keys of what the agent observed
(:func:`observation_key`, :func:`observation_anchors`; ``gigpo_obs``). docs/rewards.md, 'Multi-turn GRPO' and
'GiGPO'.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from agentgym.rewards.advantages.base import _numpy

SignalMode = Literal["value", "delta"]


def _signal_rows(rows: Any, name: str) -> list[list[float | None]]:
    """Ragged per-turn signals: a number (a bool counts as 0/1) or None (no verified signal at that turn)."""
    out: list[list[float | None]] = []
    for i, row in enumerate(_numpy(rows)):
        row = _numpy(row)
        items = row.tolist() if isinstance(row, np.ndarray) else list(row)
        clean: list[float | None] = []
        for t, x in enumerate(items):
            if x is None:
                clean.append(None)
                continue
            if not isinstance(x, (int, float, np.number)):  # bool is an int
                raise ValueError(f"{name}[{i}][{t}]: a signal is a number, a bool or None, got {x!r}")
            v = float(x)
            if not math.isfinite(v):
                raise ValueError(f"{name}[{i}][{t}]: {v} (a turn without a signal is None, never NaN)")
            clean.append(v)
        out.append(clean)
    return out


@dataclass(frozen=True)
class TurnSignal:
    """Where an env reports a verified per-turn signal: ``info[key]`` after each step, read as it is (``"value"``:
    a per-step verdict such as the diagnostics' ``correct``) or as its change over the step (``"delta"``: for a
    cumulative key such as SearchQA's ``supporting_recall``; the state before the first step is the reset's)."""

    key: str
    mode: SignalMode = "value"

    def __post_init__(self) -> None:
        if self.mode not in ("value", "delta"):
            raise ValueError(f"signal mode must be 'value' or 'delta', got {self.mode!r}")

    def read(self, reset_info: Mapping[str, Any], step_infos: Sequence[Mapping[str, Any]]) -> list[float | None]:
        """One signal per step (None: the step's info has no number under ``key``, or, for ``"delta"``, no earlier
        state had one). A bool counts as 0/1; a non-finite or non-numeric value raises ``ValueError``.

        >>> TurnSignal("recall", "delta").read({"recall": 0.0}, [{"recall": 0.5}, {}, {"recall": 1.0}])
        [0.5, None, 0.5]
        """

        def number(x: Any, where: str) -> float | None:
            if x is None:
                return None
            if not isinstance(x, (int, float, np.number)) or not math.isfinite(float(x)):
                raise ValueError(f"{where}[{self.key!r}] must be a finite number, a bool or None, got {x!r}")
            return float(x)

        prev = number(reset_info.get(self.key), "reset info")
        out: list[float | None] = []
        for k, info in enumerate(step_infos):
            x = number(info.get(self.key), f"step {k} info")
            if self.mode == "value" or x is None:
                out.append(x)
                continue
            out.append(None if prev is None else x - prev)
            prev = x
        return out


#: The verified per-turn signal each built-in env reports (what :func:`mt_grpo` reads by default in the reference
#: trainer). Household reports ``progress`` only with ``expert_plan=True``; envs not listed report none. The tool
#: envs' ``action_valid`` (a bool, read as 0/1) is the seed's "tool execution and format" turn signal.
TURN_SIGNALS: Mapping[str, TurnSignal] = MappingProxyType(
    {
        # the step's choice was right (True/False); None on a distractor stage
        "agentgym/Chain-v0": TurnSignal("correct"),
        "agentgym/Umbrella-v0": TurnSignal("correct"),
        "agentgym/KeyDoor-v0": TurnSignal("correct"),
        # the share of the task's supporting documents retrieved so far: its increase is the step's new hits
        "agentgym/SearchQA-v0": TurnSignal("supporting_recall", "delta"),
        # 1 - (expert plan length) / (initial plan length): its increase is the step's plan progress (< 0: a detour)
        "agentgym/Household-v0": TurnSignal("progress", "delta"),
        # MT-GRPO's tool-execution and format signal: the step's tool calls parsed, named a known function with valid
        # arguments (and, for CodeExec, a non-empty answer); every step's info has it. Their verified effects
        # (ToolUse's state_checks, BFCL's turn_checks, CodeExec's run_statuses) are per-episode lists, not per-step
        # numbers, so a TurnSignal cannot read them
        "agentgym/ToolUse-v0": TurnSignal("action_valid"),
        "agentgym/BFCL-v0": TurnSignal("action_valid"),
        "agentgym/CodeExec-v0": TurnSignal("action_valid"),
        # the share of the gold query's tables and columns discovered so far (TRUST-SQL's exploration reward): its
        # increase is what the step's schema probing found
        "agentgym/SQL-v0": TurnSignal("exploration_reward", "delta"),
        # boxes on targets after the step (the solver's exact `distance_to_go` / `progress` are in info too)
        "agentgym/Sokoban-v0": TurnSignal("boxes_on_target"),
        # the best score a purchase could have got so far (WebShop's reward of a viewed product with the options
        # then selected; 0.0 at the start): its increase is what the step found or selected
        "agentgym/Shop-v0": TurnSignal("best_purchase_value", "delta"),
    }
)


def flip_signals(
    rows: Sequence[Sequence[float | None]], rate: float, rng: np.random.Generator
) -> list[list[float | None]]:
    """A binary turn signal corrupted at a known rate: each reported value (0 or 1) is flipped to ``1 - x`` with
    probability ``rate``, independently; None stays None. The noisy-signal arms of a credit experiment read it.
    A value other than 0 or 1 raises ``ValueError`` (flipping has no meaning for it).

    >>> flip_signals([[1.0, None, 0.0]], 1.0, np.random.default_rng(0))
    [[0.0, None, 1.0]]
    >>> flip_signals([[1.0, 0.0]], 0.0, np.random.default_rng(0))
    [[1.0, 0.0]]
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"a flip rate is a probability in [0, 1], got {rate}")
    out: list[list[float | None]] = []
    for i, row in enumerate(rows):
        flips = rng.random(len(row)) < rate
        new: list[float | None] = []
        for t, x in enumerate(row):
            if x is not None and x not in (0.0, 1.0):
                raise ValueError(f"row {i}, turn {t}: {x} is not a binary signal (0 or 1), so it cannot be flipped")
            new.append(None if x is None else 1.0 - x if flips[t] else x)
        out.append(new)
    return out


def signal_progress(rows: Sequence[Sequence[float | None]]) -> list[list[float]]:
    """Per-turn progress rewards rebuilt from a binary turn signal: the potential ``Phi_t`` is the share of the
    episode's signalled turns passed so far (``d / D``, ``D`` = the turns that report a signal) while every signal so
    far is 1, and 0 from the first 0 on; turn t's reward is ``Phi_t - Phi_{t-1}`` (``Phi`` before the first turn is
    0). A turn without a signal (None) keeps ``Phi``. On the diagnostics, fed the verified ``info["correct"]``, this
    is exactly their ``info["progress"]`` increments; fed a corrupted or judged signal, it is the progress that signal
    implies (the noisy-signal arms of a credit experiment). The rewards sum to 1 when every signal is 1, else 0.

    >>> signal_progress([[1.0, 1.0, 0.0, 1.0], [1.0, None, 1.0], [None, None]])
    [[0.25, 0.25, -0.5, 0.0], [0.5, 0.0, 0.5], [0.0, 0.0]]
    """
    out: list[list[float]] = []
    for i, row in enumerate(rows):
        signalled = [x for x in row if x is not None]
        for t, x in enumerate(row):
            if x is not None and x not in (0.0, 1.0):
                raise ValueError(f"row {i}, turn {t}: {x} is not a binary signal (0 or 1)")
        total, passed, failed, prev, rewards = len(signalled), 0, False, 0.0, []
        for x in row:
            if x is not None:
                passed += 1
                failed = failed or x == 0.0
            phi = 0.0 if failed or total == 0 else passed / total
            rewards.append(phi - prev)
            prev = phi
        out.append(rewards)
    return out


def observation_key(messages: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """A hashable key of exactly what an observation showed the agent: each message as canonical JSON (sorted keys,
    non-JSON values by ``str``). Two observations share a key only if every message is identical.

    >>> observation_key([{"role": "user", "content": "Turn 2/2. Options: a b."}])
    ('{"content": "Turn 2/2. Options: a b.", "role": "user"}',)
    """
    return tuple(json.dumps(dict(m), sort_keys=True, ensure_ascii=False, default=str) for m in messages)


def observation_anchors(
    initial_observation: Sequence[Mapping[str, Any]], observations: Sequence[Sequence[Mapping[str, Any]]]
) -> list[tuple[str, ...]]:
    """Per turn, the :func:`observation_key` of the observation its action answered: the reset's for the first
    turn, the previous step's after that (``observations`` holds one observation per step, so one anchor each).
    GiGPO's observation anchors (``gigpo_obs``): unlike an env's state anchor they carry nothing the agent did
    not see."""
    return [observation_key(o) for o in [initial_observation, *observations][: len(observations)]]
