"""Learned turn signals: SPA's progress estimator (``ProgressEstimator``, card ``spa``) and LaRe's latent reward
(``LatentReward``, card ``lare``), both return decompositions (``ReturnDecomposition``): per-turn rewards fitted so
that each episode's sum matches its outcome. LaRe's features are the outputs of ``latent(state)`` code (an
operator's or a model's), checked and run only in the suite's sandbox; see its class docstring.

SPA learns a per-turn *contribution* c_t = P_theta(h_t, a_t) whose sum over an episode matches the episode's outcome
R, by minimising the squared error of the sum over the episodes of each batch:

    L(theta) = sum_episodes (sum_t c_t - R)^2 + ridge * ||theta||^2

and adds a grounding signal g_t = 1[the env accepted the action] (``info["action_valid"]``), so the turn reward is
r_t = c_t + alpha * g_t. The estimator is refit on every batch (plus a bounded replay of the ``replay`` batches
before it) and then scores that batch; the trainer keeps one estimator for the whole run (``persistent``).

Features of a turn (``features``):

* ``"hashed"``: a hashed bag of the word n-grams of the observation the action answered (the previous turn's
  observation, or the task prompt) and of the action, plus every crossed pair (observation n-gram x action n-gram),
  so a rule such as "signal red" with "answer red" is one feature a linear model can weight; no model needed.
* ``"trunk"``: the policy's last hidden state at the turn's last token (the trajectory rendered with its chat
  template; ``scorer`` is the trainer's ``LocalAnswerScorer`` over the policy, read without gradients).

Model (``model``): ``"linear"`` (closed-form ridge regression of R on the episode's summed features: exact,
deterministic) or ``"mlp"`` (one hidden layer in torch, full-batch Adam from a seeded initialisation).

Worked example: two one-turn episodes, action "yes" (R = 1) and "no" (R = 0), each a different hashed feature. The
ridge fit gives c = 1 / (1 + ridge) for "yes" (0.5 at ridge 1) and 0 for "no"; a valid action adds alpha:

>>> from agentgym.contract.trajectory import Trajectory, Turn
>>> def episode(action, r, valid=True):
...     turn = Turn(action, [], r, True, False, {"reward_components": {"outcome": r}, "action_valid": valid})
...     return Trajectory("e", 0, "t", "a", [{"role": "user", "content": ""}], {}, [turn])
>>> spa = ProgressEstimator(ngrams=(1,), cross=False, bias=False, ridge=1.0, alpha=0.25)
>>> [s.rewards for s in spa([episode("yes", 1.0), episode("no", 0.0, valid=False)])]
[[0.75], [0.0]]
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.answer_scoring.scorer import AnswerScorer
from agentgym.rewards.base import Replay, TurnScorer, TurnScores
from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.process import outcome_of
from agentgym.rewards.text_features import observation_text

FeatureKind = Literal["hashed", "trunk"]
ModelKind = Literal["linear", "mlp"]
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    """Lower-case alphanumeric words of ``text`` (tags and punctuation dropped).

    >>> words("Turn 2/4. Signal: red. <answer> Red </answer>")
    ['turn', '2', '4', 'signal', 'red', 'answer', 'red', 'answer']
    """
    return _WORD.findall(text.lower())


def ngrams(tokens: Sequence[str], sizes: Sequence[int]) -> list[str]:
    """Every n-gram of ``tokens`` for each n in ``sizes``, joined by spaces, in order (repeats kept).

    >>> ngrams(["signal", "red", "options"], (1, 2))
    ['signal', 'red', 'options', 'signal red', 'red options']
    """
    return [" ".join(tokens[i : i + n]) for n in sizes for i in range(len(tokens) - n + 1)]


def turn_context(traj: Trajectory, t: int) -> str:
    """The text of the observation turn ``t`` answered: the task prompt for the first turn, else turn t-1's reply."""
    return observation_text(traj.initial_observation if t == 0 else traj.turns[t - 1].observation)


@dataclass(frozen=True)
class HashedTurnFeatures:
    """phi(observation, action): signed hashed presence of the observation's and the action's word n-grams (``o:``
    and ``a:`` namespaces) and, with ``cross``, of every pair (observation n-gram, action n-gram), plus a constant 1
    (``bias``, its own coordinate). Hashes are CRC-32 (stable across processes); the top bit gives the sign.

    >>> phi = HashedTurnFeatures(dim=64, ngrams=(1,))
    >>> x = phi("signal red", "red")
    >>> x.shape, int(np.abs(x).sum())  # bias + o:signal, o:red, a:red + 2 crossed pairs (unless two collide)
    ((65,), 6)
    """

    dim: int = 4096
    ngrams: tuple[int, ...] = (1, 2)
    cross: bool = True
    bias: bool = True

    def __post_init__(self) -> None:
        if self.dim < 1 or not self.ngrams or min(self.ngrams) < 1:
            raise ValueError(f"dim and every n-gram size must be >= 1, got dim={self.dim}, ngrams={self.ngrams}")

    @property
    def size(self) -> int:
        return self.dim + 1

    def keys(self, observation: str, action: str) -> set[str]:
        """The feature names present for one turn."""
        obs, act = set(ngrams(words(observation), self.ngrams)), set(ngrams(words(action), self.ngrams))
        keys = {f"o:{g}" for g in obs} | {f"a:{g}" for g in act}
        if self.cross:
            keys |= {f"x:{o}|{a}" for o in obs for a in act}
        return keys

    def __call__(self, observation: str, action: str) -> np.ndarray:
        x = np.zeros(self.size)
        for key in sorted(self.keys(observation, action)):
            h = zlib.crc32(key.encode())
            x[h % self.dim] += 1.0 if h >> 31 else -1.0
        if self.bias:
            x[self.dim] = 1.0
        return x


@dataclass
class FitReport:
    """One refit: episodes and turns fitted on, the mean squared error of sum_t c_t vs R before (all c = 0) and after
    the fit, and (``mlp``) the training MSE after every step."""

    episodes: int
    turns: int
    mse_before: float
    mse_after: float
    curve: list[float] = field(default_factory=list)


@dataclass
class ReturnDecomposition(TurnScorer):
    """Per-turn rewards c_t fitted so that each episode's sum matches its outcome R (return decomposition), plus
    grounding alpha * g_t; subclasses say what a turn's features are (``batch_features``).

    Knobs: ``model`` (``"linear"`` ridge or ``"mlp"``), ``alpha`` (the grounding weight), ``replay`` (past batches
    kept for the fit, 0: the current batch only), ``ridge`` (the linear model's L2 weight), ``outcome`` (the reward
    component that is R), ``grounding_key`` (the info key of g_t; a turn without it counts as valid), ``bias`` (a
    constant feature), ``hidden`` / ``steps`` / ``lr`` / ``weight_decay`` / ``seed`` (MLP), ``standardize`` (divide
    dense features by their std over the fit data).

    ``score_groups`` (what the trainer calls) fits on every group of the batch, then scores them; ``score_group`` on
    one group does the same for that group. ``state_dict`` / ``load_state_dict`` carry the replay and the weights
    across a resumed run. ``last_fit`` reports the latest refit. Each trajectory's ``extras`` holds ``progress``
    (the c_t) and ``grounding`` (the g_t)."""

    #: The trainer builds one scorer per run and reuses it every iteration (its replay and weights persist).
    persistent: ClassVar[bool] = True
    #: Whether ``standardize`` applies (dense features such as hidden states or latents; never hashed counts).
    dense_features: ClassVar[bool] = True

    model: ModelKind = "linear"
    alpha: float = 0.1
    replay: int = 7
    ridge: float = 10.0
    outcome: str = "outcome"
    grounding_key: str = "action_valid"
    bias: bool = True
    hidden: int = 64
    steps: int = 300
    lr: float = 0.003
    weight_decay: float = 0.1
    seed: int = 0
    standardize: bool = True
    name: str = "return_decomposition"
    last_fit: FitReport | None = field(default=None, init=False)
    _batches: Replay[list[tuple[np.ndarray, float]]] = field(init=False, repr=False)
    _weights: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.model not in ("linear", "mlp"):
            raise ValueError(f"model must be 'linear' or 'mlp', got {self.model!r}")
        if self.replay < 0 or self.ridge <= 0 or self.weight_decay < 0 or min(self.steps, self.hidden) < 1:
            raise ValueError("need replay >= 0, ridge > 0, weight_decay >= 0, steps >= 1 and hidden >= 1")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        self._batches = Replay(self.replay + 1)

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs (the trainer saves it beside each checkpoint): the replay and the weights."""
        return {"batches": self._batches.state_dict(), "weights": dict(self._weights), "last_fit": self.last_fit}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s replay (the newest ``replay + 1`` batches) and weights."""
        self._batches.load_state_dict(list(b) for b in state["batches"])
        self._weights = dict(state["weights"])
        self.last_fit = state.get("last_fit")

    def batch_features(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[np.ndarray]]:
        """``(T, F)`` feature rows of every trajectory of every group."""
        raise NotImplementedError

    def _with_bias(self, x: np.ndarray) -> np.ndarray:
        return np.concatenate([x, np.ones((len(x), 1))], axis=1) if self.bias else x

    # ------------------------------------------------------------------------------------------- fitting

    def _episodes(self) -> list[tuple[np.ndarray, float]]:
        return [ep for batch in self._batches for ep in batch]

    def fit(self, episodes: Sequence[tuple[np.ndarray, float]]) -> FitReport:
        """Fit theta on ``(turn features (T, F), R)`` pairs: minimise sum (sum_t c_t - R)^2 + ridge * ||theta||^2
        (``mlp``: the mean over episodes, full-batch Adam with ``weight_decay``)."""
        eps = [(np.asarray(x, dtype=np.float64), r) for x, r in episodes if len(x) and np.isfinite(x).all()]
        if not eps:
            self._weights = {}
            return FitReport(0, 0, 0.0, 0.0)
        y = np.array([r for _, r in eps])
        before = float(np.mean(y**2))
        n_turns = sum(len(x) for x, _ in eps)
        scale = np.ones(eps[0][0].shape[1])
        if self.dense_features and self.standardize:
            rows = np.concatenate([x for x, _ in eps])
            std = rows.std(axis=0)
            scale = np.where(std > 1e-8, 1.0 / np.where(std > 1e-8, std, 1.0), 1.0)
        if self.model == "linear":
            s = np.stack([x.sum(axis=0) for x, _ in eps]) * scale  # (N, F): the episode's summed features
            n, f = s.shape
            if n < f:  # dual form: w = S^T (S S^T + ridge I)^-1 y
                w = s.T @ np.linalg.solve(s @ s.T + self.ridge * np.eye(n), y)
            else:
                w = np.linalg.solve(s.T @ s + self.ridge * np.eye(f), s.T @ y)
            self._weights = {"scale": scale, "w": w}
            curve: list[float] = []
        else:
            import torch

            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # a tiny model: more threads only contend (restored below)
            try:
                self._weights, curve = self._fit_mlp(eps, y, scale)
            finally:
                torch.set_num_threads(threads)
        after = float(np.mean([(self._contributions(x).sum() - r) ** 2 for x, r in eps]))
        return FitReport(len(eps), n_turns, before, after, curve)

    def _fit_mlp(
        self, eps: Sequence[tuple[np.ndarray, float]], y: np.ndarray, scale: np.ndarray
    ) -> tuple[dict[str, np.ndarray], list[float]]:
        import torch

        gen = torch.Generator().manual_seed(self.seed)
        dense = np.concatenate([e for e, _ in eps]) * scale
        rows, cols = np.nonzero(dense)  # the first layer sums the rows of w1 that a turn's features select
        index, values = torch.tensor(cols), torch.tensor(dense[rows, cols], dtype=torch.float32)
        offsets = torch.tensor(np.searchsorted(rows, np.arange(len(dense))))
        episode = torch.tensor(np.repeat(np.arange(len(eps)), [len(e) for e, _ in eps]))
        target = torch.tensor(y, dtype=torch.float32)
        f = dense.shape[1]
        w1 = (torch.randn(f, self.hidden, generator=gen) / math.sqrt(f)).requires_grad_()
        b1 = torch.zeros(self.hidden, requires_grad=True)
        w2 = (torch.randn(self.hidden, generator=gen) / math.sqrt(self.hidden)).requires_grad_()
        b2 = torch.zeros((), requires_grad=True)
        opt = torch.optim.Adam([w1, b1, w2, b2], lr=self.lr, weight_decay=self.weight_decay)
        curve = []
        for _ in range(self.steps):
            first = torch.nn.functional.embedding_bag(index, w1, offsets, mode="sum", per_sample_weights=values)
            c = torch.relu(first + b1) @ w2 + b2
            sums = torch.zeros(len(eps)).index_add(0, episode, c)
            loss = ((sums - target) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            curve.append(float(loss.detach()))
        weights = {k: v.detach().double().numpy() for k, v in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))}
        weights["scale"] = scale
        return weights, curve

    def _contributions(self, x: np.ndarray) -> np.ndarray:
        """c_t for feature rows ``x`` (zeros before any fit)."""
        if not self._weights or not len(x):
            return np.zeros(len(x))
        w = self._weights
        x = x * w["scale"]
        if "w1" in w:
            return np.maximum(x @ w["w1"] + w["b1"], 0.0) @ w["w2"] + float(w["b2"])
        return x @ w["w"]

    # ------------------------------------------------------------------------------------------- scoring

    def grounding(self, traj: Trajectory) -> list[float]:
        """g_t = 1 where ``info[grounding_key]`` is true (or absent), else 0."""
        return [1.0 if bool(turn.info.get(self.grounding_key, True)) else 0.0 for turn in traj.turns]

    def score_groups(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[TurnScores]]:
        """Add the batch to the replay, refit on it, then score every trajectory of every group."""
        feats = self.batch_features(groups)
        batch = [(x.astype(np.float32), outcome_of(traj, self.outcome))  # exact: counts, float32 states
                 for group, xs in zip(groups, feats, strict=True)
                 for traj, x in zip(group, xs, strict=True)]  # fmt: skip
        self._batches.extend([batch])
        self.last_fit = self.fit(self._episodes())
        out = []
        for group, xs in zip(groups, feats, strict=True):
            scores = []
            for traj, x in zip(group, xs, strict=True):
                c = [float(v) for v in self._contributions(x)]
                g = self.grounding(traj)
                r = [ci + self.alpha * gi for ci, gi in zip(c, g, strict=True)]
                scores.append(TurnScores(self.name, r, extras={"progress": c, "grounding": g}))
            out.append(scores)
        return out

    def score_group(self, group: Sequence[Trajectory]) -> list[TurnScores]:
        return self.score_groups([group])[0]


@dataclass
class ProgressEstimator(ReturnDecomposition):
    """SPA: c_t = P_theta(h_t, a_t) fitted so that sum_t c_t matches the outcome R, plus grounding alpha * g_t.

    Knobs of its own: ``features`` (``"hashed"`` or ``"trunk"``), ``dim`` / ``ngrams`` / ``cross`` (hashed
    features); the fit's knobs are ``ReturnDecomposition``'s. ``scorer`` is the trainer's policy scorer (read by
    ``features="trunk"`` only; not pickled: reattach it after loading)."""

    scorer: AnswerScorer | None = None
    features: FeatureKind = "hashed"
    dim: int = 4096
    ngrams: tuple[int, ...] = (1, 2)
    cross: bool = True
    name: str = "spa"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.features not in ("hashed", "trunk"):
            raise ValueError(f"features must be 'hashed' or 'trunk', got {self.features!r}")
        self.ngrams = tuple(self.ngrams)
        self._hashed = HashedTurnFeatures(self.dim, self.ngrams, self.cross, self.bias)

    @property
    def dense_features(self) -> bool:  # type: ignore[override]
        return self.features == "trunk"

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the policy scorer (the trainer checkpoints the model itself); reattach it after loading."""
        state = dict(self.__dict__)
        state["scorer"] = None
        return state

    def turn_features(self, traj: Trajectory) -> np.ndarray:
        """``(T, F)``: one feature row per turn of ``traj``."""
        if not traj.turns:
            return np.zeros((0, self._hashed.size))
        if self.features == "hashed":
            return np.stack([self._hashed(turn_context(traj, t), turn.action) for t, turn in enumerate(traj.turns)])
        return self._trunk_features(traj)

    def _trunk_features(self, traj: Trajectory) -> np.ndarray:
        model, tokenizer = getattr(self.scorer, "model", None), getattr(self.scorer, "tokenizer", None)
        if model is None or tokenizer is None:
            raise ValueError("features='trunk' needs the policy: a LocalAnswerScorer (the trainer passes one as "
                             "`scorer`; after unpickling, set estimator.scorer again)")  # fmt: skip
        import torch

        from agentgym.rewards.answer_scoring.render import render_trajectory

        rendered = render_trajectory(traj, tokenizer)
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                out = model(input_ids=torch.tensor([rendered.ids], device=device), output_hidden_states=True)
        finally:
            model.train(was_training)
        last = out.hidden_states[-1][0]
        rows = torch.tensor([t.action[1] - 1 for t in rendered.turns], device=last.device)
        x = last.index_select(0, rows).float().cpu().numpy().astype(np.float64)
        return self._with_bias(x)

    def batch_features(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[np.ndarray]]:
        return [[self.turn_features(traj) for traj in group] for group in groups]


# ----------------------------------------------------------------------------------------------------------- LaRe

#: The program the sandbox runs for a candidate: it loads ``candidate.py``, reads the states (JSON) from stdin, and
#: prints every state's latent twice: in order, then in reverse order (a function with hidden state differs).
LATENT_HARNESS = """\
import json, sys
namespace = {"__name__": "candidate"}
exec(compile(open("candidate.py", encoding="utf-8").read(), "candidate.py", "exec"), namespace)
latent = namespace["latent"]
states = json.loads(sys.stdin.read())
def row(state):
    value = latent(state)
    return [float(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
first = [row(s) for s in states]
second = [row(s) for s in reversed(states)][::-1]
print(json.dumps({"first": first, "second": second}))
"""
_FENCE = re.compile(r"```(?:python)?\s*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class CandidateCheck:
    """What the sandbox made of one candidate ``latent(state)`` source: ``ok`` when it ran on every state, gave
    finite rows of one width and the same rows in two processes and in both orders; ``reason`` says why not;
    ``values`` are its rows (``ok`` only); ``kept`` after the agreement vote."""

    source: str
    ok: bool
    reason: str = ""
    values: tuple[tuple[float, ...], ...] = ()
    kept: bool = False


def _run_candidate(source: str, states: Sequence[Any], sandbox: Any, timeout: float) -> tuple[Any, str]:
    """One sandboxed run of ``source`` on ``states``: (the harness's parsed output, "") or (None, why it failed)."""
    result = sandbox.run(LATENT_HARNESS, stdin=json.dumps(list(states)), timeout=timeout,
                         files={"candidate.py": source})  # fmt: skip
    if not result.ok:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        return None, f"crashed ({result.status}): {lines[-1] if lines else 'no message'}"
    try:
        out = json.loads(result.stdout)
        return {k: [tuple(float(v) for v in row) for row in out[k]] for k in ("first", "second")}, ""
    except (ValueError, KeyError, TypeError) as e:
        return None, f"unreadable output: {e}"


def check_candidate(source: str, states: Sequence[Any], sandbox: Any, timeout: float = 10.0) -> CandidateCheck:
    """Run ``source`` (defining ``latent(state)``) in ``sandbox`` on ``states`` twice, in two fresh processes, and
    check that it runs, gives finite rows of one width >= 1, and is deterministic (the same rows in both processes
    and in both orders). The code never runs in this process."""
    runs = []
    for _ in range(2):
        out, why = _run_candidate(source, states, sandbox, timeout)
        if out is None:
            return CandidateCheck(source, False, why)
        runs.append(out)
    rows = runs[0]["first"]
    if len({len(r) for r in rows}) > 1 or (rows and not rows[0]):
        return CandidateCheck(source, False, "its latents are empty or of different widths")
    if not all(math.isfinite(v) for r in rows for v in r):
        return CandidateCheck(source, False, "it returned a non-finite value")
    if any(run[k] != rows for run in runs for k in ("first", "second")):
        return CandidateCheck(source, False, "non-deterministic: two runs on the same states differ")
    return CandidateCheck(source, True, values=tuple(rows))


def select_candidates(
    sources: Sequence[str], states: Sequence[Any], sandbox: Any, *, min_agree: int = 1, timeout: float = 10.0
) -> list[CandidateCheck]:
    """``check_candidate`` every source, then keep the passing ones that agree: a candidate is kept when at least
    ``min_agree`` passing candidates (itself included) give the same latents on ``states`` (rounded to 9 digits)."""
    checks = [check_candidate(s, states, sandbox, timeout) for s in sources]
    votes: dict[tuple[tuple[float, ...], ...], int] = {}
    key = {c.source: tuple(tuple(round(v, 9) for v in r) for r in c.values) for c in checks if c.ok}
    for k in key.values():
        votes[k] = votes.get(k, 0) + 1
    return [dataclasses.replace(c, kept=c.ok and votes[key[c.source]] >= min_agree) for c in checks]


def extract_code(reply: str) -> str:
    """The first fenced code block of a model's reply, else the whole reply.

    >>> extract_code("Here:\\n```python\\ndef latent(s):\\n    return [1]\\n```")
    'def latent(s):\\n    return [1]\\n'
    """
    m = _FENCE.search(reply)
    return m.group(1) if m else reply


def generate_candidates(
    client: Any, task: str, states: Sequence[Any], k: int = 4, temperature: float = 0.8
) -> list[str]:
    """Ask ``client`` (an ``LLMClient``) ``k`` times for a ``latent(state)`` function of the task's states: LaRe's
    generator (its sources are unverified: ``select_candidates`` runs them in the sandbox)."""
    examples = "\n".join(f"- {json.dumps(s)[:300]}" for s in list(states)[:5])
    prompt = (f"Task given to an agent:\n{task[:2000]}\n\nExamples of the environment's symbolic state after a "
              f"step:\n{examples}\n\nWrite a deterministic Python function `latent(state)` that returns a short list "
              "of floats measuring how far the state is towards solving the task (each entry one factor). Use only "
              "the standard library. Reply with one ```python code block.")  # fmt: skip
    sources = []
    for i in range(k):
        reply = client.chat([{"role": "user", "content": prompt}], temperature=temperature, seed=i)
        sources.append(extract_code(reply.text))
    return sources


#: A ``latent(state)`` for the diagnostics' state anchors (``"<task>:<stage>:ok"``, ``":x"`` after a mistake):
#: whether every choice so far was right, and the stage reached.
CHAIN_LATENT = """\
def latent(state):
    task, stage, flag = str(state).split(":")
    return [1.0 if flag == "ok" else 0.0, float(stage)]
"""


@dataclass
class LatentReward(ReturnDecomposition):
    """LaRe: r_t = r_theta(latent(s_t)), latent() code checked in the sandbox, r_theta fitted so sum_t r_t = R.

    ``candidates`` are source texts, each defining ``latent(state) -> list[float]`` (or one float) over the env's
    symbolic state after a turn, ``info[state_key]`` (any JSON value). On the first batch every candidate runs in a
    fresh sandboxed process (``agentgym.tools.sandbox.SubprocessSandbox``; never in this process), twice, on that
    batch's states; it is kept only if it runs, gives finite rows of one width, is deterministic, and agrees with at
    least ``min_agree`` - 1 other candidates (``select_candidates``). With no candidates and a ``client`` (an LLM
    endpoint, ``scorer_kwargs["client"]``), ``generate`` candidates are written by the model from the task's prompt
    and a few states. The latents of the kept candidates, side by side, are the features of
    ``ReturnDecomposition``'s fit (standardised, plus a bias); ``alpha`` = 0: no grounding term. ``checks`` holds
    every candidate's verdict; no survivor raises ``ValueError`` with their reasons."""

    candidates: tuple[str, ...] = ()
    state_key: str = "anchor"
    min_agree: int = 1
    timeout: float = 10.0
    generate: int = 4
    client: Any = None
    alpha: float = 0.0
    name: str = "lare"
    checks: list[CandidateCheck] = field(default_factory=list, init=False)
    _kept: list[str] | None = field(default=None, init=False, repr=False)
    _sandbox: Any = field(default=None, init=False, repr=False)
    _errors: dict[int, str] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.candidates = tuple(self.candidates)
        if self.min_agree < 1 or self.generate < 0 or self.timeout <= 0:
            raise ValueError("need min_agree >= 1, generate >= 0 and timeout > 0")
        if not self.candidates and self.client is None:
            raise ValueError("LaRe needs candidates (latent(state) sources) or a client to write them")

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_sandbox"] = state["client"] = None
        return state

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "kept": self._kept, "checks": list(self.checks)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._kept, self.checks = state.get("kept"), list(state.get("checks", []))

    def sandbox(self) -> Any:
        if self._sandbox is None:
            from agentgym.tools.sandbox import SubprocessSandbox

            self._sandbox = SubprocessSandbox()
        return self._sandbox

    def states(self, traj: Trajectory) -> list[Any]:
        return [turn.info.get(self.state_key) for turn in traj.turns]

    def _rows(self, source: str, states: Sequence[Any], width: int) -> tuple[np.ndarray | None, str]:
        """A kept candidate's ``(len(states), width)`` latents in one sandboxed run, or (None, why it failed)."""
        out, why = _run_candidate(source, states, self.sandbox(), self.timeout)
        if out is None:
            return None, why
        rows = np.array(out["first"], dtype=float)
        if rows.shape != (len(states), width) and not (len(states) == 0 and rows.size == 0):
            return None, f"latents of shape {rows.shape}, not ({len(states)}, {width})"
        if not np.isfinite(rows).all():
            return None, "a non-finite latent"
        return rows.reshape(len(states), width), ""

    def _latents(self, source: str, trajs: Sequence[Trajectory]) -> np.ndarray:
        """A kept candidate on a later batch: one sandboxed run on all its states; if that fails, one run per
        trajectory, and a trajectory whose states still make it fail (crash, timeout, other widths, non-finite)
        gets NaN rows: its turns are invalid, the fit leaves it out, and ``extras["latent_error"]`` says why."""
        width = next(len(c.values[0]) for c in self.checks if c.source == source and c.values)
        states = [s for traj in trajs for s in self.states(traj)]
        rows, _ = self._rows(source, states, width)
        if rows is not None:
            return rows
        parts = []
        for traj in trajs:
            part, why = self._rows(source, self.states(traj), width)
            if part is None:
                self._errors[id(traj)] = why
                part = np.full((len(traj.turns), width), np.nan)
            parts.append(part)
        return np.concatenate(parts) if parts else np.zeros((0, width))

    def score_groups(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[TurnScores]]:
        out = super().score_groups(groups)
        for group, scores in zip(groups, out, strict=True):
            for traj, score in zip(group, scores, strict=True):
                if id(traj) in self._errors:
                    score.extras["latent_error"] = self._errors[id(traj)]
        return out

    def batch_features(self, groups: Sequence[Sequence[Trajectory]]) -> list[list[np.ndarray]]:
        self._errors = {}
        trajs = [traj for group in groups for traj in group]
        states = [s for traj in trajs for s in self.states(traj)]
        if self._kept is None:
            sources = list(self.candidates)
            if not sources and trajs:
                task = observation_text(trajs[0].initial_observation)
                sources = generate_candidates(self.client, task, states, self.generate)
            self.checks = select_candidates(sources, states, self.sandbox(), min_agree=self.min_agree,
                                            timeout=self.timeout)  # fmt: skip
            self._kept = [c.source for c in self.checks if c.kept]
            if not self._kept:
                reasons = "; ".join(c.reason or "no agreement" for c in self.checks)
                raise ValueError(f"no latent(state) candidate survived the checks: {reasons}")
            columns = [np.array(c.values, dtype=float).reshape(len(states), -1) for c in self.checks if c.kept]
        else:
            columns = [self._latents(source, trajs) for source in self._kept]
        x = self._with_bias(np.concatenate(columns, axis=1)) if columns else np.zeros((0, 1))
        out_rows, at = [], 0
        for group in groups:
            rows = []
            for traj in group:
                rows.append(x[at : at + len(traj.turns)])
                at += len(traj.turns)
            out_rows.append(rows)
        return out_rows


METHODS: tuple[Method, ...] = (
    Method(
        "spa", "SPA", "scorer", "learned stepwise progress that sums to the outcome, plus grounding",
        needs=("learned_model", "outcome", "turn_signal"), paper=cite("SPA"),
        code=f"{__name__}:ProgressEstimator",
        choices=(
            "estimator: closed-form ridge regression of R on each episode's summed turn features (knob model="
            "'linear'; 'mlp': one hidden layer, full-batch Adam, seeded; knobs hidden, steps, lr, weight_decay, seed)",
            "features: hashed word 1- and 2-grams of the observation the turn answered and of the action, plus their "
            "crossed pairs, 4096 buckets (knobs dim, ngrams, cross); features='trunk': the policy's last hidden state "
            "at the turn's last token, read without gradients",
            "ridge weight 10 on the sum of squares (knob ridge); mlp: Adam lr 0.003, weight decay 0.1, 300 steps",
            "data: refit from scratch every iteration on the batch plus the 7 batches before it (knob replay)",
            "grounding: g_t = 1[info['action_valid']] (knob grounding_key), weight alpha = 0.1 (knob alpha)",
            "R: the episode's 'outcome' component (knob outcome); the turn reward r_t = c_t + alpha * g_t is added "
            "to the env's rewards (scorer_coef), or read as mt_grpo's turn signal (turn_signal_source='scorer')",
        ),
        train={"scorer": "spa", "algo": "grpo", "estimator": "gtpo", "env_id": "agentgym/Chain-v0",
               "env_kwargs": {"horizon": 2}},
        knobs_into="scorer_kwargs",
    ),
    Method(
        "lare", "LaRe", "scorer", "LLM-written latent reward code over the symbolic state",
        needs=("learned_model", "outcome"), paper=cite("LaRe"), code=f"{__name__}:LatentReward",
        choices=(
            "candidates: latent(state) sources the operator gives (knob candidates), or generate=4 written by a "
            "model over scorer_kwargs['client'] from the task prompt and five states, on the first batch",
            "self-verification: each candidate runs twice in fresh sandboxed processes (SubprocessSandbox, 10 s, "
            "knob timeout) on the first batch's states, in order and reversed; kept if it never crashes, gives "
            "finite rows of one width and identical rows every time",
            "agreement: kept when at least min_agree = 1 passing candidates give identical latents (knob min_agree; "
            "1 keeps every passing candidate)",
            "state: info['anchor'] after the turn (knob state_key)",
            "r_theta: ridge regression of R on the episode's summed latents (kept candidates side by side, "
            "standardised, plus a bias), refit each batch with 7 past batches (ReturnDecomposition's knobs); "
            "no grounding term (alpha = 0)",
        ),
        train={"scorer": "lare", "algo": "grpo", "estimator": "gtpo", "env_id": "agentgym/Chain-v0",
               "env_kwargs": {"horizon": 2}, "scorer_kwargs": {"candidates": [CHAIN_LATENT]}},
        knobs_into="scorer_kwargs",
    ),
)  # fmt: skip
