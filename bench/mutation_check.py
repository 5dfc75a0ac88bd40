"""Mutation testing by hand (not run in CI): how many small bugs planted in a module do the tests catch?

Runs mutmut (``.venv/bin/pip install mutmut``; it is not a project dependency) on a throwaway copy of the
repository: mutmut names mutants after file paths, so the copy uses the installed layout (``envs/`` becomes
``agentgym/envs/``, likewise ``tools/`` and ``baselines/``) and the working tree is never touched. Prints the score
(killed / total) and the surviving mutants; a survivor is a change to the code that no selected test notices.

    .venv/bin/python bench/mutation_check.py                       # SearchQA env + Household engine, ~5 min
    .venv/bin/python bench/mutation_check.py --files envs/household/engine.py --show
    .venv/bin/python bench/mutation_check.py --keep /tmp/mut        # keep the copy: `mutmut show NAME` there

Only the tests of ``--tests`` run (mutmut picks, per mutant, those that reach the mutated function), without the
slow and subprocess-based ones (``--deselect``), so a run stays bounded. Survivors fall in three groups: equivalent
mutants (a changed default of an unused argument, a different but still canonical hash), code that other test files
exercise (snapshots: ``tests/core/test_branching.py``), and gaps worth a test.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Top-level folders installed as ``agentgym.<name>`` (pyproject's package-dir).
SUBPACKAGES = ("envs", "tools", "baselines")
FILES = ("envs/search_qa/env.py", "envs/household/engine.py")
TESTS = ("tests/envs/test_search_qa_env.py", "tests/envs/test_household_engine.py", "tests/envs/test_household_env.py")
DESELECT = (
    "not identical_across_processes and not byte_identical_trajectories and not agents_by_task_type "
    "and not oracle_solves_every_task and not checker_passes and not fuzz"
)


def installed_path(path: str) -> str:
    """``envs/x.py`` -> ``agentgym/envs/x.py`` (the module path mutmut derives names from)."""
    top = path.split("/", 1)[0]
    return f"agentgym/{path}" if top in SUBPACKAGES else path


def make_copy(dest: Path, files: list[str], tests: list[str], deselect: str) -> None:
    """The repository at ``dest`` in the installed layout, with a ``setup.cfg`` that configures mutmut."""
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "mutants", "*.egg-info", ".pytest_cache")
    shutil.copytree(ROOT / "agentgym", dest / "agentgym", ignore=ignore)
    for name in SUBPACKAGES:
        shutil.copytree(ROOT / name, dest / "agentgym" / name, ignore=ignore)
    shutil.copytree(ROOT / "tests", dest / "tests", ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    lines = ["[mutmut]", "source_paths=", "    agentgym", "only_mutate="]
    lines += [f"    {installed_path(f)}" for f in files]
    lines += ["pytest_add_cli_args_test_selection=", *(f"    {t}" for t in tests)]
    lines += ["pytest_add_cli_args=", "    -p", "    no:cacheprovider", "    -x", "    -q", "    -m", "    not slow"]
    lines += ["    -k", f"    {deselect}"] if deselect else []
    lines += ["use_git_change_detection=False", ""]
    (dest / "setup.cfg").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", nargs="+", default=list(FILES), help="files to mutate (repository paths)")
    parser.add_argument("--tests", nargs="+", default=list(TESTS), help="test files to run against the mutants")
    parser.add_argument("--deselect", default=DESELECT, help="pytest -k expression of tests to leave out")
    parser.add_argument("--keep", type=Path, help="build the copy here (emptied first) and keep it")
    parser.add_argument("--show", action="store_true", help="print the diff of every surviving mutant")
    args = parser.parse_args(argv)
    mutmut = shutil.which("mutmut", path=str(Path(sys.executable).parent)) or shutil.which("mutmut")
    if mutmut is None:
        print("mutmut is not installed: .venv/bin/pip install mutmut", file=sys.stderr)
        return 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="agentgym-mutation-"))
    if args.keep and work.exists():
        shutil.rmtree(work)
    make_copy(work, args.files, args.tests, args.deselect)
    try:
        subprocess.run([mutmut, "run"], cwd=work, check=False, stdout=subprocess.DEVNULL)
        out = subprocess.run([mutmut, "results", "--all", "true"], cwd=work, capture_output=True, text=True).stdout
        status = dict(re.findall(r"^\s*(\S+): (.+)$", out, flags=re.MULTILINE))
        counts = Counter(status.values())
        total = sum(counts.values())
        if not total:
            print(out or "mutmut produced no mutants", file=sys.stderr)
            return 1
        survivors = sorted(name for name, s in status.items() if s == "survived")
        for name in survivors:
            print(f"survived: {name}")
            if args.show:
                diff = subprocess.run([mutmut, "show", name], cwd=work, capture_output=True, text=True).stdout
                print("".join(f"    {line}\n" for line in diff.splitlines() if line[:1] in "+-"))
        print(f"\n{', '.join(f'{n} {s}' for s, n in counts.most_common())}")
        print(f"score: {counts['killed']}/{total} killed ({counts['killed'] / total:.1%})")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
