"""The repository root: not a package, but the trap door for one import.

A script run from the folder that holds a clone named ``agentgym`` imports ``agentgym`` from that clone folder first
(the script's folder leads ``sys.path``), and without this file Python would make the clone an empty namespace package
(setuptools' editable finder only runs after the path finder): ``gymnasium.make`` then says ``Namespace agentgym not
found``. With this file, importing the clone folder as ``agentgym`` loads the installed package in its place, or fails
with a message that says how to install it. Under any other name (a tool scanning the tree) it does nothing.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _load_installed_agentgym() -> None:
    """Put the installed ``agentgym`` package in ``sys.modules`` in place of this file (the import then returns it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    parent = os.path.dirname(here)
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != parent]
    spec = importlib.machinery.PathFinder.find_spec(__name__, others)
    if spec is None or spec.loader is None:  # not found, or only namespace folders: ask the other finders
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is importlib.machinery.PathFinder or find is None:
                continue
            found = find(__name__, None)
            if found is not None and found.loader is not None and found.origin != __file__:
                spec = found
                break
    if spec is None or spec.loader is None:
        raise ImportError(
            f"agentgym is not installed for {sys.executable}: {here} is a clone of its repository, not the package; "
            f"run `make setup` in it and use {os.path.join(here, '.venv', 'bin', 'python')} or `pip install -e {here}`",
            name=__name__,
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(__name__, None)
        raise


if __name__ == "agentgym":
    _load_installed_agentgym()
