"""Reference trainer (importable as ``agentgym.baselines``).

- ``agentgym.baselines.rollout``: the reference token-in/token-out multi-turn rollout (``collect_rollouts``,
  ``Rollout`` with prompt/response ids, loss mask, rollout log-probs, turn spans and rewards, group id, seed).
- ``agentgym.baselines.trainer``: CleanRL-style GRPO / Dr. GRPO / RLOO / PPO over those rollouts
  (``TrainConfig``, ``load_config``, ``train(config) -> summary``, ``main(argv)``).
"""
