"""Runner, replay and CLI end to end on SearchQA."""

import json
import re
import subprocess
import sys

import pytest

from agentgym.cli import main
from agentgym.contract.trajectory import read_trajectories
from agentgym.envs.search_qa.agents import RandomAgent
from agentgym.running.replay import replay_file
from agentgym.running.runner import Summary, episode_metrics, format_table, pass_hat_k, run, summarize

KW = {"dataset": "tiny"}


def test_same_seed_gives_byte_identical_files_serial_and_parallel(tmp_path):
    paths = [tmp_path / f"{name}.jsonl" for name in ("a", "b", "c")]
    run("agentgym/SearchQA-v0", "heuristic", 12, seed=7, env_kwargs=KW, out=paths[0], progress=False)
    run("agentgym/SearchQA-v0", "heuristic", 12, seed=7, env_kwargs=KW, out=paths[1], progress=False)
    run("agentgym/SearchQA-v0", "heuristic", 12, seed=7, env_kwargs=KW, out=paths[2], workers=4, progress=False)
    data = [p.read_bytes() for p in paths]
    assert data[0] == data[1] == data[2] and len(data[0]) > 1000
    other = tmp_path / "d.jsonl"
    run("agentgym/SearchQA-v0", "random", 12, seed=8, env_kwargs=KW, out=other, progress=False)
    assert other.read_bytes() != data[0]


def test_replay_reproduces_and_detects_divergence(tmp_path):
    path = tmp_path / "t.jsonl"
    run("agentgym/SearchQA-v0", "random", 6, seed=1, env_kwargs=KW, out=path, progress=False)
    assert all(r.ok for r in replay_file(path))
    lines = path.read_text(encoding="utf-8").splitlines()  # a run header, then the 6 episodes
    record = json.loads(lines[3])
    record["turns"][0]["reward"] += 0.5  # tamper with one recorded reward
    lines[3] = json.dumps(record, ensure_ascii=False)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    results = list(replay_file(path))
    assert [r.ok for r in results] == [True, True, False, True, True, True]
    assert "checksum mismatch" in results[2].divergence and "turn 1 differs" in results[2].divergence


def test_summary_by_hop_type_and_table():
    trajs = run("agentgym/SearchQA-v0", "oracle", 20, env_kwargs=KW, progress=False)
    rows = summarize(trajs)
    cats = {r["category"] for r in rows}
    assert "all" in cats and {"1hop", "bridge", "comparison", "multihop"} & cats
    table = format_table(rows, ["category", "episodes", "em"])
    assert table.splitlines()[0].startswith("| category") and "1.000" in table


def test_unknown_agent_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown agent 'nope'.*heuristic"):
        run("agentgym/SearchQA-v0", "nope", 1, env_kwargs=KW, progress=False)


def test_cli_run_replay_check_list(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "agentgym/SearchQA-v0", "--agent", "oracle", "--episodes", "5", "--out", str(out),
                 "--env-arg", "dataset=tiny", "--quiet"]) == 0  # fmt: skip
    assert "| all" in capsys.readouterr().out
    assert len(list(read_trajectories(out / "trajectories.jsonl"))) == 5
    assert (
        main(["run", "agentgym/SearchQA-v0", "--agent", "oracle", "--out", str(out), "--env-arg", "dataset=tiny"]) == 2
    )
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert main(["replay", str(out / "trajectories.jsonl")]) == 0
    assert "5 identical, 0 diverged" in capsys.readouterr().out
    assert main(["check", "agentgym/SearchQA-v0", "--env-arg", "dataset=tiny"]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["list"]) == 0
    assert "agentgym/SearchQA-v0" in capsys.readouterr().out


@pytest.mark.slow
def test_console_script_bench_writes_report_and_plots(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "agentgym.cli", "bench", "--episodes", "8", "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"\| agentgym/SearchQA-v0 +\| oracle", proc.stdout)
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "heuristic" in report and "random" in report and "![" in report
    png = out / "agentgym_SearchQA-v0_success.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = json.loads((out / "results.json").read_text())
    import gymnasium as gym

    import agentgym
    from agentgym.contract.registry import unavailable_reason
    from agentgym.running.runner import builtin_agents

    for env_id in agentgym.list_envs():  # every available env, each with every one of its built-in agents
        env = gym.make(env_id)
        if unavailable_reason(env) is None:
            assert {r["agent"] for r in rows if r["env"] == env_id} == set(builtin_agents(env)), env_id
        env.close()


def test_cli_hands_train_arguments_to_the_trainer(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--help"])
    assert info.value.code == 0
    assert "--preset" in capsys.readouterr().out


def test_group_size_plays_each_task_k_times_with_one_seed_and_distinct_agent_seeds(tmp_path):
    path = tmp_path / "g.jsonl"
    trajs = run("agentgym/SearchQA-v0", "random", 12, seed=5, env_kwargs=KW, group_size=4, out=path, progress=False)
    groups = [trajs[i : i + 4] for i in range(0, 12, 4)]
    for g, members in enumerate(groups):
        assert {(t.group_id, t.seed, t.task_id, json.dumps(t.options)) for t in members} == {
            (str(g), 5 + g, members[0].task_id, json.dumps({"task_index": g}))
        }
        assert len({json.dumps([t.action for t in m.turns]) for m in members}) > 1  # members differ
    assert len({m[0].task_id for m in groups}) == 3
    assert all(r.ok for r in replay_file(path))
    with pytest.raises(ValueError, match=r"episodes \(10\) must be a multiple of group_size \(4\)"):
        run("agentgym/SearchQA-v0", "random", 10, env_kwargs=KW, group_size=4, progress=False)


def test_more_episodes_than_tasks_play_the_tasks_again_in_order():
    trajs = run("agentgym/SearchQA-v0", "oracle", 6, env_kwargs={**KW, "max_questions": 4}, progress=False)
    assert [t.options["task_index"] for t in trajs] == [0, 1, 2, 3, 0, 1]
    assert [t.task_id for t in trajs[4:]] == [t.task_id for t in trajs[:2]]


def test_any_callable_policy_or_agent_object_runs_serial_and_parallel_alike(tmp_path):
    def always_answer(messages, info):
        return "<answer> " + messages[0]["content"].split()[-1] + " </answer>"

    trajs = run("agentgym/SearchQA-v0", always_answer, 4, env_kwargs=KW, progress=False)
    assert [t.agent for t in trajs] == ["always_answer"] * 4 and all(len(t.turns) == 1 for t in trajs)
    agent = RandomAgent()
    paths = [tmp_path / "serial.jsonl", tmp_path / "parallel.jsonl"]
    run("agentgym/SearchQA-v0", agent, 8, env_kwargs=KW, out=paths[0], progress=False)
    run("agentgym/SearchQA-v0", agent, 8, env_kwargs=KW, out=paths[1], workers=3, progress=False)
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_cli_group_size(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "agentgym/Household-v0", "--agent", "random", "--episodes", "6", "--group-size", "3",
                 "--out", str(out), "--quiet"]) == 0  # fmt: skip
    trajs = list(read_trajectories(out / "trajectories.jsonl"))
    assert [t.group_id for t in trajs] == ["0", "0", "0", "1", "1", "1"]
    assert len({t.task_id for t in trajs[:3]}) == 1 and trajs[0].task_id != trajs[3].task_id


def test_summary_counts_each_episode_once_when_tasks_have_no_category():
    trajs = run("agentgym/SearchQA-v0", "oracle", 5, env_kwargs=KW, progress=False)
    for t in trajs:
        t.reset_info = {**t.reset_info, "gold": {}}
    assert [(r["category"], r["episodes"]) for r in summarize(trajs)] == [("all", 5)]


def test_cli_group_size_that_does_not_divide_the_episodes_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "agentgym/SearchQA-v0", "--agent", "random", "--episodes", "5", "--group-size", "2"])
    assert exit_info.value.code == 2
    assert "--episodes (5) must be a positive multiple of --group-size (2)" in capsys.readouterr().err


def test_an_agent_class_is_built_with_the_agent_kwargs():
    trajs = run("agentgym/SearchQA-v0", RandomAgent, 2, env_kwargs=KW, progress=False)
    assert [t.agent for t in trajs] == ["random", "random"]


def test_pass_hat_k_is_the_chance_that_k_drawn_trials_all_succeed():
    from itertools import combinations

    for n in range(1, 7):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                draws = list(combinations(outcomes, k))
                assert pass_hat_k(c, n, k) == pytest.approx(sum(all(d) for d in draws) / len(draws))
    with pytest.raises(ValueError):
        pass_hat_k(1, 2, 3)


def test_summary_reports_pass_k_over_groups_of_trials():
    trajs = run("agentgym/SearchQA-v0", "random", 12, seed=1, env_kwargs=KW, group_size=4, progress=False)
    summary = Summary(group_size=4)
    for t in trajs:
        summary.add(t)
    (row, *_) = summary.rows()
    groups = [trajs[i : i + 4] for i in range(0, 12, 4)]
    for k in range(1, 5):
        expected = sum(pass_hat_k(sum(t.success for t in g), 4, k) for g in groups) / 3
        assert row[f"pass^{k}"] == pytest.approx(expected)
    assert row["pass^1"] == pytest.approx(row["success"])
    won = [len(t.turns) for t in trajs if t.success]
    assert row["turns_to_success"] == (pytest.approx(sum(won) / len(won)) if won else None)
    assert "pass^2" not in summarize(trajs)[0]  # without groups there is no pass^k


def test_questions_per_success_counts_the_questions_of_failures_too():
    trajs = run("agentgym/Clarify-v0", "keyword", 12, seed=0, env_kwargs={"difficulty": "hard"}, progress=False)
    wins = sum(bool(t.success) for t in trajs)
    asked = sum(episode_metrics(t)["questions"] for t in trajs)
    (row,) = summarize(trajs, by_category=False)
    assert 0 < wins < len(trajs), "the keyword agent should win some hard tasks and lose others"
    assert row["questions_per_success"] == pytest.approx(asked / wins)
    assert row["questions_per_success"] > row["questions"]  # failures cost questions and win nothing
    search = run("agentgym/SearchQA-v0", "random", 2, seed=0, env_kwargs=KW, progress=False)
    (search_row,) = summarize(search, by_category=False)
    assert "questions_per_success" not in search_row  # only where episodes report questions
