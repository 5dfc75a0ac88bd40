"""The screenshots of docs/viewer.md, taken in Debian's headless Chromium from real runs made here.

    python bench/viewer_screenshots.py            # writes docs/images/viewer/*.png

Data: Household played by its oracle and random agents (a bench-like folder); two runs of the credit-signal sweep
(``--runs``: their metrics overlaid; by default seed 1's ``mt_grpo`` fed the oracle signal flipped at 10% and at 50%,
where a local sweep left them); and a trainer run of the tiny model on Chain-v0 with its episodes logged
(``log_rollouts_every``), for the per-token advantages and a group side by side.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "images" / "viewer"
BROWSER_ARGS = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update")  # fmt: skip


def chromium(width: int = 1400, height: int = 1000) -> Any:
    """A headless Chromium (Debian's chromium and chromedriver on PATH) driven by Selenium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"
    for arg in (*BROWSER_ARGS, f"--window-size={width},{height}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"), options=options)
    driver.set_page_load_timeout(60)
    return driver


def wait_for(driver: Any, condition: Any, timeout: float = 60) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    stale = (StaleElementReferenceException,)  # the table was redrawn under the check: check again
    return WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=stale).until(condition)


RUNS = ("bench/results/credit_signals/chain/rl/Chain-H16-s1-mt_grpo@flip10",
        "bench/results/credit_signals/chain/rl/Chain-H16-s1-mt_grpo@flip50")  # fmt: skip


def make_data(root: Path, runs: list[str]) -> None:
    from agentgym.running.runner import run

    for run_dir in map(Path, runs):
        if (run_dir / "metrics.jsonl").is_file():
            dest = root / "sweep" / run_dir.name.replace("@", "-")
            dest.mkdir(parents=True)
            for name in ("metrics.jsonl", "config.json"):
                shutil.copyfile(run_dir / name, dest / name)

    for agent in ("oracle", "random"):
        run("agentgym/Household-v0", agent, 8, out=root / "trajectories" / f"household__{agent}.jsonl",
            progress=False)  # fmt: skip
    from agentgym.baselines.config import TrainConfig
    from agentgym.baselines.trainer import train

    settings = {"env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "batch_tasks": 2, "group_size": 4,
                "max_turns": 2, "max_new_tokens": 8, "stop": ["</answer>"], "iterations": 4, "sft_steps": 150,
                "sft_lr": 3e-3, "sft_batch": 8, "estimator": "mt_grpo", "plot": False, "progress": False,
                "out_dir": str(root / "train-run")}  # fmt: skip
    if "log_rollouts_every" in TrainConfig.__dataclass_fields__:
        settings["log_rollouts_every"] = 1
    train(TrainConfig.from_dict(settings))


def shoot(driver: Any, name: str, element: Any | None = None) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.png"
    (element or driver.find_element("tag name", "body")).screenshot(str(path))
    print(f"wrote {path.relative_to(ROOT)}")


def pick(driver: Any, label: str) -> None:
    button = wait_for(driver, lambda d: d.find_elements("css selector", f"nav button[title='{label}']"))[0]
    button.click()
    wait_for(driver, lambda d: "on" in button.get_attribute("class"))


def play_household(driver: Any) -> None:
    """Three turns of Household played on the page (the oracle's first two, then a wrong one), undo offered."""
    import gymnasium as gym

    from agentgym.envs.household.agents import OracleAgent
    from agentgym.running.episode import run_episode

    env = gym.make("agentgym/Household-v0")
    oracle = run_episode(env, OracleAgent(), seed=7, env_id="agentgym/Household-v0")
    env.close()
    driver.find_element("id", "playtoggle").click()
    driver.find_element("id", "playseed").send_keys("7")
    driver.find_element("id", "playstart").click()
    wait_for(driver, lambda d: "turn 0 of" in d.find_element("id", "playstate").text)
    for k, action in enumerate([oracle.turns[0].action, oracle.turns[1].action, "take the moon"], start=1):
        box = driver.find_element("id", "playaction")
        box.clear()
        box.send_keys(action)
        driver.find_element("id", "playsend").click()
        wait_for(driver, lambda d, k=k: f"turn {k} of" in d.find_element("id", "playstate").text)
    shoot(driver, "play", driver.find_element("id", "play"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", default=None, help="a folder for the data (default: a temporary one)")
    parser.add_argument("--runs", nargs="*", default=list(RUNS), help="trainer run folders whose metrics to overlay")
    args = parser.parse_args()
    from agentgym.cli import play_room
    from agentgym.tools.serving import BackgroundServer
    from agentgym.viewer.app import Viewer, create_app

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="viewer_shots_"))
    make_data(root, args.runs)
    viewer = Viewer.of(root)
    for s in viewer.sources:
        s.index.wait(60)
    driver = chromium(1400, 1400)
    try:
        room = play_room(["agentgym/Household-v0"], str(root / "played"))
        with BackgroundServer(create_app(root, viewer=viewer, play=room)) as server:
            driver.get(server.url + "/")
            pick(driver, "trajectories/household__oracle.jsonl")
            wait_for(driver, lambda d: len(d.find_elements("css selector", "#episodes tbody tr")) == 8)
            driver.find_element("id", "compare").send_keys("trajectories/household__random.jsonl")
            wait_for(driver, lambda d: all(c.text in ("yes", "no") for c in d.find_elements("css selector", "td.cmp")))
            shoot(driver, "episodes")
            driver.find_elements("css selector", "#episodes tbody tr")[2].click()
            wait_for(driver, lambda d: len(d.find_elements("css selector", "#detail .side .episode")) == 2)
            driver.execute_script("document.getElementById('detail').scrollIntoView()")
            shoot(driver, "compare", driver.find_element("id", "detail"))
            sweep = [s for s in viewer.sources if s.kind == "metrics" and s.label.startswith("sweep/")]
            if len(sweep) == 2:
                driver.find_element("id", "compare").send_keys("nothing")
                pick(driver, sweep[0].label)
                driver.find_element("id", "compare").send_keys(sweep[1].label)
                wait_for(driver, lambda d: d.find_elements("css selector", "#metrics .curve.other"))
                shoot(driver, "metrics", driver.find_element("id", "metrics"))
            trained = next((s for s in viewer.sources if s.kind == "metrics" and s.run == "train-run"), None)
            if trained is not None:
                driver.find_element("id", "compare").send_keys("nothing")
                pick(driver, trained.label)
                wait_for(driver, lambda d: d.find_elements("css selector", "#metrics .chart svg"))
                rollouts = next((s for s in viewer.sources if s.kind == "rollouts"), None)
                if rollouts is not None:
                    driver.find_elements("css selector", "#metrics .chart circle")[-1].click()
                    wait_for(driver, lambda d: d.find_elements("css selector", "#episodes tbody tr"))
                    driver.find_element("css selector", "input[name=iteration]").clear()
                    driver.find_element("css selector", "select[name=success]").send_keys("yes")
                    driver.find_element("id", "apply").click()  # a success: its group's advantages are not all 0
                    wait_for(driver, lambda d: "shown" in d.find_element("id", "pageinfo").text)
                    if not driver.find_elements("css selector", "#episodes tbody tr"):
                        driver.find_element("id", "clear").click()
                        wait_for(driver, lambda d: d.find_elements("css selector", "#episodes tbody tr"))
                    driver.find_elements("css selector", "#episodes tbody tr")[0].click()
                    wait_for(driver, lambda d: d.find_elements("css selector", "#detail .tokens"))
                    shoot(driver, "advantages", driver.find_element("css selector", "#detail .episode"))
                    driver.find_element("id", "siblings").click()
                    wait_for(driver, lambda d: d.find_elements("css selector", "#group .episode"))
                    shoot(driver, "group", driver.find_element("id", "detail"))
            play_household(driver)
        room.close()
    finally:
        driver.quit()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(sorted(p.name for p in OUT.glob("*.png"))))


if __name__ == "__main__":
    main()
