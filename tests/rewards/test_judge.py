"""JudgeScorer against a real OpenAI-compatible judge server on loopback (a small deterministic rule-based FastAPI
app defined here, served by uvicorn), on real SearchQA episodes: per-turn and per-trajectory grading, a garbled
reply and an HTTP 500 (marked NaN/invalid or raised, never 0), score parsing. LLMJudge: reply parsing, batching,
the LRU cache, failures, evidence and log-prob answers over loopback servers (a rule server, the tiny random model,
SmolLM2 in a slow test); TurnVerdictScorer on Chain-v0/Umbrella-v0/SearchQA-v0 episodes; the trainer's judge spec."""

import copy
import itertools
import json
import math

import gymnasium as gym
import pytest
from rule_judge import serve_rule_judge

import agentgym  # noqa: F401  (registers the envs)
from agentgym.baselines.components import build_scorer as build_trainer_scorer, check_scorer, make_judge
from agentgym.contract.agent import Agent
from agentgym.rewards.base import ScorerError, annotate
from agentgym.rewards.judge import (
    JudgeScorer,
    LLMJudge,
    TurnVerdictScorer,
    conversation_until,
    grounded,
    parse_compare,
    parse_evidence,
    parse_rank,
    parse_score,
    parse_yesno,
    render_conversation,
    render_gold,
    yes_no_probabilities,
)
from agentgym.rewards.verdicts import Judge, Question, RuleJudge, Verdict
from agentgym.running.runner import make_agent, run_episode
from agentgym.tools.llm import LLMClient, LLMHTTPError

fastapi = pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from agentgym.tools.serving import BackgroundServer  # noqa: E402


def rule(action: str) -> str:
    """The judge's verdict on one agent action."""
    if "GARBLE" in action:
        return "Hmm, this is hard to say."
    if "<answer>" in action:
        return "The agent commits to an answer.\n**Score:** 9/10"
    if "<search>" in action:
        return "A search step; reasonable. Score: 5/10"
    return "No valid action.\nScore: 0 out of 10"


EXPECTED = {"<answer>": 0.9, "<search>": 0.5}


def expected(action: str) -> float:
    return next((v for k, v in EXPECTED.items() if k in action), 0.0)


def make_judge_app(state: dict):
    app = fastapi.FastAPI()

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": "rule-judge", "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: fastapi.Request):
        body = await request.json()
        state["requests"] += 1
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        assert "Rubric:" in system and body["temperature"] == 0.0
        sections = user.split("### ")
        actions = [s[len("assistant\n") :] for s in sections if s.startswith("assistant\n")]
        last = actions[-1].split("\n\n---\n")[0]
        if "CRASH" in last:
            return fastapi.responses.JSONResponse({"error": {"message": "the judge crashed"}}, status_code=500)
        if "whole trajectory" in user:  # grade a trajectory: one point per search, capped at 10
            text = f"Score: {min(10, sum('<search>' in a for a in actions))}/10"
        else:
            text = rule(last)
        return {
            "id": f"judge-{state['requests']}",
            "object": "chat.completion",
            "model": body.get("model") or "rule-judge",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(user.split()), "completion_tokens": len(text.split())},
        }

    return app


@pytest.fixture(scope="module")
def judge():
    state = {"requests": 0}
    with BackgroundServer(make_judge_app(state)) as server:
        client = LLMClient(server.url + "/v1", api_key_env=None, max_retries=1, backoff=0.0, timeout=10.0)
        yield client, state
        client.close()


class Scripted(Agent):
    name = "scripted"

    def __init__(self, actions):
        super().__init__()
        self.actions = actions

    def act(self, messages, info):
        return self.actions[int(info["turn"])]


@pytest.fixture(scope="module")
def env():
    env = gym.make("agentgym/SearchQA-v0", dataset="tiny")
    yield env
    env.close()


@pytest.fixture(scope="module")
def trajs(env):
    agents = [make_agent("heuristic", env), make_agent("random", env)]
    return [run_episode(env, a, seed=i, options={"task_index": i}) for i in range(4) for a in agents]


def test_per_turn_judging_on_searchqa(judge, trajs):
    client, state = judge
    before = state["requests"]
    scores = JudgeScorer(client, rubric="Reward searching, then answering.")(trajs)
    assert state["requests"] - before == sum(len(t.turns) for t in trajs)  # one request per turn
    for traj, s in zip(trajs, scores, strict=True):
        assert s.name == "judge" and s.all_valid
        assert s.rewards == pytest.approx([expected(t.action) for t in traj.turns])
        assert len(s.extras["replies"]) == len(traj.turns) and not s.extras["errors"]
    annotate(trajs, scores)
    for traj in trajs:
        for turn in traj.turns:
            assert sum(turn.reward_components.values()) == pytest.approx(turn.reward)


def test_per_trajectory_judging(judge, trajs):
    client, _ = judge
    scores = JudgeScorer(client, mode="trajectory", name="judge_traj", model="rule-judge")(trajs)
    for traj, s in zip(trajs, scores, strict=True):
        searches = sum("<search>" in t.action for t in traj.turns)
        assert s.rewards == pytest.approx([0.0] * (len(traj.turns) - 1) + [min(10, searches) / 10])
        assert s.all_valid


def test_garbled_reply_and_server_error_are_marked_not_zero(judge, env):
    client, state = judge
    agent = Scripted(["<search> GARBLE </search>", "<search> CRASH </search>", "<search> fine </search>"] * 2)
    traj = run_episode(env, agent, seed=0)
    before = state["requests"]
    [s] = JudgeScorer(client)([traj])
    assert state["requests"] - before == len(traj.turns) + 2  # each 500 was retried once
    assert [ok for ok in s.valid] == [False, False, True] * 2
    assert all(math.isnan(r) for r, ok in zip(s.rewards, s.valid, strict=True) if not ok)
    assert s.rewards[2] == 0.5
    assert "no score" in s.extras["errors"]["0"] and "HTTP 500" in s.extras["errors"]["1"]
    with pytest.raises(ScorerError):
        annotate([traj], [s])
    annotate([traj], [s], strict=False)
    assert traj.turns[0].info["invalid_components"] == ["judge"] and "judge" not in traj.turns[0].reward_components
    assert traj.turns[2].reward_components["judge"] == 0.5


def test_raise_mode(judge, env):
    client, _ = judge
    garbled = run_episode(env, Scripted(["<answer> GARBLE </answer>"]), seed=0)
    with pytest.raises(ScorerError, match="no score"):
        JudgeScorer(client, on_error="raise")([garbled])
    crashed = run_episode(env, Scripted(["<answer> CRASH </answer>"]), seed=0)
    with pytest.raises(ScorerError) as err:
        JudgeScorer(client, on_error="raise")([crashed])
    assert isinstance(err.value.__cause__, LLMHTTPError) and err.value.__cause__.status == 500


def test_unreachable_judge_is_marked(trajs):
    with LLMClient("http://127.0.0.1:9/v1", model="x", max_retries=0, timeout=2.0, api_key_env=None) as dead:
        [s] = JudgeScorer(dead)(trajs[:1])
    assert not any(s.valid) and all(math.isnan(r) for r in s.rewards)


def test_group_order_empty_and_determinism(judge, trajs):
    client, _ = judge
    scorer = JudgeScorer(client, max_workers=3)
    a = scorer(trajs)
    b = scorer(trajs[::-1])
    assert [s.rewards for s in b] == [s.rewards for s in a[::-1]]
    assert [s.rewards for s in scorer(trajs)] == [s.rewards for s in a]
    assert scorer([]) == []
    empty = type(trajs[0])("e", 0, "t", "a", [], {})
    assert scorer([empty])[0].rewards == [] and JudgeScorer(client, mode="trajectory")([empty])[0].rewards == []


def test_prompt_construction(trajs):
    traj = next(t for t in trajs if len(t.turns) >= 2)
    judge = JudgeScorer(LLMClient("http://127.0.0.1:9/v1"), rubric="  Be kind.  ", scale=5)
    system, user = judge.judge_messages(traj, 0)
    assert "Rubric:\nBe kind." in system["content"] and "Score: N/5" in system["content"]
    assert traj.turns[0].observation[0]["content"] in user["content"]
    assert traj.turns[1].action not in user["content"]
    without = conversation_until(traj, 0, include_observation=False)
    assert without[-1] == {"role": "assistant", "content": traj.turns[0].action}
    assert render_conversation(without).endswith("### assistant\n" + traj.turns[0].action)
    with pytest.raises(ValueError):
        JudgeScorer(LLMClient("http://127.0.0.1:9/v1"), mode="episode")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "scale", "score"),
    [
        ("Score: 7/10", 10, 0.7),
        ("score 3 / 4", 10, 0.75),
        ("I scored it 2/10 at first.\nScores: 3/10", 10, 0.3),
        ("Reasoning. Final score: 8 out of 10.", 10, 0.8),
        ("**Score**: 4", 5, 0.8),
        ("Score: 0.9", 1, 0.9),
        ("Score: 85%", 10, 0.85),
        ("Score: 12/10", 10, 1.0),
        ("Score: -2/10", 10, 0.0),
        ("The first score: 2/10. On reflection, Score: 6/10", 10, 0.6),
        ("[[7]]", 10, 0.7),
        ("  6  ", 10, 0.6),
        ("7/10", 10, 0.7),
        ("Score: 3/0", 10, None),
        ("No numbers here", 10, None),
        ("It took 3 steps and 2 searches.", 10, None),
        ("", 10, None),
    ],
)
def test_parse_score(text, scale, score):
    assert parse_score(text, scale) == (pytest.approx(score) if score is not None else None)


# ----------------------------------------------------------------------------------------------------------------
# LLMJudge: reading replies, batching, caching, failures, log-prob answers, over real loopback servers


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Answer: yes", 1.0),
        ("**Answer:** Yes.", 1.0),
        ("yes", 1.0),
        ("No.", 0.0),
        ("  *No*  ", 0.0),
        ("The agent searched well.\nANSWER: NO", 0.0),
        ("Final answer is yes", 1.0),
        ("The answer to this question is yes.", 1.0),
        ("Yes at first sight.\nAnswer: no", 0.0),  # the answer line wins over the first word
        ("Answer: yes ... on reflection, Answer: no", 0.0),  # the last answer line wins
        ("Answer: Not sure", None),
        ("Nope", None),
        ("I cannot tell.", None),
        ("", None),
    ],
)
def test_parse_yesno(text, value):
    assert parse_yesno(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [("Answer: A", 1.0), ("**Answer:** B.", 0.0), ("answer: Tie", 0.5), ("B", 0.0), ("tie.", 0.5),
     ("Answer: a tie is unlikely", None), ("Both are fine.", None)],
)  # fmt: skip
def test_parse_compare(text, value):
    assert parse_compare(text) == value


@pytest.mark.parametrize(
    ("text", "items", "value"),
    [("Scores: 3, 7, 5", 3, (0.3, 0.7, 0.5)), ("**Scores:** 2/4; 12/10", 2, (0.5, 1.0)),
     ("First I thought Scores: 1, 1. Scores: 10, 0", 2, (1.0, 0.0)), ("4, 8", 2, (0.4, 0.8)),
     ("Scores: 3, 7", 3, None), ("Item 1 is best.", 2, None)],
)  # fmt: skip
def test_parse_rank(text, items, value):
    assert parse_rank(text, items) == (pytest.approx(value) if value is not None else None)


def test_evidence_and_logprob_reading():
    assert parse_evidence('Evidence: "the  door opens"\nAnswer: yes') == "the  door opens"
    assert parse_evidence("Evidence: \u201cit works\u201d") == "it works" and parse_evidence("Answer: yes") is None
    assert grounded("The DOOR opens", "... the door\nopens ...") and not grounded("", "x")
    top = [{"token": " Yes", "logprob": math.log(0.25)}, {"token": "NO.", "logprob": math.log(0.5)},
           {"token": "maybe", "logprob": math.log(0.25)}]  # fmt: skip
    assert yes_no_probabilities(top) == pytest.approx((0.25, 0.5))


def even_judge(system: str, user: str) -> str | None:
    """The served rule: a yes/no question 'Is N even?' answered by N's parity (an evidence question quotes the
    question); score, compare and rank questions get fixed grades; CRASH answers HTTP 500 and GARBLE no answer."""
    if "CRASH" in user:
        return None
    if "GARBLE" in user:
        return "Hmm, hard to say."
    if "Scores:" in system:
        return "Item 3 is best.\nScores: 1, 5/10, 10"
    if "Score: N/10" in system:
        return "Decent. Score: 7/10"
    if "'Answer: A'" in system:
        return "**Answer:** B"
    n = int(user.split("Is ")[-1].split()[0])
    if "Evidence:" in system and n % 2 == 0:
        quote = "an UNQUOTED span" if "LIE" in user else user.split("?")[0]
        return f'Evidence: "{quote}"\n**Answer:** Yes.'
    return "Answer: yes" if n % 2 == 0 else "No."


def even_first_token(system: str, user: str) -> dict[str, float]:
    n = int(user.split("Is ")[-1].split()[0])
    if n > 100:
        return {"Maybe": 0.5, "Perhaps": 0.3}
    if n == 6:  # "no" is the likeliest token, but the two spellings of yes together are likelier
        return {"no": 0.45, "yes": 0.35, " Yes": 0.15}
    return {" Yes": 0.6, "No": 0.3} if n % 2 == 0 else {"no": 0.6, "yes": 0.2}


@pytest.fixture(scope="module")
def served():
    with serve_rule_judge(even_judge, even_first_token) as server:
        client = LLMClient(server.url, api_key_env=None, max_retries=0, timeout=10.0)
        yield client, server
        client.close()


HOSTILE = ["\ud800", "a\udfff\ud800b", "nul\x00byte", "<script>alert(1)</script>", "\u202eevil", "x" * 100_000]


@pytest.mark.parametrize("junk", HOSTILE)
def test_hostile_text_in_what_is_judged_is_sent_and_judged(served, junk):
    """A trajectory is untrusted: lone surrogates (which cannot encode as UTF-8) reach the endpoint as U+FFFD, and
    markup, NULs and long lines as they are; the verdict is the judge's answer, never an exception."""
    client, server = served
    for answer in ("text", "logprob"):
        (verdict,) = LLMJudge(client, answer=answer, cache_size=0).ask([Question("yesno", f"Is 4 even? {junk}")])
        assert verdict.value == 1.0, verdict.error
    sent = server.requests[-1]
    assert "\ufffd" in sent if any(0xD800 <= ord(c) <= 0xDFFF for c in junk) else junk in sent


def q(n: int, **kw) -> Question:
    return Question("yesno", f"Is {n} even?", **kw)


def test_llm_judge_answers_every_kind(served):
    client, server = served
    judge = LLMJudge(client)
    assert isinstance(judge, Judge) and judge.name == "llm"
    questions = [q(4), q(7), Question("score", "Is 9 good?"), Question("compare", "Is 1 A or B?"),
                 Question("rank", "Is 5 first?", items=3)]  # fmt: skip
    before = len(server.bodies)
    verdicts = judge.ask(questions)
    assert [v.value for v in verdicts] == [1.0, 0.0, 0.7, 0.0, (0.1, 0.5, 1.0)]
    assert all(v.ok and v.error is None and v.reply for v in verdicts)
    bodies = server.bodies[before:]
    assert all(b["temperature"] == 0.0 and b["model"] == "rule" for b in bodies)  # greedy, the endpoint's model
    systems = sorted(b["messages"][0]["content"] for b in bodies)
    assert sum("'Answer: yes' or 'Answer: no'" in s for s in systems) == 2 and any(
        "s1, s2, ..., s3" in s for s in systems
    )
    assert judge.ask([]) == []


def test_llm_judge_batches_dedups_and_caches(served):
    client, server = served
    judge = LLMJudge(client, max_workers=3)
    before, listed = len(server.requests), server.listed
    verdicts = judge.ask([q(2), q(3), q(2), q(8), q(3), q(2)])
    assert [v.value for v in verdicts] == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert len(server.requests) - before == 3  # identical questions are asked once
    assert judge.stats() == {"requests": 3, "cache_hits": 3, "failures": 0}
    again = judge.ask([q(8), q(2), q(3)])
    assert [v.value for v in again] == [1.0, 1.0, 0.0] and len(server.requests) - before == 3  # all cached
    assert judge.stats() == {"requests": 3, "cache_hits": 6, "failures": 0}
    assert server.listed - listed == 1  # the endpoint's model list is read once
    # the key holds the kind, the evidence flag and the model: the same prompt asked otherwise is a new question
    judge.ask([Question("score", "Is 2 even?"), q(2, evidence=True)])
    assert judge.stats()["requests"] == 5
    LLMJudge(client, model="other").ask([q(2)])
    assert server.bodies[-1]["model"] == "other"


def test_llm_judge_cache_is_a_bounded_lru(served):
    client, _ = served
    judge = LLMJudge(client, cache_size=2)
    judge.ask([q(10)])
    judge.ask([q(12)])
    judge.ask([q(10)])  # a hit: 10 becomes the most recent
    judge.ask([q(14)])  # evicts 12, the least recent
    assert judge.stats() == {"requests": 3, "cache_hits": 1, "failures": 0}
    judge.ask([q(10), q(14)])
    assert judge.stats()["requests"] == 3
    judge.ask([q(12)])
    assert judge.stats()["requests"] == 4
    nocache = LLMJudge(client, cache_size=0)
    nocache.ask([q(2), q(2)])
    nocache.ask([q(2)])
    assert nocache.stats() == {"requests": 2, "cache_hits": 1, "failures": 0}


def test_llm_judge_failures_are_error_verdicts_never_zero(served):
    client, server = served
    judge = LLMJudge(client)
    crash, garble, ok = judge.ask([Question("yesno", "Is 2 even? CRASH"), Question("score", "Is 2 even? GARBLE"), q(6)])
    assert crash.value is None and "judge request failed" in crash.error and "HTTP 500" in crash.error
    assert garble.value is None and garble.error.startswith("no score answer in the judge's reply")
    assert garble.reply == "Hmm, hard to say." and ok.value == 1.0
    assert judge.stats() == {"requests": 3, "cache_hits": 0, "failures": 2}
    before = len(server.requests)
    judge.ask([Question("yesno", "Is 2 even? CRASH")])  # a failure is not cached: asked again
    assert len(server.requests) - before == 1 and judge.failures == 3


def test_llm_judge_unreachable_endpoint():
    with LLMClient("http://127.0.0.1:9/v1", max_retries=0, timeout=2.0, api_key_env=None) as dead:
        verdicts = LLMJudge(dead).ask([q(2), q(3)])
        assert all(v.value is None and "judge request failed" in v.error for v in verdicts)
        verdicts = LLMJudge(dead, model="m").ask([q(2)])
        assert verdicts[0].value is None and "judge request failed" in verdicts[0].error


def test_llm_judge_evidence(served):
    client, _ = served
    lying = Question("yesno", "Is 4 even? LIE", evidence=True)
    grounded_yes, lie, no = LLMJudge(client).ask([q(4, evidence=True), lying, q(5, evidence=True)])
    assert grounded_yes.value == 1.0 and grounded_yes.evidence == "Is 4 even"
    assert lie.value is None and "quotes evidence not in the prompt: 'an UNQUOTED span'" in lie.error
    assert no.value == 0.0 and no.evidence is None  # a no needs no evidence
    [lie_as_no] = LLMJudge(client, ungrounded="no").ask([lying])
    assert lie_as_no.value == 0.0 and lie_as_no.evidence == "an UNQUOTED span"


def test_llm_judge_logprob_answers(served):
    client, server = served
    judge = LLMJudge(client, answer="logprob")
    before = len(server.bodies)
    even, odd, six, unsure, score = judge.ask([q(4), q(7), q(6), q(101), Question("score", "Is 9 good?")])
    assert (even.value, odd.value, six.value) == (1.0, 0.0, 1.0)  # six: P(yes) = 0.35 + 0.15 > P(no) = 0.45
    assert six.reply.startswith("P(yes)=0.5 P(no)=0.45")
    assert unsure.value is None and "neither yes nor no among the 2 most likely first tokens" in unsure.error
    assert score.value == 0.7  # other kinds are read from text
    logprob_body = server.bodies[before]
    assert logprob_body["max_tokens"] == 1 and logprob_body["logprobs"] is True and logprob_body["top_logprobs"] == 20
    assert "one word: yes or no" in logprob_body["messages"][0]["content"]


# ----------------------------------------------------------------------------------------------------------------
# LLMJudge against the suite's own model server: the tiny random model (gibberish) and SmolLM2 (a weak judge)


@pytest.fixture(scope="module")
def tiny_server():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentgym.tools.openai_server import create_app
    from agentgym.tools.tiny_model import build_tiny_model

    with BackgroundServer(create_app(*build_tiny_model(seed=0), model_name="tiny")) as server:
        client = LLMClient(server.url + "/v1", api_key_env=None, max_retries=0, timeout=60.0)
        yield client
        client.close()


def test_tiny_model_gibberish_is_invalid_never_zero(tiny_server):
    questions = [q(2), Question("score", "Grade it."), Question("compare", "A or B?"), Question("rank", "x", items=2)]
    judge = LLMJudge(tiny_server, sampling={"temperature": 0.0, "max_tokens": 8})
    verdicts = judge.ask(questions)
    for question, v in zip(questions, verdicts, strict=True):
        assert v.value is None and v.reply and v.error.startswith(f"no {question.kind} answer in the judge's reply")
    assert judge.stats() == {"requests": 4, "cache_hits": 0, "failures": 4}
    # log-prob mode reads the server's top log-probs: a random model puts neither word among its 20 likeliest tokens
    [v] = LLMJudge(tiny_server, answer="logprob").ask([q(2)])
    assert v.value is None and "neither yes nor no among the 20 most likely first tokens" in v.error
    assert v.reply.startswith("P(yes)=0 P(no)=0; top first tokens: ")


#: Easy yes/no questions for a weak local judge (half yes, half no); docs/judges.md records SmolLM2's accuracy.
EASY_QUESTIONS = (
    ("Is the sky blue on a clear day?", 1.0), ("Is fire cold?", 0.0), ("Do fish live in water?", 1.0),
    ("Is the sun a planet?", 0.0), ("Is 2 plus 2 equal to 4?", 1.0), ("Can a dog fly?", 0.0),
    ("Is Paris in France?", 1.0), ("Is ice hot?", 0.0), ("Do cats have four legs?", 1.0),
    ("Is the moon made of cheese?", 0.0), ("Is water wet?", 1.0), ("Is 10 smaller than 3?", 0.0),
)  # fmt: skip


@pytest.mark.slow
def test_smollm2_answers_yes_no_questions(capsys):
    """SmolLM2-135M-Instruct served by the suite's own server: every log-prob answer is valid; text answers are a
    yes/no or a clear error. The accuracy is printed (docs/judges.md records it), not asserted."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from agentgym.tools.named_models import NAMED_MODELS, ModelUnavailableError, load_gguf
    from agentgym.tools.openai_server import create_app

    try:
        NAMED_MODELS["smollm2-135m"].gguf_path()
    except ModelUnavailableError as exc:
        pytest.skip(str(exc))
    app = create_app(*load_gguf("smollm2-135m"), model_name="smollm2-135m")
    questions = [Question("yesno", text) for text, _ in EASY_QUESTIONS]
    with BackgroundServer(app) as server, LLMClient(server.url, api_key_env=None, max_retries=0, timeout=300) as c:
        verdicts = LLMJudge(c, answer="logprob", max_workers=1).ask(questions)
        assert all(v.ok and v.value in (0.0, 1.0) and v.reply.startswith("P(yes)=") for v in verdicts)
        right = sum(v.value == gold for v, (_, gold) in zip(verdicts, EASY_QUESTIONS, strict=True))
        text_judge = LLMJudge(c, max_workers=1, sampling={"temperature": 0.0, "max_tokens": 24})
        texts = text_judge.ask(questions[:3])
        assert all(v.value in (0.0, 1.0) or v.error.startswith("no yesno answer") for v in texts)
    with capsys.disabled():
        print(f"\nSmolLM2-135M log-prob judge: {right}/{len(EASY_QUESTIONS)} easy yes/no questions right; "
              f"text replies: {[v.reply for v in texts]}")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# TurnVerdictScorer: the rule judge gives exactly the env's verified turn signal


def play_diagnostics(env_id: str, episodes: int = 6):
    env = gym.make(env_id)
    try:
        return [run_episode(env, make_agent(name, env), seed=seed) for seed in range(episodes)
                for name in ("oracle", "random")]  # fmt: skip
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["agentgym/Chain-v0", "agentgym/Umbrella-v0"])
def test_turn_verdicts_of_the_rule_judge_are_the_verified_signal(env_id):
    trajs = play_diagnostics(env_id)
    before = copy.deepcopy([t.to_dict() for t in trajs])
    scores = TurnVerdictScorer(RuleJudge())(trajs)
    assert [t.to_dict() for t in trajs] == before  # the scorer only reads
    seen = set()
    for traj, s in zip(trajs, scores, strict=True):
        for turn, r, ok in zip(traj.turns, s.rewards, s.valid, strict=True):
            correct = turn.info["correct"]
            seen.add(correct)
            if correct is None:  # a distractor stage: no verified signal, so no rule answer
                assert not ok and math.isnan(r)
            else:
                assert ok and r == float(correct)
        assert all("has no verified signal" in e for e in s.extras["errors"].values())
    assert {True, False} <= seen and (None in seen) == (env_id == "agentgym/Umbrella-v0")


def test_gold_reaches_the_judge_never_the_policy():
    trajs = play_diagnostics("agentgym/Umbrella-v0", episodes=2)
    scorer = TurnVerdictScorer(RuleJudge())
    for traj in trajs:
        gold = render_gold(traj.reset_info["gold"])
        questions = scorer.questions(traj)
        assert len(questions) == len(traj.turns)
        assert all(gold in question.prompt for question in questions)
        assert all(gold not in json.dumps(m) for m in traj.messages)  # the policy's messages never hold it
        hidden = TurnVerdictScorer(RuleJudge(), show_gold=False).questions(traj)
        assert all(gold not in question.prompt and "reference solution" not in question.prompt for question in hidden)


def test_turn_context_shows_the_judge_only_the_turn():
    """context="turn": the judge reads the observation the turn answered, the turn and the env's reply (and the
    gold), none of the earlier turns; the rule judge's verdicts are the same."""
    env = gym.make("agentgym/Chain-v0", horizon=4)
    traj = run_episode(env, make_agent("random", env), seed=3)
    env.close()
    full, short = TurnVerdictScorer(RuleJudge()), TurnVerdictScorer(RuleJudge(), context="turn")
    for t, turn in enumerate(traj.turns):
        prompt = short.prompt(traj, t)
        answered = (traj.initial_observation if t == 0 else traj.turns[t - 1].observation)[-1]["content"]
        reply = turn.observation[-1]["content"] if turn.observation else ""  # the last step's reply may be empty
        assert answered in prompt and turn.action in prompt and reply in prompt
        assert all(f"Turn {k + 1}/4." not in prompt for k in range(t))  # no earlier stage is shown
        assert len(prompt) < len(full.prompt(traj, t)) or t == 0
    assert [s.rewards for s in short([traj])] == [s.rewards for s in full([traj])]
    with pytest.raises(ValueError, match="context"):
        TurnVerdictScorer(RuleJudge(), context="all")


def test_turn_verdict_prompt_worked_example():
    """One Chain-v0 turn, its prompt and its verdict by hand."""
    env = gym.make("agentgym/Chain-v0", horizon=2)
    traj = run_episode(env, make_agent("oracle", env), seed=0)
    env.close()
    prompt = TurnVerdictScorer(RuleJudge(), rubric="Was the choice right?").prompt(traj, 0)
    assert prompt.startswith("Below is a conversation between a user (the environment) and an AI agent")
    assert (
        f"reference solution (hidden from the agent; use it to judge the turn):\n{render_gold(traj.reset_info['gold'])}"
        in prompt
    )
    assert f"### assistant\n{traj.turns[0].action}\n\n### user\n{traj.turns[0].observation[0]['content']}" in prompt
    assert prompt.count("### assistant") == 1  # the turns after it are not shown
    assert prompt.endswith("---\nQuestion: Was the choice right?")
    assert TurnVerdictScorer(RuleJudge())([traj])[0].rewards == [1.0] * len(traj.turns)  # the oracle is always right


def test_turn_verdict_delta_signal_and_missing_signal(env, trajs):
    """SearchQA's signal is the increase of supporting_recall: yes iff the step found a new supporting document."""
    for traj in trajs:
        [s] = TurnVerdictScorer(RuleJudge())([traj])
        recalls = [traj.reset_info["supporting_recall"], *(t.info["supporting_recall"] for t in traj.turns)]
        assert s.rewards == [float(b > a) for a, b in itertools.pairwise(recalls)] and s.all_valid
    odd = type(trajs[0])("agentgym/NoSignal-v0", 0, "t", "a", [], dict(trajs[0].reset_info), turns=list(trajs[0].turns))
    [s] = TurnVerdictScorer(RuleJudge())([odd])
    assert not any(s.valid) and "reports no verified turn signal (set signal_key)" in s.extras["errors"]["0"]
    [s] = TurnVerdictScorer(RuleJudge(), signal_key="supporting_recall", signal_mode="delta")([odd])
    assert s.all_valid  # a named key reads the signal of any env
    odd.reset_info = {}
    [s] = TurnVerdictScorer(RuleJudge(), signal_key="supporting_recall", signal_mode="delta")([odd])
    assert s.valid[0] is False and s.all_valid is False  # no state before the first step: no increase to judge
    with pytest.raises(ValueError):
        TurnVerdictScorer(RuleJudge(), signal_mode="sum")  # type: ignore[arg-type]


def chain_judge(system: str, user: str) -> str:
    """An LLM judge on loopback that reads the gold in its prompt: yes iff the last action names the gold choice of
    its turn (what a perfect LLM judge would answer)."""
    gold = json.loads(user.split("use it to judge the turn):\n")[1].split("\n")[0])
    turn = user.count("### assistant\n") - 1
    action = user.split("### assistant\n")[-1].split("\n\n")[0]
    return "Answer: yes" if f"<answer> {gold['choices'][turn]} </answer>" == action.strip() else "Answer: no"


def test_turn_verdicts_over_http_one_batch_per_group_cached():
    trajs = play_diagnostics("agentgym/Chain-v0", episodes=3)
    oracle = TurnVerdictScorer(RuleJudge())(trajs)
    with serve_rule_judge(chain_judge) as server, LLMClient(server.url, api_key_env=None, max_retries=0) as c:
        judge = LLMJudge(c)
        scorer = TurnVerdictScorer(judge)
        scores = scorer(trajs)
        turns = sum(len(t.turns) for t in trajs)
        assert [s.rewards for s in scores] == [s.rewards for s in oracle]  # a perfect judge gives the oracle signal
        assert judge.stats()["requests"] + judge.stats()["cache_hits"] == turns
        sent = len(server.requests)
        scorer(trajs)  # the same group again: every verdict from the cache
        assert len(server.requests) == sent and judge.stats()["cache_hits"] >= turns
        assert all(s.extras["replies"][0].startswith("Answer: ") for s in scores)


# ----------------------------------------------------------------------------------------------------------------
# the trainer's judge spec: scorer_kwargs["judge"]


def test_make_judge_specs():
    assert isinstance(make_judge("rule"), RuleJudge) and make_judge("rule", check_only=True) is None
    judge = make_judge("http://127.0.0.1:9/v1")
    assert isinstance(judge, LLMJudge) and judge.client.base_url == "http://127.0.0.1:9/v1" and judge.answer == "text"
    judge.client.close()
    judge = make_judge({"base_url": "http://127.0.0.1:9", "api_key_env": None, "max_retries": 0, "model": "m",
                        "answer": "logprob", "cache_size": 16, "max_workers": 2})  # fmt: skip
    assert (judge.model, judge.answer, judge.cache_size, judge.max_workers) == ("m", "logprob", 16, 2)
    assert judge.client.max_retries == 0 and judge.client.base_url == "http://127.0.0.1:9/v1"
    judge.client.close()
    for bad, match in [
        ("oracle", "must be 'rule' .*an OpenAI-compatible endpoint URL"),
        ({"answer": "text"}, "must be 'rule'"),
        (3, "must be 'rule'"),
        ({"base_url": "http://x", "temperature": 0.5}, r"takes no \['temperature'\]"),
        ({"base_url": "http://x", "answer": "maybe"}, "answer must be one of"),
        ({"base_url": "http://x", "cache_size": -1}, "cache_size >= 0"),
        ({"base_url": "http://x", "max_retries": -1}, "max_retries >= 0"),
    ]:
        with pytest.raises(ValueError, match=match) as err:
            make_judge(bad, check_only=True)
        assert "\n" not in str(err.value)


def test_trainer_builds_the_judge_of_a_judge_scorer():
    name = "agentgym.rewards.judge:TurnVerdictScorer"
    with pytest.raises(ValueError, match=r"needs scorer_kwargs\['judge'\]: 'rule'"):
        check_scorer(name, {})
    with pytest.raises(ValueError, match="must be 'rule'"):
        check_scorer(name, {"judge": "gpt"})
    scorer = build_trainer_scorer(name, {"judge": "rule", "show_gold": False}, None, None)
    assert isinstance(scorer, TurnVerdictScorer) and isinstance(scorer.judge, RuleJudge) and not scorer.show_gold
    scorer = build_trainer_scorer(name, {"judge": {"base_url": "http://127.0.0.1:9", "answer": "logprob"}}, None, None)
    assert isinstance(scorer.judge, LLMJudge) and scorer.judge.answer == "logprob"
    scorer.judge.client.close()
    judge_scorer = build_trainer_scorer("judge", {"client": "http://127.0.0.1:9/v1"}, None, None)
    assert isinstance(judge_scorer, JudgeScorer) and isinstance(judge_scorer.client, LLMClient)  # keeps its client
    from agentgym.baselines.config import load_config

    with pytest.raises(ValueError, match="answer must be one of") as err:
        load_config("tiny", overrides={"scorer": name, "scorer_kwargs": {"judge": {"base_url": "http://x",
                                                                                   "answer": "no"}}})  # fmt: skip
    assert "\n" not in str(err.value)


class AllYes:
    """A judge that says yes to everything (and grades everything 1.0)."""

    name = "all_yes"

    def ask(self, questions):
        return [Verdict(1.0) for _ in questions]


def test_an_all_yes_judge_reduces_mt_grpo_over_turn_verdicts_to_grpo():
    """Every turn verdict 1.0: each (group, turn) cell ties, so MT-GRPO's turn term vanishes and the advantages are
    GRPO's over the outcome, for every rollout and turn."""
    import numpy as np

    from agentgym.rewards.advantages.group import grpo
    from agentgym.rewards.advantages.multi_turn import mt_grpo

    trajs = play_diagnostics("agentgym/Chain-v0", episodes=4)
    signals = [s.rewards for s in TurnVerdictScorer(AllYes())(trajs)]
    assert all(r == 1.0 for row in signals for r in row)
    outcomes = [sum(t.reward_components.get("outcome", 0.0) for t in traj.turns) for traj in trajs]
    groups = [0] * len(trajs)
    expected = grpo(outcomes, groups)
    assert np.any(expected != 0.0)  # the oracle's and the random agent's outcomes differ
    for a, e, traj in zip(mt_grpo(outcomes, signals, groups), expected, trajs, strict=True):
        assert np.allclose(a, [e] * len(traj.turns))
