"""The viewer's page in a real headless Chromium: episodes of a bench report and a trainer run, filters, a turn's
components and signals, groups side by side, two runs compared, metrics clicked through to an iteration's episodes,
and hostile records shown as text with nothing run and nothing fetched beyond the server."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agentgym.running.runner import run
from agentgym.tools.serving import BackgroundServer
from agentgym.viewer.app import Viewer, create_app

pytestmark = pytest.mark.slow
WAIT = 60  # seconds a condition may take on a loaded machine (a condition, never a sleep)


def wait_for(driver, condition, timeout: float = WAIT):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    stale = (StaleElementReferenceException,)  # the table was redrawn under the check: check again
    return WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=stale).until(condition)


def rows(driver):
    return driver.find_elements("css selector", "#episodes tbody tr")


def cells(driver, column: int) -> list[str]:
    """Column ``column`` of the episode table, read in one go (the table may be redrawn between two reads)."""
    rows_ = "[...document.querySelectorAll('#episodes tbody tr')]"
    return driver.execute_script(f"return {rows_}.map(r => r.children[arguments[0]]?.textContent ?? null)", column)


def open_row(driver, i: int):
    """Click row ``i`` and wait for its record: the episode view of the row's offset."""
    offset = driver.execute_script(
        "const r = document.querySelectorAll('#episodes tbody tr')[arguments[0]]; r.click(); return r.dataset.offset", i
    )
    return wait_for(driver, lambda d: d.find_elements("css selector", f"#detail .episode[data-offset='{offset}']"))[0]


def serve(path: Path):
    viewer = Viewer.of(path)
    for s in viewer.sources:
        s.index.wait(60)
    return BackgroundServer(create_app(path, viewer=viewer))


def pick_source(driver, label: str) -> None:
    button = wait_for(driver, lambda d: d.find_elements("css selector", f"nav button[title='{label}']"))[0]
    button.click()
    wait_for(driver, lambda d: "on" in button.get_attribute("class") and rows(d))


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A bench-report-like folder: Household played by its oracle and by a random agent, five tasks each."""
    root = tmp_path_factory.mktemp("report")
    for agent in ("oracle", "random"):
        run("agentgym/Household-v0", agent, 5, out=root / "trajectories" / f"household__{agent}.jsonl", progress=False)
    return root


def test_the_page_lists_episodes_filters_and_shows_a_turn(browser, report):
    with serve(report) as server:
        browser.get(server.url + "/")
        pick_source(browser, "trajectories/household__random.jsonl")
        assert len(rows(browser)) == 5 and set(cells(browser, 1)) == {"agentgym/Household-v0"}
        pick_source(browser, "trajectories/household__oracle.jsonl")
        assert cells(browser, 6) == ["yes"] * 5
        browser.find_element("css selector", "select[name=success]").send_keys("no")
        browser.find_element("id", "apply").click()
        wait_for(browser, lambda d: "0 shown" in d.find_element("id", "pageinfo").text)
        browser.find_element("id", "clear").click()
        wait_for(browser, lambda d: len(rows(d)) == 5)
        view = open_row(browser, 0)
        turn = view.find_element("css selector", ".turn[data-turn='0']")
        assert turn.find_element("css selector", "pre.action").text.strip()  # the action as written
        assert "success" in browser.find_element("css selector", "#detail .meta").text
        signals = browser.find_elements("css selector", "#detail .turn .kv")
        assert any("action_valid" in t.text for t in signals)  # the verified signals of a turn


def test_two_runs_compared_on_the_same_tasks(browser, report):
    with serve(report) as server:
        browser.get(server.url + "/")
        pick_source(browser, "trajectories/household__oracle.jsonl")
        compare = browser.find_element("id", "compare")
        compare.send_keys("trajectories/household__random.jsonl")
        wait_for(browser, lambda d: all(c in ("yes", "no") for c in cells(d, 9)) and len(cells(d, 9)) == 5)
        open_row(browser, 1)
        views = wait_for(browser, lambda d: d.find_elements("css selector", "#detail .side .episode"))
        assert len(views) == 2
        tasks = [v.find_element("css selector", "h2").text.split(" · ")[1] for v in views]
        assert tasks[0] == tasks[1]  # the same task, played by each


HOSTILE = ["<script>window.__pwned = 1</script>", '<img src=x onerror="window.__pwned = 1">',
           '<img src="http://10.255.255.1/beacon.png">', "<b>bold?</b> &amp; \u202e", "nul\x00byte", "\ud800 lone",
           "x" * 300_000]  # fmt: skip


def test_hostile_records_are_inert_text(browser, tmp_path):
    rows_ = [{"env_id": "<i>env</i>", "task_id": f"<script>t{i}</script>", "success": True,
              "turns": [{"action": h, "reward": 1.0, "observation": [{"role": "user", "content": h}],
                         "info": {"reward_components": {"<b>c</b>": 1.0}}}]}
             for i, h in enumerate(HOSTILE)]  # fmt: skip
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows_), encoding="utf-8")
    with serve(tmp_path) as server:
        browser.get(server.url + "/")
        wait_for(browser, lambda d: len(rows(d)) == len(HOSTILE))
        assert cells(browser, 2)[0] == "<script>t0</script>" and cells(browser, 1)[0] == "<i>env</i>"
        for i, h in enumerate(HOSTILE):
            action = open_row(browser, i).find_element("css selector", "pre.action")
            shown = browser.execute_script("return arguments[0].textContent", action)
            if len(h) > 100_000:
                assert shown.startswith("x" * 100_000) and "200000 more characters not shown" in shown
            else:  # markup and NULs shown as the characters they are; a lone surrogate as U+FFFD
                assert shown == h.replace("\ud800", "\ufffd")
        assert browser.execute_script("return window.__pwned") is None  # no script ran
        assert not browser.find_elements("css selector", "#detail script, #detail img, #detail b, #episodes i")
        origin = urlsplit(server.url).netloc
        fetched = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert fetched and all(urlsplit(u).netloc == origin for u in fetched), fetched  # nothing beyond the server


def test_a_million_episode_file_pages_without_being_loaded(browser, tmp_path):
    path = tmp_path / "big.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, 1_000_000, 100_000):
            f.write("".join(f'{{"env_id": "e", "task_id": "t{i}", "success": {str(i % 7 == 0).lower()}, "turns": []}}\n'
                            for i in range(start, start + 100_000)))  # fmt: skip
    viewer = Viewer.of(path)  # the index scans in the background; the first page does not wait for it
    with BackgroundServer(create_app(path, viewer=viewer)) as server:
        browser.get(server.url + "/")
        wait_for(browser, lambda d: cells(d, 2)[:2] == ["t0", "t1"] and len(rows(d)) == 50)
        browser.find_element("id", "next").click()
        wait_for(browser, lambda d: cells(d, 2)[:1] == ["t50"])
        browser.find_element("css selector", "select[name=success]").send_keys("yes")
        browser.find_element("id", "apply").click()
        wait_for(browser, lambda d: cells(d, 2)[:2] == ["t0", "t7"])
        browser.find_element("id", "clear").click()
        assert viewer.sources[0].index.wait(120) and viewer.sources[0].index.lines == 1_000_000
        browser.find_element("id", "jump").send_keys("999990")
        browser.find_element("id", "go").click()
        wait_for(browser, lambda d: cells(d, 2) == [f"t{i}" for i in range(999_990, 1_000_000)])
        assert cells(browser, 0)[-1] == "999999"  # line numbers once the index has them
        browser.find_element("id", "prev").click()
        wait_for(browser, lambda d: cells(d, 2)[:1] == ["t0"])


def test_tool_calls_and_their_results_are_shown_per_turn(browser, tmp_path):
    trajs = run("agentgym/ToolUse-v0", "oracle", 2, out=tmp_path / "tools.jsonl", progress=False)
    with serve(tmp_path) as server:
        browser.get(server.url + "/")
        wait_for(browser, lambda d: len(rows(d)) == 2)
        view = open_row(browser, 0)
        labels = [e.text for e in view.find_elements("css selector", ".turn .role")]
        first = trajs[0].turns[0]
        name = json.loads(first.action.split("<tool_call>")[1].split("</tool_call>")[0])["name"]
        assert f"tool call: {name}" in labels and "tool" in labels  # the call, and the tool's reply
        replies = [p.text for p in view.find_elements("css selector", ".turn[data-turn='0'] .msg pre")]
        assert replies == [first.observation[0]["content"]]


def test_a_person_plays_household_to_success_on_the_page_and_the_saved_file_replays_identically(
    browser, tmp_path, monkeypatch
):
    import gymnasium as gym

    from agentgym.cli import play_room
    from agentgym.envs.household.agents import OracleAgent
    from agentgym.running.episode import run_episode
    from agentgym.running.replay import replay_file

    env_id, seed = "agentgym/Household-v0", 7
    env = gym.make(env_id)
    oracle = run_episode(env, OracleAgent(), seed=seed, env_id=env_id)
    env.close()
    assert oracle.success and len(oracle.turns) >= 3
    monkeypatch.setenv("AGENTGYM_TRAJECTORY_KEY", "operator-secret")  # the operator vouches for the person's turns
    room = play_room([env_id, "agentgym/Chain-v0"], str(tmp_path / "saved"))
    with BackgroundServer(create_app(None, play=room)) as server:
        browser.get(server.url + "/")
        wait_for(browser, lambda d: d.find_element("id", "playtoggle").is_displayed())
        browser.find_element("id", "playtoggle").click()
        browser.find_element("id", "playenv").send_keys(env_id)
        browser.find_element("id", "playseed").send_keys(str(seed))
        browser.find_element("id", "playstart").click()
        state = lambda d: d.find_element("id", "playstate").text
        wait_for(browser, lambda d: "turn 0 of" in state(d))

        def send(action: str, turn: int) -> None:
            box = browser.find_element("id", "playaction")
            box.clear()
            box.send_keys(action)
            browser.find_element("id", "playsend").click()
            wait_for(browser, lambda d: f"turn {turn} of" in state(d))

        send(oracle.turns[0].action, 1)
        send("go to the moon <script>window.__pwned = 1</script>", 2)  # a wrong turn: the env explains, we undo it
        assert "<script>" in browser.find_element("css selector", "#playlog .turn[data-turn='1'] pre.action").text
        browser.find_element("id", "playundo").click()
        wait_for(browser, lambda d: "turn 1 of" in state(d))
        for k, turn in enumerate(oracle.turns[1:], start=2):
            send(turn.action, k)
        assert "success" in state(browser) and browser.find_element("id", "playsend").get_property("disabled")
        signals = browser.find_element("css selector", f"#playlog .turn[data-turn='{len(oracle.turns) - 1}']").text
        assert "won" in signals and "outcome" in signals  # the verified signals and the reward components
        browser.find_element("id", "playsave").click()
        wait_for(browser, lambda d: "saved to" in state(d))
        assert browser.execute_script("return window.__pwned") is None
    room.close()
    (saved,) = (tmp_path / "saved").glob("*.jsonl")
    results = list(replay_file(saved, key=b"operator-secret"))
    assert [(r.kind, r.ok, r.turns, r.unverified) for r in results] == [("episode", True, len(oracle.turns), None)]


def test_a_trainer_run_plots_its_diagnostics_and_shows_each_tokens_advantage(browser, tmp_path):
    from agentgym.baselines.config import TrainConfig
    from agentgym.baselines.rollout_log import read_rollouts
    from agentgym.baselines.trainer import train

    run_dir = tmp_path / "run"
    train(TrainConfig.from_dict({
        "env_id": "agentgym/Chain-v0", "env_kwargs": {"horizon": 2}, "batch_tasks": 2, "group_size": 2,
        "max_turns": 2, "max_new_tokens": 6, "stop": ["</answer>"], "iterations": 2, "estimator": "mt_grpo",
        "log_rollouts_every": 1, "plot": False, "progress": False, "out_dir": str(run_dir)}))  # fmt: skip
    records = list(read_rollouts(run_dir / "rollouts.jsonl", iteration=2))
    chart = "#metrics .chart[data-metric='success_rate'] circle"
    with serve(tmp_path) as server:
        browser.get(server.url + "/")
        wait_for(browser, lambda d: d.find_elements("css selector", chart))
        points = browser.find_elements("css selector", chart)
        assert [p.get_attribute("data-iteration") for p in points] == ["1", "2"]
        points[1].click()  # the diagnostics click through to that iteration's episodes
        wait_for(browser, lambda d: cells(d, 5) == ["2"] * len(records))
        view = open_row(browser, 0)
        tokens = view.find_elements("css selector", ".turn[data-turn='0'] .tokens")[0]
        shown = browser.execute_script(
            "return [...arguments[0].querySelectorAll('.tok')].map(s => [s.textContent, s.dataset.adv])", tokens
        )
        turn = records[0]["turns"][0]
        assert [t for t, _ in shown] == turn["tokens"]  # the action's tokens, each in its own span
        assert [None if a == "null" else float(a) for _, a in shown] == turn["advantages"]  # each one's advantage
