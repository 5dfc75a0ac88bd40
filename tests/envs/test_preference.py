"""Preference-v0: the checker, the oracle on 500 tasks, heuristic, natural and random rates per difficulty (hard
separates agents by what they ask), golden dialogues, cross-process determinism, graded answers, the search syntax,
both action styles, loosely held must-haves and patience, and the scripted user's discipline (hypothesis). The
paraphrase suite is tests/envs/test_preference_paraphrases.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.user_sim.preference import (
    DIFFICULTIES,
    DOMAINS,
    LEVELS,
    PRIORITY,
    SHOWN,
    Lexicon,
    PreferenceEnv,
    PreferenceFocusedAgent,
    PreferenceHeuristicAgent,
    PreferenceKeywordAgent,
    PreferenceNaturalAgent,
    PreferenceOracleAgent,
    PreferenceRandomAgent,
    PreferenceUser,
    Reading,
    make_task,
    phrase_of,
    satisfies,
    score,
    search,
)
from agentgym.envs.user_sim.users import VOLUNTEER, find_word
from agentgym.running.checker import check
from agentgym.running.runner import run

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


@pytest.mark.slow
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


AGENTS = (("oracle", PreferenceOracleAgent), ("heuristic", PreferenceHeuristicAgent),
          ("natural", PreferenceNaturalAgent), ("random", PreferenceRandomAgent),
          ("keyword", PreferenceKeywordAgent), ("focused", PreferenceFocusedAgent))  # fmt: skip


@pytest.mark.slow
def test_agents_per_difficulty(capsys):
    """heuristic and natural share a strategy (every attribute, then the priority) and differ in wording only: their
    success stays within 0.05 at every level. At hard, where the user's patience does not cover every attribute
    plus the follow-ups its loosely held must-haves need, neither reaches 1.0: hard rewards asking about what
    matters, not wording."""
    rates = {}
    for difficulty in DIFFICULTIES:
        env = PreferenceEnv(difficulty=difficulty)
        for name, cls in AGENTS:
            metrics = [play(env, cls(), i)[1]["metrics"] for i in range(100)]
            rates[difficulty, name] = {k: sum(m[k] for m in metrics) / len(metrics)
                                       for k in ("success", "acceptable", "questions")}  # fmt: skip
    with capsys.disabled():
        print("\nPreference-v0 (100 tasks each): success / acceptable / questions")
        for (difficulty, name), r in rates.items():
            print(f"  {difficulty:6} {name:9} {r['success']:.2f} / {r['acceptable']:.2f} / {r['questions']:.1f}")
    for difficulty in DIFFICULTIES:
        oracle, heuristic, natural, random, keyword, focused = (rates[difficulty, n] for n, _ in AGENTS)
        assert focused["success"] == 1.0 and focused["questions"] < heuristic["questions"]
        assert oracle["success"] == 1.0
        assert abs(natural["success"] - heuristic["success"]) <= 0.05, difficulty
        assert heuristic["questions"] > oracle["questions"] and natural["questions"] > oracle["questions"]
        assert random["success"] <= 0.1 and random["success"] + random["acceptable"] <= 0.3
        if difficulty == "hard":
            assert 0.5 <= heuristic["success"] <= 0.9  # patience runs out before every attribute is asked
            assert keyword["success"] <= 0.1  # the template alone never pins a loosely held must-have
        else:
            assert heuristic["success"] >= 0.95  # it asks about every attribute: right, but not efficient


def test_hard_is_won_by_what_is_asked_not_how():
    """``focused`` (not privileged) asks what matters instead of every attribute: it wins every hard task within
    the user's patience, with at most nine questions."""
    env = PreferenceEnv(difficulty="hard")
    results = [play(env, PreferenceFocusedAgent(), i)[1] for i in range(100)]
    assert all(info["success"] for info in results), [i for i, info in enumerate(results) if not info["success"]]
    assert max(info["metrics"]["questions"] for info in results) <= 9


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
        ("Which area do you prefer?", "I don't mind either way."),  # no must-have on the area
        ("Is it fine if the rating is at least 7 out of 10?", "No, at least 8 out of 10, please."),
        ("So within 1 km then.", "Okay."),  # a wrong assumption; cooperativeness 0.5: not corrected this time
        ("Do you need vegetarian dishes?", "Yes, it must come with vegetarian dishes."),
        ("Hello there.", "Sorry, what do you need to know?"),
        ("Thanks.", "Could you ask me something more specific?"),
        ("Great, anything else.", "I'm not sure what you mean."),  # a statement, not a question
        ("Ok.", "By the way, it should be within 3 km."),  # the fourth off-target message: volunteers
        ("What matters most: price or rating?", "The lowest price, please."),
        ("Anything else I should know?", "That's everything I can tell you."),
    ],
    ("easy", 1): [
        ("Hello!", "Sorry, what do you need to know?"),
        ("How are you?", "Oh, and without a touchscreen, please."),  # not the colour the opening stated
        ("Any brand?", "I have no preference there."),
        ("Let me think.", "Oh, and the lowest weight, please."),
        ("Hmm.", "That's everything I can tell you."),
        ("Is it without a touchscreen?", "Yes, it must come without a touchscreen."),
    ],
    ("hard", 0): [  # price and battery held loosely; patience 11 questions
        ("What is your budget?", "I don't want to spend too much."),
        ("Is 1000 euros ok?", "No. I don't want to spend too much."),
        ("How much memory do you need?", "I have no fixed limit there."),
        ("What is the most you would pay?", "At most 800 euros."),
        ("Should I sort by price or rating?", "What I care about most is the highest rating."),
        (
            "Do you need a touchscreen or a backlit keyboard?",
            "No, it must come without a touchscreen. Yes, it must come with a backlit keyboard.",
        ),  # two questions
        ("Anything else?", "Blue, please."),
        ("How long should the battery last?", "The battery should last a good while."),
        ("At least how many hours?", "At least 12 hours."),
        ("Anything else?", "I think I've told you all I know."),
        ("What colour?", "Let's stop here, I'm out of time."),  # the twelfth question
    ],
}
OPENINGS = {
    ("medium", 0): "Can you recommend a restaurant serving greek food?",
    ("easy", 1): "I need a new laptop in blue.",
    ("hard", 0): "I need a new laptop.",
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


# -- the scripted user states only what it is asked about, and only the truth ------------------------------------
@st.composite
def conversations(draw):
    difficulty = draw(st.sampled_from(DIFFICULTIES))
    task = make_task(difficulty, draw(st.integers(0, 9_999)))
    domain = DOMAINS[task["domain"]]
    words = sorted({w for a in domain.attributes for w in (*a.aliases, *a.vague, *a.best, *map(str, a.values[:6]))})
    words += ["hello", "ok", "the", "is", "with", "without", "not", "it", "fine", "at most", "at least", "under",
              "too", "enough", "or", "and", "10", "2", "800", "16 gb", "matters most", "sort by", "anything else",
              "what else", "limit", "exactly", "tell me"]  # fmt: skip
    message = st.tuples(st.lists(st.sampled_from(words), min_size=1, max_size=5), st.sampled_from(["", "?", "."]))
    clauses = st.lists(message.map(lambda m: " ".join(m[0]) + m[1]), min_size=1, max_size=3).map(" ".join)
    messages = draw(st.lists(clauses, min_size=1, max_size=12))
    return task, messages, draw(st.integers(0, 2**32 - 1))


def _musts(domain) -> dict[str, list[str]]:
    """Every must-have (and priority) phrase the user could state, per slot."""
    out = {}
    for a in domain.attributes:
        values = (True, False) if a.kind == "flag" else a.thresholds if a.kind == "number" else a.values
        out[a.key] = [phrase_of(a, v) for v in values]
    out[PRIORITY] = [a.soft for a in domain.attributes if a.soft]
    return out


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_scripted_user_states_only_what_it_is_asked_and_only_the_truth(case):
    task, messages, seed = case
    user = PreferenceEnv()._make_user(task)
    domain = DOMAINS[task["domain"]]
    goal = {k: v.lower() for k, v in task["goal"].items()}
    musts = _musts(domain)
    user.reset(seed=seed)
    user.respond([], "")
    told = {k for k in goal if k not in task["hidden"]}
    for message in messages:
        reading = user.lexicon.read(message)
        reply, done = user.respond([], message)
        if done:
            assert reply.endswith("###STOP###") and task.get("patience") is not None
            break
        text = reply.lower()
        for key, phrases in musts.items():  # never a must-have the user does not hold
            for phrase in phrases:
                if find_word(phrase, text):
                    assert goal.get(key) == phrase, (message, reply)
        stated = {k for k, v in goal.items() if find_word(v, text)}
        asked = {a.slot for a in reading.asks}
        volunteered = reply.startswith(VOLUNTEER)
        if volunteered:
            assert task["volunteer_after"] is not None, (message, reply)
        extra = stated - asked - told
        assert len(extra) <= (1 if reading.indirect or volunteered else 0), (message, reply, extra)
        for key in stated & set(task["loose"]) - told:  # a loose must-have: stated when its limit is asked
            ask = next((a for a in reading.asks if a.slot == key), None)
            assert ask is None or ask.limit or not ask.question or ask.values, (message, reply)
        told |= stated


def test_patience_counts_the_questions_asked():
    task = make_task("hard", 1)
    user = PreferenceEnv()._make_user(task)
    user.reset(seed=0)
    user.respond([], "")
    three = "Which area? Any budget? How many stars?"
    assert task["domain"] == "hotel" and task["patience"] == 11
    for _ in range(3):
        assert not user.respond([], three)[1]
    assert not user.respond([], "Anything else?")[1]
    assert not user.respond([], "What matters most?")[1]
    reply, done = user.respond([], "Is there parking?")
    assert done and reply.endswith("###STOP###")


def test_lexicon_reads_numbers_flags_and_priorities():
    lex = Lexicon.of(DOMAINS["laptop"])
    (ask,) = lex.read("Is 2 kg too heavy?").asks
    assert (ask.slot, ask.number, ask.bound, ask.too) == ("weight", 2.0, "", True)
    (ask,) = lex.read("€1,200 max?").asks
    assert (ask.slot, ask.number, ask.bound) == ("price", 1200.0, "upper")
    assert [a.flag for a in lex.read("Do you want a touchscreen but no backlit keyboard?").asks] == [True, False]
    assert lex.read("With or without a touchscreen?").asks[0].flag is None
    assert lex.read("What's the most you'd pay?").asks[0].limit
    assert lex.read("Should the keys light up?").asks[0].slot == "keyboard"  # "light up" beats "light" (weight)
    assert lex.read("Which is the lightest?").asks[0].values == ("lowest weight",)
    assert lex.read("Anything else I should know?") == Reading((), True)
    hotel = Lexicon.of(DOMAINS["hotel"])
    assert hotel.read("How far from the centre?").asks[0].slot == "distance"  # not the area "centre"
    assert hotel.read("In the centre?").asks[0].values == ("centre",)
    assert [a.slot for a in hotel.read("How much? Is a 4-star hotel fine?").asks] == ["price", "stars"]


def test_user_rejects_loose_must_haves_that_are_not_numbers():
    task = make_task("medium", 0)
    with pytest.raises(ValueError, match="only number must-haves"):
        PreferenceUser(DOMAINS[task["domain"]], task["constraints"], task["goal"], task["request"],
                       loose=["vegetarian"])  # fmt: skip
