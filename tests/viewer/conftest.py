"""A headless Chromium (Debian's chromium and chromium-driver) driven by Selenium, for the viewer's page tests: the
same browser bench/viewer_screenshots.py takes the docs' screenshots with."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "viewer_screenshots.py"


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless browser for the session; skips where Chromium, its driver or Selenium is missing (CI installs
    them: .ci/run)."""
    pytest.importorskip("selenium.webdriver")
    if not (shutil.which("chromium") or shutil.which("chromium-browser")) or not shutil.which("chromedriver"):
        pytest.skip("no chromium and chromedriver on PATH (Debian: apt-get install chromium chromium-driver)")
    spec = importlib.util.spec_from_file_location("viewer_screenshots", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    driver = module.chromium()
    try:
        yield driver
    finally:
        driver.quit()
