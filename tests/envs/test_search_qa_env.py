"""SearchQA-v0: protocol, scoring, bad input, determinism, agents."""

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentgym
from agentgym.checker import check
from agentgym.envs.search_qa.data import build_dataset
from agentgym.envs.search_qa.env import SearchQAEnv
from agentgym.runner import run, summarize
from agentgym.tools.retrieval import make_retriever


@pytest.fixture(scope="module")
def tiny():
    ds = build_dataset("tiny", seed=0)
    return ds, make_retriever("bm25", ds.corpus)


@pytest.fixture
def env(tiny):
    ds, retriever = tiny
    return SearchQAEnv(dataset=ds, retriever=retriever, max_turns=4)


def test_registered_and_made_by_gymnasium():
    assert "agentgym/SearchQA-v0" in agentgym.list_envs()
    env = gym.make("agentgym/SearchQA-v0", dataset="tiny")
    obs, info = env.reset(seed=0)
    assert obs[0]["role"] == "user" and "<search>" in obs[0]["content"] and "Question:" in obs[0]["content"]
    assert info["turn"] == 0 and info["gold"]["answers"]


def test_gymnasium_check_env_passes(env):
    check_env(env, skip_render_check=True)


def test_agentgym_checker_passes():
    report = check("agentgym/SearchQA-v0", env_kwargs={"dataset": "tiny"})
    assert report.ok, str(report)


def test_search_returns_search_r1_passages(env):
    obs, info = env.reset(seed=1)
    query = info["gold"]["oracle_queries"][0]
    obs, reward, terminated, truncated, info = env.step(f"<think>go</think><search> {query} </search>")
    text = obs[0]["content"]
    assert text.startswith("\n\n<information>") and text.endswith("</information>\n\n")
    assert text.count("(Title: ") == 3 and "Doc 1(Title: " in text and "Doc 3(Title: " in text
    assert reward == 0.0 and not terminated and not truncated and info["action_valid"]
    assert info["gold"]["supporting_doc_ids"][0] in info["retrieved_doc_ids"]
    assert info["supporting_recall"] > 0


def test_answer_is_scored_and_ends_episode(env):
    _, info = env.reset(seed=2)
    gold = info["gold"]["answers"][0]
    _, reward, terminated, truncated, info = env.step(f"<answer> {gold.upper()}. </answer>")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["success"] and info["metrics"]["em"] == 1.0 and info["reward_components"] == {"outcome": 1.0}
    _, info = env.reset(seed=2)
    _, reward, terminated, _, info = env.step("<answer> certainly not the answer </answer>")
    assert reward == 0.0 and terminated and not info["success"] and info["metrics"]["f1"] < 1.0


@pytest.mark.parametrize("metric", ["f1", "subem"])
def test_reward_metric_knob(tiny, metric):
    ds, retriever = tiny
    env = SearchQAEnv(dataset=ds, retriever=retriever, reward_metric=metric)
    _, info = env.reset(seed=0)
    gold = info["gold"]["answers"][0]
    _, reward, *_ = env.step(f"<answer> it is {gold} </answer>")
    assert 0.0 < reward <= 1.0 if metric == "f1" else reward == 1.0


def test_turn_limit_truncates_with_zero_metrics(tiny):
    ds, retriever = tiny
    env = SearchQAEnv(dataset=ds, retriever=retriever, max_turns=2)
    env.reset(seed=0)
    assert env.step("<search> a </search>")[3] is False
    _, reward, terminated, truncated, info = env.step("<search> b </search>")
    assert (terminated, truncated, reward) == (False, True, 0.0)
    assert info["success"] is False and info["metrics"]["em"] == 0.0
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<answer> x </answer>")


def test_invalid_action_explains_and_continues(tiny):
    ds, retriever = tiny
    env = SearchQAEnv(dataset=ds, retriever=retriever, invalid_action_penalty=0.1)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("I will just chat.")
    assert not info["action_valid"] and "No action found" in info["parse_error"]
    assert "<search>" in obs[0]["content"] and "invalid" in obs[0]["content"]
    assert reward == pytest.approx(-0.1) and info["reward_components"] == {"format": -0.1}
    assert not terminated and not truncated
    obs, reward, terminated, *_ = env.step("<answer> x </answer>")
    assert terminated


def test_strict_mode(tiny):
    ds, retriever = tiny
    env = SearchQAEnv(dataset=ds, retriever=retriever, parse_mode="strict")
    env.reset(seed=0)
    _, _, _, _, info = env.step("<search>a</search><answer>b</answer>")
    assert not info["action_valid"] and "exactly one action" in info["parse_error"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.text(max_size=400),
        st.lists(
            st.sampled_from(["<search>", "</search>", "<answer>", "</answer>", "<think>", "x", " "]), max_size=60
        ).map("".join),
        st.integers(1, 3000).map(lambda n: "<search>" * n),
        st.just("a" * (1 << 20)),
        st.just("<answer>" + "b" * (1 << 20) + "</answer>"),
    )
)
def test_fuzz_arbitrary_actions_never_raise(env, action):
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step(action)
    assert env.observation_space.contains(obs)
    json.dumps(info)
    if not info["action_valid"]:
        assert info["parse_error"] and obs and not terminated
    assert info["action_truncated"] == (len(action) > env.max_action_chars)


def test_same_seed_same_episode_and_different_seeds_differ(env):
    a, _ = env.reset(seed=5)
    b, _ = env.reset(seed=5)
    c = {env.reset(seed=s)[1]["task_id"] for s in range(20)}
    assert a == b and len(c) > 5


def test_task_selection_options(env):
    _, info = env.reset(options={"task_index": 3})
    task = info["task_id"]
    _, info = env.reset(seed=99, options={"task_id": task})
    assert info["task_id"] == task
    with pytest.raises(ValueError, match="unknown task_id"):
        env.reset(options={"task_id": "nope"})


def test_oracle_solves_every_task_and_heuristic_beats_random():
    rows = {}
    for agent in ("oracle", "heuristic", "random"):
        trajs = run("agentgym/SearchQA-v0", agent, 60, env_kwargs={"dataset": "tiny"}, progress=False)
        rows[agent] = summarize(trajs, by_category=False)[0]
    assert rows["oracle"]["em"] == 1.0 and rows["oracle"]["supporting_recall"] >= 0.95
    assert rows["heuristic"]["em"] > rows["random"]["em"]
    assert rows["random"]["invalid_rate"] > 0


def test_agents_are_deterministic_given_the_seed():
    a = run("agentgym/SearchQA-v0", "random", 5, seed=3, env_kwargs={"dataset": "tiny"}, progress=False)
    b = run("agentgym/SearchQA-v0", "random", 5, seed=3, env_kwargs={"dataset": "tiny"}, progress=False)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]


def test_flashrag_files_run_the_same_env(tmp_path, tiny):
    ds, _ = tiny
    ds.save(tmp_path)
    env = gym.make(
        "agentgym/SearchQA-v0", questions_path=str(tmp_path / "test.jsonl"), corpus_path=str(tmp_path / "corpus.jsonl")
    )
    _, info = env.reset(seed=0, options={"task_index": 0})
    assert info["task_id"] == ds.test[0].id
    _, reward, terminated, _, _ = env.step(f"<answer>{ds.test[0].golden_answers[0]}</answer>")
    assert reward == 1.0 and terminated


@pytest.mark.slow
def test_oracle_answers_500_questions_of_every_hop_type_through_bm25():
    """Every task is answerable: the oracle's queries go through BM25 and reach EM >= 0.99 per hop type,
    and its queries retrieve the supporting documents in the top 3 (recall >= 0.95)."""
    trajs = run("agentgym/SearchQA-v0", "oracle", 2000, env_kwargs={"dataset": "small"}, progress=False)
    rows = {r["category"]: r for r in summarize(trajs)}
    for hop_type in ("1hop", "bridge", "comparison", "multihop"):
        assert rows[hop_type]["episodes"] >= 500
        assert rows[hop_type]["em"] >= 0.99, rows[hop_type]
        assert rows[hop_type]["supporting_recall"] >= 0.95, rows[hop_type]


def test_max_questions_keeps_the_first_questions_of_the_split():
    full = gym.make("agentgym/SearchQA-v0", dataset="tiny", split="train")
    few = gym.make("agentgym/SearchQA-v0", dataset="tiny", split="train", max_questions=3)
    first = [full.reset(seed=0, options={"task_index": i})[1]["task_id"] for i in range(3)]
    assert [few.reset(seed=0, options={"task_index": i})[1]["task_id"] for i in range(3)] == first
    with pytest.raises(ValueError, match=r"task_index 3 is out of range: this env has tasks 0\.\.2"):
        few.reset(seed=0, options={"task_index": 3})
    assert {few.reset(seed=s)[1]["task_id"] for s in range(40)} == set(first)
    with pytest.raises(ValueError, match="max_questions"):
        gym.make("agentgym/SearchQA-v0", dataset="tiny", max_questions=0)
    assert few.unwrapped.spec_kwargs()["max_questions"] == 3  # recorded for replay


def test_hop_types_filter_before_max_questions():
    env = gym.make(
        "agentgym/SearchQA-v0", dataset="tiny", split="train", hop_types=["1hop", "comparison"], max_questions=5
    )
    types = {env.reset(seed=0, options={"task_index": i})[1]["gold"]["hop_type"] for i in range(5)}
    assert types <= {"1hop", "comparison"} and len(env.unwrapped.examples) == 5
    assert env.unwrapped.spec_kwargs()["hop_types"] == ["1hop", "comparison"]
    with pytest.raises(ValueError, match="unknown hop types"):
        gym.make("agentgym/SearchQA-v0", dataset="tiny", hop_types=["2hop"])
