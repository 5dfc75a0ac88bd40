"""Shop-v0: WebShop's reward (against an independent implementation), pages and actions, agents, signals, contract."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys

import gymnasium as gym
import pytest
from thefuzz import fuzz

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.shop.catalogue import TYPES, build_catalogue
from agentgym.envs.shop.env import ShopEnv, parse_action
from agentgym.envs.shop.products import Goal, Product
from agentgym.envs.shop.reward import COLOR_SET, attribute_matches, option_matches, purchase_score, title_nouns
from agentgym.running.checker import check
from agentgym.running.runner import run

SEP = " [SEP] "


# --------------------------------------------------------------------------- an independent WebShop reward


def webshop_reward(purchased: dict, goal: dict, price: float, options: dict) -> float:
    """WebShop's reward written again from its definition, over WebShop's dict formats, with thefuzz (the library
    WebShop calls) and the documented noun stand-in in place of spaCy."""

    def colour(text: str) -> str:
        for c in COLOR_SET:
            if c in text:
                return c
        return text

    nouns_p, nouns_g = title_nouns(purchased["name"]), title_nouns(goal["name"])
    title_score = len(set(nouns_p) & set(nouns_g)) / len(nouns_g) if nouns_g else 0.2
    levels = [{x.strip() for x in d["product_category"].split("›")} for d in (purchased, goal)]
    match = purchased["query"] == goal["query"] or len(levels[0] & levels[1]) >= 2 or title_score > 0.2
    r_type = 0.0 if title_score == 0 else 0.1 if title_score < 0.1 else 1.0 if match else 0.5
    n_att = 0
    for g in goal["attributes"]:
        texts = (
            purchased["Title"].lower(),
            " ".join(purchased["BulletPoints"]).lower(),
            purchased["Description"].lower(),
        )
        fuzzy = any(fuzz.token_set_ratio(p, g) > 85 for p in purchased["Attributes"])
        n_att += fuzzy or any(g in text for text in texts)
    have = [colour(o) for o in options.values()]
    n_opt = sum(any(fuzz.token_set_ratio(h, colour(g)) > 85 for h in have) for g in goal["goal_options"])
    r_price = price <= goal["price_upper"]
    return r_type * (n_att + n_opt + r_price) / (len(goal["attributes"]) + len(goal["goal_options"]) + 1)


def as_webshop(p: Product) -> dict:
    return {"name": p.title, "Title": p.title, "query": p.query, "product_category": p.product_category,
            "Attributes": list(p.attributes), "BulletPoints": list(p.bullet_points),
            "Description": p.description}  # fmt: skip


def goal_dict(g: Goal) -> dict:
    return {"name": g.name, "query": g.query, "product_category": g.product_category, "attributes": list(g.attributes),
            "goal_options": list(g.options), "price_upper": g.price_upper}  # fmt: skip


def test_reward_agrees_with_an_independent_implementation_on_generated_purchases():
    cat = build_catalogue(600, seed=3)
    rng = random.Random(7)
    kinds = {"full": 0, "partial": 0, "zero": 0, "wrong type": 0}
    for _ in range(1500):
        goal = cat.goal(rng.randrange(600))
        same = [p for p in cat.products if p.query == goal.query]
        bought = rng.choice(same) if rng.random() < 0.7 else rng.choice(cat.products)  # often the right type
        selected = {name: rng.choice(values) for name, values in bought.options if rng.random() < 0.8}
        price = bought.price if rng.random() < 0.8 else goal.price_upper + rng.choice((-0.01, 0.0, 0.01))
        ours = purchase_score(bought, goal, price, selected).total
        theirs = webshop_reward(as_webshop(bought), goal_dict(goal), price, selected)
        assert ours == pytest.approx(theirs, abs=1e-12), (bought.asin, goal)
        kinds["full" if ours == 1 else "zero" if ours == 0 else "partial"] += 1
        kinds["wrong type"] += bought.query != goal.query and ours < 1
    assert min(kinds.values()) >= 20, kinds  # every case is exercised


def test_attribute_and_option_matching_by_hand():
    p = Product("B0X", "Acme Shampoo", "beauty", "shampoo", "Beauty › Hair", 5.0, "$5.0",
                ("tea tree", "essential oil", "natural ingredients"), (), "", (), ())  # fmt: skip
    # fuzzy: "essential oils" ~ "essential oil"
    assert attribute_matches(p, ["tea tree", "essential oils", "natural ingredients"]) == 3
    bare = Product("B0Y", "Acme Shampoo", "beauty", "shampoo", "Beauty › Hair", 5.0, "$5.0", (), (),
                   "Best shampoo, made with natural ingredients", ("It has essential oils",), ())  # fmt: skip
    assert attribute_matches(bare, ["tea tree", "essential oils", "natural ingredients"]) == 2  # text substrings
    assert option_matches(["pack of 12", "grey", "XL"], ["grey", "XL", "pack of 12"]) == 3
    assert option_matches(["pack of 12", "blue", "XL"], ["grey", "XL", "pack of 12"]) == 2
    assert option_matches(["pack of 12", "powder snow", "XL"], ["cool powder snow", "XL", "pack of 12"]) == 3
    assert option_matches(["navy blue"], ["dark blue"]) == 1  # both reduce to "blue"
    assert option_matches([], ["a", "b"]) == 0 and option_matches(["a"], []) == 0
    # WebShop matches sizes fuzzily too: a word subset scores 100
    assert option_matches(["x-small"], ["small"]) == 1 and option_matches(["l"], ["xl"]) == 0


def test_type_reward_and_total_by_hand():
    shirt = Product("B0A", "Acme Cotton Crew T-Shirt", "fashion", "men's shirts", "Clothing › Men › Shirts", 9.0,
                    "$9.0", ("machine wash",), (("size", ("small", "large")),), "", (), ())  # fmt: skip
    lamp = Product("B0B", "Lumo Desk Lamp", "electronics", "lamps", "Home › Lighting › Lamps", 9.0, "$9.0",
                   ("machine wash",), (("size", ("small", "large")),), "", (), ())  # fmt: skip
    goal = Goal("B0A", "...", ("machine wash", "slim fit"), ("large",), 20.0, shirt.title, shirt.query,
                shirt.category, shirt.product_category)  # fmt: skip
    # right type, 1 of 2 attributes, the option, the price: 1 * (1 + 1 + 1) / 4
    assert purchase_score(shirt, goal, 9.0, {"size": "large"}).total == 0.75
    assert purchase_score(shirt, goal, 25.0, {"size": "small"}).total == 0.25  # over the cap, wrong size
    s = purchase_score(lamp, goal, 9.0, {"size": "large"})  # no title noun shared: r_type 0
    assert (s.r_type, s.total, s.title_score) == (0.0, 0.0, 0.0)


# --------------------------------------------------------------------------- catalogue and agents


def test_catalogue_is_a_function_of_size_and_seed_in_any_process():
    code = ("import hashlib, json; from agentgym.envs.shop.catalogue import build_catalogue; "
            "c = build_catalogue(300, 5); "
            "print(hashlib.sha256(json.dumps([repr(p) for p in c.products] + [repr(c.goal(i)) for i in range(300)])"
            ".encode()).hexdigest())")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    c = build_catalogue(300, 5)
    here = hashlib.sha256(json.dumps([repr(p) for p in c.products] + [repr(c.goal(i)) for i in range(300)]).encode())
    assert out == here.hexdigest()
    assert build_catalogue(300, 6).products != c.products
    assert len({p.asin for p in c.products}) == 300
    assert {p.category for p in build_catalogue(2000).products} == {t.category for t in TYPES}


def play(env: ShopEnv, agent_name: str, index: int, seed: int = 0) -> tuple[float, dict, list[str]]:
    agent = env.agents[agent_name]()
    agent.reset(seed=seed)
    obs, info = env.reset(options={"task_index": index})
    messages, actions, total = list(obs), [], 0.0
    for _ in range(env.max_turns):
        action = agent.act(messages, info)
        actions.append(action)
        messages.append({"role": "assistant", "content": action})
        obs, r, term, trunc, info = env.step(action)
        messages += obs
        total += r
        if term or trunc:
            break
    return total, info, actions


def test_oracle_buys_a_full_score_product_on_every_tiny_task():
    env = ShopEnv(catalogue="tiny")
    for i in range(env.num_tasks):
        total, info, _ = play(env, "oracle", i)
        assert total == 1.0 and info["success"], (i, info.get("reward_parts"))


@pytest.mark.slow
def test_oracle_buys_a_full_score_product_on_every_default_task():
    env = ShopEnv()
    assert env.num_tasks == 5000
    failed = [i for i in range(env.num_tasks) if play(env, "oracle", i)[0] != 1.0]
    assert failed == []


def test_heuristic_beats_random_and_both_stay_below_the_oracle():
    h = run("agentgym/Shop-v0", "heuristic", episodes=40, seed=1, progress=False, env_kwargs={"catalogue": "1k"})
    r = run("agentgym/Shop-v0", "random", episodes=40, seed=1, progress=False, env_kwargs={"catalogue": "1k"})
    score = lambda eps: sum(sum(t.reward for t in e.turns) for e in eps) / len(eps)
    assert score(h) > score(r) + 0.3 and score(h) < 1.0


# --------------------------------------------------------------------------- pages and actions


def page(obs) -> list[str]:
    return obs[-1]["content"].rsplit("\n\n", 1)[-1].split("\nAvailable actions:")[0].split(SEP)


def test_the_pages_and_their_clicks_follow_webshop():
    env = ShopEnv(catalogue="tiny", show_actions=False)
    obs, info = env.reset(options={"task_index": 4})
    instruction = env.unwrapped._ep.goal.instruction
    assert page(obs) == ["WebShop", "Instruction:", instruction, "Search"]
    obs, _, _, _, info = env.step("click[back to search]")  # nothing to click on the search page
    assert not info["action_valid"] and "search[" in info["parse_error"]
    obs, _, _, _, info = env.step(f"search[{instruction}]")
    parts = page(obs)
    assert parts[:5] == ["Instruction:", instruction, "Back to Search", "Page 1 (Total results: 50)", "Next >"]
    assert "< Prev" not in parts and len([p for p in parts if p.startswith("B0")]) == 10
    assert info["admissible_commands"][:2] == ["click[back to search]", "click[next >]"]
    _, _, _, _, info = env.step("search[again]")
    assert not info["action_valid"] and "only on the search page" in info["parse_error"]
    obs, _, _, _, info = env.step("click[Next >]")  # any case
    assert "Page 2 (Total results: 50)" in page(obs) and "< Prev" in page(obs)
    for _ in range(4):
        obs, *_ = env.step("click[next >]")
    assert page(obs)[3:] == ["Page 6 (Total results: 50)", "< Prev", "Next >"]  # past the results: an empty page
    obs, *_ = env.step("click[< prev]")
    first = next(p for p in page(obs) if p.startswith("B0"))
    obs, _, _, _, info = env.step(f"click[{first.lower()}]")
    product = env.unwrapped.store.data.by_asin[first]
    parts = page(obs)
    assert parts[2:4] == ["Back to Search", "< Prev"] and parts[-4:] == [
        "Description",
        "Features",
        "Reviews",
        "Buy Now",
    ]
    assert f"Price: {product.price_tag}" in parts and product.title in parts
    name, values = product.options[0]
    obs, _, _, _, info = env.step(f"click[{values[-1]}]")
    assert env.unwrapped._ep.page.selected() == {name: values[-1]}
    obs, *_ = env.step("click[description]")
    assert page(obs) == ["Instruction:", instruction, "Back to Search", "< Prev", product.description]
    obs, *_ = env.step("click[< prev]")  # back to the item page, the selection kept
    assert env.unwrapped._ep.page.kind == "item" and env.unwrapped._ep.page.selected() == {name: values[-1]}
    value = info["purchase_value"]
    obs, reward, terminated, _, info = env.step("click[buy now]")
    assert terminated and reward == value == info["reward_parts"]["total"]
    assert page(obs) == ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{round(reward, 4)}"]


@pytest.mark.parametrize("action", ["", " ", "x" * 100_000, "search[]", "click[]", "click[nothing]", "search[a" * 3,
                                    "上", "\ud800", "\x00click[buy now]", "<action>click[buy now]",
                                    "search[" + "a " * 400 + "]",
                                    '{"name": "click"}', "click[buy now]click[buy now]"])  # fmt: skip
def test_hostile_actions_are_explained_not_raised(action):
    env = gym.make("agentgym/Shop-v0", catalogue="tiny")
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(action)
    assert isinstance(info["action_valid"], bool) and not terminated and reward == 0.0
    if not info["action_valid"]:
        assert info["parse_error"]


def test_action_forms():
    assert parse_action("click[buy now]") == ("click", "buy now")
    assert parse_action("Think: cheap.\nAction: search[red shoes]") == ("search", "red shoes")
    assert parse_action("<answer>CLICK[B0ABC]</answer>") == ("click", "B0ABC")
    assert isinstance(parse_action("I will buy it"), str)
    # a word-piece tokenizer's decoding: spaces around brackets and punctuation
    env = ShopEnv(catalogue="tiny")
    _, info = env.reset(options={"task_index": 0})
    _, _, _, _, info = env.step(f"search [ {info['gold']['search']} ]")
    assert info["action_valid"] and info["page"] == "results"
    _, _, _, _, info = env.step("click [ next > ]")
    assert info["action_valid"] and env.unwrapped._ep.page.page == 2
    _, _, _, _, info = env.step("click [ < prev ]")
    assert info["action_valid"] and env.unwrapped._ep.page.page == 1


# --------------------------------------------------------------------------- signals, anchors, contract


def test_signals_follow_the_selection_and_the_search():
    env = ShopEnv(catalogue="tiny")
    _, info = env.reset(options={"task_index": 7})
    gold = info["gold"]
    assert info["purchase_value"] is None and info["target_rank"] is None
    _, _, _, _, info = env.step(f"search[{gold['search']}]")
    assert info["target_rank"] is not None and info["purchase_value"] is None
    _, _, _, _, info = env.step(f"click[{gold['asin'].lower()}]")
    values = [info["purchase_value"]]
    for v in gold["select"].values():
        _, _, _, _, info = env.step(f"click[{v}]")
        values.append(info["purchase_value"])
    assert values == sorted(values) and values[-1] == 1.0  # each goal option selected raises it
    assert info["options_matched"] == len(gold["goal"]["options"]) and info["type_match"] == 1.0


def test_anchor_is_the_page_not_the_path():
    env = ShopEnv(catalogue="tiny")
    env.reset(options={"task_index": 0})
    env.step("search[Coffee  beans]")
    a = env.unwrapped.anchor()
    env.step("click[next >]")
    env.step("click[< prev]")
    assert env.unwrapped.anchor() == a
    env.step("click[back to search]")
    env.step("search[coffee beans]")
    assert env.unwrapped.anchor() == a


def test_snapshot_restore_and_same_seed_same_trajectory():
    env = ShopEnv(catalogue="tiny")
    _, info = env.reset(options={"task_index": 3})
    env.step(f"search[{info['gold']['search']}]")
    snap = env.snapshot()
    after = [env.step(a)[4]["anchor"] for a in (f"click[{info['gold']['asin'].lower()}]", "click[features]")]
    env.restore(snap)
    assert [env.step(a)[4]["anchor"] for a in (f"click[{info['gold']['asin'].lower()}]", "click[features]")] == after
    a = run("agentgym/Shop-v0", "random", episodes=4, seed=11, progress=False, env_kwargs={"catalogue": "tiny"})
    b = run("agentgym/Shop-v0", "random", episodes=4, seed=11, progress=False, env_kwargs={"catalogue": "tiny"})
    assert [[t.action for t in x.turns] for x in a] == [[t.action for t in x.turns] for x in b]


def test_check_env_and_cli_check():
    assert check("agentgym/Shop-v0", env_kwargs={"catalogue": "tiny"}).ok
    proc = subprocess.run([sys.executable, "-m", "agentgym.cli", "check", "agentgym/Shop-v0"], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0 and "OK" in proc.stdout


def test_public_args_refuse_large_catalogues():
    from agentgym.contract.trust import UntrustedArgumentError, checked_kwargs

    assert checked_kwargs("agentgym/Shop-v0", {"catalogue": "1k", "show_attrs": True}) == {
        "catalogue": "1k",
        "show_attrs": True,
    }
    for kwargs in ({"catalogue": "300k"}, {"catalogue": "../x"}, {"seed": -1}):
        with pytest.raises(UntrustedArgumentError):
            checked_kwargs("agentgym/Shop-v0", kwargs)
