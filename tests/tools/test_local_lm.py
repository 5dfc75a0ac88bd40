"""LocalLM (agentgym.tools.local_lm) on the real tiny model: greedy determinism, stop strings, log-probs, prompt
scoring against one plain forward pass; and the chat-message normalisation it shares with the rest of agentgym."""

import pytest

from agentgym.contract.agent import normalize_messages

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.tools.local_lm import LocalLM, model_input_names  # noqa: E402
from agentgym.tools.tiny_model import build_tiny_model  # noqa: E402

MESSAGES = [{"role": "user", "content": "Which river flows through the city of Ovra?"}]


@pytest.fixture(scope="module")
def lm():
    return LocalLM(*build_tiny_model(seed=0))


def test_normalize_messages():
    parts = [{"type": "text", "text": "a"}, {"text": "b"}]
    assert normalize_messages([{"role": "user", "content": parts}, {"role": "assistant", "content": None}]) == [
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": ""},
    ]
    for bad in ({"content": "x"}, {"role": "user", "content": 5}, {"role": "user", "content": [{"type": "image"}]}):
        with pytest.raises(ValueError):
            normalize_messages([bad])


def test_greedy_generation_is_deterministic_and_stops_at_a_stop_string(lm):
    ids = lm.chat_prompt_ids(MESSAGES)
    first = lm.generate(ids, max_new_tokens=12, logprobs=2)
    assert first.finish_reason == "length" or first.stop_reason in lm.eos_token_ids
    assert lm.generate(ids, max_new_tokens=12, logprobs=2) == first
    assert len(first.logprobs) == len(first.token_ids) and all(lp.rank == 1 for lp in first.logprobs)  # greedy
    assert all(len(lp.top) == 2 and lp.top[0][0] == lp.token_id for lp in first.logprobs)
    word = next(w for w in first.text.split() if w.isalpha() and len(w) >= 3)
    cut = lm.generate(ids, max_new_tokens=12, stop=[word])
    assert cut.text == first.text[: first.text.index(word) + len(word)]
    assert (cut.finish_reason, cut.stop_reason) == ("stop", word)


def test_score_equals_one_forward_pass(lm):
    ids = lm.chat_prompt_ids(MESSAGES)
    scored = lm.score(ids)
    assert scored[0] is None and len(scored) == len(ids)
    with torch.inference_mode():
        logp = torch.log_softmax(lm.model(torch.tensor([ids])).logits[0, :-1].float(), dim=-1)
    expected = logp.gather(1, torch.tensor(ids[1:]).unsqueeze(1)).squeeze(1)
    assert torch.allclose(torch.tensor([s.logprob for s in scored[1:]]), expected, atol=1e-5)


def test_model_input_names(lm):
    cache, keep = model_input_names(lm.model)
    assert cache in ("cache", "past_key_values") and keep in ("logits_to_keep", "num_logits_to_keep", None)
