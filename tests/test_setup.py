"""Getting started: the README states what setup needs, and the Makefile installs torch from a chosen index."""

from __future__ import annotations

import re
import shutil
import subprocess
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
