"""Learned turn signals: SPA's progress estimator (``ProgressEstimator``, card ``spa``).

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

import math
import re
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from agentgym.contract.trajectory import Trajectory
from agentgym.rewards.answer_scoring.scorer import AnswerScorer
from agentgym.rewards.base import TurnScorer, TurnScores
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
    _batches: deque[list[tuple[np.ndarray, float]]] = field(init=False, repr=False)
    _weights: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.model not in ("linear", "mlp"):
            raise ValueError(f"model must be 'linear' or 'mlp', got {self.model!r}")
        if self.replay < 0 or self.ridge <= 0 or self.weight_decay < 0 or min(self.steps, self.hidden) < 1:
            raise ValueError("need replay >= 0, ridge > 0, weight_decay >= 0, steps >= 1 and hidden >= 1")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        self._batches = deque(maxlen=self.replay + 1)

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs (the trainer saves it beside each checkpoint): the replay and the weights."""
        return {"batches": [list(b) for b in self._batches], "weights": dict(self._weights), "last_fit": self.last_fit}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s replay (the newest ``replay + 1`` batches) and weights."""
        self._batches = deque((list(b) for b in state["batches"]), maxlen=self.replay + 1)
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
        eps = [(np.asarray(x, dtype=np.float64), r) for x, r in episodes if len(x)]
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
        self._batches.append(batch)
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
)  # fmt: skip
