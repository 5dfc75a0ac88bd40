"""``agentgym serve`` prints, before it listens, one line per sandbox back-end of each served env that runs one
(``AgentEnv.sandbox_capabilities``), with what its probe measured; a real server process on a loopback port."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.envs.code_exec.env import CodeExecEnv

BIN = Path(sys.executable).parent / "agentgym"
COMMAND = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "agentgym.cli"]
LISTENING = "Uvicorn running on"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def output_until_listening(*args: str) -> list[str]:
    """The lines ``agentgym serve ARGS`` writes (stdout and stderr) up to the one saying it listens; then it is
    killed."""
    proc = subprocess.Popen([*COMMAND, "serve", *args, "--port", str(free_port())], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if LISTENING in line:
                return lines
        raise AssertionError(f"the server ended without listening: {lines}")
    finally:
        proc.kill()
        proc.wait()


def sandbox_lines(lines: list[str]) -> list[str]:
    """The sandbox lines, each without its notes (a probe's notes name paths made for that run)."""
    return [line.partition("; notes:")[0] for line in lines if line.startswith("sandbox ")]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_serve_prints_each_sandbox_backend_before_listening():
    lines = output_until_listening("agentgym/CodeExec-v0", "agentgym/Chain-v0")
    expected = [f"sandbox {c.backend} for agentgym/CodeExec-v0: {c.summary()}".partition("; notes:")[0]
                for c in CodeExecEnv.sandbox_capabilities({})]  # fmt: skip
    assert [e.split(":")[0] for e in expected] == [
        "sandbox pooled for agentgym/CodeExec-v0",
        "sandbox subprocess for agentgym/CodeExec-v0",
    ]
    assert sandbox_lines(lines) == expected, lines  # Chain-v0 runs no sandbox: no line of its own
    assert all("memory per " in line and "root" in line for line in expected)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_serve_says_plainly_when_the_sandbox_promises_no_isolation():
    """The operator's ``isolation=none`` (rlimits only) and ``backend=pool``: one line, and it says NO ISOLATION."""
    lines = output_until_listening("agentgym/CodeExec-v0", "--env-arg", "isolation=none", "--env-arg", "backend=pool")
    found = sandbox_lines(lines)
    assert len(found) == 1, lines
    assert found[0].startswith("sandbox pooled for agentgym/CodeExec-v0: NO ISOLATION (rlimits only"), found
    assert "network NOT isolated" in found[0] and "host files visible" in found[0]
