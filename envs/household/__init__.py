"""Household: a fast, offline, deterministic ALFWorld-like text world, plus adapters to ALFWorld and TextWorld.

Modules: ``catalog`` (object and receptacle types, rooms, task wording), ``world`` (seeded layouts and tasks,
splits), ``engine`` (state, grammar, feedback, admissible commands), ``planner`` (optimal expert plans),
``prompts`` (plain and verl-agent templates), ``env`` (``Household-v0``), ``agents`` (oracle, heuristic, random),
``adapters`` / ``textworld_adapter`` / ``alfworld_adapter`` (``TextWorld-v0``, ``ALFWorld-v0``).

>>> from agentgym.envs.household import Engine, expert_plan, generate_task
>>> eng = Engine(generate_task("valid_unseen", 0))
>>> plan = expert_plan(eng)
>>> all(eng.step(cmd)[1] for cmd in plan), eng.won
(True, True)
"""

from agentgym.envs.household.engine import Engine
from agentgym.envs.household.env import HouseholdEnv
from agentgym.envs.household.planner import expert_plan
from agentgym.envs.household.world import GenConfig, Task, generate_task

__all__ = ["Engine", "GenConfig", "HouseholdEnv", "Task", "expert_plan", "generate_task"]
