"""The attack suite (``sandbox_attacks.py``) against every back-end, as the user running the tests and, when that is
root, again as ``nobody`` (a copy of the sandbox package that ``nobody`` can read, run by a Python it can run).

On back-ends with namespaces (and Docker) every attack must be contained; on every back-end, ``capabilities()`` must
promise exactly what the attacks found (``sandbox_attacks.expected``). The Docker back-end runs where
``$AGENTGYM_DOCKER_IMAGE`` names an image and an engine answers (``.ci/run`` builds it; ``make sandbox-image``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sandbox_attacks import SHARED_DIRS, attack, expected, make_box

import agentgym.tools.sandbox as sandbox

LOCAL = ["subprocess", "pooled", "subprocess-nons", "pooled-nons"]
LIMITS = sandbox.Limits(memory_bytes=512 << 20, processes=64, disk_bytes=16 << 20)
NOBODY = 65534
#: ``subprocess`` arguments that start the child as ``nobody`` (uid, gid, no groups; set before ``execve``, so the
#: program itself must be reachable by ``nobody``: ``setpriv`` can exec it with root's access still in force).
AS_NOBODY = {"user": NOBODY, "group": NOBODY, "extra_groups": [], "env": {"PATH": "/usr/bin:/bin"}}


def docker_reason() -> str | None:
    """Why the Docker back-end is not attacked here, or None."""
    image = os.environ.get("AGENTGYM_DOCKER_IMAGE")
    if not image:
        return "AGENTGYM_DOCKER_IMAGE is not set (`make sandbox-image` builds the image; .ci/run sets it)"
    ok, why = sandbox.DockerSandbox.available(image)
    return None if ok else why


def host_dir_parent() -> str:
    """A directory outside every masked one where the caller can make a directory of its own."""
    for d in ("/var/lib", os.path.expanduser("~"), "/opt"):
        if os.path.isdir(d) and os.access(d, os.W_OK) and not any(d.startswith(m) for m in SHARED_DIRS):
            return d
    pytest.skip("no writable directory outside /tmp, /var/tmp, /dev/shm, /run/lock for the caller's own file")


def check(backend: str, report: dict) -> None:
    """Every attack ``capabilities()`` promises to contain was contained and none it did not promise was; with
    namespaces (or a container) all are."""
    caps, attacks = report["caps"], report["attacks"]
    assert caps["process_containment"] != "none", f"{backend}: the probe failed: {caps['notes']}"
    promised = expected(caps)
    found = {name: attacks[name]["contained"] for name in promised}
    mismatched = {n: attacks[n]["detail"] for n in promised if promised[n] != found[n]}
    assert not mismatched, f"{backend}: capabilities() {promised} but the attacks found {found}: {mismatched}"
    assert attacks["memory"]["contained"], attacks["memory"]
    if not backend.endswith("-nons"):
        assert caps["process_containment"] in ("pid-namespace", "container"), caps
        leaks = {n: a["detail"] for n, a in attacks.items() if not a["contained"]}
        assert not leaks, f"{backend}: {leaks}"


@pytest.fixture(scope="module")
def host_dir():
    d = tempfile.mkdtemp(prefix="agentgym-attack-", dir=host_dir_parent())
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("backend", [*LOCAL, "docker"])
def test_attacks_are_contained_and_capabilities_match(backend, host_dir):
    if backend == "docker" and (why := docker_reason()):
        pytest.skip(f"DockerSandbox not attacked: {why}")
    box = make_box(sandbox, backend, LIMITS)
    try:
        probe = box.capabilities()
        if not backend.endswith("-nons") and probe.process_containment not in ("pid-namespace", "container"):
            pytest.skip(f"the kernel refuses namespaces to uid {os.geteuid()}: {probe}")
        check(backend, attack(box, host_dir))
    finally:
        box.close()


def nobody_python() -> str | None:
    """A Python >= 3.11 that ``nobody`` can run (the virtualenv's may lie under a directory closed to it)."""
    for python in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3", shutil.which("python3")):
        if python and os.path.exists(python):
            check = "import sys; sys.exit(sys.version_info < (3, 11))"
            try:
                r = subprocess.run([python, "-I", "-c", check], capture_output=True, check=False, **AS_NOBODY)
            except PermissionError:  # under a directory closed to nobody (/root/.pyenv)
                continue
            if r.returncode == 0:
                return python
    return None


@pytest.mark.slow
def test_attacks_as_nobody(host_dir):
    """The same attacks from an unprivileged caller: the sandbox under ``nobody``, in a user namespace."""
    if os.geteuid() != 0:
        pytest.skip("the tests already run unprivileged: test_attacks_are_contained_and_capabilities_match is it")
    python = nobody_python()
    if python is None:
        pytest.skip("no Python >= 3.11 that nobody can run")
    base = Path(tempfile.mkdtemp(prefix="agentgym-attack-nobody-", dir=host_dir_parent()))
    try:
        shutil.copytree(Path(sandbox.__file__).parent, base / "sbxcopy", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(Path(__file__).with_name("sandbox_attacks.py"), base / "sandbox_attacks.py")
        (base / "home").mkdir()
        for root, dirs, files in os.walk(base):
            for entry in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.chown(entry, NOBODY, NOBODY)
        os.chmod(base, 0o755)
        cmd = [python, "-I", str(base / "sandbox_attacks.py"), str(base), str(base / "home"), *LOCAL]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=base, timeout=600, check=False, **AS_NOBODY)
        assert r.returncode == 0, r.stderr[-3000:]
        reports = json.loads(r.stdout)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if reports["subprocess"]["caps"]["process_containment"] != "pid-namespace":
        pytest.skip(f"the kernel refuses user namespaces to nobody: {reports['subprocess']['caps']}")
    for backend, report in reports.items():
        assert report["caps"]["caller"] == NOBODY and report["caps"]["unprivileged"], (backend, report["caps"])
        check(backend, report)


FAIL_OPEN = """
import json, os, sys
import gymnasium as gym
import agentgym
from agentgym.contract.env import EnvUnavailableError
from agentgym.tools.sandbox import PooledSandbox, SubprocessSandbox
marker = sys.argv[1]
code = f"open({marker!r}, 'w').write('ran unisolated')\\nprint('RAN')"
out = {}
for name, box in (("subprocess", SubprocessSandbox()), ("pooled", PooledSandbox(workers=1))):
    r = box.run(code)
    caps = box.capabilities()
    box.close()
    out[name] = {"status": r.status, "stdout": r.stdout, "stderr": r.stderr, "containment": caps.process_containment}
try:
    gym.make("agentgym/CodeExec-v0")
    out["code_exec"] = "made"
except EnvUnavailableError as e:
    out["code_exec"] = str(e)
env = gym.make("agentgym/CodeExec-v0", isolation="none")  # the operator's opt-in by name
env.reset(seed=0)
out["opted_in"] = env.unwrapped.run_code("print(6 * 7)").stdout
env.close()
print(json.dumps(out))
"""


def test_fail_closed_where_the_kernel_refuses_namespaces(tmp_path):
    """Where the kernel refuses namespaces (as under Docker's default seccomp profile: here a seccomp filter of the
    same effect), the code never runs: each back-end refuses with the kernel's reason, ``capabilities()`` promises
    nothing, and CodeExec-v0 raises ``EnvUnavailableError`` unless the operator opts in with ``isolation='none'``."""
    marker = tmp_path / "ran.txt"
    deny = Path(__file__).with_name("deny_namespaces.py")
    cmd = [sys.executable, str(deny), sys.executable, "-c", FAIL_OPEN, str(marker)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert not marker.exists()
    for name in ("subprocess", "pooled"):
        run = out[name]
        assert run["status"] == "error" and run["stdout"] == "", run
        assert run["stderr"].startswith("sandbox: cannot isolate the run: ") and "unshare" in run["stderr"], run
        assert run["containment"] == "none", run
    assert "cannot isolate" in out["code_exec"] and "isolation='none'" in out["code_exec"], out["code_exec"]
    assert out["opted_in"] == "42\n"


def test_non_root_caller_with_supplementary_groups_is_refused(tmp_path):
    """As non-root the code runs in a user namespace, where the caller's supplementary groups cannot be shed (a
    ``docker`` group's socket would stay in reach): the sandbox refuses to start and says so."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start a caller with a chosen supplementary group")
    python = nobody_python()
    if python is None:
        pytest.skip("no Python >= 3.11 that nobody can run")
    base = Path(tempfile.mkdtemp(prefix="agentgym-groups-", dir=host_dir_parent()))
    try:
        shutil.copytree(Path(sandbox.__file__).parent, base / "sbxcopy", ignore=shutil.ignore_patterns("__pycache__"))
        os.chmod(base, 0o755)
        code = (
            f"import sys; sys.path.insert(0, {str(base)!r}); import sbxcopy\n"
            "r = sbxcopy.SubprocessSandbox().run('print(1)'); print(r.status, r.stdout == '', r.stderr)"
        )
        as_grouped = {**AS_NOBODY, "extra_groups": [NOBODY, 100]}
        r = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, cwd=base, timeout=120,
                           check=False, **as_grouped)  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("error True sandbox: cannot isolate the run: ") and "supplementary groups" in r.stdout
