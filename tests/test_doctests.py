"""The runnable examples in the docstrings of every agentgym module run and print what they say."""

import doctest
import importlib
import pkgutil

import pytest

ROOTS = ("agentgym", "agentgym.envs", "agentgym.tools", "agentgym.baselines")  # envs/, tools/, baselines/ are mapped


def all_modules() -> list[str]:
    names = set(ROOTS)
    for root in ROOTS:
        package = importlib.import_module(root)
        names |= {m.name for m in pkgutil.walk_packages(package.__path__, root + ".")}
    return sorted(n for n in names if not n.endswith("__main__"))


def test_modules_are_found():
    names = all_modules()
    assert {"agentgym.contract.env", "agentgym.envs.search_qa.env", "agentgym.tools.retrieval.bm25"} <= set(names)


@pytest.mark.parametrize("name", all_modules())
def test_docstring_examples(name):
    import gymnasium as gym

    registered = set(gym.registry)  # examples may register envs: they leave the registry as they found it
    try:
        flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        result = doctest.testmod(importlib.import_module(name), optionflags=flags)
    finally:
        for env_id in set(gym.registry) - registered:
            del gym.registry[env_id]
    assert result.failed == 0
