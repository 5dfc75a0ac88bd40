"""Test-session settings shared by every test module."""

import os

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Hypothesis without its clocks: Hypothesis's own "ci" profile (loaded by default here, not only where a CI variable
# is set) has no per-example deadline (200 ms by default) and no too_slow health check, so a loaded machine cannot
# fail a test that a quiet one passes; it derandomizes (every run tries the same examples, so a pass or failure
# depends on the code only, and no example database is shared between parallel workers) and prints the blob that
# replays a failure. "explore" (HYPOTHESIS_PROFILE=explore, or --hypothesis-profile=explore) draws fresh examples
# each run and keeps failures in .hypothesis/, for hunting bugs by hand. A test's own @settings sets max_examples.
settings.register_profile(
    "explore", deadline=None, derandomize=False, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """One intra-op torch thread for the whole run: the test models are tiny, and on a shared 2-core machine two
    OpenMP threads competing with another process made each tiny-model forward ~30x slower (520 ms vs 15 ms)."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """For running documentation examples: offline, in a scratch directory; torch's thread count and Gymnasium's
    registry are restored after (examples may set the one and register envs in the other)."""
    import sys

    import gymnasium as gym

    import agentgym  # noqa: F401  (its own envs stay registered: an example's `import agentgym` may be its first)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    registered = set(gym.registry)
    yield tmp_path
    for env_id in set(gym.registry) - registered:
        del gym.registry[env_id]
    if torch is not None:
        torch.set_num_threads(threads)
