"""``DockerSandbox``: each call in a fresh container (``docker`` SDK; no network, no /dev/shm, a private IPC
namespace, memory / pids / CPU limits, read-only root with a tmpfs workdir of ``Limits.disk_bytes``, all capabilities
dropped, ``no-new-privileges``, ``nobody``), removed after the call.

Needs ``pip install docker``, a reachable engine and an image with Python 3 (``python3`` or ``python``: the sandbox
finds which). ``tools/sandbox/build_image.sh`` builds one offline from Debian's packages (``make sandbox-image``);
the image is ``image=``, else ``$AGENTGYM_DOCKER_IMAGE``, else ``agentgym-sandbox:bookworm``.
``DockerSandbox.available()`` says whether the SDK and an engine are there.

>>> DockerSandbox.available()[0] in (True, False)
True
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from .base import (
    DEFAULT_TIMEOUT,
    WORKDIR,
    Capabilities,
    Files,
    Limits,
    RunResult,
    Sandbox,
    classify,
    decode_output,
)
from .local import _capabilities, _refusal

#: The image built by ``tools/sandbox/build_image.sh``.
DEFAULT_IMAGE = "agentgym-sandbox:bookworm"
#: Interpreters looked for, in this order, when ``python=`` is not given.
PYTHONS = ("python3", "python")

#: Bytes of files and stdin one Docker run may receive: they travel base64-encoded in the command line, split into
#: arguments under Linux's 128 KiB per argument and well under its ~2 MiB for all of them.
DOCKER_FILE_BYTES = 1 << 20
_ARG_CHUNK = 100_000
#: Bytes of a container's output the engine may keep on the host's disk (its json log) while it runs.
LOG_BYTES = 1 << 20
#: The program the container runs (``python -I -c BOOT CODE CHUNK...``): writes the files, then the code as
#: ``main.py``, makes stdin (an in-memory file) its fd 0, and runs the code as ``__main__`` with a traceback that
#: starts at the code. The chunks joined are base64 of JSON ``{"files": {name: base64}, "stdin": base64}``.
BOOT = """\
import base64, json, os, sys, traceback, types
boot = json.loads(base64.b64decode("".join(sys.argv[2:]))) if len(sys.argv) > 2 else {}
for name, data in boot.get("files", {}).items():
    os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
    with open(name, "wb") as f:
        f.write(base64.b64decode(data))
if boot.get("stdin"):
    fd = os.memfd_create("stdin")
    with open(fd, "wb", closefd=False) as f:
        f.write(base64.b64decode(boot["stdin"]))
    os.lseek(fd, 0, 0)
    os.dup2(fd, 0)
    os.close(fd)
code = sys.argv[1]
with open("main.py", "w", encoding="utf-8") as f:
    f.write(code)
sys.argv = ["main.py"]
main = types.ModuleType("__main__")
main.__file__ = os.path.abspath("main.py")
sys.modules["__main__"] = main
try:
    exec(compile(code, "main.py", "exec"), main.__dict__)
except SystemExit:
    raise
except BaseException as e:
    traceback.print_exception(type(e), e, e.__traceback__.tb_next)
    sys.exit(1)
"""


class DockerSandbox(Sandbox):
    """Runs ``PYTHON -I -c BOOT CODE`` in a fresh container of ``image`` with ``network_mode="none"``; ``python`` is
    the interpreter's name in the image (None: the first of ``PYTHONS`` it has, found at the first run)."""

    name = "docker"

    def __init__(
        self, image: str | None = None, limits: Limits | None = None, client: Any = None, python: str | None = None
    ) -> None:
        self.image = image or os.environ.get("AGENTGYM_DOCKER_IMAGE") or DEFAULT_IMAGE
        self.limits = limits or Limits()
        self.python = python
        if client is None:
            import docker

            client = docker.from_env()
        self.client = client
        self._lock = threading.Lock()

    def interpreter(self) -> str:
        """The interpreter's name in the image: ``python`` if given, else the first of ``PYTHONS`` that runs there
        (found once, by starting it). ``RuntimeError`` when the image has none (or cannot be run)."""
        with self._lock:
            if self.python is None:
                tried = []
                for name in PYTHONS:
                    try:
                        out = self.client.containers.run(
                            self.image, [name, "-c", "print(1)"], network_mode="none", remove=True, stderr=True
                        )
                    except Exception as e:
                        tried.append(f"{name}: {str(e).splitlines()[0][:200]}")
                        continue
                    if out.strip() == b"1":
                        self.python = name
                        break
                else:
                    raise RuntimeError(f"image {self.image} has no Python to run ({'; '.join(tried)})")
            return self.python

    @staticmethod
    def available(image: str | None = None) -> tuple[bool, str]:
        """Whether the SDK is installed, an engine answers and (if given) it has ``image``; and why not."""
        try:
            import docker
        except ImportError:
            return False, "the docker SDK is not installed (pip install docker)"
        try:
            client = docker.from_env(timeout=10)
            client.ping()
        except Exception as e:
            return False, f"no docker engine reachable: {type(e).__name__}: {e}"
        try:
            if image is not None:
                client.images.get(image)
        except Exception as e:
            return False, f"image {image} not found ({type(e).__name__}): make sandbox-image builds it"
        finally:
            client.close()
        return True, ""

    def run(
        self, code: str, *, stdin: str = "", timeout: float = DEFAULT_TIMEOUT, files: Files | None = None
    ) -> RunResult:
        start = time.monotonic()
        checked, refused = _refusal(code, stdin, files, self.limits)
        if refused is None and sum(map(len, checked.values())) + len(stdin.encode()) > DOCKER_FILE_BYTES:
            refused = f"the files and stdin hold over {DOCKER_FILE_BYTES} bytes, the most a Docker run takes"
        if refused is not None:
            return RunResult("error", "", f"sandbox: {refused}", None, time.monotonic() - start)
        try:
            python = self.interpreter()
        except RuntimeError as e:
            return RunResult("error", "", f"sandbox: {e}", None, time.monotonic() - start)
        boot = {"files": {n: base64.b64encode(c).decode() for n, c in checked.items()}}
        if stdin:
            boot["stdin"] = base64.b64encode(stdin.encode()).decode()
        blob = base64.b64encode(json.dumps(boot).encode())
        chunks = (
            [blob[i : i + _ARG_CHUNK].decode() for i in range(0, len(blob), _ARG_CHUNK)] if checked or stdin else []
        )
        try:
            container = self.client.containers.create(
                self.image,
                [python, "-I", "-c", BOOT, code, *chunks],
                network_mode="none",
                ipc_mode="none",
                mem_limit=self.limits.memory_bytes,
                memswap_limit=self.limits.memory_bytes,
                pids_limit=self.limits.processes,
                nano_cpus=1_000_000_000,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                read_only=True,
                tmpfs={WORKDIR: f"size={self.limits.disk_bytes},uid=65534,gid=65534,mode=700"},
                working_dir=WORKDIR,
                # The engine's own copy of the output stays bounded on the host's disk (the run reads it live).
                log_config={"Type": "json-file", "Config": {"max-size": str(LOG_BYTES), "max-file": "1"}},
                user="65534:65534",
                environment={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                ulimits=[
                    {"Name": "fsize", "Soft": self.limits.file_bytes, "Hard": self.limits.file_bytes},
                    {"Name": "nofile", "Soft": self.limits.open_files, "Hard": self.limits.open_files},
                ],
            )
        except Exception as e:
            return RunResult("error", "", f"sandbox: cannot create the container: {e}", None, time.monotonic() - start)
        try:
            # Attached before it starts: its output is read as it is written, and it is killed at the cap.
            stream = container.attach(stdout=True, stderr=True, stream=True, demux=True)
            container.start()
        except Exception as e:
            with contextlib.suppress(Exception):
                container.remove(force=True)
            return RunResult("error", "", f"sandbox: cannot start the container: {e}", None, time.monotonic() - start)
        cap = self.limits.output_bytes
        try:
            timer = threading.Timer(timeout, lambda: _kill_quietly(container))
            timer.start()
            try:
                (out, err), overflow = _read_capped(stream, cap, lambda: _kill_quietly(container))
                exit_code = container.wait()["StatusCode"]
            finally:
                timer.cancel()
                with contextlib.suppress(Exception):
                    stream.close()
            timed_out = not overflow and time.monotonic() - start >= timeout
            container.reload()
            state = container.attrs.get("State", {})
            out, cut_out = decode_output(out, cap)
            err, cut_err = decode_output(err, cap)
            if state.get("OOMKilled"):
                return RunResult("memory", out, err, exit_code, time.monotonic() - start, cut_out or cut_err)
            exit_code = 128 - exit_code if exit_code > 128 else exit_code  # 128+n: killed by signal n
            status = classify(exit_code, err, timed_out=timed_out, overflow=overflow)
            return RunResult(status, out, err, exit_code, time.monotonic() - start, cut_out or cut_err)
        except Exception as e:
            return RunResult("error", "", f"sandbox: {e}", None, time.monotonic() - start)
        finally:
            with contextlib.suppress(Exception):
                container.remove(force=True)

    def capabilities(self) -> Capabilities:
        caps = _capabilities(self, self.name, containment="container")
        note = f"memory {self.limits.memory_bytes} B and pids {self.limits.processes} by cgroup"
        return dataclasses.replace(caps, notes=(*caps.notes, note))

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if close is not None:
            close()


def _read_capped(stream: Any, cap: int, kill: Callable[[], None]) -> tuple[tuple[bytes, bytes], bool]:
    """stdout and stderr from a demultiplexed attach ``stream`` until it ends; past ``cap + 1`` bytes on either,
    ``kill`` the container (from a thread of its own: the engine does not finish a kill while the output it is
    writing to us is not read) and drop the rest. Returns the bytes and whether the cap was passed."""
    bufs = (bytearray(), bytearray())
    overflow = False
    for chunk in stream:
        if overflow:
            continue
        for buf, data in zip(bufs, chunk, strict=True):
            if data and len(buf) <= cap:
                buf += data[: cap + 1 - len(buf)]
        if len(bufs[0]) > cap or len(bufs[1]) > cap:
            overflow = True
            threading.Thread(target=kill, daemon=True).start()
    return (bytes(bufs[0]), bytes(bufs[1])), overflow


def _kill_quietly(container: Any) -> None:
    with contextlib.suppress(Exception):
        container.kill()
