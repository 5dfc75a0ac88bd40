"""`agentgym bench`'s report.md is readable: one table per env with only the columns that env fills, its own metrics
(CustomerService's database-as-gold, facts told and policy violations; TwentyQuestions' bits per question) in its
table, and every column defined in the report. ``agentgym bench --help`` states what a full bench costs."""

from __future__ import annotations

import re

import pytest

from agentgym import cli
from agentgym.running.bench import bench

ENVS = ["agentgym/Chain-v0", "agentgym/CustomerService-v0", "agentgym/TwentyQuestions-v0"]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("bench")
    result = bench(episodes=3, envs=ENVS, out=out, progress=False)
    assert result.report_path is not None
    return result.report_path.read_text(encoding="utf-8")


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def header(section: str) -> list[str]:
    [line] = [line for line in section.splitlines() if line.startswith("| agent")]
    return [c.strip() for c in line.strip("|").split("|")]


def defined(text: str) -> set[str]:
    return set(re.findall(r"^- `([^`]+)`:", text, flags=re.MULTILINE)) | {"category"}


def test_one_table_per_env_with_only_its_columns(report):
    by_env = sections(report)
    assert list(by_env) == ENVS
    assert header(by_env["agentgym/Chain-v0"]) == [
        "agent", "category", "episodes", "success", "return", "turns", "turns_to_success", "invalid_rate", "error",
        "seconds",
    ]  # fmt: skip
    service = header(by_env["agentgym/CustomerService-v0"])
    assert {"db_match", "facts_told", "policy_violation", "writes"} <= set(service)
    assert "information_gain_per_question" not in service and "env" not in service
    assert "information_gain_per_question" in header(by_env["agentgym/TwentyQuestions-v0"])
    for section in by_env.values():  # no column is empty in every row
        rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| agent")]
        cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
        for i, name in enumerate(header(section)):
            assert any(row[i] for row in cells), f"column {name} is empty"


def test_every_column_is_defined_in_the_report(report):
    common, by_env = report.split("\n## ", 1)[0], sections(report)
    for env_id, section in by_env.items():
        missing = set(header(section)) - defined(common) - defined(section)
        assert not missing, f"{env_id}: columns without a definition: {missing}"
    assert "database" in by_env["agentgym/CustomerService-v0"] and "bits per question" in report


def test_bench_help_states_the_cost(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert re.search(r"Cost of a full bench \(--episodes 2000, every env\): .*minutes.* MB", text), text


def test_a_damaged_progress_file_is_no_progress(tmp_path):
    """``progress.json`` that is torn, not UTF-8, not an object, or JSON nested thousands deep reads as no progress
    (the bench then says the folder holds an earlier run), never as a traceback."""
    from agentgym.running.bench import PROGRESS, read_progress

    path = tmp_path / PROGRESS
    for damaged in (b'{"envs": {', b"\xff\xfe\x00", b"[1, 2]", b'{"envs": ' + b"[" * 5000 + b"]" * 5000 + b"}"):
        path.write_bytes(damaged)
        assert read_progress(tmp_path) is None
    path.write_text('{"settings": {}, "envs": {}}', encoding="utf-8")
    assert read_progress(tmp_path) == {"settings": {}, "envs": {}}
