"""TextWorld-v0: play any TextWorld game file (``.z8`` / ``.ulx``, e.g. made with ``tw-make``) through the
Household protocol (prompts, ``info`` keys, rewards; see ``adapters``).

Needs ``pip install textworld`` (the x86-64 wheel ships the Inform 7 tools, so ``tw-make`` works offline)::

    tw-make custom --world-size 5 --nb-objects 10 --quest-length 5 --seed 1234 --output games/g.z8

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/TextWorld-v0", game_file="games/g.z8")          # doctest: +SKIP
>>> obs, info = env.reset(seed=0)                                               # doctest: +SKIP
>>> info["admissible_commands"][:2], info["expert_plan"][:1]                    # doctest: +SKIP
"""

from __future__ import annotations

import glob
import os
import warnings
from collections.abc import Sequence
from typing import Any

from agentgym.contract.env import EnvUnavailableError
from agentgym.envs.household.adapters import TextGameEnv

GAME_EXTENSIONS = (".z8", ".ulx", ".z5")
INSTALL_HINT = "pip install textworld"


def find_games(game_file: str | Sequence[str]) -> list[str]:
    """Game files from a path, a directory (every ``.z8``/``.ulx``/``.z5`` in it, sorted) or a list of paths."""
    paths = [game_file] if isinstance(game_file, str | os.PathLike) else list(game_file)
    games: list[str] = []
    for p in map(str, paths):
        if os.path.isdir(p):
            games += sorted(g for ext in GAME_EXTENSIONS for g in glob.glob(os.path.join(p, f"*{ext}")))
        elif os.path.isfile(p):
            games.append(p)
        else:
            raise EnvUnavailableError(f"agentgym/TextWorld-v0: game file {p!r} does not exist")
    return games


class TextWorldEnv(TextGameEnv):
    """TextWorld games with Household's protocol.

    Args:
        game_file: a game file, a directory of games, or a list of game files; ``reset`` picks one with the
            seed (or ``options={"task_index": i}``).
        prompt, success_reward, invalid_action_penalty, max_turns: as in ``HouseholdEnv``.
        expert_plan: request TextWorld's ``policy_commands`` (a walkthrough from the current state) as
            ``info["expert_plan"]``; the ``oracle`` agent follows it. About halves TextWorld's speed.
    """

    env_name = "TextWorld text-based game"

    public_args = TextGameEnv.public_args  # ``game_file`` (paths) is the operator's

    def __init__(
        self,
        *,
        game_file: str | Sequence[str] | None = None,
        prompt: str = "plain",
        success_reward: float = 1.0,
        invalid_action_penalty: float = 0.0,
        expert_plan: bool = True,
        max_turns: int = 50,
        render_mode: str | None = None,
    ):
        unavailable = None
        try:
            import textworld
        except ImportError:
            textworld, unavailable = None, f"agentgym/TextWorld-v0 needs the `textworld` package: {INSTALL_HINT}"
        if game_file is None and unavailable is None:
            unavailable = (
                "agentgym/TextWorld-v0 needs game_file=<a .z8/.ulx game, a directory of games, or a list>; make one "
                "offline with: tw-make custom --world-size 5 --nb-objects 10 --quest-length 5 --seed 1234 "
                "--output games/g.z8"
            )
        self._textworld = textworld
        super().__init__(
            games=find_games(game_file) if unavailable is None and game_file is not None else (),
            unavailable=unavailable, prompt=prompt, success_reward=success_reward,
            invalid_action_penalty=invalid_action_penalty, expert_plan=expert_plan, max_turns=max_turns,
            render_mode=render_mode,
        )  # fmt: skip

    def task_id_of(self, path: str) -> str:
        return os.path.splitext(os.path.basename(path))[0]

    def _load(self, path: str) -> Any:
        infos = self._textworld.EnvInfos(
            admissible_commands=True, won=True, lost=True, policy_commands=self.expert_plan
        )
        with warnings.catch_warnings():  # jericho warns that tw-make games lack its score/move detection
            warnings.filterwarnings("ignore", message=".*not fully supported.*")
            return self._textworld.start(path, request_infos=infos)
