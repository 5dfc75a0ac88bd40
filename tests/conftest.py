"""Test-session settings shared by every test module."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


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
