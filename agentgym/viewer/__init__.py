"""Looking at episodes: ``agentgym view PATH`` serves a local page over trajectory files, bench reports and trainer
runs (``index``: byte-offset paging of JSONL files of any size; ``sources``: what a path holds; ``app``: the HTTP
API and the page, loopback unless a bearer token is set).

May import: agentgym.contract, agentgym.tools.
"""
