"""MatchTIR matching (docs/rewards.md, 'MatchTIR: tool-call matching'): similarity bounds, optimal >= greedy,
Sinkhorn, and the turn scorer (empty inputs, determinism, permutation equivariance)."""

import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from agentgym.contract.parsing import ToolCall
from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards.base import annotate
from agentgym.rewards.matching import ToolCallMatching, call_similarity, match_calls, similarity_matrix

SETTINGS = settings(max_examples=100, deadline=None)
VALUES = st.one_of(st.integers(0, 2), st.booleans(), st.sampled_from(["x", "y"]), st.none())
CALLS = st.builds(
    lambda name, args: {"name": name, "arguments": args},
    st.sampled_from(["search", "add", "book"]),
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), VALUES, max_size=4),
)


@SETTINGS
@given(p=CALLS, g=CALLS)
def test_similarity_bounds_identity_and_names(p, g):
    s = call_similarity(p, g)
    assert 0.0 <= s <= 1.0
    assert call_similarity(g, g) == 1.0
    assert call_similarity(ToolCall(g["name"], g["arguments"]), g) == 1.0
    if p["name"] != g["name"]:
        assert s == 0.0
    else:
        assert s >= 1.0 / (2 + len(g["arguments"]))


def test_similarity_formula():
    gold = {"name": "book", "arguments": {"city": "Ovra", "nights": 2, "pets": False}}
    # keys {city, nights} vs {city, nights, pets}: Jaccard 2/3; equal values: city only
    pred = {"name": "book", "arguments": {"city": "Ovra", "nights": 3}}
    assert call_similarity(pred, gold) == pytest.approx((1 + 2 / 3 + 1) / (2 + 3))
    # booleans are not numbers here, and "parameters" is accepted for "arguments"
    assert call_similarity({"name": "f", "parameters": {"x": True}}, {"name": "f", "arguments": {"x": 1}}) == 2 / 3
    assert call_similarity({"name": "f", "arguments": {}}, {"name": "f", "arguments": {}}) == 1.0


@SETTINGS
@given(pred=st.lists(CALLS, max_size=5), gold=st.lists(CALLS, max_size=5))
def test_optimal_beats_greedy_and_sinkhorn(pred, gold):
    opt = match_calls(pred, gold, "optimal")
    greedy = match_calls(pred, gold, "greedy")
    soft = match_calls(pred, gold, "sinkhorn", reg=0.1)
    assert opt.total >= greedy.total - 1e-12
    assert opt.total >= soft.total - 1e-6  # a doubly-stochastic plan never beats the best permutation
    for m in (opt, greedy, soft):
        assert 0.0 <= m.score <= 1.0 + 1e-9 and not math.isnan(m.score)
        assert len(m.per_pred) == len(pred)
    assert len({i for i, _, _ in opt.pairs}) == len(opt.pairs) == len({j for _, j, _ in opt.pairs})
    assert opt.score == pytest.approx(opt.total / max(len(pred), len(gold), 1) if pred or gold else 1.0)


def test_greedy_is_suboptimal_on_a_known_case():
    pred = [{"name": "f", "arguments": {"b": 1, "c": 0, "a": 1}}, {"name": "f", "arguments": {"a": 0, "c": 1}}]
    gold = [{"name": "f", "arguments": {}}, {"name": "f", "arguments": {"b": 0}}]
    assert match_calls(pred, gold, "optimal").total > match_calls(pred, gold, "greedy").total + 0.1


def test_sinkhorn_tends_to_optimal_as_reg_shrinks():
    pred = [{"name": "f", "arguments": {"b": 1, "c": 0, "a": 1}}, {"name": "f", "arguments": {"a": 0, "c": 1}}]
    gold = [{"name": "f", "arguments": {}}, {"name": "f", "arguments": {"b": 0}}, {"name": "g", "arguments": {}}]
    opt = match_calls(pred, gold).total
    gaps = [opt - match_calls(pred, gold, "sinkhorn", reg=r).total for r in (0.5, 0.1, 0.01)]
    assert gaps[0] > gaps[1] > gaps[2] >= -1e-9 and gaps[2] < 1e-3
    with pytest.raises(ValueError):
        match_calls(pred, gold, "hungarian")  # type: ignore[arg-type]


@pytest.mark.slow
@SETTINGS
@given(pred=st.lists(CALLS, max_size=5), gold=st.lists(CALLS, max_size=5), data=st.data())
def test_matching_is_permutation_equivariant_and_deterministic(pred, gold, data):
    """The turn score is invariant to the order of the calls; Sinkhorn's per-call credit is equivariant (the hard
    assignments break ties between equally good calls by order, so only their totals are compared)."""
    perm = data.draw(st.permutations(range(len(pred))))
    gold_perm = data.draw(st.permutations(range(len(gold))))
    for method in ("optimal", "greedy", "sinkhorn"):
        a = match_calls(pred, gold, method)
        b = match_calls([pred[i] for i in perm], [gold[j] for j in gold_perm], method)
        if method != "greedy":  # greedy's result depends on its tie-breaking order
            assert b.total == pytest.approx(a.total, abs=1e-9)
        if method == "sinkhorn":
            assert b.per_pred == pytest.approx([a.per_pred[i] for i in perm], abs=1e-6)
        again = match_calls(pred, gold, method)
        assert (again.per_pred, again.pairs, again.total) == (a.per_pred, a.pairs, a.total)


def test_empty_inputs():
    assert match_calls([], []).score == 1.0
    assert match_calls([], [{"name": "f", "arguments": {}}]).score == 0.0
    assert match_calls([{"name": "f", "arguments": {}}], [], "sinkhorn").score == 0.0
    assert similarity_matrix([], []).shape == (0, 0)


# ---------------------------------------------------------------- the turn scorer


def call(name, **args):
    return {"name": name, "arguments": args}


def action(*calls, think="Let me call the tools."):
    return think + "".join(f"\n<tool_call>{json.dumps(c)}</tool_call>" for c in calls)


def trajectory(actions, gold, task="t"):
    turns = [
        Turn(a, [{"role": "tool", "content": "ok"}], 0.0, k == len(actions) - 1, False, {"reward_components": {}})
        for k, a in enumerate(actions)
    ]
    return Trajectory("tool-env", 0, task, "agent", [{"role": "user", "content": "Do it."}], {"gold": gold}, turns)


GOLD = {
    "calls": [
        [call("find_user", email="a@b.c")],
        [call("get_order", order_id=7), call("get_order", order_id=8)],
        [],
    ]
}


def test_turn_scope_rewards():
    traj = trajectory(
        [
            action(call("find_user", email="a@b.c")),  # exact: 1
            action(call("get_order", order_id=8)),  # one of two gold calls: 1 / max(1, 2)
            "<answer>done</answer>",  # no calls, none expected: empty_reward
            action(call("cancel", order_id=7)),  # past the gold list: an extra call costs
        ],
        GOLD,
    )
    [scores] = ToolCallMatching()([traj])
    assert scores.rewards == [1.0, 0.5, 1.0, 0.0] and scores.all_valid
    assert ToolCallMatching(empty_reward=0.0)([traj])[0].rewards[2] == 0.0
    assert ToolCallMatching(method="greedy")([traj])[0].rewards == [1.0, 0.5, 1.0, 0.0]


def openai_action(*calls):
    """The same calls as an OpenAI assistant message (how a dict action is recorded: its JSON text)."""
    fns = [{"name": c["name"], "arguments": json.dumps(c["arguments"])} for c in calls]
    items = [{"id": f"c{i}", "type": "function", "function": fn} for i, fn in enumerate(fns)]
    return json.dumps({"role": "assistant", "content": None, "tool_calls": items})


def test_openai_tool_calls_score_like_hermes_blocks():
    calls = [[call("find_user", email="a@b.c")], [call("get_order", order_id=8)], [], [call("cancel", order_id=7)]]
    hermes = trajectory([action(*c) if c else "done" for c in calls], GOLD)
    openai = trajectory([openai_action(*c) if c else json.dumps({"content": "done"}) for c in calls], GOLD)
    for scorer in (ToolCallMatching(), ToolCallMatching(scope="trajectory", method="sinkhorn")):
        [h], [o] = scorer([hermes]), scorer([openai])
        assert o.rewards == h.rewards and not o.extras["parse_errors"]
    assert ToolCallMatching()([openai])[0].rewards == [1.0, 0.5, 1.0, 0.0]


def test_unparseable_turn_scores_zero_and_is_recorded():
    broken = '<tool_call>{"name": "find_user", "arguments": {"email": </tool_call>'
    [scores] = ToolCallMatching()([trajectory([broken, action(call("get_order", order_id=7))], GOLD)])
    assert scores.rewards == [0.0, 0.5] and scores.all_valid
    assert "0" in scores.extras["parse_errors"]


def test_trajectory_scope_credits_calls_in_any_turn():
    # the two get_order calls are made one turn late: turn-aligned matching misses them, global matching does not
    traj = trajectory(
        [
            action(call("find_user", email="a@b.c")),
            action(think="thinking"),
            action(call("get_order", order_id=7), call("get_order", order_id=8)),
        ],
        GOLD,
    )
    assert ToolCallMatching(scope="turn")([traj])[0].rewards == [1.0, 0.0, 0.0]
    assert ToolCallMatching(scope="trajectory")([traj])[0].rewards == [1.0, 0.0, 1.0]


def test_group_permutation_equivariance_empty_and_annotate():
    group = [
        trajectory([action(call("find_user", email="x"))], GOLD, "a"),
        trajectory([], GOLD, "empty"),
        trajectory([action(call("find_user", email="a@b.c")), action(call("get_order", order_id=7))], GOLD, "b"),
    ]
    scorer = ToolCallMatching()
    scores = scorer(group)
    assert [s.rewards for s in scores] == [[pytest.approx(2 / 3)], [], [1.0, 0.5]]
    assert not any(math.isnan(r) for s in scores for r in s.rewards)
    reordered = scorer(group[::-1])
    assert [s.rewards for s in reordered] == [s.rewards for s in scores[::-1]]
    annotate(group, scores)
    assert group[2].turns[1].reward == 0.5 and group[2].turns[1].reward_components == {"tool_match": 0.5}


def test_missing_gold_raises():
    with pytest.raises(ValueError, match="gold calls"):
        ToolCallMatching()([trajectory(["x"], {"answers": ["y"]})])
    with pytest.raises(ValueError):
        ToolCallMatching(scope="episode")  # type: ignore[arg-type]
