"""The runnable examples in the Household docstrings run and print what they say."""

import doctest
import importlib

import pytest

MODULES = [
    "agentgym.envs.household",
    "agentgym.envs.household.catalog",
    "agentgym.envs.household.world",
    "agentgym.envs.household.engine",
    "agentgym.envs.household.planner",
    "agentgym.envs.household.prompts",
    "agentgym.envs.household.env",
    "agentgym.envs.household.agents",
    "agentgym.envs.household.adapters",
    "agentgym.envs.household.textworld_adapter",
    "agentgym.envs.household.alfworld_adapter",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
