"""SIOP, label-free (``SelfInducedOutcomePotential``): clusters the group's final answers and rewards the growth of
the support of the rollout's own cluster, weighted by the cluster's reliability; the answer clusterers and the
default evidence signal it uses. docs/rewards.md, 'SIOP: self-induced outcome potential'."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.grading.answers import normalize_answer
from agentgym.rewards.answer_scoring import AnswerScorer, encode_suffix, render_trajectory
from agentgym.rewards.base import TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.information.common import _floats, _scores, _tokenizer_of, final_answer
from agentgym.rewards.papers import cite


class AnswerClusterer(Protocol):
    """Groups answers into semantic-equivalence clusters: ``cluster(answers)`` -> a label per answer."""

    def cluster(self, answers: Sequence[str]) -> list[int]: ...


@dataclass
class StringClusterer:
    """Answers are equivalent when their normalised strings are equal (SQuAD normalisation by default).
    Labels are numbered by first appearance.

    >>> StringClusterer().cluster(["The Ovra", "ovra.", "Mira"])
    [0, 0, 1]
    """

    normalize: Callable[[str], str] = normalize_answer

    def cluster(self, answers: Sequence[str]) -> list[int]:
        labels: dict[str, int] = {}
        return [labels.setdefault(self.normalize(a), len(labels)) for a in answers]


@dataclass
class EmbeddingClusterer:
    """Leader clustering on cosine similarity of embeddings: in order, an answer joins the first cluster whose leader
    (first member) is at least ``threshold`` similar, else leads a new cluster. Answers with equal normalised strings
    always share a cluster. ``embed`` maps texts to a ``(n, d)`` array (e.g. a sentence encoder).

    >>> EmbeddingClusterer(lambda xs: np.array([[1.0, 0.0] if "a" in x else [0.0, 1.0] for x in xs])).cluster(
    ...     ["ab", "ac", "x"])
    [0, 0, 1]
    """

    embed: Callable[[Sequence[str]], Any]
    threshold: float = 0.85
    normalize: Callable[[str], str] = normalize_answer

    def cluster(self, answers: Sequence[str]) -> list[int]:
        keys = [self.normalize(a) for a in answers]
        unique = list(dict.fromkeys(keys))
        if not unique:
            return []
        vectors = np.asarray(self.embed(unique), dtype=np.float64)
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        leaders: list[int] = []
        label_of: dict[str, int] = {}
        for i, key in enumerate(unique):
            sims = [float(vectors[i] @ vectors[j]) for j in leaders]
            match = next((n for n, s in enumerate(sims) if s >= self.threshold), None)
            if match is None:
                leaders.append(i)
                match = len(leaders) - 1
            label_of[key] = match
        return [label_of[k] for k in keys]


def observation_support(answer: str, traj: Trajectory) -> float:
    """1.0 when the normalised ``answer`` occurs (as whole words) in the normalised text of the trajectory's tool
    observations, else 0.0: SIOP's default evidence signal for one rollout."""
    target = normalize_answer(answer)
    if not target:
        return 0.0
    parts = []
    for turn in traj.turns:
        for msg in turn.observation:
            content = msg.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            parts.append(str(content or ""))
    return float(f" {target} " in f" {normalize_answer(' '.join(parts))} ")


@dataclass
class SelfInducedOutcomePotential(TurnScorer):
    """SIOP, label-free: reward the growth of the support of the rollout's own answer cluster.

    Per group of K rollouts: final answers (the last action's ``<answer>``) are clustered (``clusterer``; normalised
    strings by default); ``m(c) = |c|/K``; ``rbar(c)`` = mean over the cluster's rollouts of ``evidence(answer,
    traj)`` (default ``observation_support``: does the answer appear in that rollout's tool observations), so the
    fraction of its rollouts whose observations contain the answer; ``q(c) = m(c)*exp(eta*rbar(c)) / sum_c' ...``.
    A cluster's references are its up to ``max_references`` most frequent surface forms (ties: first seen);
    ``phat_t = sum_j alpha_j * exp(mean log p(ref_j | h'_t, answer_prompt))`` with ``alpha_j = 1/#refs`` unless
    ``alpha`` is given, ``h'_t`` ending at the end of agent turn t (``h'_0`` = the prompt). For t = 1..T:
    ``r_t = q(c_i)*(log(phat_t + eps) - log(phat_{t-1} + eps))``, and ``r_T += (1 - lam)*q(c_i)``.

    A rollout without a final answer belongs to no cluster and gets 0 on every turn (still counted in K).
    ``references_fn(traj, group)`` overrides the references (with the gold answer as the only reference, q = 1 and
    ``lam = 1`` this is IGPO's ``log_prob_diff`` on ``h'_t``). ``extras``: ``phat``, ``cluster``, ``q``,
    ``references``, ``answer``.

    >>> siop = SelfInducedOutcomePotential(LocalAnswerScorer(model, tok))   # doctest: +SKIP
    >>> siop(group)[0].extras["q"]                                          # doctest: +SKIP
    """

    scorer: AnswerScorer
    tokenizer: Any = None
    clusterer: AnswerClusterer = field(default_factory=StringClusterer)
    eta: float = 1.0
    lam: float = 0.5
    eps: float = 1e-6
    max_references: int = 3
    alpha: Sequence[float] | None = None
    answer_prompt: str = "<answer> "
    evidence: Callable[[str, Trajectory], float] = observation_support
    references_fn: Callable[[Trajectory, Sequence[Trajectory]], Sequence[str]] | None = None
    name: str = "siop"

    def __post_init__(self) -> None:
        if self.max_references < 1:
            raise ValueError("max_references must be >= 1")
        if self.alpha is not None and len(self.alpha) < self.max_references:
            raise ValueError(f"alpha needs {self.max_references} weights, got {len(self.alpha)}")

    def reliability(
        self, group: Sequence[Trajectory]
    ) -> tuple[list[int | None], dict[int, float], dict[int, list[str]]]:
        """(cluster label per rollout, None without a final answer; q per cluster; references per cluster)."""
        answers = [final_answer(t) for t in group]
        answered = [(i, a) for i, a in enumerate(answers) if a is not None]
        labels: list[int | None] = [None] * len(group)
        members: dict[int, list[tuple[int, str]]] = {}
        for (i, a), label in zip(answered, self.clusterer.cluster([a for _, a in answered]), strict=True):
            labels[i] = int(label)
            members.setdefault(int(label), []).append((i, a))
        K = len(group)
        weight = {
            c: len(m) / K * math.exp(self.eta * float(np.mean([self.evidence(a, group[i]) for i, a in m])))
            for c, m in members.items()
        }
        total = sum(weight.values())
        q = {c: w / total for c, w in weight.items()} if total > 0 else {}
        refs = {}
        for c, m in members.items():
            forms = [a.strip() for _, a in m]
            counts = Counter(forms)
            first = {f: n for n, f in enumerate(dict.fromkeys(forms))}
            refs[c] = sorted(counts, key=lambda f: (-counts[f], first[f]))[: self.max_references]
        return labels, q, refs

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        tok = _tokenizer_of(self.scorer, self.tokenizer)
        labels, q, refs = self.reliability(group)
        items, jobs = [], []
        for i, traj in enumerate(group):
            label = labels[i]
            if label is None or not traj.turns:
                continue
            references = list(self.references_fn(traj, group) if self.references_fn else refs[label])
            references = references[: self.max_references]
            rendered = render_trajectory(traj, tok)
            cuts = rendered.cuts("action")  # h'_0 .. h'_T
            prefix_text = rendered.generation_prompt + self.answer_prompt
            suffixes = [encode_suffix(tok, [(prefix_text, False), (r, True)]) for r in references]
            items.append((rendered.ids, [c for c in cuts for _ in suffixes], [s for _ in cuts for s in suffixes]))
            jobs.append((i, references))
        results = dict(zip([i for i, _ in jobs], self.scorer.logprobs_many(items), strict=True))
        out = []
        for i, traj in enumerate(group):
            label = labels[i]
            answer = final_answer(traj)
            if i not in results or label is None:  # no answer: no cluster, nothing scored
                extras: dict[str, Any] = {"cluster": label, "q": 0.0, "answer": answer, "phat": [], "references": []}
                out.append(_scores(self.name, [0.0] * len(traj.turns), extras))
                continue
            references = dict(jobs)[i]
            k = len(references)
            alpha = np.asarray(self.alpha[:k] if self.alpha is not None else [1.0 / k] * k, dtype=np.float64)
            means = np.array([np.mean(lp) for lp in results[i]], dtype=np.float64).reshape(-1, k)
            phat = np.exp(means) @ alpha
            log_support = np.log(phat + self.eps)
            qi = q[label]
            rewards = [qi * (log_support[t] - log_support[t - 1]) for t in range(1, len(traj.turns) + 1)]
            rewards[-1] += (1.0 - self.lam) * qi
            extras = {"cluster": label, "q": qi, "answer": answer, "phat": _floats(phat), "references": references}
            out.append(_scores(self.name, rewards, extras))
        return out


METHODS: tuple[Method, ...] = (
    Method("siop", "SIOP", "scorer",
           "label-free potential over clusters of the group's final answers, weighted by their reliability",
           needs=("scoring_model", "group"), paper=cite("SIOP"), code=f"{__name__}:SelfInducedOutcomePotential",
           choices=("answers clustered by normalised string (EmbeddingClusterer and NLI are options)",),
           train={"algo": "grpo", "scorer": "siop", "estimator": "siop", "reward_components": "all"},
           knobs_into="scorer_kwargs"),
)  # fmt: skip
