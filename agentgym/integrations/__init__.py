"""Thin adapters from agentgym envs to external RL trainers (docs/integrations.md).

Each module imports its trainer lazily, so ``import agentgym`` and these modules work without the trainers installed:

- ``agentgym.integrations.trl`` (TRL 1.16): ``AgentGymRollout``, a ``GRPOTrainer`` ``rollout_func``;
  ``tool_environment``, an ``environment_factory`` class for the tool-calling envs.
- :mod:`agentgym.integrations.skyrl` (skyrl-gym 0.4): a ``BaseTextEnv`` subclass per env, registered with
  ``skyrl_gym.envs.register``.
- :mod:`agentgym.integrations.verl` (verl 0.9): the ``agentgym`` agent loop and the ``agentgym_turn`` advantage
  estimator.
- :mod:`agentgym.integrations.openrlhf` (OpenRLHF 0.11): ``AgentInstance`` / ``AgentExecutor`` classes for
  ``--train.agent_func_path``.

All four live here. The TRL adapter drives the reference token-in/token-out rollout (``agentgym.baselines.rollout``),
so this room sits above the trainer; the others use only the env contract. :mod:`agentgym.integrations.tasks` holds
what they share: a JSON-serialisable reference to one task of one env (:class:`~agentgym.integrations.tasks.TaskRef`)
and dataset rows.

May import: agentgym (the package root, which registers the envs), agentgym.contract, agentgym.grading,
agentgym.agents, agentgym.rewards, agentgym.running, agentgym.serving, agentgym.tools, agentgym.baselines.
"""

from agentgym.integrations.tasks import TaskRef, task_rows

__all__ = ["TaskRef", "task_rows"]
