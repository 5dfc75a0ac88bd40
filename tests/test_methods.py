"""The method catalogue: cards beside their code, the registry built from them, ``agentgym methods``, the docs
table, ``agentgym train --method`` and a training run of every method the catalogue calls built."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
from pathlib import Path

import pytest
from rule_judge import serve_rule_judge

from agentgym.baselines.methods import (
    TRAINER_MODULES,
    catalogue,
    fill_docs,
    get_method,
    kinds_markdown,
    markdown,
    method_overrides,
)
from agentgym.cli import main as cli_main
from agentgym.rewards.advantages import ESTIMATORS
from agentgym.rewards.catalogue import CARD_MODULES, NEEDS, Method, Paper, collect, merge
from agentgym.rewards.planned import PLANNED

ROOT = Path(__file__).resolve().parents[1]
CARDS = catalogue()
BUILT = [c for c in CARDS if c.status == "built"]
#: Methods that are no paper's system: generic pieces of the suite.
NO_PAPER = {"judge", "vpr", "format_penalty", "step_cost", "novelty"}


def _card_modules() -> set[str]:
    """Every module of the package (agentgym/, baselines/, envs/) that assigns a module-level ``METHODS``."""
    found = set()
    folders = (
        (ROOT / "agentgym", "agentgym"),
        (ROOT / "baselines", "agentgym.baselines"),
        (ROOT / "envs", "agentgym.envs"),
    )
    for folder, package in folders:
        for path in folder.rglob("*.py"):
            tree = ast.parse(path.read_text())
            names = {t.id for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
                     for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                     if isinstance(t, ast.Name)}  # fmt: skip
            if "METHODS" in names:
                parts = path.relative_to(folder).with_suffix("").parts
                found.add(".".join((package, *parts)))
    return found


def test_every_module_with_cards_is_collected():
    assert _card_modules() == set(CARD_MODULES) | set(TRAINER_MODULES)


def test_names_are_unique_and_each_card_is_whole():
    names = [c.name for c in CARDS]
    assert len(names) == len(set(names))
    for card in CARDS:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", card.name), card.name
        assert card.summary and set(card.needs) <= set(NEEDS)
        if card.status != "built":
            assert card.missing, card.name
        if card.code is not None:
            assert callable(card.load()) and isinstance(card.knobs(), dict)
        assert card.paper is not None or card.name in NO_PAPER, f"{card.name}: no paper"
        json.dumps(card.row())  # the registry is JSON for tools


def test_every_registered_estimator_has_a_method():
    """A registered estimator is a method's card or the estimator a card trains with (gigpo_obs is gigpo's)."""
    used = {c.name for c in CARDS} | {c.train.get("estimator") for c in CARDS} | {"gigpo_obs"}
    assert set(ESTIMATORS) <= used


def test_a_built_card_replaces_the_planned_one():
    planned = Method("x", "X", "estimator", "planned", status="missing", missing="all of it")
    built = Method("x", "X", "estimator", "built", code="agentgym.rewards.advantages.group:_est_grpo")
    assert merge([built], [planned]) == (built,)
    with pytest.raises(ValueError, match="has cards in"):
        collect([importlib.import_module("agentgym.rewards.advantages.group")] * 2)
    with pytest.raises(ValueError, match="needs code"):
        Method("y", "Y", "estimator", "built without code")
    with pytest.raises(ValueError, match="unknown needs"):
        Method("y", "Y", "estimator", "s", needs=("telepathy",), status="missing", missing="m")


def test_knobs_are_read_from_the_code():
    assert get_method("grpo").knobs() == {"eps": 1e-6, "scale": True}
    assert get_method("gigpo").knobs()["omega"] == 1.0
    assert "clusterer" not in get_method("siop").knobs()  # an object, not a value a command line can give
    assert Paper("t", 2024, "2402.03300").url == "https://arxiv.org/abs/2402.03300"


def test_method_overrides_send_knobs_where_the_card_says():
    assert method_overrides(get_method("gigpo"), {"omega": 0.5, "iterations": 3}) == {
        "algo": "grpo", "estimator": "gigpo", "reward_components": "all", "estimator_kwargs": {"omega": 0.5},
        "iterations": 3}  # fmt: skip
    assert method_overrides(get_method("igpo"), {"mode": "log_prob_diff"})["scorer_kwargs"] == {"mode": "log_prob_diff"}
    wrappers = method_overrides(get_method("step_cost"), {"cost": 0.5})["reward_wrappers"]
    assert wrappers == [{"name": "step_cost", "cost": 0.5}]
    assert get_method("step_cost").train["reward_wrappers"] == [{"name": "step_cost"}]  # the card is unchanged
    missing = next(c for c in PLANNED if c.status == "missing")  # a planned card, built or not
    with pytest.raises(ValueError, match="not built yet"):
        method_overrides(missing, {})
    code = "agentgym.rewards.judge:JudgeScorer"
    untrainable = Method("half", "Half", "scorer", "partial, no train settings", code=code, status="partial")
    with pytest.raises(ValueError, match="cannot train yet"):
        method_overrides(untrainable, {})


@pytest.mark.parametrize("page", ["docs/methods.md", "README.md"])
def test_docs_tables_equal_the_registry(page):
    text = (ROOT / page).read_text()
    assert text == fill_docs(text, CARDS), f"regenerate them: python -m agentgym.baselines.methods {page}"
    assert (markdown(CARDS) if page.startswith("docs") else kinds_markdown(CARDS)) in text


def test_cli_lists_filters_and_shows(capsys):
    assert cli_main(["methods"]) == 0
    out = capsys.readouterr().out
    assert all(f"| {c.name} " in out for c in CARDS) and f"{len(CARDS)} methods:" in out
    assert cli_main(["methods", "--need", "group", "--kind", "estimator", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all("group" in r["needs"] and r["kind"] == "estimator" for r in rows)
    assert {r["name"] for r in rows} >= {"grpo", "rloo", "gigpo"}
    assert cli_main(["methods", "gigpo"]) == 0
    card = capsys.readouterr().out
    assert (
        "omega = 1.0" in card and "anchor_groups.py:" in card and "agentgym train --preset tiny --method gigpo" in card
    )


def test_cli_user_errors_are_one_line(capsys):
    assert cli_main(["methods", "gigp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean gigpo" in err
    missing = next(c.name for c in CARDS if c.status == "missing")
    with pytest.raises(SystemExit) as stop:  # the train command's own parser exits
        cli_main(["train", "--preset", "tiny", "--method", missing, "--out-dir", "/nonexistent/x"])
    assert stop.value.code == 2 and "not built yet" in capsys.readouterr().err


@pytest.fixture(scope="module")
def judge_url():
    """A rule judge on a real loopback OpenAI-compatible server: every turn gets 7/10."""
    with serve_rule_judge(lambda system, user: "Relevant and well formed. Score: 7/10") as judge:
        yield judge.url


def smoke_settings(card: Method, judge_url: str) -> dict:
    """What a method's smoke run adds to its card's settings where it needs a judge: a scorer that takes a ``judge``
    (a ``Judge``) gets the rule judge (``scorer_kwargs["judge"] = "rule"``, beside the card's own scorer_kwargs);
    one that takes an LLM ``client`` gets the served rule judge's endpoint. A judged reward wrapper (ONI's bonus)
    keeps its own judge setting, the rule judge by default."""
    if "judge" not in card.needs or "scorer" not in card.train:
        return {}
    if card.code is not None and "judge" in inspect.signature(card.load()).parameters:
        return {"scorer_kwargs": {**card.train.get("scorer_kwargs", {}), "judge": "rule"}}
    return {"scorer_kwargs": {"client": {"base_url": judge_url, "api_key_env": None, "max_retries": 0}}}


@pytest.mark.slow
@pytest.mark.parametrize("name", [c.name for c in BUILT])
def test_every_built_method_trains(name, tmp_path, capsys, request):
    """``agentgym train --method NAME`` runs a tiny model end to end: what makes a card "built"."""
    card = get_method(name)
    extra = smoke_settings(card, request.getfixturevalue("judge_url") if "judge" in card.needs else "")
    sets = ["batch_tasks=1", "group_size=2", "plot=false", "progress=false", "max_turns=2", "max_new_tokens=8"]
    sets += [f"{k}={json.dumps(v)}" for k, v in extra.items()]
    argv = ["train", "--preset", "tiny", "--method", name, "--iterations", "1", "--out-dir", str(tmp_path)]
    assert cli_main([*argv, *(a for s in sets for a in ("--set", s))]) == 0, capsys.readouterr().err
    config = json.loads((tmp_path / "config.json").read_text())
    for key, value in card.train.items():
        assert config[key] == value or key in extra, (key, config[key], value)
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1
