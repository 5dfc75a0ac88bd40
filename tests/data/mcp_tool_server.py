"""A small real MCP server for tests (MCPServer, the SDK's FastMCP): a calculator, notes, one slow tool, one that
answers a huge output and one that kills its own process. Run: ``python tests/data/mcp_tool_server.py [http PORT]``."""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("agentgym-test-tools")
notes: dict[str, str] = {}


@server.tool()
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@server.tool()
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


@server.tool()
def save_note(key: str, text: str) -> str:
    """Save a note under a key."""
    notes[key] = text
    return f"saved {key}"


@server.tool()
def read_note(key: str) -> str:
    """Read the note saved under a key."""
    if key not in notes:
        raise ValueError(f"no note {key!r}")
    return notes[key]


@server.tool()
def slow(seconds: float) -> str:
    """Sleep for a while, then answer."""
    time.sleep(seconds)
    return "woke up"


@server.tool()
def huge(n: int) -> str:
    """Answer n characters."""
    return "x" * n


@server.tool()
def crash() -> str:
    """End the server process at once."""
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
