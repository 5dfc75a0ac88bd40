"""The guides under docs/ cannot go stale: every ```python block of every Markdown file runs, in order.

Each file gets one fresh module namespace, shared by its blocks (so a later block uses what an earlier one
defined); a block whose fence reads ```python no-run is skipped (only for examples that need a GPU or a remote
endpoint). The blocks run in a temporary working directory, offline. A failure names the file and the line of
the block's fence, and the traceback points into the Markdown file itself.
"""

from __future__ import annotations

import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DOC_FILES = sorted(DOCS.rglob("*.md"))

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: its info string words, the line of its opening fence (1-based), its source."""

    info: tuple[str, ...]
    line: int
    source: str

    @property
    def is_python(self) -> bool:
        return bool(self.info) and self.info[0] == "python"

    @property
    def runs(self) -> bool:
        return self.is_python and "no-run" not in self.info[1:]


def code_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text (CommonMark fences: ``` or ~~~, closed by a same-char fence at
    least as long; a backtick fence's info string has no backtick). An unclosed fence raises ``ValueError``: it
    would silently swallow the rest of the file."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None or (m["fence"][0] == "`" and "`" in m["info"]):  # inline code, not a fence
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        info = tuple(m["info"].split())
        start = i + 1
        body: list[str] = []
        i += 1
        while i < len(lines):
            close = FENCE.match(lines[i])
            if (
                close
                and close["fence"][0] == fence[0]
                and len(close["fence"]) >= len(fence)
                and not close["info"].strip()
            ):
                break
            line = lines[i]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])
            i += 1
        else:
            raise ValueError(f"the code fence opened on line {start} is never closed")
        blocks.append(Block(info, start, "\n".join(body) + "\n"))
        i += 1
    return blocks


def test_fence_parser():
    lines = [
        "intro",
        "```python",
        "a = 1",
        "```",
        "```` ```python ```` is inline code",
        "````markdown",
        "```python",
        "not a block",
        "```",
        "````",
        "```python no-run",
        "b",
        "```",
    ]
    text = "\n".join(lines) + "\n"
    blocks = code_blocks(text)
    assert [(b.info, b.line, b.runs) for b in blocks] == [
        (("python",), 2, True),
        (("markdown",), 6, False),
        (("python", "no-run"), 11, False),
    ]
    assert blocks[0].source == "a = 1\n"
    with pytest.raises(ValueError, match="line 1"):
        code_blocks("```python\nx = 1\n")


def test_docs_exist():
    assert (DOCS / "rewards.md").is_file()
    assert DOC_FILES, "no Markdown files under docs/"


def test_rewards_guide_covers_the_api():
    """Every public name of ``agentgym.rewards`` and every registered advantage estimator is in the guide."""
    from agentgym import rewards
    from agentgym.rewards.advantages import ESTIMATORS

    text = (DOCS / "rewards.md").read_text(encoding="utf-8")
    missing = [name for name in rewards.__all__ if not re.search(rf"\b{name}\b", text)]
    missing += [name for name in ESTIMATORS if f"| `{name}` |" not in text]  # a row of the registry table
    assert not missing, f"docs/rewards.md does not mention {missing}"


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_fences_are_well_formed(path):
    """A python fence is ``python`` or ``python no-run``: a typo such as ``python norun`` fails instead of
    silently running (or skipping) the block."""
    for block in code_blocks(path.read_text(encoding="utf-8")):
        if block.is_python:
            assert block.info in (("python",), ("python", "no-run")), f"{path.name}:{block.line}: {block.info}"


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(path, sandbox):
    blocks = [b for b in code_blocks(path.read_text(encoding="utf-8")) if b.runs]
    if not blocks:
        pytest.skip(f"{path.name} has no runnable python block")
    if any("torch" in b.source for b in blocks):
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    name = "docs_" + re.sub(r"\W", "_", str(path.relative_to(DOCS).with_suffix("")))
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # dataclasses and pickling look classes up by module
    try:
        for block in blocks:
            # pad with newlines so tracebacks give the block's real line numbers in the Markdown file
            code = compile("\n" * block.line + block.source, str(path), "exec")
            try:
                exec(code, module.__dict__)
            except Exception as e:
                raise AssertionError(f"{path.relative_to(ROOT)}: the block at line {block.line} failed: {e!r}") from e
    finally:
        sys.modules.pop(name, None)


# --- references point into the repo ---------------------------------------------------------------------------

#: Design notes that lived outside the repo; docstrings and docs cite docs/*.md instead.
STALE_NOTES = re.compile(r"\b(?:DESIGN|ENVS|REWARDS)\.md\b")
#: ``docs/<guide>.md, 'Section'`` (or ``'A' and 'B'``, ``'A', 'B'``): a citation of sections of a guide.
CITATION = re.compile(r"(docs/[\w/-]+\.md),\s*((?:'[^'\n]+'(?:,\s*|\s+and\s+)?)+)")


def repo_files(*suffixes: str) -> list[Path]:
    """The repo's tracked and not-ignored files with these suffixes (skips when git cannot list them)."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    paths = (ROOT / name for name in out.split("\0") if name)
    return sorted(p for p in paths if p.suffix in suffixes and p.is_file())


def headings(path: Path) -> list[str]:
    """The Markdown headings of a file (outside code fences), backticks dropped and whitespace collapsed."""
    found: list[str] = []
    fence: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = FENCE.match(line)
        if m is not None and m["fence"][0] == "`" and "`" in m["info"]:
            m = None  # inline code, not a fence (as in code_blocks)
        if fence is None:
            if m is not None:
                fence = m["fence"]
            elif line.startswith("#"):
                found.append(" ".join(line.lstrip("#").replace("`", "").split()))
        elif m is not None and m["fence"][0] == fence[0] and len(m["fence"]) >= len(fence) and not m["info"].strip():
            fence = None
    return found


def names_heading(section: str, heading: str) -> bool:
    """A citation names a heading by its whole text or by a leading part of it ending at a word boundary."""
    return heading.startswith(section) and (len(heading) == len(section) or not heading[len(section)].isalnum())


def test_headings_and_section_names():
    assert headings(DOCS / "rewards.md")[:2] == ["Dense turn-level rewards and advantages", "Where each piece lives"]
    assert "IGPO: information gain, InformationGain" in headings(DOCS / "rewards.md")
    assert names_heading("IGPO: information gain", "IGPO: information gain, InformationGain")
    assert names_heading("A^2TGPO", "A^2TGPO") and not names_heading("IGPO", "IGPOs")


def test_no_references_to_notes_outside_the_repo():
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in repo_files(".py", ".md")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if STALE_NOTES.search(line)
    ]
    assert not hits, (
        "cite docs/*.md (e.g. docs/rewards.md, 'A^2TGPO') instead of notes outside the repo:\n" + "\n".join(hits)
    )


def test_doc_citations_name_existing_sections():
    """Every ``docs/<guide>.md, 'Section'`` citation in the code and docs names a heading of that guide."""
    bad, missing = [], set()
    for path in repo_files(".py", ".md"):
        for m in CITATION.finditer(path.read_text(encoding="utf-8")):
            doc = ROOT / m[1]
            if not doc.is_file():
                missing.add(m[1])
                continue
            titles = headings(doc)
            for section in re.findall(r"'([^']+)'", m[2]):
                if not any(names_heading(section, t) for t in titles):
                    bad.append(f"{path.relative_to(ROOT)}: {m[1]}, {section!r}")
    assert not bad, "citations of sections that do not exist:\n" + "\n".join(bad)
    assert not missing, f"citations of guides that do not exist: {sorted(missing)}"


def test_readme_shows_the_example_env_verbatim():
    """The README's "Writing an environment" example is envs/example.py, which the tests run and check."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = [b.source for b in code_blocks(readme) if b.is_python and "class GuessNumberEnv(AgentEnv)" in b.source]
    assert shown == [(ROOT / "envs" / "example.py").read_text(encoding="utf-8")], (
        "the README must show envs/example.py verbatim, in one python block"
    )
