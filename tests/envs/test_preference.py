"""Preference-v0: the checker, the oracle on 500 tasks, heuristic and random rates per difficulty, golden dialogues,
cross-process determinism, graded answers, the search syntax, both action styles, and the scripted user's discipline
(hypothesis)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.checker import check
from agentgym.envs.user_sim.preference import (
    DIFFICULTIES,
    DOMAINS,
    LEVELS,
    PRIORITY,
    SHOWN,
    PreferenceEnv,
    PreferenceHeuristicAgent,
    PreferenceOracleAgent,
    PreferenceRandomAgent,
    make_task,
    satisfies,
    score,
    search,
    slots_of,
)
from agentgym.envs.user_sim.users import VOLUNTEER, find_word, mentions
from agentgym.runner import run

ENV_ID = "agentgym/Preference-v0"


def play(env: PreferenceEnv, agent, index: int) -> tuple[float, dict, list[dict]]:
    agent.reset(seed=index)
    obs, info = env.reset(options={"task_index": index})
    messages, total, done = list(obs), 0.0, False
    while not done:
        action = agent.act(messages, info)
        obs, reward, terminated, truncated, info = env.step(action)
        messages += [{"role": "assistant", "content": action}, *obs]
        total += reward
        done = terminated or truncated
    return total, info, messages


def test_checker_passes():
    report = check(ENV_ID)
    assert report.ok, str(report)
    assert not report.notes, report.notes
    assert check(ENV_ID, env_kwargs={"difficulty": "hard"}).ok


def test_oracle_solves_500_tasks_of_every_difficulty():
    env = PreferenceEnv()  # mixed: task i is of level i % 3
    seen = set()
    for i in range(500):
        _, info, _ = play(env, PreferenceOracleAgent(), i)
        assert info["success"] and info["verdict"] == "best", (i, info)
        assert info["reward_components"]["outcome"] == 1.0
        assert info["metrics"]["best"] == 1.0 and info["metrics"]["elicited"] == 1.0
        assert info["metrics"]["searches"] == 1.0
        seen.add(info["task_id"].split("/")[0])
    assert seen == set(DIFFICULTIES)


def test_heuristic_and_random_per_difficulty(capsys):
    rates = {}
    for difficulty in DIFFICULTIES:
        env = PreferenceEnv(difficulty=difficulty)
        for name, cls in (("oracle", PreferenceOracleAgent), ("heuristic", PreferenceHeuristicAgent),
                          ("random", PreferenceRandomAgent)):  # fmt: skip
            metrics = [play(env, cls(), i)[1]["metrics"] for i in range(100)]
            rates[difficulty, name] = {k: sum(m[k] for m in metrics) / len(metrics)
                                       for k in ("success", "acceptable", "questions")}  # fmt: skip
    with capsys.disabled():
        print("\nPreference-v0 (100 tasks each): success / acceptable / questions")
        for (difficulty, name), r in rates.items():
            print(f"  {difficulty:6} {name:9} {r['success']:.2f} / {r['acceptable']:.2f} / {r['questions']:.1f}")
    for difficulty in DIFFICULTIES:
        oracle, heuristic, random = (rates[difficulty, n] for n in ("oracle", "heuristic", "random"))
        assert oracle["success"] == 1.0
        assert heuristic["success"] >= 0.95  # it asks about every attribute: right, but not efficient
        assert heuristic["questions"] > oracle["questions"]
        assert random["success"] <= 0.1 and random["success"] + random["acceptable"] <= 0.3


def test_tasks_are_solvable_and_need_every_preference():
    for difficulty in DIFFICULTIES:
        level = LEVELS[difficulty]
        for i in range(100):
            task = make_task(difficulty, i)
            assert task == make_task(difficulty, i)
            domain = DOMAINS[task["domain"]]
            soft = domain.attribute(task["soft"])
            items = {it["id"]: it for it in task["catalog"]}
            assert len(items) == len(task["catalog"]) and level.items[0] <= len(items) <= level.items[1]
            assert level.constraints[0] <= len(task["constraints"]) <= level.constraints[1]
            assert set(task["goal"]) == {*task["constraints"], PRIORITY}

            def fits(item, skip=None, task=task, domain=domain):
                return all(satisfies(domain.attribute(k), item[k], v)
                           for k, v in task["constraints"].items() if k != skip)  # fmt: skip

            best = items[task["best"]]
            assert fits(best) and task["acceptable"]
            for other in task["acceptable"]:
                assert fits(items[other]) and score(soft, items[other][soft.key]) < score(soft, best[soft.key])
            assert sorted(i for i, it in items.items() if fits(it)) == sorted([task["best"], *task["acceptable"]])
            for key in task["constraints"]:  # a trap per must-have
                assert any(fits(it, key) and not fits(it) and score(soft, it[soft.key]) > score(soft, best[soft.key])
                           for it in items.values()), (difficulty, i, key)  # fmt: skip
            top = search(task["catalog"], domain, task["query"]).splitlines()[1]
            assert top.startswith(task["best"] + ":")


GOLDEN = {
    ("medium", 0): [
        ("Which area do you prefer?", "I'm not sure, it doesn't matter to me."),
        ("Is it fine if the rating is at least 7 out of 10?", "No, it isn't."),  # cooperativeness 0.5: no correction
        ("So within 1 km then.", "Actually, within 3 km."),  # a wrong assumption, corrected
        ("Do you need vegetarian dishes?", "With vegetarian dishes, please."),
        ("Hello there.", "I'm not sure what you mean."),
        ("Thanks.", "Sorry, what do you need to know?"),
        ("Great, anything else.", "Could you ask me something more specific?"),
        ("Ok.", "I should mention: at least 8 out of 10."),  # the fourth off-target message: volunteers
        ("What matters most to you?", "The lowest price, please."),
    ],
    ("easy", 1): [
        ("Hello!", "Sorry, what do you need to know?"),
        ("How are you?", "I should mention: without a touchscreen, please."),  # not the colour the opening stated
        ("Any brand?", "I have no preference there."),
        ("Let me think.", "Oh, and the lowest weight, please."),
        ("Hmm.", "That's everything I can tell you."),
        ("Is it without a touchscreen?", "Correct."),
    ],
}
OPENINGS = {
    ("medium", 0): "Can you recommend a restaurant serving greek food?",
    ("easy", 1): "I need a new laptop in blue.",
}


@pytest.mark.parametrize("key", list(GOLDEN))
def test_golden_dialogue(key):
    difficulty, index = key
    env = PreferenceEnv(difficulty=difficulty)
    obs, info = env.reset(options={"task_index": index})
    assert obs[-1]["content"] == OPENINGS[key]
    assert info["gold"]["category"] == difficulty
    for question, reply in GOLDEN[key]:
        obs, *_ = env.step(f"[action] {question}")
        assert obs == [{"role": "user", "content": reply}], question


_SCRIPT = """
import json, sys
from agentgym.envs.user_sim.preference import PreferenceEnv, PreferenceHeuristicAgent
out = []
for index in (0, 1, 2, 3, 4, 5):
    env = PreferenceEnv()
    agent = PreferenceHeuristicAgent()
    agent.reset(seed=index)
    obs, info = env.reset(options={"task_index": index})
    msgs, done = list(obs), False
    for action in ("[action] Hello?", "[action] Ok.", "[action] Is it cheap?", "[action] Fine."):
        obs, _, done, _, info = env.step(action)
        msgs += [{"role": "assistant", "content": action}, *obs]
    while not done:
        action = agent.act(msgs, info)
        obs, _, terminated, truncated, info = env.step(action)
        msgs += [{"role": "assistant", "content": action}, *obs]
        done = terminated or truncated
    out.append([msgs[1:], info["metrics"]])
print(json.dumps(out))
"""


def test_same_seed_same_dialogue_in_another_process():
    runs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, check=True)
        runs.append(json.loads(proc.stdout))
    assert runs[0] == runs[1]
    transcript = runs[0][0][0]
    assert any("[search]" in m["content"] for m in transcript if m["role"] == "assistant")


def _answer(env: PreferenceEnv, index: int, content: str) -> tuple[float, dict]:
    env.reset(options={"task_index": index})
    _, reward, terminated, _, info = env.step(f"[answer] {content}")
    assert terminated
    return reward, info


def test_best_acceptable_and_wrong_answers():
    env = PreferenceEnv(difficulty="medium")
    task = make_task("medium", 3)
    wrong = next(it["id"] for it in task["catalog"] if it["id"] not in [task["best"], *task["acceptable"]])
    reward, info = _answer(env, 3, f"The best one is {task['best']}.")
    assert (reward, info["success"], info["verdict"]) == (1.0, True, "best")
    assert info["metrics"]["best"] == 1.0 and info["metrics"]["acceptable"] == 0.0
    reward, info = _answer(env, 3, task["acceptable"][0].lower())
    assert (reward, info["success"], info["verdict"], info["violated"]) == (0.5, False, "acceptable", [])
    assert info["reward_components"] == {"outcome": 0.5} and info["metrics"]["acceptable"] == 1.0
    reward, info = _answer(env, 3, wrong)
    assert (reward, info["success"], info["verdict"]) == (0.0, False, "wrong") and info["violated"]
    for content in ("the cheapest one", "Z999", f"{task['best']} or {wrong}"):
        reward, info = _answer(env, 3, content)
        assert reward == 0.0 and not info["success"] and "answer exactly one id" in info["answer_error"]
    env = PreferenceEnv(difficulty="medium", acceptable_reward=0.25)
    assert _answer(env, 3, task["acceptable"][0])[0] == 0.25
    assert env.spec_kwargs()["acceptable_reward"] == 0.25


def test_search_syntax_and_errors():
    task = make_task("hard", 1)  # hotels
    domain, catalog = DOMAINS[task["domain"]], task["catalog"]
    assert task["domain"] == "hotel"
    cases = {
        "wifi=yes": "Error: unknown attribute 'wifi'; the attributes are area, price, stars,",
        "area=mars": "Error: area is one of north, south, east, west, centre, not 'mars'.",
        "area<=north": "Error: area is not a number: use area=value or area!=value.",
        "pool=maybe": "Error: pool is yes or no, not 'maybe'.",
        "price<=cheap": "Error: price takes a number, not 'cheap' (e.g. price<=100).",
        "cheap hotels": "Error: cannot read 'cheap': write filters as key=value",
        "sort=area": "Error: sort takes a number attribute (price, stars, rating, distance)",
    }
    for query, start in cases.items():
        assert search(catalog, domain, query).startswith(start), query
    everything = search(catalog, domain, "").splitlines()
    assert everything[0] == f"{len(catalog)} hotels match; the first {SHOWN} are shown (add filters to narrow it down):"
    assert len(everything) == SHOWN + 1
    lines = search(catalog, domain, "stars >= 4 , pool = yes sort=-rating").splitlines()
    rows = [dict(kv.split("=") for kv in line.split(": ")[1].split()) for line in lines[1:]]
    assert rows and all(float(r["stars"]) >= 4 and r["pool"] == "yes" for r in rows)
    assert [float(r["rating"]) for r in rows] == sorted((float(r["rating"]) for r in rows), reverse=True)
    assert search(catalog, domain, "price<1") == "No hotel matches 'price<1'."
    env = PreferenceEnv(difficulty="hard")
    env.reset(options={"task_index": 1})
    obs, _, terminated, _, info = env.step("[search] wifi=yes")
    assert obs[0]["content"].startswith("Error: unknown attribute 'wifi'") and info["action_valid"]
    assert not terminated and info["queries"] == ["wifi=yes"]


def test_both_action_styles():
    env = PreferenceEnv(difficulty="easy")
    _, info = env.reset(options={"task_index": 0})
    gold = info["gold"]

    def call(choice: str, content: str, call_id: str) -> str:
        args = {"name": "interact_with_env", "arguments": {"choice": choice, "content": content}, "id": call_id}
        return f"<tool_call>{json.dumps(args)}</tool_call>"

    obs, *_ = env.step(call("action", "Do you have a requirement about weight?", "c1"))
    assert obs[0]["role"] == "tool" and obs[0]["content"] == "At most 2 kg."
    obs, *_ = env.step(call("search", gold["query"], "c2"))
    assert obs[0]["role"] == "tool" and obs[0]["content"].splitlines()[1].startswith(gold["best"])
    obs, reward, terminated, _, info = env.step(call("answer", gold["best"], "c3"))
    assert terminated and reward == 1.0 and info["metrics"]["searches"] == 1.0
    env.reset(options={"task_index": 0})
    obs, *_ = env.step("Let me look. [search] weight<=2 touchscreen=yes sort=price")
    assert obs[0]["role"] == "user" and obs[0]["content"].splitlines()[1].startswith(gold["best"])
    _, _, _, _, info = env.step("[finish]")
    assert not info["action_valid"] and "[finish] is not available" in info["parse_error"]


def test_gold_ids_and_runner():
    env = PreferenceEnv()
    assert env.task_index_of("hard/7") == 7 * 3 + 2
    _, info = env.reset(options={"task_id": "hard/7"})
    gold = info["gold"]
    assert gold["category"] == "hard" and gold["best"] not in gold["acceptable"] and len(gold["hidden"]) == 6
    assert set(gold) >= {"goal", "hidden", "constraints", "priority", "best", "acceptable", "query", "domain"}
    with pytest.raises(ValueError):
        PreferenceEnv(difficulty="extreme")
    trajs = run(ENV_ID, "oracle", episodes=3, seed=0, progress=False)
    assert all(t.success for t in trajs)
    assert isinstance(gym.make(ENV_ID).unwrapped, PreferenceEnv)


# -- the scripted user states only what it is asked about ----------------------------------------------------------
@st.composite
def conversations(draw):
    difficulty = draw(st.sampled_from(DIFFICULTIES))
    task = make_task(difficulty, draw(st.integers(0, 9_999)))
    slots = slots_of(DOMAINS[task["domain"]])
    words = sorted({w for s in slots for w in (*s.aliases, *s.choices)})
    words += ["hello", "ok", "the", "is", "with", "without", "not", "it", "fine", "at most", "at least", "10", "2"]
    message = st.tuples(st.lists(st.sampled_from(words), min_size=1, max_size=4), st.sampled_from(["", "?", "."]))
    messages = draw(st.lists(message.map(lambda m: " ".join(m[0]) + m[1]), min_size=1, max_size=12))
    return task, messages, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_scripted_user_states_only_what_it_is_asked(case):
    task, messages, seed = case
    user = PreferenceEnv()._make_user(task)
    slots = slots_of(DOMAINS[task["domain"]])
    goal = {k: v.lower() for k, v in task["goal"].items()}
    user.reset(seed=seed)
    user.respond([], "")
    off = 0
    for message in messages:
        reply, done = user.respond([], message)
        assert not done
        text = reply.lower()
        stated = [k for k, v in goal.items() if find_word(v, text)]
        about = mentions(slots, message)
        first = about[0] if about else None
        off = 0 if any(m.slot in goal for m in about) else off + 1
        volunteered = reply.startswith(VOLUNTEER)
        assert len(stated) <= 1, (message, reply)
        if volunteered:
            assert task["volunteer_after"] is not None and off >= task["volunteer_after"], (message, reply)
            off = 0
        for key in stated:
            asked = first is not None and first.slot == key and first.question
            corrected = first is not None and first.slot == key and first.choice not in (None, goal[key])
            assert asked or corrected or volunteered, (message, reply, key)
