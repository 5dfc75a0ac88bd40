"""Answer normalisation and scoring: SQuAD normalisation, exact match, substring EM and token F1.

Shared by every layer that compares a predicted answer with golden ones: the search-QA env's metrics and the reward
methods (``agentgym.rewards``). Conventions of Search-R1 / FlashRAG: a prediction is compared with every golden
answer and the best score counts.

>>> normalize_answer("The  Hemlo-City!")
'hemlocity'
>>> exact_match("the Hemlo City", ["Hemlo City", "Hemlo"]), sub_exact_match("It is Hemlo.", ["Hemlo City", "Hemlo"])
(1.0, 1.0)
>>> round(f1_score("Hemlo", ["Hemlo City"]), 3)
0.667
>>> score_answer("Hemlo City", "Hemlo")
{'em': 0.0, 'subem': 1.0, 'f1': 0.6666666666666666}
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lowercase, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", s).split())


def _golds(golds: str | Iterable[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else list(golds)


def exact_match(prediction: str, golds: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction equals any normalised golden answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golds(golds)))


def sub_exact_match(prediction: str, golds: str | Iterable[str]) -> float:
    """1.0 if any normalised golden answer is a substring of the normalised prediction, else 0.0.

    A golden answer that normalises to the empty string only matches an empty prediction (it would otherwise be
    a substring of everything).
    """
    pred = normalize_answer(prediction)
    for g in _golds(golds):
        gold = normalize_answer(g)
        if (gold in pred) if gold else not pred:
            return 1.0
    return 0.0


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:  # SQuAD v2 convention: both empty -> 1, one empty -> 0
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golds: str | Iterable[str]) -> float:
    """Token-overlap F1 between normalised prediction and golden answer, maximised over the golden answers."""
    pred = normalize_answer(prediction).split()
    return max((_token_f1(pred, normalize_answer(g).split()) for g in _golds(golds)), default=0.0)


def score_answer(prediction: str, golds: str | Iterable[str]) -> dict[str, float]:
    """``{"em", "subem", "f1"}`` of one prediction."""
    golds = _golds(golds)
    return {
        "em": exact_match(prediction, golds),
        "subem": sub_exact_match(prediction, golds),
        "f1": f1_score(prediction, golds),
    }


# -- extracting the answer from free text --------------------------------------------------------------------------
_FENCE = re.compile(r"```(.*?)(?:```|\Z)", re.DOTALL)
_FENCE_LANGUAGE = re.compile(r"[\w+#.-]*")
_EMPHASIS = (
    re.compile(r"(?<![\w*])\*\*(?=\S)(.+?)(?<=\S)\*\*(?![\w*])", re.DOTALL),  # **bold**
    re.compile(r"(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)", re.DOTALL),  # __bold__
    re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])", re.DOTALL),  # *italics*
    re.compile(r"(?<![\w_])_(?=[^\s_])(.+?)(?<=[^\s_])_(?![\w_])", re.DOTALL),  # _italics_
    re.compile(r"`+([^`]*?)`+"),  # `inline code`
)
#: Phrases after which the answer follows, wherever they are in the text (the last one counts).
_STRONG_LEAD_IN = re.compile(
    r"(?:\b(?:the|my|our)\s+)?\b(?:final\s+|correct\s+|best\s+)?(?:answer|result|guess)(?:\s+(?:is|would\s+be|should\s+be|="
    r")\b|\s*[:=])\s*:?|\bhere\s+(?:you\s+go|it\s+is|is\s+(?:the|my)\s+(?:final\s+)?answer|'s\s+(?:the|my)\s+"
    r"(?:final\s+)?answer)\s*[:!,.-]?",
    re.IGNORECASE,
)
#: Phrases that open an answer (only at its start): a hedge or a pointer to the thing named.
_WEAK_LEAD_IN = re.compile(
    r"(?:(?:so|then|ok|okay|well|alright|great|therefore|thus|hmm)\b[,!.]?\s+)*"
    r"(?:i\s+(?:think|believe|guess|bet)|i'm\s+(?:pretty\s+|fairly\s+|quite\s+)?sure|probably|maybe|surely|"
    r"my\s+(?:final\s+)?guess\s+is|i(?:'d|\s+would)\s+say)?\s*[:,]?\s*"
    r"(?:(?:it|that|this)(?:\s+is|'s|\s+must\s+be|\s+should\s+be|\s+has\s+to\s+be)|you(?:'re|\s+are)\s+thinking\s+of"
    r"|is\s+it)?\b\s*[:,]?\s*",
    re.IGNORECASE,
)
_WORD = re.compile(r"\w")
_QUOTES = (('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"), ("«", "»"))


def extract_answer(text: str) -> str:
    """The answer a model gave in ``text``, without its wrapping: the last non-empty code fence (with or without a
    language) if there is one, what follows the last lead-in ("The answer is", "Answer:", "Final answer:", "Here you
    go:"), an opening hedge ("It is", "I think it's", "My guess is"), markdown emphasis and inline code, wrapping
    quotes, and a final period or exclamation mark. Never raises; a text with none of these comes back stripped.

    >>> extract_answer("The answer is **3464999702**.")
    '3464999702'
    >>> extract_answer("Here you go:\\n```python\\norder_pizza(size='large')\\n```")
    "order_pizza(size='large')"
    >>> extract_answer("I think it's *The Road to Velkrond*!"), extract_answer("Final answer: `17:00`")
    ('The Road to Velkrond', '17:00')
    >>> extract_answer("  42 "), extract_answer("**Answer:** \\"North\\".")
    ('42', 'North')
    """
    fenced = [_unfence(m.group(1)) for m in _FENCE.finditer(text)]
    fenced = [f for f in fenced if f.strip()]
    if fenced:
        text = fenced[-1]
    for _ in range(4):  # a few rounds: "**Answer:** `42`." unwraps in layers
        before = text
        text = _unemphasise(text).strip()
        lead = next(reversed(list(_STRONG_LEAD_IN.finditer(text))), None)  # the last one
        if lead is not None and _WORD.search(text, lead.end()):
            text = text[lead.end() :].strip()
        weak = _WEAK_LEAD_IN.match(text)
        if weak is not None and weak.end() and _WORD.search(text, weak.end()):
            text = text[weak.end() :]
        text = text.strip().rstrip(".!").rstrip()
        text = _unquote(text)
        if text == before:
            break
    return text


def _unfence(body: str) -> str:
    """A code fence's text without its language tag (the first line, when that is one word)."""
    first, newline, rest = body.partition("\n")
    if newline and _FENCE_LANGUAGE.fullmatch(first.strip()):
        return rest
    return body


def _unemphasise(text: str) -> str:
    for pattern in _EMPHASIS:
        text = pattern.sub(r"\1", text)
    return text


def _unquote(text: str) -> str:
    for left, right in _QUOTES:
        if len(text) >= 2 and text.startswith(left) and text.endswith(right) and left not in text[1:-1]:
            return text[1:-1].strip()
    return text
