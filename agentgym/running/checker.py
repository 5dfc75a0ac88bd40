"""``check_env`` for text envs: Gymnasium's checker plus the contract of ``agentgym.contract.env``.

Checks, in order: Gymnasium's ``check_env``; the ``info`` keys after ``reset`` and ``step``; same seed ->
identical episode (observations, rewards, flags and info, compared as JSON); ``info`` JSON-serialisable;
rewards finite and equal to the sum of ``reward_components``; a battery of malformed actions (empty,
whitespace, 1 MB, invalid Unicode, unbalanced and nested tags, thousands of tags, broken JSON, JSON nested
10,000 deep, integers of 400 and 4,301 digits, NaN, escaped lone surrogates, binary junk, non-strings) raises
nothing, yields a valid observation (valid Unicode throughout) and, where invalid, ``action_valid=False`` with a
``parse_error`` message; branching: a snapshot taken mid-episode, restored into the same env and into
a fresh one, and the env pickled and unpickled, all continue the episode identically (for an env without snapshot
support this check is skipped, with one line saying so; it must still pickle between episodes).

>>> import agentgym
>>> report = check("agentgym/SearchQA-v0", env_kwargs={"dataset": "tiny"})
>>> report.ok
True
"""

from __future__ import annotations

import json
import math
import pickle
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.utils.env_checker import check_env as gym_check_env

REQUIRED_RESET_KEYS = ("turn", "task_id", "action_valid", "parse_error", "reward_components", "anchor", "gold")
REQUIRED_STEP_KEYS = ("turn", "task_id", "action_valid", "parse_error", "reward_components", "anchor")

MALFORMED_ACTIONS: tuple[tuple[str, Any], ...] = (
    ("empty", ""),
    ("whitespace", " \n\t "),
    ("plain prose", "I think the answer is probably somewhere."),
    ("1 MB of text", "x" * (1 << 20)),
    ("1 MB of open tags", "<search>" * (1 << 17)),
    ("lone surrogate", "<answer>\ud800</answer>"),
    ("control characters", "\x00\x01\x1b[31m<answer>\x07</answer>"),
    ("unbalanced open", "<search> what is it"),
    ("unbalanced close", "what is it </search>"),
    ("mismatched", "<search> a </answer>"),
    ("nested", "<search><answer><search>x</search></answer></search>"),
    ("thousands of tags", "<search>q</search>" * 5000),
    ("empty tag", "<answer></answer>"),
    ("broken tool JSON", '<tool_call>{"name": "f", "arguments": {</tool_call>'),
    ("deep JSON", "<tool_call>" + "[" * 100_000 + "</tool_call>"),
    ("deep JSON arguments string", '<tool_call>{"name": "f", "arguments": "' + "[" * 10_000 + '"}</tool_call>'),
    ("deep OpenAI message", '{"tool_calls": ' + "[" * 10_000 + "]" * 10_000 + "}"),
    ("4,301-digit integer", '<tool_call>{"name": "f", "arguments": {"n": ' + "9" * 4301 + "}}</tool_call>"),
    ("400-digit integer", '<tool_call>{"name": "f", "arguments": {"x": ' + "9" * 400 + "}}</tool_call>"),
    ("NaN and Infinity", '<tool_call>{"name": "f", "arguments": {"x": NaN, "y": -Infinity, "z": 1e400}}</tool_call>'),
    ("escaped lone surrogates", '<tool_call>{"name": "f\\ud800", "arguments": {"p": "a\\udfffb"}}</tool_call>'),
    ("tool call with wrong types", '<tool_call>{"name": 3, "arguments": []}</tool_call>'),
    ("unknown tool", '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>'),
    ("binary junk", bytes(range(256)).decode("latin-1")),
    ("RTL and emoji", "\u202e<answer>🙂</answer>\u202c"),
    ("not a string (None)", None),
    ("not a string (bytes)", b"<answer>bytes</answer>"),
    ("not a string (dict)", {"role": "assistant", "content": "hi"}),
)


@dataclass
class CheckReport:
    """Results of ``check``: one line per check, ``ok`` if none failed."""

    env_id: str
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    #: Checks that do not apply to this env, each with why (e.g. an env that does not support snapshots).
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed

    def __str__(self) -> str:
        lines = [f"check {self.env_id}: {'OK' if self.ok else 'FAILED'}"]
        lines += [f"  pass  {p}" for p in self.passed]
        lines += [f"  FAIL  {f}" for f in self.failed]
        lines += [f"  skip  {n}" for n in self.notes]
        return "\n".join(lines)


class _Skip(Exception):
    """A check that does not apply to the env: ``check`` lists it as skipped, with the message as why."""


def _canonical(x: Any) -> str:
    return json.dumps(x, sort_keys=True, ensure_ascii=False, allow_nan=False)


def _episode(env: gym.Env, seed: int, actions: list[str]) -> list[str]:
    obs, info = env.reset(seed=seed)
    record = [_canonical([obs, info])]
    for a in actions:
        out = env.step(a)
        record.append(_canonical(list(out)))
        if out[2] or out[3]:
            break
    return record


def check(
    env_id: str,
    *,
    env_kwargs: dict[str, Any] | None = None,
    seed: int = 0,
    make_env: Callable[[], gym.Env] | None = None,
) -> CheckReport:
    """Run every check on ``env_id`` and return a report (never raises for a failing check)."""
    factory = make_env or (lambda: gym.make(env_id, **(env_kwargs or {})))
    report = CheckReport(env_id)

    def run_check(name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
            report.passed.append(name)
        except _Skip as e:
            report.notes.append(str(e))
        except Exception as e:
            report.failed.append(f"{name}: {type(e).__name__}: {e}")

    def gymnasium_checker() -> None:
        env = factory()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a checker warning is a failure here
            gym_check_env(env.unwrapped, skip_render_check=True)
        env.close()

    def info_contract() -> None:
        env = factory()
        obs, info = env.reset(seed=seed)
        missing = [k for k in REQUIRED_RESET_KEYS if k not in info]
        assert not missing, f"reset info lacks {missing}"
        assert env.observation_space.contains(obs), "reset observation is not in observation_space"
        _, reward, _, _, info = env.step(env.action_space.sample())
        missing = [k for k in REQUIRED_STEP_KEYS if k not in info]
        assert not missing, f"step info lacks {missing}"
        comps = info["reward_components"]
        assert math.isclose(reward, sum(comps.values()), abs_tol=1e-9), f"reward {reward} != sum of {comps}"
        _canonical(info)
        env.close()

    def determinism() -> None:
        env = factory()
        sampler = env.action_space
        sampler.seed(seed)
        actions = [sampler.sample() for _ in range(8)]
        first = _episode(env, seed, actions)
        second = _episode(env, seed, actions)
        other = factory()
        third = _episode(other, seed, actions)
        assert first == second, "same seed, same env object: episodes differ"
        assert first == third, "same seed, fresh env object: episodes differ"
        env.close()
        other.close()

    def malformed_actions() -> None:
        env = factory()
        for label, action in MALFORMED_ACTIONS:
            env.reset(seed=seed)
            try:
                obs, reward, _, _, info = env.step(action)
            except Exception as e:
                raise AssertionError(f"action {label!r} raised {type(e).__name__}: {e}") from None
            assert env.observation_space.contains(obs), f"action {label!r}: observation not in the space"
            assert math.isfinite(reward), f"action {label!r}: reward {reward} is not finite"
            try:
                _canonical([obs, info]).encode("utf-8")
            except UnicodeEncodeError:
                raise AssertionError(f"action {label!r}: a lone surrogate in the observation or info") from None
            if not info["action_valid"]:
                assert info["parse_error"], f"action {label!r}: invalid but parse_error is empty"
                assert obs, f"action {label!r}: invalid but no explanatory observation"
        env.close()

    def branching() -> None:
        from agentgym.contract.branching import restore, snapshot
        from agentgym.contract.env import SnapshotError

        env = factory()
        actions = _actions(env, seed)
        env.reset(seed=seed)
        head = env.step(actions[0])
        if head[2] or head[3]:
            env.reset(seed=seed)
        try:
            snap = snapshot(env)
        except SnapshotError as e:
            pickle.loads(pickle.dumps(factory()))  # between episodes it must still pickle
            why = "" if "does not support snapshots" in str(e) else f": {' '.join(str(e).split())}"
            raise _Skip(f"snapshot/restore: {env_id} does not support snapshots{why}") from None
        pickle.loads(pickle.dumps(snap))

        def rest(e: gym.Env) -> list[str]:
            out = []
            for a in actions[1:]:
                step = e.step(a)
                out.append(_canonical(list(step)))
                if step[2] or step[3]:
                    break
            return out

        pickled = pickle.dumps(env)
        reference = rest(env)
        restore(env, snap)
        assert rest(env) == reference, "restore into the same env: the continuation differs"
        fresh = factory()
        restore(fresh, snap)
        assert rest(fresh) == reference, "restore into a fresh env: the continuation differs"
        assert rest(pickle.loads(pickled)) == reference, "pickled mid-episode and unpickled: the continuation differs"
        env.close()
        fresh.close()

    run_check("gymnasium check_env", gymnasium_checker)
    run_check("info keys, reward = sum of reward_components, info JSON-serialisable", info_contract)
    run_check("same seed -> identical episode", determinism)
    run_check(f"{len(MALFORMED_ACTIONS)} malformed actions raise nothing", malformed_actions)
    run_check("snapshot/restore and pickle continue an episode identically", branching)
    return report


def _actions(env: gym.Env, seed: int, n: int = 8) -> list[Any]:
    """Actions for the branching check: a built-in agent's (``random`` if the env has one), else sampled text."""
    from agentgym.running.runner import builtin_agents, make_agent

    names = builtin_agents(env)
    if not names:
        env.action_space.seed(seed)
        return [env.action_space.sample() for _ in range(n)]
    agent = make_agent("random" if "random" in names else names[0], env)
    agent.reset(seed=seed)
    obs, info = env.reset(seed=seed)
    messages, actions = list(obs), []
    for _ in range(n):
        actions.append(agent.act(messages, info))
        obs, _, terminated, truncated, info = env.step(actions[-1])
        messages += [{"role": "assistant", "content": actions[-1]}, *obs]
        if terminated or truncated:
            break
    return actions
