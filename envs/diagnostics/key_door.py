"""KeyDoor-v0: a clue in the first observation ("The door opens with the blue key.") must be used on turn H, the
door, with distractor turns in between that pay small rewards.

Turns 1..H-1 are distractor stages over fruit words: picking the fruit the signal names pays ``distractor_reward``
(component ``distractor``), any other pays 0. Turn H lists k key colours (alphabetically: the list does not depend on
which is right) and is the only decisive stage; the ``outcome`` is 1 for the clue's key. The clue appears in the first
observation only and no later observation before the door names a colour, so the policy must carry it across H-1
turns; with ``noise`` the clue names a wrong key. A random policy succeeds with probability 1/k whatever H is.

Progress is 0 until the door and then the outcome: the clue is given, not earned, and no choice before the door
changes whether the door can be opened, so every state before it is as close to success as any other (a potential
that grew over the distractor turns would pay for the passage of time). Knobs, action format and anchors:
``agentgym.envs.diagnostics.base``.

>>> env = KeyDoorEnv(horizon=3)
>>> obs, info = env.reset(options={"task_index": 0})
>>> print(obs[0]["content"])
The door opens with the white key. Reply <answer> option </answer> each turn. Pick the option that matches the
signal, if any. Turn 1/3. Signal: fig. Options: fig peach.
>>> for choice in ["fig", "grape", "white"]:
...     obs, reward, terminated, truncated, info = env.step(f"<answer> {choice} </answer>")
...     print(obs[0]["content"] if obs else None, info["reward_components"], info["progress"])
Turn 2/3. Signal: mango. Options: grape mango. {'distractor': 0.1} 0.0
Turn 3/3. Door: which key opens it? Options: gold white. {'distractor': 0.0} 0.0
None {'outcome': 1.0} 1.0
"""

from __future__ import annotations

import random

from agentgym.envs.diagnostics.base import COLOURS, FRUITS, INTRO, DistractorEnv, Stage, Task

DOOR = "Door: which key opens it?"


class KeyDoorEnv(DistractorEnv):
    """H-1 distractor turns paying ``distractor_reward`` for the signalled fruit, then the door (see the module
    docstring; arguments: ``DistractorEnv``)."""

    salt = "agentgym/KeyDoor-v0"
    public_args = DistractorEnv.public_args

    def _make_task(self, rng: random.Random) -> Task:
        keys, key, shown, misleading = self.draw_signal(rng, COLOURS)
        stages = [self.signal_stage(rng, t, FRUITS, payoff=self.distractor_reward) for t in range(1, self.horizon)]
        stages.append(Stage(self.stage_text(self.horizon, keys, label=DOOR), keys, answer=key, misleading=misleading))
        return Task(f"The door opens with the {shown} key. {INTRO}", tuple(stages))
