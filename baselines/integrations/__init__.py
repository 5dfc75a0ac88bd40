"""Trainer adapters that drive the reference rollout (importable as ``agentgym.baselines.integrations``).

- ``agentgym.baselines.integrations.trl``: TRL 1.16 ``GRPOTrainer`` ``rollout_func`` (token-in/token-out through
  ``agentgym.baselines.rollout``) and ``environment_factory`` for the tool-calling envs.

The adapters that need only the env contract (SkyRL, verl, OpenRLHF) are in ``agentgym.integrations``.
"""
