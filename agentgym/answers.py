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
