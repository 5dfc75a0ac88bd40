"""Information-based turn rewards from answer likelihoods: IGPO, TIPS, SIOP and InfoPO.

The methods, their formulas and properties: docs/rewards.md, 'Post-episode turn scorers'.

Each scorer is a ``TurnScorer``: ``scorer(group)`` -> one ``TurnScores`` per trajectory (reward per agent turn,
validity, and the per-turn probability/potential series in ``extras``). They all ask an ``AnswerScorer``
(``agentgym.rewards.answer_scoring``: a local model scored in one forward pass per trajectory, or an
OpenAI-compatible endpoint) for ``log p(answer | context after turn t)``; a turn whose likelihood could not be
computed is NaN and invalid, never 0. Contexts are rendered with the scoring tokenizer's chat template; the
pseudo-answer suffix starts with the template's generation prompt (a new assistant turn).

- ``InformationGain`` (IGPO): ``p_t = exp(mean log p(gold | h_t, answer prompt))``, ``r_t = p_t - p_{t-1}`` for
  non-final turns. Not policy-invariant: it is a difference of potentials *without* the terminal ``-p_{T-1}``, so the
  shaped return ``p_{T-1} - p_0`` depends on the trajectory and can change the optimal policy.
- ``InformationPotential`` (TIPS): ``Phi_t = logsumexp_k mean log p("<answer>"+a_k+"</answer>" | h_t)``, potential-
  based shaping with ``Phi(terminal) = 0``: policy-invariant.
- ``SelfInducedOutcomePotential`` (SIOP): label-free; clusters the group's final answers and rewards the growth of
  the support of the rollout's own cluster, weighted by the cluster's reliability.
- ``CounterfactualInformationGain`` (InfoPO): how much observation ``o_t`` changed the log-probs of the next action.

Example (``annotate`` adds ``reward_components["info_gain"]`` to every turn)::

    scorer = InformationGain(LocalAnswerScorer(model, tok))
    annotate(group, scorer(group))
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from agentgym.contract.parsing import ParseError, parse_tag_action
from agentgym.contract.trajectory import Trajectory
from agentgym.grading.answers import f1_score, normalize_answer
from agentgym.rewards.answer_scoring import (
    AnswerScorer,
    CutKind,
    RenderedTrajectory,
    Suffix,
    encode_suffix,
    render_trajectory,
)
from agentgym.rewards.base import TurnScorer, TurnScores

#: IGPO's pseudo answer prompt, appended after the generation prompt; the gold answer follows it.
IGPO_ANSWER_PROMPT = "<think>I now have enough information to answer.</think>\n<answer> "


def gold_answers(traj: Trajectory) -> list[str]:
    """The gold answer aliases of a trajectory's task (``reset_info["gold"]["answers"]``)."""
    gold = traj.reset_info.get("gold") or {}
    answers = gold.get("answers") if isinstance(gold, dict) else None
    if isinstance(answers, str):
        answers = [answers]
    if not answers:
        raise ValueError(f"trajectory of task {traj.task_id!r} has no reset_info['gold']['answers']")
    return [str(a) for a in answers]


def final_answer(traj: Trajectory, tags: Sequence[str] = ("search", "answer")) -> str | None:
    """The content of the last action's ``<answer>`` tag (as the env parses it), or None when it has none."""
    if not traj.turns:
        return None
    try:
        parsed = parse_tag_action(traj.turns[-1].action, tags)
    except ParseError:
        return None
    return parsed.content if parsed.tag == "answer" else None


def _tokenizer_of(scorer: AnswerScorer, tokenizer: Any) -> Any:
    tok = tokenizer if tokenizer is not None else getattr(scorer, "tokenizer", None)
    if tok is None:
        raise ValueError("pass the tokenizer that renders trajectories for the scoring model (tokenizer=...)")
    return tok


def _scores(name: str, rewards: Sequence[float], extras: dict[str, Any]) -> TurnScores:
    rewards = [float(r) for r in rewards]
    return TurnScores(name, rewards, [math.isfinite(r) for r in rewards], extras)


def _floats(values: Sequence[float] | np.ndarray) -> list[float | None]:
    """JSON-friendly list: NaN -> None."""
    return [None if not math.isfinite(float(v)) else float(v) for v in values]


# --------------------------------------------------------------------------------------------- IGPO


@dataclass
class InformationGain(TurnScorer):
    """IGPO information gain: ``r_t = p_t - p_{t-1}`` (``prob_diff``) or ``mean log-prob_t - mean log-prob_{t-1}``
    (``log_prob_diff``) for turns ``t = 1..T-1``, where ``p_t = exp(mean_j log p(gold_j | h_t, answer_prompt))``
    and ``p_0`` conditions on the prompt alone. Sum over turns = ``p_{T-1} - p_0`` (telescoping).

    Final turn: 0 by default, because the env's ``outcome`` reward component already carries the outcome;
    ``final_reward="f1"`` adds IGPO's own final reward instead (F1 of the ``<answer>`` against the gold aliases,
    ``format_penalty`` = -2 when the last action has no parsable answer): then drop the env's outcome component
    to avoid counting it twice. Not policy-invariant (see the module docstring). IGPO scores with the policy
    itself; pass a scorer over the current policy weights.

    ``context="observation"`` uses ``h_t`` (after the env's reply, as IGPO); ``"action"`` uses ``h'_t``.
    ``answer_fn`` picks the scored answer (default: the first gold alias). ``extras``: ``p`` (``p_0..p_{T-1}``)
    and ``mean_logprob``. For ``advantages.igpo_advantages`` pass the non-final rewards, ``s.rewards[:-1]``.

    >>> scores = InformationGain(LocalAnswerScorer(model, tok))(group)     # doctest: +SKIP
    >>> scores[0].rewards, scores[0].extras["p"]                            # doctest: +SKIP
    """

    scorer: AnswerScorer
    tokenizer: Any = None
    mode: Literal["prob_diff", "log_prob_diff"] = "prob_diff"
    answer_prompt: str = IGPO_ANSWER_PROMPT
    answer_close: str = " </answer>"
    context: CutKind = "observation"
    answer_fn: Callable[[Trajectory], str] | None = None
    final_reward: Literal["none", "f1"] = "none"
    format_penalty: float = -2.0
    name: str = "info_gain"

    def __post_init__(self) -> None:
        if self.mode not in ("prob_diff", "log_prob_diff"):
            raise ValueError(f"mode must be 'prob_diff' or 'log_prob_diff', got {self.mode!r}")
        if self.final_reward not in ("none", "f1"):
            raise ValueError(f"final_reward must be 'none' or 'f1', got {self.final_reward!r}")

    def _answer(self, traj: Trajectory) -> str:
        return self.answer_fn(traj) if self.answer_fn is not None else gold_answers(traj)[0]

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        tok = _tokenizer_of(self.scorer, self.tokenizer)
        items = []
        for traj in group:
            rendered = render_trajectory(traj, tok)
            pieces = [(rendered.generation_prompt + self.answer_prompt, False), (self._answer(traj), True)]
            suffix = encode_suffix(tok, [*pieces, (self.answer_close, False)])
            cuts = rendered.cuts(self.context)[: len(traj.turns)]  # h_0 .. h_{T-1}
            items.append((rendered.ids, cuts, [suffix] * len(cuts)))
        results = self.scorer.logprobs_many(items)
        out = []
        for traj, lps in zip(group, results, strict=True):
            mean_lp = np.array([np.mean(lp) for lp in lps], dtype=np.float64)
            p = np.exp(mean_lp)
            series = p if self.mode == "prob_diff" else mean_lp
            rewards = [float(series[t] - series[t - 1]) for t in range(1, len(traj.turns))]
            if traj.turns:
                rewards.append(self._final(traj))
            out.append(_scores(self.name, rewards, {"p": _floats(p), "mean_logprob": _floats(mean_lp)}))
        return out

    def _final(self, traj: Trajectory) -> float:
        if self.final_reward == "none":
            return 0.0
        answer = final_answer(traj)
        return self.format_penalty if answer is None else f1_score(answer, gold_answers(traj))


# --------------------------------------------------------------------------------------------- TIPS


@dataclass
class InformationPotential(TurnScorer):
    """TIPS potential-based shaping with ``Phi_t = logsumexp_k mean log p_teacher(answer_format(a_k) | h_t)`` over the
    gold aliases ``a_k`` (default format ``"<answer>{answer}</answer>"``, every token scored).

    Emitted per turn: ``c*w*(Phi_t - Phi_{t-1})`` for t = 1..T, and on the last turn also ``-c*w*Phi_T`` (the
    terminal convention ``Phi(terminal) = 0``; a truncated episode's end counts as terminal too), so the last turn
    gets ``-c*w*Phi_{T-1}`` and the emitted rewards sum to ``-c*w*Phi_0``. The outcome ``R`` is *not* emitted: it
    stays in the env's ``outcome`` reward component, so after ``annotate`` the turn rewards sum to ``R - c*w*Phi_0``
    for any ``c`` (docs/rewards.md, 'TIPS: information potential'). ``terminal_zero=False`` skips the terminal term
    (sum ``c*w*(Phi_T - Phi_0)``).

    ``scale``: a fixed ``c`` (0.02) or ``"adaptive"``: ``c = scale_target / mean|dPhi|`` over the non-terminal
    differences of the batch, clipped to ``scale_bounds`` (``fit_scale``; ``score_groups`` fits one ``c`` for several
    groups, ``__call__`` fits it on its one group). ``weight`` is ``w``. The teacher is the scorer's model (a frozen or
    periodically refreshed copy of the policy). ``extras``: ``phi`` (``Phi_0..``), ``scale``.

    >>> tips = InformationPotential(LocalAnswerScorer(teacher, tok), scale="adaptive")  # doctest: +SKIP
    >>> per_group = tips.score_groups(groups)                                           # doctest: +SKIP
    """

    scorer: AnswerScorer
    tokenizer: Any = None
    scale: float | Literal["adaptive"] = 0.02
    weight: float = 1.0
    answer_prompt: str = ""
    answer_format: str = "<answer>{answer}</answer>"
    answers_fn: Callable[[Trajectory], Sequence[str]] | None = None
    scale_target: float = 0.11
    scale_bounds: tuple[float, float] = (0.02, 0.2)
    terminal_zero: bool = True
    name: str = "info_potential"

    def __post_init__(self) -> None:
        if self.scale != "adaptive" and not isinstance(self.scale, (int, float)):
            raise ValueError(f"scale must be a number or 'adaptive', got {self.scale!r}")
        lo, hi = self.scale_bounds
        if not 0 < lo <= hi:
            raise ValueError(f"scale_bounds must satisfy 0 < low <= high, got {self.scale_bounds}")

    def potentials(self, group: Sequence[Trajectory]) -> list[np.ndarray]:
        """``Phi_0..Phi_{T-1}`` per trajectory (``..Phi_T`` with ``terminal_zero=False``); NaN where scoring failed."""
        tok = _tokenizer_of(self.scorer, self.tokenizer)
        items, n_aliases = [], []
        for traj in group:
            rendered = render_trajectory(traj, tok)
            n_ctx = len(traj.turns) if self.terminal_zero else len(traj.turns) + 1
            cuts = rendered.cuts("observation")[:n_ctx]
            answers = list(self.answers_fn(traj) if self.answers_fn is not None else gold_answers(traj))
            if not answers:
                raise ValueError(f"no answers to score for task {traj.task_id!r}")
            prefix_text = rendered.generation_prompt + self.answer_prompt
            suffixes = [
                encode_suffix(tok, [(prefix_text, False), (self.answer_format.format(answer=a), True)]) for a in answers
            ]
            items.append((rendered.ids, [c for c in cuts for _ in suffixes], [s for _ in cuts for s in suffixes]))
            n_aliases.append(len(suffixes))
        out = []
        for lps, k in zip(self.scorer.logprobs_many(items), n_aliases, strict=True):
            means = np.array([np.mean(lp) for lp in lps], dtype=np.float64).reshape(-1, k)
            out.append(_logsumexp_rows(means))
        return out

    def fit_scale(self, potentials: Sequence[np.ndarray]) -> float:
        """Adaptive ``c = scale_target / mean|Phi_t - Phi_{t-1}|`` (non-terminal steps, NaN ignored), clipped to
        ``scale_bounds``; the upper bound when every difference is 0 or there is none."""
        lo, hi = self.scale_bounds
        diffs = np.concatenate([np.abs(np.diff(np.asarray(phi, dtype=np.float64))) for phi in potentials] or [[]])
        diffs = diffs[np.isfinite(diffs)]
        mean = float(diffs.mean()) if diffs.size else 0.0
        return hi if mean <= 0 else float(np.clip(self.scale_target / mean, lo, hi))

    def score_groups(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[TurnScores]]:
        """Score several groups with one (possibly adaptive) scale ``c``."""
        phis = [self.potentials(g) for g in groups]
        c = self.fit_scale([p for ps in phis for p in ps]) if self.scale == "adaptive" else float(self.scale)
        return [
            [self._shaped(traj, phi, c) for traj, phi in zip(g, ps, strict=True)]
            for g, ps in zip(groups, phis, strict=True)
        ]

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        return self.score_groups([group])[0]

    def _shaped(self, traj: Trajectory, phi: np.ndarray, c: float) -> TurnScores:
        T = len(traj.turns)
        cw = c * self.weight
        rewards = [cw * (phi[t] - phi[t - 1]) for t in range(1, T)]
        if T:
            # last turn: c*w*(Phi_T - Phi_{T-1}) - c*w*Phi_T = -c*w*Phi_{T-1} (Phi_T cancels, so it is not scored)
            rewards.append(-cw * phi[T - 1] if self.terminal_zero else cw * (phi[T] - phi[T - 1]))
        return _scores(self.name, rewards, {"phi": _floats(phi), "scale": c, "weight": self.weight})


def _logsumexp_rows(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return np.zeros(x.shape[0])
    m = np.max(x, axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        return (m + np.log(np.sum(np.exp(x - m), axis=1, keepdims=True)))[:, 0]


# --------------------------------------------------------------------------------------------- SIOP


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
            if i not in results:
                extras = {"cluster": label, "q": 0.0, "answer": answer, "phat": [], "references": []}
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


# --------------------------------------------------------------------------------------------- InfoPO


@dataclass
class CounterfactualInformationGain(TurnScorer):
    """InfoPO: ``I_t = mean over the tokens of a_{t+1} of [log pi(tok | context with o_t) - log pi(tok | context with
    o_t's text replaced by a same-length run of the placeholder token)]``, credited to turn t; the last turn gets 0
    (and so does a turn whose env reply was empty). Same length keeps every later position unchanged; role markers of
    the observation messages stay. Scored with the policy (``scorer``); the factual log-probs are read off the
    trajectory's own positions in the same pass. ``extras``: ``info`` (``I_1..I_T``).

    ``placeholder``: a token id, or a string whose last token is used (default ``"."``).

    >>> infopo = CounterfactualInformationGain(LocalAnswerScorer(model, tok))   # doctest: +SKIP
    """

    scorer: AnswerScorer
    tokenizer: Any = None
    placeholder: str | int = "."
    name: str = "infopo"

    def _placeholder_id(self, tok: Any) -> int:
        if isinstance(self.placeholder, int):
            return self.placeholder
        ids = list(tok(self.placeholder, add_special_tokens=False)["input_ids"])
        if not ids:
            raise ValueError(f"placeholder {self.placeholder!r} encodes to no token")
        return int(ids[-1])

    def _requests(self, rendered: RenderedTrajectory, placeholder: int) -> tuple[list[int], list[Suffix], list[int]]:
        cuts: list[int] = []
        suffixes: list[Suffix] = []
        turns: list[int] = []
        ids = rendered.ids
        for t in range(len(rendered.turns) - 1):
            contents = [s for s in rendered.turns[t].observation_content if s[1] > s[0]]
            nxt = rendered.turns[t + 1].action_content
            if not contents or nxt[1] <= nxt[0]:
                continue
            start = contents[0][0]
            factual = list(ids[start : nxt[1]])
            counterfactual = list(factual)
            for a, b in contents:
                counterfactual[a - start : b - start] = [placeholder] * (b - a)
            mask = tuple(nxt[0] <= start + j < nxt[1] for j in range(len(factual)))
            cuts += [start, start]
            suffixes += [Suffix(tuple(factual), mask), Suffix(tuple(counterfactual), mask)]
            turns.append(t)
        return cuts, suffixes, turns

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        tok = _tokenizer_of(self.scorer, self.tokenizer)
        placeholder = self._placeholder_id(tok)
        items, turn_lists = [], []
        for traj in group:
            rendered = render_trajectory(traj, tok)
            cuts, suffixes, turns = self._requests(rendered, placeholder)
            items.append((rendered.ids, cuts, suffixes))
            turn_lists.append(turns)
        out = []
        for traj, lps, turns in zip(group, self.scorer.logprobs_many(items), turn_lists, strict=True):
            info = [0.0] * len(traj.turns)
            for n, t in enumerate(turns):
                info[t] = float(np.mean(lps[2 * n] - lps[2 * n + 1]))
            out.append(_scores(self.name, info, {"info": _floats(info)}))
        return out


def infopo_fuse(
    a_out: Any,
    a_int: Any,
    outcome_std: float | Any,
    beta: float,
    tau: float = 0.05,
    mask: Any = None,
    eps: float = 1e-6,
) -> np.ndarray:
    """InfoPO's gated fusion ``A = A_out + beta * g * m * z(A_int)`` with ``g = sigmoid(-outcome_std / tau)``.

    ``z`` standardises ``a_int`` over the entries where ``mask`` (``m``, default all ones) is non-zero; masked-out
    entries get ``A_out`` unchanged. The gate is near 0.5 when a group's outcomes tie (std 0: no outcome signal, lean
    on the intrinsic advantage) and falls towards 0 as the outcomes spread. ``outcome_std`` may be a scalar or
    broadcast against ``a_out`` (one per row/group).

    >>> infopo_fuse([1.0, -1.0], [0.2, 0.4], outcome_std=0.0, beta=1.0).round(3)
    array([ 0.5, -0.5])
    """
    a_out = np.asarray(a_out, dtype=np.float64)
    a_int = np.asarray(a_int, dtype=np.float64)
    m = np.ones_like(a_int) if mask is None else np.asarray(mask, dtype=np.float64)
    if a_out.shape != a_int.shape or m.shape != a_int.shape:
        raise ValueError(f"shapes differ: A_out {a_out.shape}, A_int {a_int.shape}, mask {m.shape}")
    sel = m != 0
    z = np.zeros_like(a_int)
    if sel.any():
        vals = a_int[sel]
        z[sel] = (vals - vals.mean()) / (vals.std() + eps)
    gate = 1.0 / (1.0 + np.exp(np.asarray(outcome_std, dtype=np.float64) / tau))
    return a_out + beta * gate * m * z
