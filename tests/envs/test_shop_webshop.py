"""WebShop-v0: the real WebShop data files read with WebShop's rules, played through Shop-v0.

The sample under tests/data/webshop is hand-written in WebShop's formats (items_shuffle.json, items_ins_v2.json,
items_human_ins.json): a shirt with a colour x size grid ("Black/White", " Large "), shoes priced as a range with a
null option list, a soap with empty pricing and no options, a repeated ASIN, an ASIN "nan", one too long, a mug
missing from items_ins_v2 (no pricing) and a tea priced above every cap.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401  (registers the envs)
from agentgym.contract.env import EnvUnavailableError
from agentgym.contract.trust import UntrustedArgumentError, checked_kwargs
from agentgym.envs.shop.products import NO_CAP, price_cap
from agentgym.envs.shop.webshop import WebShopEnv, load_webshop, webshop_files
from agentgym.running.runner import builtin_agents, run

ENV = "agentgym/WebShop-v0"
SAMPLE = Path(__file__).parent.parent / "data" / "webshop"
PRICE_TEXT = re.compile(r", and price lower than (\d+\.\d\d) dollars$")

#: The sample's human goals before the shuffle: product order, the instruction without attributes left out.
HUMAN = [
    ("B000SHIRT1", "i need a machine wash cotton t-shirt for men in navy blue, size large"),
    ("B000SHIRT1", "i want a short sleeve t-shirt in x-large"),
    ("B000SHOE02", "i want lightweight running shoes in size 9"),
    ("B000SOAP03", "i'm looking for an unscented bar soap for sensitive skin"),
    ("B000TEA005", "i need organic green tea"),
]
SHIRT = "i am looking for a machine wash men's t-shirt with "
#: The synthetic goals before the shuffle: one per option combination, option names sorted (color, then size).
SYNTHETIC = [
    ("B000SHIRT1", SHIRT + "color: navy blue, and size: large", ("navy blue", "large")),
    ("B000SHIRT1", SHIRT + "color: navy blue, and size: x-large", ("navy blue", "x-large")),
    ("B000SHIRT1", SHIRT + "color: black | white, and size: large", ("black | white", "large")),
    ("B000SHIRT1", SHIRT + "color: black | white, and size: x-large", ("black | white", "x-large")),
    ("B000SHOE02", "i want lightweight running shoes with size: 8", ("8",)),
    ("B000SHOE02", "i want lightweight running shoes with size: 9", ("9",)),
    ("B000SHOE02", "i want lightweight running shoes with size: 10", ("10",)),
    ("B000TEA005", "i need organic green tea", ()),
]


def webshop_shuffled(items: list[Any]) -> list[Any]:
    """What WebShop's SimServer does to its goal list: ``random.seed(233); random.shuffle(goals)``."""
    state = random.getstate()
    try:
        out = list(items)
        random.seed(233)
        random.shuffle(out)
        return out
    finally:
        random.setstate(state)


def split_text(instruction: str) -> tuple[str, float]:
    """An instruction's text without the price text, and its cap (NO_CAP without one)."""
    m = PRICE_TEXT.search(instruction)
    return (instruction[: m.start()], float(m[1])) if m else (instruction, NO_CAP)


def caps_above(price: float) -> set[float]:
    """The caps WebShop may draw for ``price`` (hand rule): the 2nd-4th of the first four multiples of ten above."""
    above = [10.0 * i for i in range(1, 100) if 10.0 * i > price][:4]
    return set(above[1:]) if len(above) >= 2 else {NO_CAP}


# -- loading -----------------------------------------------------------------------------------------------------------


def test_products_are_read_with_webshops_rules():
    data = load_webshop(str(SAMPLE))
    # the repeated ASIN, "nan" and the 13-character ASIN are skipped; the first listing of an ASIN stays
    assert [p.asin for p in data.products] == ["B000SHIRT1", "B000SHOE02", "B000SOAP03", "B000MUG004", "B000TEA005"]
    shirt, shoes, soap, mug, tea = data.products
    assert data.by_asin["B000SHIRT1"] is shirt and shirt.title == "Acme Cotton Crew T-Shirt for Men"
    assert shirt.query == "men's t-shirts" and shirt.category == "fashion"
    assert shirt.product_category == "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts"
    assert shirt.options == (("color", ("navy blue", "black | white")), ("size", ("large", "x-large")))
    assert shirt.description == "A soft crew neck t-shirt. Machine wash cold."
    assert shirt.bullet_points == ("100% cotton", "Machine wash", "Short sleeve crew neck")
    assert shirt.attributes == ("machine wash", "cotton", "short sleeve")
    assert (shirt.price, shirt.price_tag, shirt.reviews, shirt.rating) == (12.99, "$12.99", (), "N.A.")
    # a price range: the tag shows it, the price is drawn in it; a null option list is left out
    assert shoes.price_tag == "$65.0 to $80.0" and 65.0 <= shoes.price <= 80.0
    assert shoes.options == (("size", ("8", "9", "10")),)
    # empty pricing and no options; small_description as one string
    assert (soap.price, soap.price_tag, soap.options) == (100.0, "$100.0", ())
    assert soap.bullet_points == ("Made for sensitive skin",)
    # null pricing; not in items_ins_v2
    assert (mug.price, mug.price_tag, mug.attributes) == (100.0, "$100.0", ("DUMMY_ATTR",))
    assert tea.price == 995.0
    assert data.skipped == 1  # the human instruction without attributes


def test_num_products_keeps_the_first_entries_of_the_file_before_skipping():
    assert [p.asin for p in load_webshop(str(SAMPLE), num_products=3).products] == [
        "B000SHIRT1", "B000SHOE02", "B000SOAP03"
    ]  # fmt: skip
    assert len(load_webshop(str(SAMPLE), num_products=6).products) == 3  # entries 4-6 are all skipped
    with pytest.raises(ValueError, match="num_products"):
        load_webshop(str(SAMPLE), num_products=0)


def test_human_goals_are_webshops_in_its_shuffled_order():
    data = load_webshop(str(SAMPLE))
    assert data.num_goals == 5
    got = [(g.asin, split_text(g.instruction)[0]) for g in data.goals]
    assert got == webshop_shuffled(HUMAN)
    prices = {p.asin: p.price for p in data.products}
    for g in data.goals:
        text, cap = split_text(g.instruction)
        assert g.price_upper == cap and cap in caps_above(prices[g.asin]), (g.instruction, prices[g.asin])
        assert not text.endswith(".")
    shirt = next(g for g in data.goals if g.instruction.startswith("i need a machine wash"))
    assert shirt.attributes == ("machine wash", "cotton") and shirt.options == ("navy blue", "large")
    assert (shirt.name, shirt.query) == ("Acme Cotton Crew T-Shirt for Men", "men's t-shirts")
    assert shirt.category == "fashion"
    tea = next(g for g in data.goals if g.asin == "B000TEA005")
    assert (tea.instruction, tea.price_upper) == ("i need organic green tea", NO_CAP)  # $995: no cap, no price text


def test_synthetic_goals_are_one_per_option_combination_in_webshops_shuffled_order():
    data = load_webshop(str(SAMPLE), human_goals=False)
    got = [(g.asin, split_text(g.instruction)[0], g.options) for g in data.goals]
    assert got == webshop_shuffled(SYNTHETIC)
    for asin in ("B000SHIRT1", "B000SHOE02"):  # one cap per product
        assert len({g.price_upper for g in data.goals if g.asin == asin}) == 1
    assert all(g.attributes == {"B000SHIRT1": ("machine wash",), "B000SHOE02": ("lightweight",),
                                "B000TEA005": ("organic",)}[g.asin] for g in data.goals)  # fmt: skip


def test_prices_and_caps_come_from_the_seeded_generator_in_webshops_order():
    data = load_webshop(str(SAMPLE), seed=7)
    rng = random.Random(7)
    shoes = rng.uniform(65.0, 80.0)  # the only range-priced product draws first
    assert data.by_asin["B000SHOE02"].price == shoes
    prices = {"B000SHIRT1": 12.99, "B000SHOE02": shoes, "B000SOAP03": 100.0, "B000TEA005": 995.0}
    caps = [price_cap(prices[asin], rng) for asin, _ in HUMAN]  # then one cap per goal, before the shuffle
    by_text = {split_text(g.instruction)[0]: g.price_upper for g in data.goals}
    assert [by_text[text] for _, text in HUMAN] == caps
    again = load_webshop(str(SAMPLE), seed=7)
    assert [g.instruction for g in again.goals] == [g.instruction for g in data.goals]
    assert load_webshop(str(SAMPLE), seed=8).by_asin["B000SHOE02"].price != shoes


# -- which files -------------------------------------------------------------------------------------------------------


def _copy(tmp_path: Path, **names: str) -> Path:
    """The sample's files under other names (``target=source``); a ``_1000`` products file keeps 3 entries."""
    for target, source in names.items():
        raw = json.loads((SAMPLE / source).read_text(encoding="utf-8"))
        if source == "items_shuffle.json" and "_" in target.removeprefix("items_shuffle"):
            raw = raw[:3]
        (tmp_path / f"{target}.json").write_text(json.dumps(raw), encoding="utf-8")
    return tmp_path


def test_the_full_files_are_preferred_and_a_named_one_wins(tmp_path):
    _copy(tmp_path, items_shuffle="items_shuffle.json", items_shuffle_1000="items_shuffle.json",
          items_ins_v2="items_ins_v2.json", items_ins_v2_1000="items_ins_v2.json",
          items_human_ins="items_human_ins.json")  # fmt: skip
    files = webshop_files(str(tmp_path))
    assert (Path(files.products).name, Path(files.ins).name) == ("items_shuffle.json", "items_ins_v2.json")
    assert len(load_webshop(str(tmp_path)).products) == 5
    files = webshop_files(str(tmp_path), products_file="items_shuffle_1000.json")
    assert (Path(files.products).name, Path(files.ins).name) == ("items_shuffle_1000.json", "items_ins_v2_1000.json")
    assert len(load_webshop(str(tmp_path), products_file="items_shuffle_1000.json").products) == 3
    files = webshop_files(str(tmp_path), products_file="items_shuffle_1000.json", ins_file="items_ins_v2.json")
    assert Path(files.ins).name == "items_ins_v2.json"
    for bad in ("../items_shuffle.json", "/etc/passwd", ""):
        with pytest.raises(ValueError, match="products_file must be a file name inside data_dir"):
            webshop_files(str(tmp_path), products_file=bad)


def test_the_only_file_is_read_and_several_without_the_full_one_must_be_named(tmp_path):
    _copy(tmp_path, items_shuffle_1000="items_shuffle.json", items_ins_v2_1000="items_ins_v2.json",
          items_human_ins="items_human_ins.json")  # fmt: skip
    assert len(load_webshop(str(tmp_path)).products) == 3
    _copy(tmp_path, items_shuffle_100="items_shuffle.json")
    with pytest.raises(ValueError, match=r"several items_shuffle\*\.json files .*products_file="):
        webshop_files(str(tmp_path))
    files = webshop_files(str(tmp_path), products_file="items_shuffle_100.json")  # no _100 ins: the only one
    assert Path(files.ins).name == "items_ins_v2_1000.json"


def _products(tmp_path: Path, edit: dict[str, Any]) -> Path:
    raw = json.loads((SAMPLE / "items_shuffle.json").read_text(encoding="utf-8"))
    raw[0].update(edit)
    (tmp_path / "items_shuffle.json").write_text(json.dumps(raw), encoding="utf-8")
    for name in ("items_ins_v2.json", "items_human_ins.json"):
        shutil.copy(SAMPLE / name, tmp_path / name)
    return tmp_path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"pricing": "12.99"}, r"B000SHIRT1.*'pricing' '12.99' has no price after a '\$'"),
        ({"pricing": 12.99}, r"B000SHIRT1.*'pricing' must be a string"),
        ({"name": None}, r"B000SHIRT1.*'name' must be a string"),
        ({"customization_options": {"Color": ["navy"]}}, r"B000SHIRT1.*customization option 'Color' must be a list"),
        ({"customization_options": ["navy"]}, r"'customization_options' must be an object or null"),
        ({"small_description": [1, 2]}, r"'small_description' must be a list of strings"),
        ({"asin": 7}, r"product 0: 'asin' must be a string"),
    ],
)
def test_a_malformed_product_is_a_value_error_naming_the_file_and_the_product(tmp_path, edit, message):
    _products(tmp_path, edit)
    with pytest.raises(ValueError, match=message) as err:
        load_webshop(str(tmp_path))
    assert str(err.value).startswith(str(tmp_path / "items_shuffle.json"))


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("items_shuffle.json", {"asin": "B000SHIRT1"}, "must hold a JSON list of product objects"),
        ("items_shuffle.json", "[{", "is not valid JSON"),
        ("items_ins_v2.json", [], r"must hold a JSON object of ASIN -> an object"),
        ("items_human_ins.json", {"B000SHIRT1": {"instruction": "x"}},
         r"must hold a JSON object of ASIN -> a list of instruction objects; B000SHIRT1 has \{'instruction'"),
        ("items_human_ins.json", {"B000SHIRT1": [{"instruction": "x"}]}, r"B000SHIRT1\[0\]: 'instruction_attributes'"),
        ("items_human_ins.json", {"B000SHIRT1": [{"instruction": "x", "instruction_attributes": ["a"]}]},
         r"B000SHIRT1\[0\]: 'instruction_options' must be a list"),
    ],
)  # fmt: skip
def test_a_file_of_the_wrong_shape_is_a_value_error_naming_it(tmp_path, name, content, message):
    _products(tmp_path, {})
    (tmp_path / name).write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    with pytest.raises(ValueError, match=message) as err:
        load_webshop(str(tmp_path))
    assert str(err.value).startswith(str(tmp_path / name))


def test_a_synthetic_instruction_without_attributes_is_a_value_error(tmp_path):
    """WebShop asserts that a synthetic instruction has attributes; human goals skip such instructions instead."""
    _products(tmp_path, {})
    ins = json.loads((SAMPLE / "items_ins_v2.json").read_text(encoding="utf-8"))
    ins["B000SHOE02"]["instruction_attributes"] = []
    (tmp_path / "items_ins_v2.json").write_text(json.dumps(ins), encoding="utf-8")
    assert load_webshop(str(tmp_path)).num_goals == 5
    with pytest.raises(ValueError, match=r"items_ins_v2.json: B000SHOE02: an instruction needs .* instruction attr"):
        load_webshop(str(tmp_path), human_goals=False)


# -- the env -----------------------------------------------------------------------------------------------------------


def test_the_oracle_buys_every_goal_for_a_score_of_one():
    trajs = run(ENV, "oracle", episodes=5, env_kwargs={"data_dir": str(SAMPLE), "split": "all"}, progress=False)
    assert sorted(t.task_id for t in trajs) == [f"webshop/{i}" for i in range(5)]
    assert all(t.success and t.total_reward == 1.0 for t in trajs), [(t.task_id, t.total_reward) for t in trajs]


def _play(env: WebShopEnv, actions: list[str]) -> tuple[float, dict[str, Any]]:
    for action in actions:
        obs, reward, terminated, _, info = env.step(action)
        assert info["action_valid"], (action, obs[-1]["content"])
    assert terminated
    return reward, info


def test_wrong_purchases_score_what_webshops_formula_gives():
    env = gym.make(ENV, data_dir=str(SAMPLE), split="all").unwrapped
    shirt = next(i for i in range(env.num_tasks) if env.store.data.goal(i).instruction.startswith("i need a machine"))
    # the goal: attributes (machine wash, cotton), options (navy blue, large), a cap of 30-50 dollars
    env.reset(options={"task_index": shirt})
    reward, info = _play(env, ["search[acme ceramic coffee mug]", "click[b000mug004]", "click[buy now]"])
    # the mug: title nouns {acme, ceramic, coffee, mug} share 'acme' with the shirt's five nouns {acme, cotton,
    # crew, shirt, men}: title score 1/5 = 0.2, no query or breadcrumb match -> r_type 0.5; 'cotton' is in its
    # features (1 of 2 attributes), no options, $100 over the cap: 0.5 * (1 + 0 + 0) / (2 + 2 + 1) = 0.1
    parts = info["reward_parts"]
    assert (parts["r_type"], parts["title_score"], parts["attributes_matched"], parts["options_matched"],
            parts["price_ok"]) == (0.5, 0.2, 1, 0, False)  # fmt: skip
    assert reward == pytest.approx(0.1)
    env.reset(options={"task_index": shirt})
    reward, info = _play(env, ["search[acme cotton crew t-shirt]", "click[b000shirt1]", "click[black | white]",
                               "click[x-large]", "click[buy now]"])  # fmt: skip
    # the shirt in the wrong colour: both attributes, 'x-large' matches 'large' (token set), 'black' does not
    # match 'blue' (navy blue's colour), $12.99 under the cap: 1.0 * (2 + 1 + 1) / 5 = 0.8
    assert (info["reward_parts"]["attributes_matched"], info["reward_parts"]["options_matched"]) == (2, 1)
    assert reward == pytest.approx(0.8)


def _generated(tmp_path: Path, n_products: int = 17, per_product: int = 100) -> list[str]:
    """A data folder of ``n_products`` products with ``per_product`` human instructions each; the instructions in
    WebShop's pre-shuffle order."""
    products, human, texts = [], {}, []
    for i in range(n_products):
        asin = f"B0GEN{i:05d}"
        products.append({"asin": asin, "name": f"Generated Widget {i}", "full_description": "", "small_description": [],
                         "pricing": "$5.00", "images": [""], "customization_options": {}, "category": "tools",
                         "query": "widget", "product_category": "Tools › Widgets"})  # fmt: skip
        human[asin] = []
        for _ in range(per_product):
            texts.append(f"goal {len(texts)}")
            human[asin].append({"instruction": texts[-1], "instruction_attributes": ["sturdy"],
                                "instruction_options": []})  # fmt: skip
    (tmp_path / "items_shuffle.json").write_text(json.dumps(products), encoding="utf-8")
    (tmp_path / "items_ins_v2.json").write_text("{}", encoding="utf-8")
    (tmp_path / "items_human_ins.json").write_text(json.dumps(human), encoding="utf-8")
    return texts


def test_splits_are_webshops_goal_ranges_and_task_ids_are_global(tmp_path):
    expected = webshop_shuffled(_generated(tmp_path))  # 1,700 goals
    envs = {s: gym.make(ENV, data_dir=str(tmp_path), split=s).unwrapped for s in ("test", "eval", "train", "all")}
    assert {s: e.num_tasks for s, e in envs.items()} == {"test": 500, "eval": 1000, "train": 200, "all": 1700}
    assert envs["test"].store.index is envs["train"].store.index  # one store for every split
    every = envs["all"].store.data
    assert [split_text(every.goal(i).instruction)[0] for i in range(1700)] == expected
    for split, first, last in (("test", 0, 499), ("eval", 500, 1499), ("train", 1500, 1699)):
        env = envs[split]
        for local, index in ((0, first), (env.num_tasks - 1, last)):
            info = env.reset(options={"task_index": local})[1]
            assert info["task_id"] == f"webshop/{index}"
            assert info["gold"]["goal"]["instruction"].startswith(expected[index] + ", and price lower than")
            assert env.task_index_of(f"webshop/{index}") == local
        with pytest.raises(ValueError, match="unknown task_id"):
            env.task_index_of(f"webshop/{last + 1}")
        if first:
            with pytest.raises(ValueError, match="unknown task_id"):
                env.task_index_of(f"webshop/{first - 1}")
    assert envs["eval"].reset(options={"task_id": "webshop/700"})[1]["task_id"] == "webshop/700"
    for bad in ("webshop/x", "s0/700", "700"):
        with pytest.raises(ValueError, match="unknown task_id"):
            envs["eval"].task_index_of(bad)
    with pytest.raises(ValueError, match=r"split 'eval' .* is empty: the data has 500 goals"):
        gym.make(ENV, data_dir=str(tmp_path), split="eval", num_products=5)
    with pytest.raises(ValueError, match="split must be one of"):
        WebShopEnv(data_dir=str(tmp_path), split="valid")


def test_without_the_data_the_env_constructs_and_says_what_to_download(monkeypatch, tmp_path):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    env = gym.make(ENV)
    assert builtin_agents(env) == [] and env.unwrapped.num_tasks == 0
    with pytest.raises(EnvUnavailableError) as err:
        env.reset(seed=0)
    message = str(err.value)
    assert message == env.unwrapped.unavailable_reason and err.value.env_unavailable
    assert message.startswith("agentgym/WebShop-v0 is unavailable here")
    for needed in ("$WEBSHOP_DATA", "items_shuffle.json", "items_ins_v2.json", "items_human_ins.json", "setup.sh",
                   "agentgym/Shop-v0"):  # fmt: skip
        assert needed in message
    assert f"items_shuffle*.json in {tmp_path}" in WebShopEnv(data_dir=str(tmp_path)).unavailable_reason
    _copy(tmp_path, items_shuffle="items_shuffle.json", items_ins_v2="items_ins_v2.json")
    assert f"items_human_ins.json in {tmp_path}" in WebShopEnv(data_dir=str(tmp_path)).unavailable_reason
    assert WebShopEnv(data_dir=str(tmp_path), human_goals=False, split="all").num_tasks == 8
    monkeypatch.setenv("WEBSHOP_DATA", str(SAMPLE))
    env = gym.make(ENV, split="all")
    assert env.unwrapped.unavailable_reason is None and env.unwrapped.num_tasks == 5
    assert sorted(builtin_agents(env)) == ["heuristic", "oracle", "random", "rule"]


def test_check_env_passes():
    check_env(gym.make(ENV, data_dir=str(SAMPLE)).unwrapped, skip_render_check=True)


def test_data_dir_and_the_files_are_the_operators():
    assert checked_kwargs(ENV, {"split": "eval", "show_attrs": True, "show_actions": False, "max_turns": 30}) == {
        "split": "eval", "show_attrs": True, "show_actions": False, "max_turns": 30
    }  # fmt: skip
    for name, value in (("data_dir", str(SAMPLE)), ("products_file", "items_shuffle.json"), ("ins_file", "x.json"),
                        ("num_products", 1000), ("human_goals", False), ("split", "valid")):  # fmt: skip
        with pytest.raises(UntrustedArgumentError, match=repr(name)):
            checked_kwargs(ENV, {name: value})
    assert checked_kwargs(ENV, {"data_dir": "/srv/webshop"}, operator={"data_dir": "/srv/webshop"}) == {
        "data_dir": "/srv/webshop"
    }
