"""The runnable examples in the docstrings run and print what they say."""

import doctest
import importlib

import pytest

MODULES = [
    "agentgym",
    "agentgym.core",
    "agentgym.spaces",
    "agentgym.parsing",
    "agentgym.trajectory",
    "agentgym.registry",
    "agentgym.runner",
    "agentgym.checker",
    "agentgym.replay",
    "agentgym.agents.base",
    "agentgym.rewards.base",
    "agentgym.rewards.wrappers",
    "agentgym.rewards.matching",
    "agentgym.rewards.process",
    "agentgym.rewards.judge",
    "agentgym.rewards.advantages",
    "agentgym.rewards.answer_scoring",
    "agentgym.rewards.information",
    "agentgym.reward_bench",
    "agentgym.envs.search_qa.env",
    "agentgym.envs.search_qa.agents",
    "agentgym.tools.retrieval",
    "agentgym.tools.retrieval.base",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
