"""Action parsing: Search-R1 tags, Hermes tool calls, OpenAI tool_calls; both modes; adversarial input."""

import contextlib
import json
import re
import time

import pytest
from hypothesis import given, settings, strategies as st

from agentgym.contract.parsing import (
    MAX_INT_DIGITS,
    MAX_JSON_DEPTH,
    EmptyActionError,
    EmptyContentError,
    InvalidJSONError,
    InvalidToolCallError,
    JSONLimitError,
    MultipleActionsError,
    NoActionError,
    ParseError,
    TagAction,
    ToolCall,
    TrailingTextError,
    UnclosedTagError,
    json_too_deep,
    loads_untrusted,
    parse_hermes_tool_calls,
    parse_openai_tool_calls,
    parse_tag_action,
    parse_tool_calls,
    parse_tool_turn,
)

TAGS = ("search", "answer")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<search> capital of Ovra </search>", TagAction("search", "capital of Ovra")),
        ("<think>plan</think>\n<answer>Paris</answer>", TagAction("answer", "Paris")),
        # Search-R1: the leftmost complete pair wins, the rest is ignored.
        ("<search>a</search><answer>b</answer>", TagAction("search", "a")),
        ("<answer>b</answer> trailing words", TagAction("answer", "b")),
        # leftmost *open* tag with a matching close, like re.search(r"<(search|answer)>(.*?)</\1>")
        ("<answer> x <search>q</search>", TagAction("search", "q")),
        ("<SEARCH>q</Search>", TagAction("search", "q")),
        ("<answer> unfinished answer", TagAction("answer", "unfinished answer")),
    ],
)
def test_lenient_follows_search_r1(text, expected):
    assert parse_tag_action(text, TAGS) == expected


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", EmptyActionError),
        ("   \n", EmptyActionError),
        ("just prose", NoActionError),
        ("</search>", NoActionError),
        ("<answer>   </answer>", EmptyContentError),
        ("<search>", UnclosedTagError),
    ],
)
def test_lenient_errors(text, error):
    with pytest.raises(error) as info:
        parse_tag_action(text, TAGS)
    assert str(info.value)  # a message the model can read


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<search>a</search><answer>b</answer>", MultipleActionsError),
        ("<answer>b</answer> trailing words", TrailingTextError),
        ("<answer> unfinished", UnclosedTagError),
        ("<search> a </answer>", UnclosedTagError),
        ("<SEARCH>q</SEARCH>", NoActionError),
        ("<answer></answer>", EmptyContentError),
    ],
)
def test_strict_rejects_what_lenient_tolerates(text, error):
    with pytest.raises(error):
        parse_tag_action(text, TAGS, mode="strict")


def test_strict_accepts_think_then_one_action():
    assert parse_tag_action("<think>x</think> <answer>42</answer>\n", TAGS, mode="strict") == TagAction("answer", "42")


def test_unknown_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="mode must be one of"):
        parse_tag_action("<answer>x</answer>", TAGS, mode="loose")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "<search>" * 200_000,
        "<search>q</search>" * 60_000,
        "<search><answer>" * 100_000 + "</answer>",
        "<tool_call>" * 100_000,
        "x" * 1_000_000,
    ],
)
def test_adversarial_inputs_are_linear_time(text):
    start = time.perf_counter()
    for parser in (lambda t: parse_tag_action(t, TAGS), lambda t: parse_tag_action(t, TAGS, mode="strict")):
        with contextlib.suppress(ParseError):
            parser(text)
    with contextlib.suppress(ParseError):
        parse_hermes_tool_calls(text)
    assert time.perf_counter() - start < 30.0  # a hang guard (linear: ~1 s on a loaded machine; quadratic: hours)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>/searchnw tool_c{}\"':,x")) | st.characters(), max_size=300))
def test_any_text_parses_or_raises_a_parse_error(text):
    for mode in ("lenient", "strict"):
        try:
            action = parse_tag_action(text, TAGS, mode=mode)
            assert action.tag in TAGS and action.content == action.content.strip() and action.content
        except ParseError as e:
            assert str(e)
        try:
            calls = parse_hermes_tool_calls(text, mode=mode)
            assert all(isinstance(c, ToolCall) and isinstance(c.arguments, dict) for c in calls)
        except ParseError as e:
            assert str(e)


@given(st.text(min_size=1).filter(lambda s: s.strip() and "<" not in s))
def test_lenient_round_trips_content(content):
    assert parse_tag_action(f"<answer>{content}</answer>", TAGS).content == content.strip()


def test_hermes_multiple_calls_in_order():
    text = (
        'Let me check.\n<tool_call>\n{"name": "get", "arguments": {"id": 1}}\n</tool_call>\n'
        '<tool_call>{"name": "put", "arguments": "{\\"id\\": 2}"}</tool_call>'
    )
    assert parse_hermes_tool_calls(text) == [ToolCall("get", {"id": 1}), ToolCall("put", {"id": 2})]


def test_hermes_unclosed_final_call_counts_only_when_lenient():
    text = '<tool_call>{"name": "get", "arguments": {}}'
    assert parse_hermes_tool_calls(text) == [ToolCall("get", {})]
    with pytest.raises(UnclosedTagError):
        parse_hermes_tool_calls(text, mode="strict")


def test_hermes_code_fence_and_no_calls():
    assert parse_hermes_tool_calls('<tool_call>```json\n{"name": "f"}\n```</tool_call>') == [ToolCall("f", {})]
    assert parse_hermes_tool_calls("no calls here") == []


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('<tool_call>{"name": "f", "arguments": {</tool_call>', InvalidJSONError),
        ("<tool_call>" + "[" * 50_000 + "</tool_call>", InvalidJSONError),
        ('<tool_call>{"arguments": {}}</tool_call>', InvalidToolCallError),
        ('<tool_call>{"name": 3}</tool_call>', InvalidToolCallError),
        ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', InvalidToolCallError),
        ('<tool_call>{"name": "f", "arguments": "{bad"}</tool_call>', InvalidJSONError),
        ("<tool_call>[1, 2]</tool_call>", InvalidToolCallError),
        ('<tool_call>{"name": "f"}<tool_call>{"name": "g"}</tool_call>', UnclosedTagError),
    ],
)
def test_hermes_errors(text, error):
    with pytest.raises(error):
        parse_hermes_tool_calls(text)


def test_openai_tool_calls():
    msg = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": json.dumps({"id": 7})}}
        ],
    }
    assert parse_openai_tool_calls(msg) == [ToolCall("get", {"id": 7}, "call_1")]
    assert parse_openai_tool_calls(json.dumps(msg)) == [ToolCall("get", {"id": 7}, "call_1")]
    assert parse_openai_tool_calls({"role": "assistant", "content": "hi"}) == []


@pytest.mark.parametrize(
    ("msg", "error"),
    [
        ("{not json", InvalidJSONError),
        ("[1]", InvalidToolCallError),
        ({"tool_calls": {"a": 1}}, InvalidToolCallError),
        ({"tool_calls": [{"id": "x"}]}, InvalidToolCallError),
        ({"tool_calls": [{"type": "code", "function": {"name": "f", "arguments": "{}"}}]}, InvalidToolCallError),
        ({"tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}, InvalidJSONError),
    ],
)
def test_openai_tool_call_errors(msg, error):
    with pytest.raises(error):
        parse_openai_tool_calls(msg)


# -- untrusted JSON: depth, digits, non-finite numbers, surrogates (loads_untrusted) ----------------------------------
DEEP_ARGS = json.dumps({"name": "f", "arguments": "[" * 1000 + "]" * 1000})


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        # the issue's inputs: each raised RecursionError or ValueError out of the parser
        (f"<tool_call>{DEEP_ARGS}</tool_call>", "nested more than 64 levels"),
        ('<tool_call>{"name": "f", "arguments": {"n": ' + "9" * 4301 + "}}</tool_call>", "4,301 digits"),
        ('{"tool_calls": [{"function": {"name": "f", "arguments": "' + "[" * 1000 + '"}}]}', "nested more than 64"),
        ('{"tool_calls": [{"function": {"name": "f", "arguments": "{\\"n\\": ' + "1" * 5000 + '}"}}]}', "5,000 digits"),
        ("{" + '"a": {' * 100_000, "nested more than 64"),
        ('<tool_call>{"name": "f", "arguments": {"x": NaN}}</tool_call>', "NaN, which is not a JSON number"),
        ('<tool_call>{"name": "f", "arguments": {"x": -Infinity}}</tool_call>', "-Infinity"),
        ('<tool_call>{"name": "f", "arguments": {"x": 1e400}}</tool_call>', "1e400 is out of range"),
        ('<tool_call>{"name": "f", "arguments": {"x": -' + "9" * 101 + "}}</tool_call>", "101 digits"),
    ],
)
def test_hostile_json_is_a_json_limit_error_naming_the_limit(text, phrase):
    with pytest.raises(JSONLimitError, match=re.escape(phrase)):
        parse_tool_turn(text)


def test_json_limits_are_inclusive():
    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_untrusted(ok) is not None
    assert loads_untrusted("9" * MAX_INT_DIGITS) == int("9" * MAX_INT_DIGITS)
    assert loads_untrusted("-" + "9" * MAX_INT_DIGITS) == -int("9" * MAX_INT_DIGITS)
    assert loads_untrusted('"' + "9" * 10_000 + '"') == "9" * 10_000  # digits inside a string are text
    assert loads_untrusted("1.7976931348623157e308") == 1.7976931348623157e308
    # brackets inside strings, escaped quotes and backslashes do not count towards the depth
    assert loads_untrusted(json.dumps(["[" * 500, '\\"[[[', "\\\\"])) == ["[" * 500, '\\"[[[', "\\\\"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"a\\ud800b"', "a\ufffdb"),  # lone high surrogate, escaped
        ('"\\udfff"', "\ufffd"),  # lone low
        ('"\\udc00\\ud800"', "\ufffd\ufffd"),  # a pair in the wrong order
        ('"\\ud83d\\ude00"', "\U0001f600"),  # a real pair stays one character
        ('"a\ud800b"', "a\ufffdb"),  # raw (parse_tool_turn may be called without sanitize_action)
        ('{"k\\ud800": ["\\ud800"]}', {"k\ufffd": ["\ufffd"]}),  # keys and nested values
    ],
)
def test_lone_surrogates_become_replacement_characters(text, expected):
    assert loads_untrusted(text) == expected
    json.dumps(loads_untrusted(text), ensure_ascii=False).encode("utf-8")


def test_surrogate_in_a_tool_argument_reaches_the_tool_as_replacement_character():
    (call,) = parse_tool_calls('<tool_call>{"name": "cat", "arguments": {"path": "a\\ud800b"}}</tool_call>')
    assert call.arguments == {"path": "a\ufffdb"}
    (call,) = parse_tool_calls(
        json.dumps({"tool_calls": [{"function": {"name": "python", "arguments": '{"code": "print(1) # \\ud800"}'}}]})
    )
    assert call.arguments["code"] == "print(1) # \ufffd"


def _nesting(value):
    if isinstance(value, list | dict):
        return 1 + max(map(_nesting, value.values() if isinstance(value, dict) else value), default=0)
    return 0


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.integers(0, 100))
def test_json_too_deep_measures_nesting_exactly(value, wraps):
    text = json.dumps(value)
    for k in range(wraps):
        text = f"[{text}]" if k % 2 else f'{{"[{{\\"": {text}}}'  # keys full of brackets and escaped quotes
    assert json_too_deep(text) == (wraps + _nesting(value) > MAX_JSON_DEPTH)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from('[]{}",:0123456789.eE-+ \\aNInfty\ud800'), max_size=300))
def test_loads_untrusted_is_total_on_json_like_junk(text):
    try:
        value = loads_untrusted(text)
    except InvalidJSONError:
        return
    json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
