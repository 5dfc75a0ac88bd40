"""A griffe extension for the API reference: agentgym's docstrings are reStructuredText-ish, the site is Markdown.

Before mkdocstrings renders a docstring, doctest blocks (``>>>`` lines and the output after them) and literal
blocks (a paragraph ending in ``::`` followed by an indented block) become fenced code, and Sphinx roles such as
:class:`AgentEnv` become code spans. Nothing else changes: ``double backticks`` already read as code in Markdown.
"""

from __future__ import annotations

import re
import textwrap

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|ref|py:\w+):`~?([^`]+)`")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The end of the literal block starting at ``start``: the lines indented past ``indent`` (blank ones included),
    trailing blank lines left out."""
    end = start
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return end


def rst_to_markdown(text: str) -> str:
    """The docstring ``text`` with doctests and literal blocks fenced and Sphinx roles turned into code spans."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        pad = " " * _indent(line)
        if line.lstrip(" ").startswith(">>>"):  # a doctest: prompts, continuation lines and output up to a blank line
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i][len(pad) :] if _indent(lines[i]) >= len(pad) else lines[i].lstrip(" "))
                i += 1
            out += [pad + "```pycon", *(pad + b for b in block), pad + "```"]
            continue
        if line.rstrip().endswith("::") and not line.lstrip(" ").startswith(".."):
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and _indent(lines[j]) > len(pad):
                end = _block_end(lines, j, len(pad))
                head = line.rstrip()[:-1]  # "Example::" -> "Example:"; a lone "::" disappears
                if head.strip() not in ("", ":"):
                    out += [ROLE.sub(r"`\1`", head), ""]
                body = textwrap.dedent("\n".join(lines[j:end])).splitlines()
                out += [pad + "```", *(pad + b if b else "" for b in body), pad + "```"]
                i = end
                continue
        out.append(ROLE.sub(r"`\1`", line))
        i += 1
    return "\n".join(out)


class RstDocstrings(griffe.Extension):
    """Rewrites every docstring griffe loads with :func:`rst_to_markdown`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
