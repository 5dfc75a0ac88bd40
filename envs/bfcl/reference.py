"""BFCL's own verdict on an agent's output, computed by BFCL's code and nothing of the env: the yardstick that
``bench/bench_bfcl_gold.py`` and the tests hold ``BFCLEnv``'s verdict to.

The input is what BFCL's runner would have stored as the model's result: per user turn, the agent's raw actions in
order (``model_result[turn][step]``). :func:`bfcl_verdict` then does what BFCL's eval runner does with a result file
(``_evaluate_single_multi_turn_entry`` in ``bfcl_eval/eval_checker/eval_runner.py``): a task with fewer turns than its
gold was force-terminated and fails; each step is decoded into Python call strings (a step that decodes to no call
is skipped) and ``multi_turn_checker`` judges them, executing them on fresh instances with BFCL's executor. Decoding
is BFCL's for function-calling models (``convert_to_function_call`` in ``bfcl_eval/model_handler/utils.py``, which
needs packages the wheel is installed without, so its one format line is :func:`call_string`) after
``agentgym.contract.parsing.parse_tool_turn`` has read the env's call formats. A turn with more than BFCL's
``MAXIMUM_STEP_LIMIT`` decoded steps would have been force-quit by BFCL's inference loop, so it fails too.

>>> call_string("cd", {"folder": "document"}), call_string("close_ticket", {"ticket_id": "ticket_001"})
("cd(folder='document')", "close_ticket(ticket_id='ticket_001')")
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.contract.parsing import ParseError, parse_tool_turn
from agentgym.envs.bfcl import data

UTILS = "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils"
PROMPTS = "bfcl_eval.constants.default_prompts"


def call_string(name: str, arguments: dict[str, Any]) -> str:
    """One decoded call as BFCL's FC handlers write it: ``name(k=repr(v),...)``."""
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


def decode_step(action: str) -> list[str]:
    """The calls of one agent step as BFCL call strings (``[]`` for a plain reply or a turn that does not parse)."""
    try:
        calls = parse_tool_turn(action).calls
    except ParseError:
        return []
    return [call_string(c.name, c.arguments) for c in calls or ()]


@dataclass(frozen=True)
class Verdict:
    """BFCL's verdict: ``valid`` (its eval runner's), ``irrelevance_valid`` (its ``multi_turn_irrelevance_checker``,
    which v4's runner does not call), the error type and message when not valid, and ``crashed`` when BFCL's own code
    raised (then ``valid`` is False and the message is the exception)."""

    valid: bool
    irrelevance_valid: bool
    error_type: str = ""
    error_message: str = ""
    crashed: bool = False


def bfcl_verdict(task: data.Task, model_result: Sequence[Sequence[str]]) -> Verdict:
    """BFCL's verdict on ``model_result`` (per user turn, the agent's raw actions in order) for ``task``."""
    checker = data.bfcl_module(data.CHECKER)
    limit = data.bfcl_module(PROMPTS).MAXIMUM_STEP_LIMIT
    truth = [list(t) for t in task.ground_truth]
    decoded = [[calls for calls in map(decode_step, turn) if calls] for turn in model_result]
    padded = decoded + [[] for _ in truth[len(decoded) :]]  # the turns a force-quit left out had no calls
    irrelevance = checker.multi_turn_irrelevance_checker(padded, truth)["valid"]
    if len(decoded) != len(truth) or any(len(turn) > limit for turn in decoded):
        return Verdict(False, irrelevance, "multi_turn:force_terminated", "force-terminated (BFCL's step limit)")
    return bfcl_check(task, decoded, irrelevance)


def bfcl_check(task: data.Task, decoded: Sequence[Sequence[Sequence[str]]], irrelevance: bool = True) -> Verdict:
    """``multi_turn_checker`` on decoded calls (per user turn, per step, call strings), on fresh instances."""
    checker = data.bfcl_module(data.CHECKER)
    entry = {"id": task.id, "initial_config": task.initial_config, "involved_classes": list(task.involved_classes)}
    truth = [list(t) for t in task.ground_truth]
    model = f"agentgym_reference_{uuid.uuid4().hex}"  # BFCL keeps instances in globals by model name and task id
    utils = data.bfcl_module(UTILS)
    steps = [[list(calls) for calls in turn] for turn in decoded]
    try:
        result = checker.multi_turn_checker(steps, truth, entry, f"multi_turn_{task.category}", model)
    except Exception as e:  # BFCL's own code failing is a finding, not a verdict
        return Verdict(False, irrelevance, "crash", f"{type(e).__name__}: {e}", crashed=True)
    finally:
        for key in [k for k in vars(utils) if k.startswith(model)]:
            del vars(utils)[key]
    return Verdict(result["valid"], irrelevance, result.get("error_type", ""), result.get("error_message", ""))


def bfcl_execute(task: data.Task, steps: Sequence[Sequence[str]]) -> tuple[list[str], dict[str, Any]]:
    """Run call strings step by step on fresh instances with BFCL's executor (``execute_multi_turn_func_call``, as
    its checker runs a model's calls); return every result and the instances (class name -> instance)."""
    utils = data.bfcl_module(UTILS)
    model = f"agentgym_reference_{uuid.uuid4().hex}"
    results: list[str] = []
    instances: dict[str, Any] = {}
    try:
        for calls in [*steps, []]:  # the empty step makes the instances when there is no step
            out, instances = utils.execute_multi_turn_func_call(
                list(calls), task.initial_config, list(task.involved_classes), model, task.id,
                long_context=task.long_context, is_evaL_run=True,
            )  # fmt: skip
            results += out
    finally:
        for key in [k for k in vars(utils) if k.startswith(model)]:
            del vars(utils)[key]
    return results, instances
