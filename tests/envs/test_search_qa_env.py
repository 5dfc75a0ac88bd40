"""SearchQA-v0: protocol, scoring, bad input, determinism, agents."""

import dataclasses
import json
from fractions import Fraction

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings, strategies as st

import agentgym
from agentgym.envs.search_qa.data import QADataset, build_dataset
from agentgym.envs.search_qa.env import PROMPT, SearchQAEnv
from agentgym.running.checker import check
from agentgym.running.runner import run, summarize
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


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
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


def test_the_reworded_question_is_the_same_task_in_other_words(env, tiny):
    ds, _ = tiny
    for seed in range(10):
        obs, info = env.reset(seed=seed, options={"wording": "original"})
        again, other = env.reset(seed=seed, options={"wording": "reworded"})
        example = ds.example(info["task_id"])
        assert obs[0]["content"] == PROMPT.format(question=example.question)
        assert again[0]["content"] == PROMPT.format(question=example.rewording) != obs[0]["content"]
        assert other["pair_id"] == info["pair_id"] == example.id and other["gold"] == info["gold"]
        _, r, *_ = env.step(f"<answer> {example.golden_answers[0]} </answer>")  # the same answer scores
        assert r == 1.0
    _, plain = env.reset(seed=0)
    assert "pair_id" not in plain  # without the option nothing changes
    with pytest.raises(ValueError, match="wording must be"):
        env.reset(seed=0, options={"wording": "upside down"})


def test_a_loaded_question_file_has_no_second_wording(tmp_path, tiny):
    ds, _ = tiny
    bare = dataclasses.replace(ds, test=[dataclasses.replace(e, rewording="") for e in ds.test])
    env = SearchQAEnv(dataset=bare, retriever=tiny[1])
    with pytest.raises(ValueError, match="no second wording"):
        env.reset(seed=0, options={"wording": "reworded"})


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


# -- reset options ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("str", r"options must be a dict, got str"),
        ({"task_index": "3"}, r"task_index must be an int, got str '3'"),
        ({"task_index": 1.9}, r"task_index must be an int, got float 1\.9"),
        ({"task_index": True}, r"task_index must be an int, got bool True"),
        ({"task_index": "abc"}, r"task_index must be an int, got str 'abc'"),
        ({"task_index": None}, r"task_index must be an int, got NoneType None"),
        ({"task_index": float("nan")}, r"task_index must be an int, got float nan"),
        ({"task_index": 40}, r"task_index 40 is out of range: this env has tasks 0\.\.39"),
        ({"task_id": "test-99999"}, r"unknown task_id 'test-99999'"),
        ({"task_id": "valid_seen:" + "9" * 40 + ":x"}, r"unknown task_id"),
    ],
)
def test_bad_reset_options_raise_clear_value_errors(env, options, message):
    with pytest.raises(ValueError, match=message):
        env.reset(seed=0, options=options)


# -- truncated and invisible actions -----------------------------------------------------------------------------
def _padded(tail: str, cut_inside: int, limit: int) -> str:
    """``<think>...</think>`` + ``tail``, padded so the action limit falls ``cut_inside`` characters into ``tail``."""
    pad = limit - cut_inside - len("<think></think>")
    return f"<think>{'x' * pad}</think>{tail}"


def test_an_answer_cut_by_the_length_limit_is_invalid_and_the_episode_continues(env):
    """The reported case: a 16,358-character thought then ``<answer> 1155 </answer>``, cut to ``<answer> 11``."""
    env.reset(seed=0)
    action = _padded("<answer> 1155 </answer>", len("<answer> 11"), env.max_action_chars)
    assert len("<think>" + "x" * 16_358 + "</think>") == action.index("<answer>")
    obs, reward, terminated, _, info = env.step(action)
    assert info["action_truncated"] and not info["action_valid"] and not terminated and reward == 0.0
    assert "answer" not in info and "metrics" not in info
    assert "too long" in info["parse_error"] and "cut at 16384 characters" in info["parse_error"]
    assert "inside the <answer> tag" in info["parse_error"] and info["parse_error"] in obs[0]["content"]
    _, _, terminated, _, info = env.step("<answer> 1155 </answer>")  # the agent can still answer
    assert terminated and info["action_valid"] and info["answer"] == "1155"


def test_a_cut_answer_that_reads_as_the_gold_answer_is_not_scored(env):
    _, info = env.reset(seed=2)
    gold = info["gold"]["answers"][0]
    action = _padded(f"<answer> {gold}xyz </answer>", len(f"<answer> {gold}"), env.max_action_chars)
    _, reward, terminated, _, info = env.step(action)
    assert (reward, terminated, info["action_valid"]) == (0.0, False, False)


@pytest.mark.parametrize("tag", ["answer", "search"])
def test_an_action_wholly_past_the_cut_says_the_turn_was_truncated(env, tag):
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step(f"<think>{'y' * 20_000}</think><{tag}> 1155 </{tag}>")
    assert info["action_truncated"] and not info["action_valid"] and not terminated
    message = info["parse_error"]
    assert "cut at 16384 characters" in message and "not read" in message and "No action found" not in message
    assert message in obs[0]["content"]


def test_a_search_cut_inside_its_tag_is_not_run(env):
    env.reset(seed=0)
    obs, _, _, _, info = env.step(_padded("<search> capital of Ovra </search>", 12, env.max_action_chars))
    assert not info["action_valid"] and "inside the <search> tag" in info["parse_error"]
    assert "retrieved_doc_ids" not in info and "<information>" not in obs[0]["content"]


def test_a_complete_action_before_the_cut_still_counts(env):
    _, info = env.reset(seed=2)
    gold = info["gold"]["answers"][0]
    _, reward, terminated, _, info = env.step(f"<answer>{gold}</answer><think>{'z' * 20_000}")
    assert info["action_truncated"] and info["action_valid"] and terminated and reward == 1.0


def test_an_unclosed_answer_is_still_read_when_nothing_was_cut(env):
    """Search-R1's lenient parse: an unclosed final tag runs to the end of a turn that was not truncated."""
    _, info = env.reset(seed=2)
    _, reward, terminated, _, info = env.step(f"<answer> {info['gold']['answers'][0]}")
    assert not info["action_truncated"] and info["action_valid"] and terminated and reward == 1.0


INVISIBLE = ["\x00", "\x00" * 50, "\u200b", "\u200b\u200c\u200d\u2060\ufeff", "\x01\x1f\x7f", " \u00ad\x00 \u200b"]


@pytest.mark.parametrize("content", INVISIBLE, ids=["nul", "50-nuls", "zwsp", "zero-widths", "controls", "mixed"])
@pytest.mark.parametrize("tag", ["search", "answer"])
@pytest.mark.parametrize("closed", [True, False])
def test_a_tag_of_only_invisible_characters_is_empty(env, content, tag, closed):
    """NUL, control and zero-width characters count as nothing: the action is refused as an empty tag is."""
    close = f"</{tag}>" if closed else ""
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step(f"<{tag}>{content}{close}")
    assert not info["action_valid"] and not terminated and "retrieved_doc_ids" not in info and "answer" not in info
    assert info["parse_error"] in obs[0]["content"]
    assert (f"The <{tag}> tag is empty" if closed else f"The <{tag}> tag is never closed") in info["parse_error"]


def test_invisible_characters_around_real_content_are_kept(env):
    _, info = env.reset(seed=2)
    _, _, terminated, _, info = env.step(f"<answer>\u200b{info['gold']['answers'][0]}</answer>")
    assert info["action_valid"] and terminated


# -- verified signals pinned to the generator's gold ------------------------------------------------------------
def test_progress_and_supporting_recall_are_the_share_of_supporting_docs_retrieved(tiny):
    """After each oracle search, ``progress`` and ``supporting_recall`` are exactly
    ``#(supporting docs retrieved so far) / #(supporting docs)``, from ``gold`` and ``retrieved_doc_ids``."""
    ds, retriever = tiny
    env = SearchQAEnv(dataset=ds, retriever=retriever, max_turns=12)
    seen_fractions = set()
    for index in range(env.num_tasks):
        _, info = env.reset(options={"task_index": index})
        supporting = set(info["gold"]["supporting_doc_ids"])
        assert supporting and info["progress"] == info["supporting_recall"] == 0.0
        retrieved: set[str] = set()
        for query in [*info["gold"]["oracle_queries"], "zzz unrelated words"]:
            _, _, _, _, info = env.step(f"<search>{query}</search>")
            retrieved |= set(info["retrieved_doc_ids"])
            expected = Fraction(len(supporting & retrieved), len(supporting))
            seen_fractions.add(expected)
            assert info["progress"] == info["supporting_recall"] == float(expected), (index, query)
            _, _, _, _, invalid = env.step("an invalid turn")  # progress holds on an invalid action
            assert not invalid["action_valid"] and invalid["gold"] == info["gold"]
            assert invalid["progress"] == invalid["supporting_recall"] == float(expected)
        _, _, terminated, _, info = env.step(f"<answer>{info['gold']['answers'][0]}</answer>")
        assert terminated and info["metrics"]["supporting_recall"] == float(expected)
        assert info["progress"] == float(expected)
    assert {Fraction(1, 3), Fraction(2, 3), Fraction(1, 2), Fraction(1)} <= seen_fractions


# -- pinned by mutation testing (bench/mutation_check.py) -------------------------------------------------------
def test_information_block_lists_the_retrieved_passages_verbatim(tiny):
    """The observation is exactly Search-R1's block for the ``topk`` passages named by ``retrieved_doc_ids``."""
    ds, retriever = tiny
    for topk in (1, 3, 5):
        env = SearchQAEnv(dataset=ds, retriever=retriever, topk=topk)
        _, info = env.reset(options={"task_index": 7})
        obs, *_, info = env.step(f"<search>{info['gold']['oracle_queries'][0]}</search>")
        docs = [ds.doc(i) for i in info["retrieved_doc_ids"]]
        passages = "".join(f"Doc {i}(Title: {d.title}) {d.text}\n" for i, d in enumerate(docs, 1))
        block = f"\n\n<information>{passages.strip()}</information>\n\n"
        assert len(docs) == topk and obs == [{"role": "user", "content": block}]


def test_prompt_and_invalid_action_messages_are_user_turns_with_the_question(env):
    obs, _ = env.reset(seed=4)
    assert obs == [{"role": "user", "content": PROMPT.format(question=env.example.question)}]
    assert env.example.question in obs[0]["content"]
    obs, *_ = env.step("no tags")
    assert [m["role"] for m in obs] == ["user"] and obs[0]["content"].startswith("\nMy previous action is invalid:")


def test_search_count_and_metrics_of_an_episode_that_runs_out_of_turns(tiny):
    ds, retriever = tiny
    env = SearchQAEnv(dataset=ds, retriever=retriever, max_turns=4)
    _, info = env.reset(options={"task_index": 12})
    supporting = set(info["gold"]["supporting_doc_ids"])
    retrieved: set[str] = set()
    for action in (f"<search>{info['gold']['oracle_queries'][0]}</search>", "no action", "<search>x</search>"):
        _, _, _, truncated, info = env.step(action)
        retrieved |= set(info.get("retrieved_doc_ids", ()))
    _, _, terminated, truncated, info = env.step("<search>y</search>")
    retrieved |= set(info["retrieved_doc_ids"])
    recall = len(supporting & retrieved) / len(supporting)
    assert truncated and not terminated and recall > 0
    assert info["metrics"] == {"em": 0.0, "f1": 0.0, "subem": 0.0, "supporting_recall": recall, "searches": 3.0}
    _, info = env.reset(options={"task_index": 12})
    _, _, _, _, info = env.step(f"<answer>{info['gold']['answers'][0]}</answer>")
    assert info["metrics"] == {"em": 1.0, "f1": 1.0, "subem": 1.0, "supporting_recall": 0.0, "searches": 0.0}


def test_anchor_is_the_set_of_passages_seen(env):
    _, info = env.reset(options={"task_index": 30})
    queries = info["gold"]["oracle_queries"]
    assert len(queries) >= 2
    anchors = [info["anchor"]]
    for query in queries[:2]:
        anchors.append(env.step(f"<search>{query}</search>")[4]["anchor"])
    env.reset(options={"task_index": 30})
    for query in reversed(queries[:2]):  # the same passages in the other order: the same state
        last = env.step(f"<search>{query}</search>")[4]["anchor"]
    assert len(set(anchors)) == 3 and last == anchors[-1]
    assert all(a.startswith(env.example.id + ":") for a in anchors)


def test_a_question_without_supporting_documents_has_zero_recall(tiny):
    """Benchmark files may name no supporting documents: recall and progress stay 0 (not 1, not a crash)."""
    ds, retriever = tiny
    bare = QADataset(config=None, seed=None, corpus=ds.corpus, train=[],
                     test=[dataclasses.replace(ds.test[0], supporting_doc_ids=())])  # fmt: skip
    env = SearchQAEnv(dataset=bare, retriever=retriever)
    _, info = env.reset(seed=0)
    assert info["supporting_recall"] == info["progress"] == 0.0
    _, _, _, _, info = env.step(f"<search>{ds.test[0].oracle_queries[0]}</search>")
    assert info["supporting_recall"] == info["progress"] == 0.0


def test_constructor_arguments_reach_the_env(tmp_path, tiny):
    ds, retriever = tiny
    env = SearchQAEnv(dataset="tiny", retriever=retriever, render_mode="ansi", max_questions=1)
    env.reset(seed=0)
    assert env.num_tasks == 1 and env.render().startswith("[user] Answer the question below.")
    other = SearchQAEnv(dataset="tiny", data_seed=1, retriever=retriever)
    assert [e.question for e in other.examples] != [e.question for e in ds.test]
    ds.save(tmp_path)
    for only in ({"questions_path": str(tmp_path / "test.jsonl")}, {"corpus_path": str(tmp_path / "corpus.jsonl")}):
        with pytest.raises(ValueError, match="must be given together"):
            SearchQAEnv(**only)
    train = SearchQAEnv(questions_path=str(tmp_path / "train.jsonl"), corpus_path=str(tmp_path / "corpus.jsonl"),
                        split="train")  # fmt: skip
    assert [e.id for e in train.examples] == [e.id for e in ds.train]
