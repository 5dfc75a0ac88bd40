"""Sandboxes for running untrusted Python code (an agent's tool calls): one ``Sandbox`` interface, local back-ends
(``SubprocessSandbox``, the warm ``PooledSandbox``) and ``DockerSandbox`` over the ``docker`` SDK.

>>> from agentgym.tools.sandbox import RunResult, Sandbox, SubprocessSandbox
>>> issubclass(SubprocessSandbox, Sandbox)
True
"""

from __future__ import annotations

from .base import DEFAULT_TIMEOUT, OUTPUT_LIMIT, WORKDIR, Capabilities, Limits, RunResult, Sandbox
from .docker import DockerSandbox
from .local import SHARED_WORKERS, PooledSandbox, PoolKey, SharedSandboxes, SubprocessSandbox, isolation_refused

__all__ = [
    "DEFAULT_TIMEOUT",
    "OUTPUT_LIMIT",
    "SHARED_WORKERS",
    "WORKDIR",
    "Capabilities",
    "DockerSandbox",
    "Limits",
    "PoolKey",
    "PooledSandbox",
    "RunResult",
    "Sandbox",
    "SharedSandboxes",
    "SubprocessSandbox",
    "isolation_refused",
]
