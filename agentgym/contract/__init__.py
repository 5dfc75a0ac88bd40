"""The env contract: what every agentgym environment is and what an episode leaves behind.

``env`` (``AgentEnv``, the Gymnasium base class every env derives from), ``spaces`` (the chat observation and
Unicode text action spaces), ``parsing`` (tags, JSON and tool calls read from model text without raising),
``agent`` (the ``Agent`` interface), ``registry`` (ids, ``make``, plugins), ``branching`` (snapshot, restore,
branch), ``trust`` (which constructor arguments an outside caller may set) and ``trajectory`` (episode records and
their crash-safe, signed JSONL files). Everything else in agentgym builds on this room.

May import: agentgym.tools.sandbox (a type only).
"""
