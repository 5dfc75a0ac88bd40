"""Getting started: the README states what setup needs, and the Makefile installs torch from a chosen index."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def requires_python() -> tuple[int, int]:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    m = re.fullmatch(r">=\s*(\d+)\.(\d+)", spec.strip())
    assert m, f"requires-python {spec!r} is not a plain lower bound"
    return int(m[1]), int(m[2])


def dry_run(*args: str) -> list[str]:
    """The commands ``make -n setup ARGS`` would run, for a venv that does not exist yet."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "setup", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def test_readme_states_python_disk_and_torch_index():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    major, minor = requires_python()
    assert f"Python >= {major}.{minor}" in readme
    assert re.search(r"\d(\.\d+)? GB of disk", readme)
    assert "make test TORCH_INDEX=<url>" in readme


def test_makefile_checks_the_python_version_pyproject_requires():
    major, minor = requires_python()
    assert f"sys.version_info < ({major}, {minor})" in (ROOT / "Makefile").read_text(encoding="utf-8")


def test_torch_index_is_passed_only_when_set(tmp_path):
    venv = f"VENV={tmp_path / 'venv'}"
    [plain] = [c for c in dry_run(venv) if "install -q torch" in c]
    assert "index-url" not in plain  # the default index, as before
    [chosen] = [c for c in dry_run(venv, "TORCH_INDEX=file:///wheels/cpu") if "install -q torch" in c]
    assert "--index-url file:///wheels/cpu" in chosen
    assert not any("index-url" in c for c in dry_run(venv, "TORCH_INDEX=file:///wheels/cpu") if c != chosen)


def test_makefile_names_no_host():
    assert "://" not in (ROOT / "Makefile").read_text(encoding="utf-8")


# ------------------------------------------------------------------ a script next to the clone imports the package

SCRIPT = """
import agentgym, gymnasium
env = gymnasium.make("agentgym/Chain-v0")
print(agentgym.__file__, type(env.unwrapped).__name__)
"""


def _run_next_to(clone: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """Run a script from the folder that holds ``clone`` (named agentgym) with this interpreter, as a user would."""
    script = clone.parent / "script.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *flags, str(script)], cwd=clone.parent, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


@pytest.mark.parametrize("how", ["the installed clone", "another copy"])
def test_a_script_next_to_a_clone_named_agentgym_imports_the_package(tmp_path, how):
    """The folder holding the clone leads sys.path, so ``import agentgym`` finds the clone folder before the
    installed package; the clone's root ``__init__.py`` hands over to the installed package (without it the clone
    became an empty namespace package and gymnasium said ``Namespace agentgym not found``)."""
    clone = tmp_path / "agentgym"
    if how == "the installed clone":
        clone.symlink_to(ROOT, target_is_directory=True)
    else:
        clone.mkdir()
        shutil.copy(ROOT / "__init__.py", clone / "__init__.py")
        shutil.copy(ROOT / "pyproject.toml", clone / "pyproject.toml")
    res = _run_next_to(clone)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(ROOT / "agentgym" / "__init__.py"), "ChainEnv"]


def test_a_script_next_to_a_clone_without_the_package_installed_says_what_to_do(tmp_path):
    clone = tmp_path / "agentgym"
    clone.symlink_to(ROOT, target_is_directory=True)
    res = _run_next_to(clone, "-S")  # no site-packages: nothing is installed for this interpreter
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: agentgym is not installed for") and "make setup" in last, res.stderr
    assert "Namespace" not in res.stderr


# ------------------------------------------------------------------ make bench reruns, make clean keeps .venv


def make(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    return subprocess.run(["make", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_clean_keeps_the_venv_and_distclean_removes_it(tmp_path):
    venv = f"VENV={tmp_path / 'venv'}"
    clean = make("-n", "clean", venv).stdout
    assert "rm -rf" in clean and str(tmp_path / "venv") not in clean
    distclean = make("-n", "distclean", venv).stdout
    assert f"rm -rf {tmp_path / 'venv'}" in distclean.splitlines()


@pytest.mark.slow
def test_make_bench_runs_twice_and_keeps_the_first(tmp_path):
    venv = ROOT / ".venv"
    if not (venv / "bin" / "agentgym").exists():
        pytest.skip("needs the project's .venv (make setup)")
    out = tmp_path / "bench"
    args = ["-o", f"{venv}/.installed", "bench", f"VENV={venv}", f"BENCH_OUT={out}", "EPISODES=2",
            "ARGS=--env agentgym/Chain-v0 --quiet"]  # fmt: skip
    first = make(*args)
    assert first.returncode == 0, first.stderr
    report = (out / "report.md").read_text(encoding="utf-8")
    second = make(*args)
    assert second.returncode == 0, second.stderr
    [kept] = [p for p in tmp_path.iterdir() if p.name.startswith("bench.")]
    assert f"the earlier bench is kept in {kept}" in second.stdout
    assert (kept / "report.md").read_text(encoding="utf-8") == report and (out / "report.md").is_file()
    third = make(*args, "OVERWRITE=1")
    assert third.returncode == 0, third.stderr
    assert "kept in" not in third.stdout and len(list(tmp_path.iterdir())) == 2
