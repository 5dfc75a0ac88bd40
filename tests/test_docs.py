"""The docs site cannot go stale: every ```python block of every page under docs/ runs, in order, and prints what
its comments say; the site builds with ``mkdocs build --strict``.

Each page gets one fresh module namespace, shared by its blocks (so a later block uses what an earlier one
defined); a block whose fence reads ```python no-run is skipped (only for examples that need a GPU, a remote
endpoint or downloaded data). A line ``--8<-- "path"`` inside a block is the file at that path (pymdownx.snippets
includes it when the site is built; the test runs what the page shows). A ``print(...)  # text`` line's comment is
the output it shows: the block's output must contain each such text, in order, with ``...`` standing for anything
(whitespace is compared collapsed). The blocks run in a temporary working directory, offline. A failure names the
file and the line of the block's fence, and the traceback points into the Markdown file itself.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
import tokenize
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DOC_FILES = sorted(DOCS.rglob("*.md"))
MKDOCS_YML = ROOT / "mkdocs.yml"
#: ``--8<-- "path"``: pymdownx.snippets' include of a repository file (base path: the repository root).
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)
#: An example that imports these needs torch and transformers (skipped where they are not installed).
NEEDS_TORCH = re.compile(r"\b(torch|tiny_model|LocalAnswerScorer)\b")

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


def expand_snippets(source: str) -> str:
    """``source`` with every ``--8<-- "path"`` line replaced by that file of the repository, as the site shows it."""
    return SNIPPET.sub(lambda m: (ROOT / m[1]).read_text(encoding="utf-8").rstrip("\n"), source)


def printed_comments(source: str) -> list[tuple[int, str]]:
    """``(line, comment text)`` of every ``print(...)  # comment`` line of ``source``."""
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            code = tok.line[: tok.start[1]].strip()
            if code.startswith("print(") and code.endswith(")"):
                found.append((tok.start[0], tok.string[1:].strip()))
    return found


def check_printed(output: str, expected: list[tuple[int, str]], where: str) -> None:
    """Each expected text occurs in ``output`` after the previous one (``...`` matches anything)."""
    flat = " ".join(output.split())
    pos = 0
    for line, text in expected:
        pattern = ".*?".join(re.escape(" ".join(part.split())) for part in text.split("..."))
        m = re.compile(pattern, re.DOTALL).search(flat, pos)
        assert m is not None, f"{where}, line {line}: the output does not show {text!r}; it is:\n{output}"
        pos = m.end()


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


def test_snippets_are_expanded(tmp_path):
    shown = expand_snippets('x = 1\n--8<-- "envs/example.py"\n')
    assert shown.startswith("x = 1\n") and "class GuessNumberEnv(AgentEnv)" in shown
    assert expand_snippets('print("--8<-- x")\n') == 'print("--8<-- x")\n'  # only a whole line includes


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
    if any(NEEDS_TORCH.search(b.source) for b in blocks):
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    name = "docs_" + re.sub(r"\W", "_", str(path.relative_to(DOCS).with_suffix("")))
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # dataclasses and pickling look classes up by module
    try:
        for block in blocks:
            source = expand_snippets(block.source)
            # pad with newlines so tracebacks give the block's real line numbers in the Markdown file
            code = compile("\n" * block.line + source, str(path), "exec")
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    exec(code, module.__dict__)
            except Exception as e:
                raise AssertionError(f"{path.relative_to(ROOT)}: the block at line {block.line} failed: {e!r}") from e
            check_printed(out.getvalue(), printed_comments(source), f"{path.relative_to(ROOT)}:{block.line}")
    finally:
        sys.modules.pop(name, None)
        import gymnasium as gym

        for value in list(module.__dict__.values()):  # vector envs own worker processes
            if isinstance(value, gym.Env | gym.vector.VectorEnv):
                value.close()


# --- the site ---------------------------------------------------------------------------------------------------


def nav_pages(nav: list) -> list[str]:
    """The page paths of a mkdocs ``nav`` (nested sections flattened)."""
    pages: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_is_in_the_nav():
    """Every Markdown file under docs/ is a page of the site's navigation, and every nav entry exists."""
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load(MKDOCS_YML.read_text(encoding="utf-8"))
    pages = nav_pages(config["nav"])
    assert len(pages) == len(set(pages)), "a page is in the nav twice"
    assert sorted(pages) == sorted(str(p.relative_to(DOCS)) for p in DOC_FILES)


def test_api_reference_docstrings_become_markdown():
    """The API reference's griffe extension fences doctests and ``::`` literal blocks and turns Sphinx roles into code
    spans; without it, ``obs[0]["role"]`` in a doctest reads as a Markdown link and the strict build fails."""
    pytest.importorskip("griffe")
    import importlib.util

    spec = importlib.util.spec_from_file_location("rst_docstrings", DOCS / "_ext" / "rst_docstrings.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    text = "\n".join(["See :class:`~agentgym.AgentEnv`.", "", '>>> obs[0]["role"]', "'user'", "", "Example::", "",
                      "    run(x)", "", "    y", "", "End."])  # fmt: skip
    assert ext.rst_to_markdown(text).splitlines() == [
        "See `agentgym.AgentEnv`.", "", "```pycon", '>>> obs[0]["role"]', "'user'", "```", "",
        "Example:", "", "```", "run(x)", "", "y", "```", "", "End.",
    ]  # fmt: skip
    assert ext.rst_to_markdown("no literal block follows::\nEnd.") == "no literal block follows::\nEnd."


@pytest.mark.slow
def test_site_builds_strictly(tmp_path):
    """``mkdocs build --strict`` passes: no broken link or anchor, no page left out of the nav, every API reference
    resolves (the same build ``make docs`` and CI run)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(MKDOCS_YML), "-d", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "index.html").is_file() and (tmp_path / "api" / "contract" / "index.html").is_file()


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
    """The README's "Write an environment" quick start is envs/example.py, which the tests run and check; the docs'
    "Writing an environment" page includes the same file."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = [b.source for b in code_blocks(readme) if b.is_python and "class GuessNumberEnv(AgentEnv)" in b.source]
    assert shown == [(ROOT / "envs" / "example.py").read_text(encoding="utf-8")], (
        "the README must show envs/example.py verbatim, in one python block"
    )
    page = (DOCS / "writing-an-env.md").read_text(encoding="utf-8")
    included = [b for b in code_blocks(page) if b.is_python and b.source == '--8<-- "envs/example.py"\n']
    assert len(included) == 1, "docs/writing-an-env.md must include envs/example.py in one python block"
