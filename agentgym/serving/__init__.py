"""Serving envs to other processes: the HTTP env server, its client and the OpenEnv bridge.

``server`` (``agentgym serve``: sessions, per-client shares, size limits, tokens beyond loopback; ``--web`` adds the
viewer's page for playing the served envs by hand), ``remote``
(``RemoteEnv``, an ``AgentEnv`` played over HTTP) and ``openenv`` (the same envs behind OpenEnv's protocol).

May import: agentgym.contract, agentgym.running, agentgym.tools, agentgym.viewer.
"""
