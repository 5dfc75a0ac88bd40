"""ALFWorld-v0: the real ALFWorld text games (``alfworld`` package + its downloaded data) through the Household
protocol (prompts, ``info`` keys, rewards; see ``adapters``).

Needs ``pip install alfworld`` (which brings ``textworld``; ``textworld[pddl]`` for expert plans) and the game
data: run ``alfworld-download`` and point ``$ALFWORLD_DATA`` (or ``data_dir=``) at it. Games are the
``json_2.1.1/<split>/**/game.tw-pddl`` files, skipping ALFWorld's unsupported ``movable`` and ``Sliced`` tasks, as
ALFWorld does. Without the package or the data the env still constructs (``unavailable_reason`` says what is
missing) and ``reset`` raises ``EnvUnavailableError``; Household-v0 is the offline stand-in.

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/ALFWorld-v0", split="valid_unseen")                # doctest: +SKIP
>>> obs, info = env.reset(seed=0)                                               # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from agentgym.contract.trust import declare, list_of, one_of
from agentgym.envs.household import catalog as C
from agentgym.envs.household.adapters import TextGameEnv

ALFWORLD_SPLITS = {"train": "train", "valid_seen": "valid_seen", "valid_unseen": "valid_unseen"}
DATA_ENV = "ALFWORLD_DATA"
INSTRUCTIONS = (
    "You are in a household text game. Each turn, reply with exactly one command, such as 'go to countertop 1', "
    "'open fridge 1', 'take apple 1 from countertop 1', 'move apple 1 to diningtable 1' (or 'put apple 1 in/on "
    "diningtable 1'), 'heat apple 1 with microwave 1', 'use desklamp 1', 'inventory' or 'look'. Type 'help' for "
    "the full list of commands.\n\n"
)


def find_alfworld_games(data_dir: str, split: str, task_types: Sequence[str] | None = None) -> list[str]:
    """ALFWorld game files of ``split`` under ``data_dir`` (sorted), as ALFWorld selects them."""
    root = os.path.join(data_dir, "json_2.1.1", ALFWORLD_SPLITS[split])
    wanted = set(task_types or C.TASK_TYPES)
    games = []
    for folder, _, files in os.walk(root):
        if "game.tw-pddl" not in files or "traj_data.json" not in files:
            continue
        if "movable" in folder or "Sliced" in folder:
            continue
        if task_type_of_path(folder) in wanted:
            games.append(os.path.join(folder, "game.tw-pddl"))
    return sorted(games)


def task_type_of_path(path: str) -> str:
    """``pick_cool_then_place_in_recep`` from ``.../pick_cool_then_place_in_recep-Pan-None-DiningTable-7/trial_...``."""
    for part in reversed(os.path.normpath(path).split(os.sep)):
        head = part.split("-", 1)[0]
        if head in C.TASK_TYPES:
            return head
    return "unknown"


class ALFWorldEnv(TextGameEnv):
    """ALFWorld's TextWorld games with Household's protocol.

    Args:
        split: ``"train"`` (3,553 games), ``"valid_seen"`` (140) or ``"valid_unseen"`` (134).
        data_dir: the ALFWorld data folder (default ``$ALFWORLD_DATA``).
        task_types: restrict to some of the six task types.
        prompt, success_reward, invalid_action_penalty, max_turns: as in ``HouseholdEnv``.
        expert_plan: request TextWorld's ``policy_commands`` (a planner's plan; needs ``textworld[pddl]``).
    """

    env_name = "ALFRED Embodied Environment"
    instructions = INSTRUCTIONS

    #: ``data_dir`` (a path) is the operator's.
    public_args = declare(TextGameEnv.public_args, split=one_of(*ALFWORLD_SPLITS),
                   task_types=list_of(one_of(*C.TASK_TYPES), max_items=len(C.TASK_TYPES), optional=True))  # fmt: skip

    def __init__(
        self,
        *,
        split: str = "valid_seen",
        data_dir: str | None = None,
        task_types: Sequence[str] | None = None,
        prompt: str = "plain",
        success_reward: float = 1.0,
        invalid_action_penalty: float = 0.0,
        expert_plan: bool = False,
        max_turns: int = 50,
        render_mode: str | None = None,
    ):
        if split not in ALFWORLD_SPLITS:
            raise ValueError(f"split must be one of {tuple(ALFWORLD_SPLITS)}, got {split!r}")
        missing = []
        tw: tuple[Any, ...] = ()
        try:
            import textworld
            from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

            tw = (textworld, AlfredDemangler, AlfredInfos)
        except ImportError:
            missing.append("the `alfworld` package (pip install alfworld)")
        data = data_dir or os.environ.get(DATA_ENV)
        games: list[str] = []
        if not data:
            missing.append(f"the ALFWorld game data (run `alfworld-download`, then set ${DATA_ENV} to its folder)")
        else:
            games = find_alfworld_games(data, split, task_types)
            if not games:
                missing.append(
                    f"ALFWorld games under {os.path.join(data, 'json_2.1.1', split)} (run `alfworld-download`)"
                )
        unavailable = None
        if missing:
            unavailable = ("agentgym/ALFWorld-v0 is unavailable here: it needs " + " and ".join(missing)
                           + ". agentgym/Household-v0 is the offline, ALFWorld-compatible stand-in.")  # fmt: skip
        self._tw = tw
        self._data_dir = data
        super().__init__(
            games=games if unavailable is None else (), unavailable=unavailable, prompt=prompt,
            success_reward=success_reward, invalid_action_penalty=invalid_action_penalty,
            expert_plan=expert_plan, max_turns=max_turns, render_mode=render_mode,
        )  # fmt: skip

    def task_type_of(self, path: str) -> str:
        return task_type_of_path(path)

    def task_id_of(self, path: str) -> str:
        return os.path.relpath(os.path.dirname(path), os.path.join(str(self._data_dir), "json_2.1.1"))

    def _load(self, path: str) -> Any:
        textworld, demangler, alfred_infos = self._tw
        infos = textworld.EnvInfos(
            won=True, admissible_commands=True, policy_commands=self.expert_plan, extras=["gamefile"]
        )
        return textworld.start(path, request_infos=infos, wrappers=[demangler(shuffle=False), alfred_infos])
