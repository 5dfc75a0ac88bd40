"""The Chat observation space and the full-Unicode Text action space."""

from hypothesis import given, strategies as st

from agentgym.contract.spaces import Chat, UnicodeText


@given(st.text(max_size=200))
def test_unicode_text_contains_any_string_within_length(s):
    assert UnicodeText(max_length=200).contains(s)


def test_unicode_text_bounds_and_types():
    space = UnicodeText(max_length=5)
    assert not space.contains("toolong")
    assert not space.contains(b"bytes")
    assert not space.contains(None)


def test_unicode_text_sample_is_seeded_and_contained():
    a, b = UnicodeText(max_length=64, seed=3), UnicodeText(max_length=64, seed=3)
    samples = [a.sample() for _ in range(20)]
    assert samples == [b.sample() for _ in range(20)]
    assert all(a.contains(s) for s in samples)
    assert any(ord(c) > 0xFFFF for s in samples for c in s) or any(ord(c) > 127 for s in samples for c in s)


def test_chat_contains():
    space = Chat(max_messages=3)
    assert space.contains([])
    assert space.contains([{"role": "user", "content": "hi"}, {"role": "tool", "content": "{}", "tool_call_id": "1"}])
    assert not space.contains([{"role": "robot", "content": "hi"}])
    assert not space.contains([{"role": "user", "content": 3}])
    assert not space.contains([{"role": "user", "content": "x", "extra": 1}])
    assert not space.contains({"role": "user", "content": "hi"})
    assert not space.contains([{"role": "user", "content": "x"}] * 4)


def test_chat_sample_is_seeded_and_contained():
    a, b = Chat(seed=1), Chat(seed=1)
    for _ in range(20):
        s = a.sample()
        assert a.contains(s) and s == b.sample()
