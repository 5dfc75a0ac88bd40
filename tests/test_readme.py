"""The README's examples are true: every ```python block of README.md runs, and prints what its comments say.

Each block runs on its own, in a fresh module namespace (a reader copies one block, not the whole README), in a
temporary working directory, offline. A block fenced ```python no-run is skipped: only for examples that need a
GPU, a remote endpoint, a network or data downloaded separately. A ``print(...)  # text`` line's comment is the
output it shows: the block's output must contain each such text, in order, with ``...`` standing for anything
(whitespace is compared collapsed).
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import tokenize
import types
from pathlib import Path

import pytest
from test_docs import Block, code_blocks  # tests/ is on sys.path (pytest's default rootdir-relative import)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCKS = code_blocks(README.read_text(encoding="utf-8"))
RUNNABLE = [b for b in BLOCKS if b.runs]


def quickstart() -> Block:
    """The first python block after the README's opening commands (its first, ```bash, block)."""
    first_bash = next(i for i, b in enumerate(BLOCKS) if b.info[:1] == ("bash",))
    return next(b for b in BLOCKS[first_bash + 1 :] if b.is_python)


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


def run_block(block: Block) -> tuple[dict, str]:
    """Run one block in a fresh module namespace; returns (its namespace, what it printed). Envs it leaves open
    (vector envs own worker processes) are closed."""
    import gymnasium as gym

    if re.search(r"\b(torch|tiny_model|LocalAnswerScorer)\b", block.source):
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    name = f"readme_block_{block.line}"
    module = types.ModuleType(name)
    module.__file__ = str(README)
    sys.modules[name] = module  # dataclasses and pickling look classes up by module
    out = io.StringIO()
    try:
        # pad with newlines so tracebacks give the block's real line numbers in README.md
        code = compile("\n" * block.line + block.source, str(README), "exec")
        with contextlib.redirect_stdout(out):
            try:
                exec(code, module.__dict__)
            except Exception as e:
                raise AssertionError(f"README.md: the block at line {block.line} failed: {e!r}") from e
    finally:
        sys.modules.pop(name, None)
        for value in list(module.__dict__.values()):
            if isinstance(value, gym.Env | gym.vector.VectorEnv):
                value.close()
    return module.__dict__, out.getvalue()


def test_readme_has_runnable_blocks():
    assert RUNNABLE, "README.md has no runnable python block"
    for block in BLOCKS:
        if block.is_python:  # ``python norun`` would silently run (or skip) the block
            assert block.info in (("python",), ("python", "no-run")), f"README.md:{block.line}: {block.info}"


def test_printed_comments_parser():
    source = 'x = 1  # not a print\nprint(x)  # 1\nprint("# no")\nprint(x, x)  # 1 ... 1\n'
    assert printed_comments(source) == [(2, "1"), (4, "1 ... 1")]
    check_printed("a b\n  c\n7 a", [(2, "a b c"), (4, "7 ... a")], "x")  # whitespace collapsed; ... elides
    with pytest.raises(AssertionError, match="does not show"):
        check_printed("1 2", [(1, "2"), (2, "1")], "x")


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: f"line{b.line}")
def test_block_runs_and_prints_what_it_says(block, sandbox):
    _, output = run_block(block)
    check_printed(output, printed_comments(block.source), f"README.md:{block.line}")


def test_quickstart_answers_correctly(sandbox):
    """The opening example plays one task to the end and its answer is right (reward 1.0), as its comments say."""
    block = quickstart()
    assert block.runs and "SearchQA-v0" in block.source
    ns, _ = run_block(block)
    assert ns["reward"] == 1.0
    assert ns["terminated"] and ns["info"]["success"]
    assert ns["info"]["metrics"]["em"] == 1.0
