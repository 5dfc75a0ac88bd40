"""``agentgym`` plugin commands: the ``agentgym.commands`` entry-point group, dispatch, ``--help``, broken plugins."""

import re
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from agentgym import cli

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = """
def main(argv):
    print("hello", argv)
    return 3
"""


@pytest.fixture
def plugins(monkeypatch, tmp_path):
    """Replace the installed ``agentgym.commands`` entry points by a working, a missing and a crashing plugin."""
    (tmp_path / "hello_plugin.py").write_text(PLUGIN, encoding="utf-8")
    (tmp_path / "crashing_plugin.py").write_text('raise RuntimeError("line one\\nline two")\n', encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [
        EntryPoint("hello", "hello_plugin:main", cli.COMMAND_GROUP),
        EntryPoint("missing", "no_such_module_for_agentgym:main", cli.COMMAND_GROUP),
        EntryPoint("crashing", "crashing_plugin:main", cli.COMMAND_GROUP),
        EntryPoint("run", "hello_plugin:main", cli.COMMAND_GROUP),  # would shadow a built-in command
        EntryPoint("other", "hello_plugin:main", "some.other.group"),
    ]
    monkeypatch.setattr(cli, "entry_points", lambda group: [ep for ep in eps if ep.group == group])
    return eps


def test_train_and_methods_are_declared_and_installed_as_plugins():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][cli.COMMAND_GROUP]
    assert declared == {"train": "agentgym.baselines.trainer:main", "methods": "agentgym.baselines.methods:main"}
    installed = cli.plugin_commands()
    for name, target in declared.items():
        assert name in installed, "reinstall (pip install --no-deps -e .) to refresh the entry points"
        assert installed[name].value == target


def test_builtin_commands_are_the_parsers():
    usage = cli.build_parser().format_usage()
    assert set(re.search(r"\{(.*?)\}", usage)[1].split(",")) == cli.builtin_commands()
    assert cli.builtin_commands() == {
        "list",
        "run",
        "bench",
        "check",
        "replay",
        "serve",
        "serve-retriever",
        "view",
        "play",
    }


def test_plugin_gets_the_remaining_argv_help_included(plugins, capsys):
    assert cli.main(["hello", "--help", "-x", "run"]) == 3
    assert capsys.readouterr().out == "hello ['--help', '-x', 'run']\n"


def test_help_lists_plugin_commands(plugins, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "plugin command from hello_plugin:main" in out and "crashing" in out and "other" not in out


def test_a_plugin_that_fails_to_load_is_a_one_line_error(plugins, capsys):
    for name, why in [("missing", "ModuleNotFoundError"), ("crashing", "RuntimeError: line one line two")]:
        assert cli.main([name, "--help"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"agentgym: command {name!r}") and why in err


def test_plugins_never_shadow_builtin_commands_and_unknown_commands_fail(plugins, capsys):
    assert set(cli.plugin_commands()) == {"hello", "missing", "crashing"}
    for argv in (["run"], ["no-such-command"]):  # argparse: `run` needs an env id; the unknown command is refused
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2
    assert "no-such-command" in capsys.readouterr().err


def test_agentgym_train_help_reaches_the_trainer(capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: agentgym train")
