"""A turn's action inside its tokens (``agentgym.rewards.advantages.tokens``): the characters the env reads as the
action, by the parsing rules of ``agentgym.contract.parsing``; their tokens under the tiny model's tokenizer, indexed
by hand; and the broadcast that gives a turn's action tokens their own advantage (SERL's token granularity)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agentgym.contract.parsing import parse_hermes_tool_calls, parse_tag_action
from agentgym.rewards.advantages.tokens import (
    ACTION_TAGS,
    action_char_span,
    action_token_span,
    broadcast_to_action_tokens,
    broadcast_to_tokens,
)

FAST = settings(max_examples=60, deadline=None, derandomize=True)


def piece(text: str) -> str:
    s, e = action_char_span(text)
    return text[s:e]


def test_action_characters_by_the_parsing_rules():
    # 3. a tag action: the leftmost complete block of the action tags, tags included; the reasoning is not in it
    assert piece("<think>who?</think> <search>Paris mayor</search>") == "<search>Paris mayor</search>"
    assert piece("<Answer>x</Answer> <search>y</search>") == "<Answer>x</Answer>"  # leftmost, case-insensitive
    assert piece("<search>a <answer>b</answer>") == "<answer>b</answer>"  # the unclosed <search> is not a pair
    assert piece("<think>hmm</think><answer> runs on") == "<answer> runs on"  # an unclosed tag runs to the end
    assert piece("<think>plan</think><action>go to desk 1</action>") == "<action>go to desk 1</action>"
    # 2. Hermes tool calls: from the first <tool_call> to the last </tool_call>
    two = '<think>ls then pwd</think>\n<tool_call>{"name": "ls"}</tool_call> <tool_call>{"name": "pwd"}</tool_call>'
    assert piece(two) == two[27:]
    assert piece('ok <tool_call>{"name": "ls"}') == '<tool_call>{"name": "ls"}'  # unclosed: to the end
    # 1. an OpenAI message: the whole turn, stripped
    assert piece('  {"tool_calls": []} ') == '{"tool_calls": []}'
    # 4. a plain command: after the last closing tag, stripped ("<think>" is 7 characters, "</think>" 8)
    assert action_char_span("<think>desk first</think> go to desk 1") == (26, 38)
    assert piece("<subgoal>get the key</subgoal> open drawer 1 ") == "open drawer 1"
    assert piece("go to desk 1") == "go to desk 1"
    # nothing found (reasoning only, blank): the whole turn
    assert action_char_span("<think>unsure</think>") == (0, 21) and action_char_span("") == (0, 0)
    assert action_char_span("  ") == (0, 2)
    assert ACTION_TAGS == ("search", "answer", "action")


texts = st.lists(st.sampled_from(["<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>", " q ",
                                  "Paris", "\n", "<", "x"]), max_size=10).map("".join)  # fmt: skip


@FAST
@given(texts)
def test_the_tag_block_is_the_one_the_env_parses(text):
    """Where ``parse_tag_action`` (lenient, SearchQA's tags) reads an action, the action span holds exactly that tag and
    content; where it reads none, the span is the text after the last closing tag or the whole turn."""
    s, e = action_char_span(text)
    assert 0 <= s <= e <= len(text)
    try:
        parsed = parse_tag_action(text, ("search", "answer"))
    except ValueError:
        return
    assert parse_tag_action(text[s:e], ("search", "answer")) == parsed
    assert text[s:e].lower().startswith(f"<{parsed.tag}>")


def test_the_tool_call_span_holds_every_call():
    text = (
        'Listing first. <tool_call>{"name": "ls", "arguments": {}}</tool_call>\n<tool_call>{"name": "pwd"}</tool_call>'
    )
    s, e = action_char_span(text)
    assert parse_hermes_tool_calls(text[s:e]) == parse_hermes_tool_calls(text) and text[:s] == "Listing first. "


@pytest.fixture(scope="module")
def tok():
    from agentgym.tools.tiny_model import build_tiny_tokenizer

    return build_tiny_tokenizer()


def ids_and_decode(tok, text):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return ids, lambda xs: tok.decode(list(xs), skip_special_tokens=True)


def test_action_tokens_under_the_tiny_tokenizer(tok):
    # tokens: <think> why </think> <search> paris mayor </search> -> the search block is tokens 3..6
    ids, decode = ids_and_decode(tok, "<think> why </think> <search> paris mayor </search>")
    assert len(ids) == 7 and action_token_span(ids, decode) == (3, 7)
    # tokens: <think> desk first </think> go to desk 1 <|end|> -> the command is tokens 4..7, and the end-of-turn
    # token (decodes to nothing, after an action that runs to the end of the text) is the action's too
    ids, decode = ids_and_decode(tok, "<think> desk first </think> go to desk 1<|end|>")
    assert len(ids) == 9 and action_token_span(ids, decode) == (4, 9)
    # tokens: i think , <answer> x </answer> <think> later </think> -> the answer block is tokens 3..5
    ids, decode = ids_and_decode(tok, "i think, <answer> x </answer> <think> later </think>")
    assert len(ids) == 9 and action_token_span(ids, decode) == (3, 6)
    # a plain command with no reasoning, and a turn of reasoning only: the whole turn
    ids, decode = ids_and_decode(tok, "go to desk 1<|end|>")
    assert action_token_span(ids, decode) == (0, 5)
    ids, decode = ids_and_decode(tok, "<think> no idea </think>")
    assert action_token_span(ids, decode) == (0, 4)
    assert action_token_span([], decode) == (0, 0)


@FAST
@given(texts)
def test_action_tokens_cover_the_action_characters(text):
    """Under a tokenizer where each token is one character, the action tokens are the action characters."""
    ids = [ord(c) for c in text]
    s, e = action_char_span(text)
    a, b = action_token_span(ids, lambda xs: "".join(chr(i) for i in xs))
    assert (a, b) == ((s, e) if e > s else (0, len(ids)))


def test_broadcast_to_action_tokens_by_hand():
    # turn 0 = tokens 0..2, action 1..2: [1, 2, 2]; token 3 an env token: 0; turn 1 = 4..5, action 5: [-1, -0.5]
    got = broadcast_to_action_tokens([1.0, -1.0], [2.0, -0.5], [(0, 3), (4, 6)], [(1, 3), (5, 6)], 7)
    assert got.tolist() == [1.0, 2.0, 2.0, 0.0, -1.0, -0.5, 0.0]
    # a mask-0 token gets 0; an empty action span leaves the turn's own advantage on every token
    got = broadcast_to_action_tokens([1.0], [3.0], [(0, 3)], [(2, 2)], 3, loss_mask=[0, 1, 1])
    assert got.tolist() == [0.0, 1.0, 1.0]
    # equal advantages: the plain broadcast
    same = broadcast_to_action_tokens([0.5, -2.0], [0.5, -2.0], [(0, 2), (3, 5)], [(0, 1), (4, 5)], 6)
    assert np.array_equal(same, broadcast_to_tokens([0.5, -2.0], [(0, 2), (3, 5)], 6))
    with pytest.raises(ValueError, match="inside"):
        broadcast_to_action_tokens([1.0], [2.0], [(0, 2)], [(1, 3)], 4)
    with pytest.raises(ValueError, match="action spans"):
        broadcast_to_action_tokens([1.0, 1.0], [2.0, 2.0], [(0, 2), (2, 3)], [(0, 1)], 4)
    assert broadcast_to_action_tokens([], [], [], [], 0).shape == (0,)
