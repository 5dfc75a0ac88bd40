"""Serving envs to other processes: the HTTP env server, its client and the OpenEnv bridge.

``server`` (``agentgym serve``: sessions, per-client shares, size limits, tokens beyond loopback; ``--web`` mounts the
viewer's page for playing the served envs by hand, which the command line builds), ``remote``
(``RemoteEnv``, an ``AgentEnv`` played over HTTP) and ``openenv`` (the same envs behind OpenEnv's protocol).

May import: agentgym.contract, agentgym.running, agentgym.tools.
"""
