"""Chain-v0: H turns, each a choice among k options whose right answer is the one the signal names; the reward
(component ``outcome``) comes only at the end: 1 if every choice was right.

Every stage is decisive, so a policy that is right with probability p per turn succeeds with probability p^H: an
untrained policy (p = 1/k) succeeds at (1/k)^H, and outcome-only groups go silent as H grows, while the verified
progress (``info["progress"]`` = t/H while every choice so far was right, 0 after a mistake) and the state anchors
still tell the turns apart. Knobs, action format, progress and anchors: ``agentgym.envs.diagnostics.base``.

>>> env = ChainEnv(horizon=3)
>>> obs, info = env.reset(options={"task_index": 0})
>>> print(obs[0]["content"])
Reply <answer> option </answer> each turn. Pick the option that matches the signal, if any.
Turn 1/3. Signal: red. Options: brown red.
>>> info["gold"]["choices"], info["anchor"], info["progress"]
(['red', 'yellow', 'blue'], '0:0:ok', 0.0)
>>> obs, reward, terminated, truncated, info = env.step("<answer> red </answer>")
>>> obs[0]["content"], reward, info["anchor"], round(info["progress"], 3)
('Turn 2/3. Signal: yellow. Options: purple yellow.', 0.0, '0:1:ok', 0.333)
>>> obs, reward, terminated, truncated, info = env.step("purple")  # wrong: the outcome is lost, progress drops to 0
>>> info["correct"], info["anchor"], info["progress"]
(False, '0:2:x', 0.0)
>>> obs, reward, terminated, truncated, info = env.step("<answer> maybe blue </answer>")  # invalid: a miss
>>> print(obs[0]["content"])
Invalid action: 'maybe blue' is not one of the options (blue gold). This turn counts as a miss.
>>> terminated, info["reward_components"], info["success"]
(True, {'outcome': 0.0}, False)
"""

from __future__ import annotations

import random

from agentgym.envs.diagnostics.base import COLOURS, INTRO, DiagnosticEnv, Task


class ChainEnv(DiagnosticEnv):
    """H decisive stages in a row (see the module docstring; arguments: ``DiagnosticEnv``)."""

    salt = "agentgym/Chain-v0"
    public_args = DiagnosticEnv.public_args

    def _make_task(self, rng: random.Random) -> Task:
        return Task(INTRO, tuple(self.signal_stage(rng, t, COLOURS) for t in range(1, self.horizon + 1)))
