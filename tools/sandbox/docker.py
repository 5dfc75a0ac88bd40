"""``DockerSandbox``: each call in a fresh container (``docker`` SDK; no network, memory / pids / CPU limits,
read-only root with a small tmpfs workdir, all capabilities dropped, ``nobody``), removed after the call.

Needs ``pip install docker`` and a reachable engine; ``DockerSandbox.available()`` says whether both are there.

>>> DockerSandbox.available()[0] in (True, False)
True
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from typing import Any

from .base import (
    DEFAULT_TIMEOUT,
    PROBE,
    WORKDIR,
    Capabilities,
    Files,
    Limits,
    RunResult,
    Sandbox,
    check_files,
    classify,
    decode_output,
)

#: Bytes of files one Docker run may receive: they travel base64-encoded in the command line, split into arguments
#: under Linux's 128 KiB per argument and well under its ~2 MiB for all of them.
DOCKER_FILE_BYTES = 1 << 20
_ARG_CHUNK = 100_000
#: The program the container runs (``python -I -c BOOT CODE CHUNK...``): writes the files, then the code as
#: ``main.py``, and runs it as ``__main__`` with a traceback that starts at the code.
BOOT = """\
import base64, json, os, sys, traceback, types
files = json.loads(base64.b64decode("".join(sys.argv[2:]))) if len(sys.argv) > 2 else {}
for name, data in files.items():
    os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
    with open(name, "wb") as f:
        f.write(base64.b64decode(data))
code = sys.argv[1]
with open("main.py", "w", encoding="utf-8") as f:
    f.write(code)
sys.argv = ["main.py"]
main = types.ModuleType("__main__")
main.__file__ = os.path.abspath("main.py")
sys.modules["__main__"] = main
del files, name, data, f
try:
    exec(compile(code, "main.py", "exec"), main.__dict__)
except SystemExit:
    raise
except BaseException as e:
    traceback.print_exception(type(e), e, e.__traceback__.tb_next)
    sys.exit(1)
"""


class DockerSandbox(Sandbox):
    """Runs ``python -c CODE`` in ``image`` (which must have ``python``) with ``network_mode="none"``."""

    name = "docker"

    def __init__(self, image: str = "python:3.11-slim", limits: Limits | None = None, client: Any = None) -> None:
        self.image = image
        self.limits = limits or Limits()
        if client is None:
            import docker

            client = docker.from_env()
        self.client = client

    @staticmethod
    def available() -> tuple[bool, str]:
        """Whether the SDK is installed and an engine answers, and why not."""
        try:
            import docker
        except ImportError:
            return False, "the docker SDK is not installed (pip install docker)"
        try:
            docker.from_env(timeout=5).ping()
        except Exception as e:
            return False, f"no docker engine reachable: {type(e).__name__}: {e}"
        return True, ""

    def run(
        self, code: str, *, stdin: str = "", timeout: float = DEFAULT_TIMEOUT, files: Files | None = None
    ) -> RunResult:
        checked = check_files(files, min(self.limits.file_bytes, DOCKER_FILE_BYTES))
        start = time.monotonic()
        blob = base64.b64encode(json.dumps({n: base64.b64encode(c).decode() for n, c in checked.items()}).encode())
        chunks = [blob[i : i + _ARG_CHUNK].decode() for i in range(0, len(blob), _ARG_CHUNK)] if checked else []
        try:
            container = self.client.containers.create(
                self.image,
                ["python", "-I", "-c", BOOT, code, *chunks],
                stdin_open=bool(stdin),
                network_mode="none",
                mem_limit=self.limits.memory_bytes,
                memswap_limit=self.limits.memory_bytes,
                pids_limit=self.limits.processes,
                nano_cpus=1_000_000_000,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                read_only=True,
                tmpfs={WORKDIR: "size=16m", "/var/tmp": "size=1m"},
                working_dir=WORKDIR,
                user="65534:65534",
                environment={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                ulimits=[
                    {"Name": "fsize", "Soft": self.limits.file_bytes, "Hard": self.limits.file_bytes},
                    {"Name": "nofile", "Soft": self.limits.open_files, "Hard": self.limits.open_files},
                ],
            )
        except Exception as e:
            return RunResult("error", "", f"sandbox: cannot create the container: {e}", None, time.monotonic() - start)
        timed_out = False
        try:
            if stdin:
                sock = container.attach_socket(params={"stdin": 1, "stream": 1})
                container.start()
                raw = getattr(sock, "_sock", sock)
                raw.sendall(stdin.encode())
                raw.close()
            else:
                container.start()
            timer = threading.Timer(timeout, lambda: _kill_quietly(container))
            timer.start()
            try:
                exit_code = container.wait()["StatusCode"]
            finally:
                timer.cancel()
            timed_out = time.monotonic() - start >= timeout
            container.reload()
            state = container.attrs.get("State", {})
            cap = self.limits.output_bytes
            out, cut_out = decode_output(container.logs(stdout=True, stderr=False), cap)
            err, cut_err = decode_output(container.logs(stdout=False, stderr=True), cap)
            if state.get("OOMKilled"):
                return RunResult("memory", out, err, exit_code, time.monotonic() - start, cut_out or cut_err)
            exit_code = 128 - exit_code if exit_code > 128 else exit_code  # 128+n: killed by signal n
            status = classify(exit_code, err, timed_out=timed_out, overflow=False)
            return RunResult(status, out, err, exit_code, time.monotonic() - start, cut_out or cut_err)
        except Exception as e:
            return RunResult("error", "", f"sandbox: {e}", None, time.monotonic() - start)
        finally:
            with contextlib.suppress(Exception):
                container.remove(force=True)

    def capabilities(self) -> Capabilities:
        r = self.run(PROBE, timeout=60.0)
        try:
            seen = json.loads(r.stdout)
        except ValueError:
            return Capabilities(
                self.name, False, "container", False, False, notes=(f"probe failed: {r.stderr[-300:]}",)
            )
        return Capabilities(
            backend=self.name,
            network_isolated=set(seen["ifaces"]) <= {"lo"},
            process_containment="container",
            private_tmp=True,
            unprivileged=seen["uid"] != 0,
            rlimits=seen["rlimits"],
            notes=(f"memory {self.limits.memory_bytes} B and pids {self.limits.processes} by cgroup",),
        )

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if close is not None:
            close()


def _kill_quietly(container: Any) -> None:
    with contextlib.suppress(Exception):
        container.kill()
