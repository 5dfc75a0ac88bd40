"""Umbrella-v0: only the first turn's choice decides the final reward; the H-1 turns after it show distractor
options and pay random +-r rewards unrelated to the outcome (after bsuite's umbrella_length).

Turn 1 is a decisive stage (pick the option the signal names); turns 2..H list k animal words without a signal, and
each option pays ``+distractor_reward`` or ``-distractor_reward`` (component ``distractor``) from a per-task table
drawn independently of everything else, so no observation predicts it and its sum is independent of the outcome. The
``outcome`` (1 if turn 1 was right) is paid on turn H. The table depends on the choice, so group members that choose
differently see different distractor rewards: noise that a method crediting a turn with the rewards near it mistakes
for signal, and that potential-based shaping on ``info["progress"]`` (1 or 0 from turn 1 on: the outcome is known
then) moves back onto turn 1. A random policy succeeds with probability 1/k whatever H is. Knobs, action format,
progress and anchors: ``agentgym.envs.diagnostics.base``.

>>> env = UmbrellaEnv(horizon=3)
>>> obs, info = env.reset(options={"task_index": 0})
>>> obs[0]["content"][-41:], info["gold"]["choices"], info["gold"]["decisive"]
('Turn 1/3. Signal: red. Options: gold red.', ['red', 'dog', 'goat'], [True, False, False])
>>> obs, reward, terminated, truncated, info = env.step("<answer> red </answer>")
>>> obs[0]["content"], reward, info["progress"]  # the outcome is decided: progress is 1
('Turn 2/3. Options: dog wolf.', 0.0, 1.0)
>>> obs, reward, terminated, truncated, info = env.step("<answer> wolf </answer>")
>>> obs[0]["content"], info["reward_components"], info["anchor"]
('Turn 3/3. Options: goat horse.', {'distractor': -0.1}, '0:2:ok')
>>> obs, reward, terminated, truncated, info = env.step("<answer> goat </answer>")
>>> info["reward_components"], info["success"]
({'distractor': 0.1, 'outcome': 1.0}, True)
"""

from __future__ import annotations

import random

from agentgym.envs.diagnostics.base import ANIMALS, COLOURS, INTRO, DistractorEnv, Stage, Task


class UmbrellaEnv(DistractorEnv):
    """One decisive turn, then H-1 distractor turns paying +-``distractor_reward`` (see the module docstring;
    arguments: ``DistractorEnv``)."""

    salt = "agentgym/Umbrella-v0"
    public_args = DistractorEnv.public_args

    def _make_task(self, rng: random.Random) -> Task:
        r = self.distractor_reward
        stages = [self.signal_stage(rng, 1, COLOURS)]
        for t in range(2, self.horizon + 1):
            options = self.draw_options(rng, ANIMALS)
            payoffs = tuple((r if rng.random() < 0.5 else -r) + 0.0 for _ in options)  # + 0.0: no -0.0 when r = 0
            stages.append(Stage(self.stage_text(t, options), options, payoffs=payoffs))
        return Task(INTRO, tuple(stages))
