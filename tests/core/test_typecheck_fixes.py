"""Behaviour behind the type checker's findings in the core (``make typecheck``): each test fails on the code mypy
flagged and passes on its fix."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest

from agentgym.contract.agent import Agent
from agentgym.contract.trust import constructor_signature
from agentgym.integrations.openrlhf import AgentGymInstance
from agentgym.running.episode import make_agent
from agentgym.running.pool import EnvFactory


def test_constructor_signature_reads_a_factory_function_entry_point():
    def factory(*, size: int = 3, label: str = "x", **rest: object) -> gym.Env:
        raise AssertionError("never called")

    params, owners, open_ended = constructor_signature(factory)
    assert list(params) == ["size", "label"]
    assert owners["size"] is factory
    assert open_ended


def test_constructor_signature_follows_kwargs_up_a_class_hierarchy():
    class Base:
        def __init__(self, *, depth: int = 1) -> None:
            self.depth = depth

    class Child(Base):
        def __init__(self, *, width: int = 2, **kwargs: int) -> None:
            super().__init__(**kwargs)
            self.width = width

    params, owners, open_ended = constructor_signature(Child)
    assert list(params) == ["width", "depth"]
    assert owners["depth"] is Base.__dict__["__init__"]
    assert not open_ended


def test_make_agent_builds_an_agent_class_and_refuses_any_other_class():
    class Echo(Agent):
        def __init__(self, text: str = "hi") -> None:
            super().__init__()
            self.text = text

        def act(self, messages, info):
            return self.text

    env = gym.make("agentgym/Chain-v0")
    try:
        agent = make_agent(Echo, env, text="42")
        assert isinstance(agent, Echo) and agent.act([], {}) == "42"
        with pytest.raises(TypeError, match="must subclass"):
            make_agent(dict, env)
    finally:
        env.close()


def test_an_env_factory_without_an_id_or_a_maker_says_so():
    with pytest.raises(ValueError, match="env_id or make_env"):
        EnvFactory(None, {}, None, None)()


def test_an_openrlhf_row_without_a_task_label_is_refused_by_name():
    agent = type("I", (AgentGymInstance,), {"tokenizer": None, "_chat": None})()
    with pytest.raises(ValueError, match="label must be a TaskRef"):
        asyncio.run(agent.reset({"observation": "", "label": None}))
