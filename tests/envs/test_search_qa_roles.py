"""SearchQARoles-v0 (M-ASK): one role is SearchQA-v0, the KMA's reward, role tags, no gold in observations."""

import json
import re

import gymnasium as gym
import pytest

import agentgym
from agentgym.envs.search_qa import roles as roles_module
from agentgym.envs.search_qa.agents import OracleAgent, RandomAgent
from agentgym.envs.search_qa.env import SearchQAEnv
from agentgym.envs.search_qa.roles import RoleOracleAgent, RoleRandomAgent, SearchQARolesEnv, keeps, kma_reward
from agentgym.rewards.catalogue import collect
from agentgym.rewards.papers import cite
from agentgym.running.checker import check


def _play(env, agent, task_index):
    """One episode of ``agent``: the list of (action, step tuple as JSON)."""
    agent.reset(seed=task_index)
    obs, info = env.reset(seed=7, options={"task_index": task_index})
    messages, record = list(obs), [json.dumps([obs, info], sort_keys=True)]
    while True:
        action = agent.act(messages, info)
        out = env.step(action)
        record.append(json.dumps(list(out), sort_keys=True))
        obs, info = out[0], out[4]
        messages += [{"role": "assistant", "content": action}, *obs]
        if out[2] or out[3]:
            return record


@pytest.mark.parametrize("agent", [OracleAgent, RandomAgent])
def test_one_role_is_search_qa_exactly(agent):
    """Same actions and seed: the same observations, rewards, flags and info, turn by turn."""
    for task in range(12):
        plain = _play(SearchQAEnv(dataset="tiny"), agent(), task)
        single = _play(SearchQARolesEnv(dataset="tiny", roles="single"), agent(), task)
        assert single == plain


def test_worked_example_multihop_task():
    """Tiny task 1 (4 hops): the first oracle query retrieves 1 of the 4 supporting documents, which states 'New
    Sheilkrou'. SBA: recall 0 -> 1/4. KMA: 7 words keeping it -> 1 - 0.01 * 7 = 0.93; notes without it -> 0."""
    env = SearchQARolesEnv(dataset="tiny")
    obs, info = env.reset(options={"task_index": 1})
    gold = info["gold"]
    assert gold["hop_answers"][0] == "New Sheilkrou" and info["next_role"] == "sba"
    obs, r, _, _, info = env.step(f"<search> {gold['oracle_queries'][0]} </search>")
    assert (r, info["reward_components"], info["role"], info["next_role"]) == (0.25, {"recall": 0.25}, "sba", "kma")
    assert "Sonvux Shoston is a poet who was born in New Sheilkrou" in obs[0]["content"]
    assert env.unwrapped.evidence_seen() == ["New Sheilkrou"]
    snap = env.unwrapped.snapshot()
    _, r, _, _, info = env.step("<notes> Sonvux Shoston was born in New Sheilkrou. </notes>")
    assert r == pytest.approx(0.93) and info["role"] == "kma" and info["next_role"] == "sba"
    env.unwrapped.restore(snap)
    obs, r, _, _, info = env.step("<notes> Sonvux Shoston is a poet at Nehar Holdings. </notes>")
    assert r == 0.0 and info["reward_components"] == {"notes": 0.0}
    assert "<notes> Sonvux Shoston is a poet at Nehar Holdings. </notes>" in obs[0]["content"]
    assert "<information>" not in obs[0]["content"]  # the SBA gets the notes in place of the passages


def test_notes_that_drop_evidence_earn_zero_whatever_lambda():
    evidence = ["Trarhak Tunmamsik", "Bilgertiv"]
    for lam in (0.0, 0.01, 0.5):
        assert kma_reward("Trarhak Tunmamsik directed it.", evidence, notes_lambda=lam) == 0.0
        assert kma_reward("", evidence, notes_lambda=lam) == 0.0
    assert kma_reward("Trarhak Tunmamsik, born in Bilgertiv.", evidence, notes_lambda=0.1) == pytest.approx(0.5)
    assert kma_reward("a b c d e f g h i j k l", evidence[:0], notes_lambda=0.1) == 0.0  # clipped at 0
    assert kma_reward("", [], notes_lambda=0.1) == 1.0  # nothing seen yet: nothing to keep
    assert keeps("the director is TRARHAK Tunmamsik!", "Trarhak Tunmamsik") and not keeps("Bilgertivs", "Bilgertiv")


def test_oracle_notes_keep_everything_and_dropping_a_hop_costs_the_reward():
    """Over every tiny test task: the oracle's notes keep all evidence seen (reward > 0 on each notes turn); the same
    notes with one evidence string removed earn 0."""
    env = SearchQARolesEnv(dataset="tiny")
    for task in range(env.unwrapped.num_tasks):
        agent = RoleOracleAgent()
        agent.reset(seed=task)
        obs, info = env.reset(options={"task_index": task})
        messages = list(obs)
        while True:
            action = agent.act(messages, info)
            if info["next_role"] == "kma":
                seen = env.evidence_seen()
                snap = env.snapshot()
                for e in seen:  # remove one evidence string: reward 0
                    dropped = re.sub(re.escape(e), "someone", action, flags=re.I)
                    assert env.step(dropped)[1] == 0.0, (task, e)
                    env.restore(snap)
            obs, r, term, trunc, info = env.step(action)
            if info["role"] == "kma":
                assert r > 0, (task, action)
            messages += [{"role": "assistant", "content": action}, *obs]
            if term or trunc:
                assert info["success"]
                break


def test_invalid_notes_keep_the_old_ones_and_pass_the_turn():
    env = SearchQARolesEnv(dataset="tiny", invalid_action_penalty=0.1)
    _, info = env.reset(options={"task_index": 1})
    env.step(f"<search> {info['gold']['oracle_queries'][0]} </search>")
    env.step("<notes> New Sheilkrou </notes>")
    env.step(f"<search> {info['gold']['oracle_queries'][1]} </search>")
    obs, r, term, _, info = env.step("I forgot the tags")
    assert not info["action_valid"] and info["parse_error"] and r == pytest.approx(-0.1) and not term
    assert info["next_role"] == "sba" and "<notes> New Sheilkrou </notes>" in obs[0]["content"]


def test_gold_reaches_observations_only_through_passages_and_notes():
    """Every gold string (answers, hop answers, oracle queries) in an observation is inside a passage block or the
    notes the policy wrote, unless the question itself names it."""
    env = SearchQARolesEnv(dataset="tiny")
    for agent_cls in (RoleOracleAgent, RoleRandomAgent):
        for task in range(env.num_tasks):
            agent = agent_cls()
            agent.reset(seed=task)
            obs, info = env.reset(options={"task_index": task})
            gold = info["gold"]
            secrets = [*gold["answers"], *gold["hop_answers"], *gold["oracle_queries"]]
            question = env.example.question
            messages = list(obs)
            while True:
                for m in obs:
                    bare = re.sub(r"<information>.*?</information>|<notes>.*?</notes>", "", m["content"], flags=re.S)
                    leaked = [s for s in secrets if keeps(bare, s) and not keeps(question, s)]
                    assert not leaked, (task, leaked)
                action = agent.act(messages, info)
                obs, _, term, trunc, info = env.step(action)
                messages += [{"role": "assistant", "content": action}, *obs]
                if term or trunc:
                    break


@pytest.mark.parametrize("roles", ["two", "single"])
def test_check_env_and_determinism(roles):
    assert "agentgym/SearchQARoles-v0" in agentgym.list_envs()
    report = check("agentgym/SearchQARoles-v0", env_kwargs={"dataset": "tiny", "roles": roles})
    assert report.ok, str(report)
    first = _play(gym.make("agentgym/SearchQARoles-v0", dataset="tiny", roles=roles), RoleRandomAgent(), 5)
    again = _play(gym.make("agentgym/SearchQARoles-v0", dataset="tiny", roles=roles), RoleRandomAgent(), 5)
    assert first == again


def test_turn_limit_and_arguments():
    assert SearchQARolesEnv(dataset="tiny").max_turns == 11
    assert SearchQARolesEnv(dataset="tiny", roles="single").max_turns == 6
    with pytest.raises(ValueError, match="roles"):
        SearchQARolesEnv(dataset="tiny", roles="three")
    with pytest.raises(ValueError, match="notes_lambda"):
        SearchQARolesEnv(dataset="tiny", notes_lambda=-1.0)


def test_card():
    (card,) = collect([roles_module])
    assert card.name == "m_ask" and card.paper == cite("M-ASK") and card.knobs() == {"notes_lambda": 0.01}
    assert card.train["env_id"] == "agentgym/SearchQARoles-v0"
