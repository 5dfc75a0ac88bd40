"""StateFactory (docs/grounded-rewards.md, 'StateFactory'): the worked example by hand, the spec's properties
(sim(G, G) = 1, sim in [0, 1], setting a current attribute to the goal's value never lowers it), the one-to-one
assignment, Household-v0's facts (the goal's facts hold exactly when the game is won), and the wrapper's shaping
(it telescopes to -Phi(s_0), recorded as a component)."""

import math

import gymnasium as gym
import pytest
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.rewards import state_similarity
from agentgym.rewards.catalogue import collect
from agentgym.rewards.state_similarity import (
    EmbeddingSimilarity,
    StateGoalSimilarity,
    state_goal_similarity,
    string_similarity,
)

SETTINGS = settings(max_examples=60, deadline=None)
WORDS = st.sampled_from(["apple", "mug", "countertop", "fridge", "hot", "cold", "clean", "agent", "on"])
KEYS = st.sampled_from(["location", "temperature", "cleanliness", "power"])
FACT = st.builds(lambda n, a: {"name": n, "attributes": a}, WORDS, st.dictionaries(KEYS, WORDS, max_size=3))
FACTS = st.lists(FACT, min_size=1, max_size=4)
MODES = st.sampled_from(["exact", "string"])
ASSIGN = st.sampled_from(["matching", "best"])


def fact(name, **attributes):
    return {"name": name, "attributes": attributes}


def test_worked_example_by_hand():
    """Goal: a hot apple on a countertop. The fridge apple has 1 of 2 goal attributes (name 1 x mean 1/2); the mug
    is no apple (name 0): sim = 0.5. In string mode the mug's name scores difflib's ratio of 'apple' and 'mug'
    (2 * 0 / 8 = 0), the apple's location 'fridge' vs 'countertop' 2 * 1 / 16 = 0.125 (one 'r'): 1 * (0.125 + 1)/2."""
    goal = [fact("apple", location="countertop", temperature="hot")]
    state = [fact("apple", location="fridge", temperature="hot"), fact("mug", location="countertop", temperature="hot")]
    assert state_goal_similarity(state, goal, "exact") == 0.5
    assert string_similarity("fridge", "countertop") == pytest.approx(2 * 1 / 16)
    assert state_goal_similarity(state, goal, "string") == pytest.approx((0.125 + 1.0) / 2)


def test_two_goal_objects_need_two_objects_under_matching():
    """Two apples on the countertop: one placed, one in the fridge. One-to-one: (1 + 0) / 2; sharing: (1 + 1) / 2."""
    goal = [fact("apple", location="countertop")] * 2
    state = [fact("apple", location="countertop"), fact("apple", location="fridge")]
    assert state_goal_similarity(state, goal, "exact", "matching") == 0.5
    assert state_goal_similarity(state, goal, "exact", "best") == 1.0
    assert state_goal_similarity(state[:1], goal, "exact", "matching") == 0.5  # the second goal apple has none


@SETTINGS
@given(goal=FACTS, mode=MODES, assignment=ASSIGN)
def test_the_goal_is_similar_to_itself(goal, mode, assignment):
    assert state_goal_similarity(goal, goal, mode, assignment) == 1.0


@SETTINGS
@given(state=FACTS, goal=FACTS, mode=MODES, assignment=ASSIGN)
def test_similarity_lies_in_the_unit_interval(state, goal, mode, assignment):
    assert 0.0 <= state_goal_similarity(state, goal, mode, assignment) <= 1.0


@SETTINGS
@given(state=FACTS, goal=FACTS, mode=MODES, assignment=ASSIGN, data=st.data())
def test_gaining_a_goal_attribute_never_lowers_it(state, goal, mode, assignment, data):
    """Give one current object one of the goal's attribute values (the state moves towards the goal)."""
    g = data.draw(st.sampled_from(goal))
    if not g["attributes"]:
        return
    key = data.draw(st.sampled_from(sorted(g["attributes"])))
    i = data.draw(st.integers(0, len(state) - 1))
    after = [dict(f, attributes=dict(f["attributes"])) for f in state]
    after[i]["attributes"][key] = g["attributes"][key]
    before_sim = state_goal_similarity(state, goal, mode, assignment)
    assert state_goal_similarity(after, goal, mode, assignment) >= before_sim - 1e-12


def test_an_empty_goal_scores_one_and_an_empty_state_zero():
    assert state_goal_similarity([fact("mug")], [], "exact") == 1.0
    assert state_goal_similarity([], [fact("mug")], "exact") == 0.0


def household(**kwargs):
    return gym.make("agentgym/Household-v0", split="train", state_facts=True, expert_plan=True, **kwargs)


def play_plan(env, task_index):
    """Follow the expert plan to the goal; the infos of the reset and every step."""
    _, info = env.reset(seed=0, options={"task_index": task_index})
    infos = [info]
    while not infos[-1]["won"]:
        infos.append(env.step(infos[-1]["expert_plan"][0])[-1])
    return infos


@pytest.mark.parametrize("task_index", range(12))
def test_household_goal_facts_hold_exactly_when_won(task_index):
    """Along an expert episode, sim = 1 in exact mode on the won state and < 1 on every state before it."""
    infos = play_plan(household(), task_index)
    goal = infos[0]["gold"]["goal_facts"]
    sims = [state_goal_similarity(i["state_facts"], goal, "exact") for i in infos]
    assert sims[-1] == 1.0 and all(s < 1.0 for s in sims[:-1]), (infos[0]["task_type"], sims)


def test_wrapper_shaping_telescopes_and_records_the_similarity():
    """sum_t F_t = -Phi(s_0) with gamma = 1 and Phi(terminal) = 0; each turn records the term and the similarity."""
    env = StateGoalSimilarity(household(), mode="exact", scale=2.0)
    _, info = env.reset(seed=0, options={"task_index": 5})
    phi0, terms, done = 2.0 * info["goal_similarity"], [], False
    while not done:
        _, r, term, trunc, info = env.step(info["expert_plan"][0])
        terms.append(info["reward_components"]["state_goal"])
        assert r == pytest.approx(sum(info["reward_components"].values()))
        assert 0.0 <= info["goal_similarity"] <= 1.0
        done = term or trunc
    assert info["goal_similarity"] == 1.0
    assert math.fsum(terms) == pytest.approx(-phi0)


def test_wrapper_needs_the_facts():
    env = StateGoalSimilarity(gym.make("agentgym/Household-v0", split="train"), mode="exact")
    with pytest.raises(KeyError, match="state_facts=True"):
        env.reset(seed=0)


def test_state_facts_leave_the_trajectory_unchanged():
    """The same actions with and without state_facts: same observations, rewards and infos but the new keys."""
    plain, facts = (gym.make("agentgym/Household-v0", split="train", state_facts=f) for f in (False, True))
    for task in range(6):
        (o1, i1), (o2, i2) = plain.reset(seed=task), facts.reset(seed=task)
        assert o1 == o2 and i1 == {**{k: v for k, v in i2.items() if k != "state_facts"},
                                   "gold": {k: v for k, v in i2["gold"].items()
                                            if k not in ("goal_facts", "subgoals")}}  # fmt: skip
        for t in range(15):
            action = sorted(i1["admissible_commands"])[(7 * t + task) % len(i1["admissible_commands"])]
            s1, s2 = plain.step(action), facts.step(action)
            assert s1[:4] == s2[:4]
            i1 = s1[4]
            assert i1 == {k: v for k, v in s2[4].items() if k != "state_facts"}


def test_card():
    (card,) = collect([state_similarity])
    assert card.name == "statefactory" and card.load() is StateGoalSimilarity
    assert {"mode", "scale", "gamma", "assignment"} <= set(card.knobs())


@pytest.mark.slow
def test_minilm_mode():
    """The MiniLM similarity: identical strings 1 exactly, others in [0, 1]; 'hot' is closer to 'warm' than to
    'fridge'; the goal is similar to itself."""
    sim = EmbeddingSimilarity()
    assert sim("hot", "hot") == 1.0
    assert 0.0 <= sim("hot", "fridge") < sim("hot", "warm") <= 1.0
    goal = [fact("apple", location="countertop", temperature="hot")]
    assert state_goal_similarity(goal, goal, sim) == 1.0


def test_tool_use_worlds_reach_their_goal_facts():
    """ToolUse-v0 (state_facts=True): the oracle ends every episode on the gold final state (sim = 1 in exact mode)
    from a start below it; the flag changes nothing else (same turns with and without it)."""
    from agentgym.envs.tool_use.agents import OracleAgent
    from agentgym.running.runner import run_episode

    facts, plain = (gym.make("agentgym/ToolUse-v0", state_facts=f) for f in (True, False))
    worlds = set()
    for seed in range(6):
        traj = run_episode(facts, OracleAgent(), seed=seed, env_id="agentgym/ToolUse-v0")
        goal = traj.reset_info["gold"]["goal_facts"]
        start = state_goal_similarity(traj.reset_info["state_facts"], goal, "exact")
        end = state_goal_similarity(traj.turns[-1].info["state_facts"], goal, "exact")
        assert traj.success and start < 1.0 and end == 1.0
        worlds.add(traj.task_id.split("/")[0])
        other = run_episode(plain, OracleAgent(), seed=seed, env_id="agentgym/ToolUse-v0")
        assert [(t.action, t.observation, t.reward) for t in other.turns] == [
            (t.action, t.observation, t.reward) for t in traj.turns]  # fmt: skip
        assert [{k: v for k, v in t.info.items() if k != "state_facts"} for t in traj.turns] == [
            t.info for t in other.turns]  # fmt: skip
    assert worlds == {"filesystem", "calendar", "bank"}
