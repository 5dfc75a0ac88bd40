"""JudgeScorer against a real OpenAI-compatible judge server on loopback (a small deterministic rule-based FastAPI
app defined here, served by uvicorn), on real SearchQA episodes: per-turn and per-trajectory grading, a garbled
reply and an HTTP 500 (marked NaN/invalid or raised, never 0), score parsing."""

import math

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.agent import Agent
from agentgym.rewards.base import ScorerError, annotate
from agentgym.rewards.judge import JudgeScorer, conversation_until, parse_score, render_conversation
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
