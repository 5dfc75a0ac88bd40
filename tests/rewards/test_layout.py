"""The layout of agentgym.rewards: the method packages (``advantages``, ``information``, ``answer_scoring``) re-export
every public function and class their modules define, so ``from agentgym.rewards.<package> import X`` does not depend
on which module holds X; and every lazy name of ``agentgym.rewards`` resolves to the object its module defines."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import agentgym.rewards

PACKAGES = ("agentgym.rewards.advantages", "agentgym.rewards.information", "agentgym.rewards.answer_scoring")
#: Public module members that are infrastructure, not API: the registry's collector.
NOT_EXPORTED = {"agentgym.rewards.advantages.registry": {"collect_specs"}}


def defined_public(module: object) -> set[str]:
    """The public functions and classes a module defines itself (not those it imports)."""
    return {
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and obj.__module__ == module.__name__  # type: ignore[attr-defined]
    }


@pytest.mark.parametrize("package_name", PACKAGES)
def test_packages_re_export_every_public_function_and_class(package_name):
    package = importlib.import_module(package_name)
    exported = set(package.__all__)
    assert all(getattr(package, name) is not None for name in exported)
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package_name}.{info.name}")
        missing = defined_public(module) - exported - NOT_EXPORTED.get(module.__name__, set())
        assert not missing, f"{module.__name__} defines {sorted(missing)}, not in {package_name}.__all__"
        for name in defined_public(module) & exported:
            assert getattr(package, name) is getattr(module, name)


def test_lazy_names_resolve_to_their_modules():
    for name, module_name in agentgym.rewards._LAZY.items():
        module = importlib.import_module(f"agentgym.rewards.{module_name}")
        assert getattr(agentgym.rewards, name) is getattr(module, name)
    assert sorted(dir(agentgym.rewards)) == sorted(agentgym.rewards._LAZY)
    with pytest.raises(AttributeError):
        agentgym.rewards.NoSuchName  # noqa: B018
