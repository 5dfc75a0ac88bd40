"""BFCL-v0's verdict is BFCL's: the env's ``success`` / ``bfcl_success`` equal what BFCL's own checker, called
directly on the same model output (``agentgym.envs.bfcl.reference``), says: for the gold the env used to reject, for
BFCL's step limit without an episode cap of the env's own, for perturbed oracles on a seeded sample of tasks, and for
fuzzed call sequences. ``bench/bench_bfcl_gold.py`` runs all 800 tasks x 7 agents."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agentgym.envs.bfcl import data

if data.unavailable_reason() is not None:
    pytest.skip(data.unavailable_reason(), allow_module_level=True)

from agentgym.contract.agent import Agent
from agentgym.envs.bfcl.agents import READ_ONLY, OracleAgent, PerturbedOracle, RandomAgent, hermes
from agentgym.envs.bfcl.env import BFCLEnv
from agentgym.envs.bfcl.reference import Verdict, bfcl_verdict

AGENTS = [OracleAgent, *(lambda k=k: PerturbedOracle(k) for k in PerturbedOracle.kinds), RandomAgent]


def play(env: BFCLEnv, task_id: str, agent: Agent) -> tuple[dict[str, Any], list[list[str]], int]:
    """One episode: the last info, the model output (per user turn played, the raw actions) and the steps taken."""
    obs, info = env.reset(options={"task_id": task_id})
    agent.reset(seed=0)
    messages, done, steps = list(obs), False, 0
    output: list[list[str]] = [[] for _ in env.task.turns]
    while not done:
        action = agent.act(messages, info)
        output[info["user_turn"]].append(action)
        obs, _, terminated, truncated, info = env.step(action)
        messages += [{"role": "assistant", "content": action}, *obs]
        done, steps = terminated or truncated, steps + 1
    return info, output[: len(info["turn_checks"])], steps


def assert_agrees(info: dict[str, Any], verdict: Verdict, label: str) -> None:
    assert not verdict.crashed, (label, verdict)
    m = info["metrics"]
    assert (m["bfcl_success"], info["success"]) == (float(verdict.valid), verdict.valid), (label, m, verdict)
    assert m["irrelevance"] == float(verdict.irrelevance_valid), (label, m, verdict)


class Scripted(Agent):
    """Plays fixed actions in order, then "Done."."""

    name = "scripted"

    def __init__(self, actions: list[str]) -> None:
        super().__init__()
        self.actions = actions

    def act(self, messages: list[dict[str, Any]], info: dict[str, Any]) -> str:
        played = sum(1 for m in messages if m.get("role") == "assistant")
        return self.actions[played] if played < len(self.actions) else "Done."


def gold_calls(task: data.Task) -> list[list[dict[str, Any]]]:
    owners = data.method_owners(task.involved_classes)
    return [[data.call_dict(text, owners) for text in turn] for turn in task.ground_truth]


# -- the inputs -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "task_id", [*(f"multi_turn_{c}_173" for c in data.CATEGORIES), "multi_turn_miss_func_49"]
)  # fmt: skip
def test_gold_the_env_rejected_runs_as_in_bfcl(task_id):
    """close_ticket(ticket_id='ticket_001') (an integer in the doc) and tail before miss_func_49 gives it back: BFCL
    runs both and passes the gold; the env rejected them and failed it."""
    env = BFCLEnv(category=task_id.removeprefix("multi_turn_").rsplit("_", 1)[0])
    info, output, _ = play(env, task_id, OracleAgent())
    verdict = bfcl_verdict(env.task, output)
    assert verdict.valid and info["success"]
    assert_agrees(info, verdict, task_id)


def test_miss_param_131_with_16_call_steps_per_turn_passes_as_in_bfcl():
    """Every user turn: its gold calls, then read-only calls up to 16 call steps, then a reply: 120 steps. BFCL
    allows 20 steps per turn and no cap on the task; the env truncated at 100."""
    env = BFCLEnv(category="miss_param")
    env.reset(options={"task_id": "multi_turn_miss_param_131"})
    task = env.task
    extra = hermes([READ_ONLY[task.involved_classes[0]]])
    actions = []
    for calls in gold_calls(task):
        actions += [hermes(calls), *[extra] * 15, "Done."] if calls else ["Which value do you mean?"]
    info, output, steps = play(env, task.id, Scripted(actions))
    assert steps == len(actions) > 100
    verdict = bfcl_verdict(task, output)
    assert verdict.valid and info["success"]
    assert_agrees(info, verdict, task.id)


def test_a_21st_call_step_in_a_turn_force_quits_as_in_bfcl():
    env = BFCLEnv(category="base")
    env.reset(options={"task_id": "multi_turn_base_0"})
    task = env.task
    calls = gold_calls(task)
    for extra_steps, passes in ((19, True), (20, False)):  # the gold step and 19 or 20 more
        actions = [hermes(calls[0]), *[hermes([{"name": "pwd", "arguments": {}}])] * extra_steps, "Done."]
        actions += [a for turn in calls[1:] for a in (hermes(turn), "Done.")]
        info, output, _ = play(env, task.id, Scripted(actions))
        verdict = bfcl_verdict(task, output)
        assert info["success"] == verdict.valid == passes, extra_steps
        assert_agrees(info, verdict, f"{extra_steps} extra steps")
        assert passes or (info["turn_check"]["forced_quit"] and verdict.error_type == "multi_turn:force_terminated")


# -- a seeded sample of every category, the oracle and its perturbations -----------------------------------------------
SAMPLE = [f"multi_turn_{c}_{i}" for c in data.CATEGORIES for i in sorted(random.Random(20).sample(range(200), 20))]


@pytest.mark.slow
def test_env_verdict_equals_bfcls_checker_on_a_seeded_sample():
    env = BFCLEnv(category="all")
    outcomes: dict[str, list[bool]] = {}
    for task_id in SAMPLE:
        for make in AGENTS:
            agent = make()
            info, output, _ = play(env, task_id, agent)
            verdict = bfcl_verdict(env.task, output)
            assert_agrees(info, verdict, f"{task_id} {agent.name}")
            outcomes.setdefault(agent.name, []).append(verdict.valid)
    # not vacuous: the oracle passes everything, the perturbations that change the outcome fail some tasks
    assert all(outcomes["oracle"]) and all(outcomes["oracle-extra-read-only"])
    for name in ("oracle-wrong-value", "oracle-drop-one", "oracle-coerced", "random"):
        assert not all(outcomes[name]), name
    assert any(outcomes["oracle-wrong-value"]) and any(outcomes["oracle-coerced"])


# -- fuzz: random call sequences built from the gold ------------------------------------------------------------------
FUZZ_TASKS = [f"multi_turn_{c}_{i}" for c in data.CATEGORIES for i in (3, 49, 131, 173)]


def _mutate(call: dict[str, Any], how: str) -> dict[str, Any]:
    call = copy.deepcopy(call)
    for key, value in call["arguments"].items():
        if how == "coerce" and isinstance(value, int | float) and not isinstance(value, bool):
            call["arguments"][key] = str(value)
            break
        if how == "coerce" and isinstance(value, str) and value.isdigit():
            call["arguments"][key] = int(value)
            break
        if how == "change" and isinstance(value, str):
            call["arguments"][key] = value + "x"
            break
    if how == "drop-arg" and call["arguments"]:
        call["arguments"].pop(next(iter(call["arguments"])))
    return call


@st.composite
def episode(draw) -> tuple[str, list[str]]:
    task_id = draw(st.sampled_from(FUZZ_TASKS))
    task = next(t for t in data.load_tasks(task_id.removeprefix("multi_turn_").rsplit("_", 1)[0]) if t.id == task_id)
    gold = gold_calls(task)
    pool = [c for turn in gold for c in turn] + [READ_ONLY[c] for c in task.involved_classes]
    hows = st.sampled_from(["keep"] * 12 + ["coerce", "change", "drop-arg"])
    actions = []
    for calls in gold:
        if draw(st.integers(0, 39)) == 0:  # a flood of steps: BFCL's step limit
            actions += [hermes([READ_ONLY[task.involved_classes[0]]])] * draw(st.integers(19, 22))
        order = draw(st.permutations(calls)) if calls else []
        kept = order if draw(st.integers(0, 3)) else order[: draw(st.integers(0, len(order)))]
        steps = draw(st.lists(st.sampled_from(pool), max_size=1)) if pool else []
        chosen = [_mutate(c, draw(hows)) for c in kept + steps]
        cut = draw(st.integers(0, len(chosen)))
        actions += [hermes(part) for part in (chosen[:cut], chosen[cut:]) if part]
        actions.append("Done.")
    return task_id, actions


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=episode())
def test_fuzz_env_verdict_equals_bfcls_checker(case):
    task_id, actions = case
    for irrelevance_check in (False, True):
        env = BFCLEnv(category="all", irrelevance_check=irrelevance_check)
        info, output, _ = play(env, task_id, Scripted(actions))
        verdict = bfcl_verdict(env.task, output)
        assert not verdict.crashed, verdict
        m = info["metrics"]
        assert m["bfcl_success"] == float(verdict.valid) and m["irrelevance"] == float(verdict.irrelevance_valid)
        expected = verdict.valid and (verdict.irrelevance_valid or not irrelevance_check)
        assert info["success"] == expected, (task_id, m, verdict)
