"""Running episodes: one, many, in parallel, benchmarked, checked and replayed.

``episode`` (a policy made an ``Agent`` and one episode played), ``runner`` (runs of many episodes in GRPO-style
groups, streamed to a JSONL file, resumed, summarised), ``pool`` (envs on threads, processes or Ray actors),
``bench`` (``agentgym bench``: every env against its built-in agents), ``checker`` (``agentgym check``),
``replay`` (``agentgym replay``: re-execute a file and verify it), ``reward_bench`` (reward methods scored on one
set of episodes) and ``stats`` (paired sign-flip tests and Holm's correction for experiments).

May import: agentgym.contract, agentgym.grading, agentgym.agents, agentgym.rewards, agentgym.tools.
"""
