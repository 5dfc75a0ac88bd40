"""ONI: an asynchronous judge labels the states rollouts reach; a bonus reads the labels from a per-batch snapshot.

:class:`Annotator` runs a judge on a background thread. ``submit(key, question)`` only puts the question on a bounded
queue (a full queue drops it and counts the drop; a key already labelled or waiting is not asked again), so a step
never waits for the judge. The thread answers questions in small batches and keeps each yes/no label in a bounded
cache (the oldest labels go first); a question the judge could not answer gets no label and may be asked again.

:class:`AnnotationTable` is the trainer's cross-batch table around an annotator: ``update(...)``, which the trainer
calls once per iteration after all rollouts, freezes a snapshot of the labels answered so far, and every episode of
the next iteration reads that snapshot, so sibling rollouts see the same labels whatever the judge does meanwhile.

:class:`LearnedBonus` is the step wrapper (ONI's hashing variant: the reward model is a lookup by state):

    bonus_t = coef * label(info["anchor"] after step t)      (0 for a state not labelled yet)

and on every step it submits the reached state to the annotator: a yes/no question showing the task and the
observation ("does it show progress on the task?"), whose rule (what ``RuleJudge`` answers) is that the env's
verified ``info["progress"]`` is above its value at the reset. The classification and ranking variants of the paper
(a model fitted to the labels) are not built.

>>> import gymnasium as gym, agentgym
>>> table = AnnotationTable()
>>> env = LearnedBonus(gym.make("agentgym/SearchQA-v0", dataset="tiny"), table, coef=0.5)
>>> _, info = env.reset(seed=3)
>>> _, r, *_, info = env.step("<search>" + info["gold"]["oracle_queries"][0] + "</search>")
>>> r   # nothing is labelled yet
0.0
>>> table.annotator.wait_idle(); table.update([])   # the next batch's snapshot holds the label
>>> _, info = env.reset(seed=3)
>>> env.step("<search>" + info["gold"]["oracle_queries"][0] + "</search>")[1]
0.5
>>> table.close()
"""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import gymnasium as gym

from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite
from agentgym.rewards.text_features import observation_text
from agentgym.rewards.verdicts import Judge, Question, RuleJudge
from agentgym.rewards.wrappers import StepReturn, add_component

_STOP = object()


class Annotator:
    """A judge on a background thread (see the module docstring). ``maxsize``: the queue's bound; ``cache_size``:
    how many labels are kept; ``batch``: at most this many questions per ``judge.ask``. The thread starts on the first
    ``submit`` (``autostart=False``: on ``start()`` or ``wait_idle()``); ``close()`` stops it after the questions
    already queued."""

    def __init__(self, judge: Judge | RuleJudge | None = None, maxsize: int = 1024, cache_size: int = 65536,
                 batch: int = 8, autostart: bool = True):  # fmt: skip
        if maxsize < 1 or cache_size < 1 or batch < 1:
            raise ValueError("maxsize, cache_size and batch must be >= 1")
        self.judge: Judge | RuleJudge = judge if judge is not None else RuleJudge()
        self.maxsize, self.cache_size, self.batch, self.autostart = maxsize, cache_size, batch, autostart
        self._queue: queue.Queue[Any] = queue.Queue(maxsize)
        self._lock = threading.Lock()
        self._labels: OrderedDict[str, float] = OrderedDict()
        self._pending: set[str] = set()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: counters: questions answered, dropped (queue full), failed (no verdict)
        self.answered = self.dropped = self.failed = 0

    def start(self) -> None:
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="oni-annotator", daemon=True)
                self._thread.start()

    def submit(self, key: str, question: Question) -> bool:
        """Queue ``question`` about ``key`` without waiting; False when it is already labelled or queued, the queue is
        full (counted in ``dropped``) or the annotator is closed."""
        with self._lock:
            if self._closed or key in self._labels or key in self._pending:
                return False
            try:
                self._queue.put_nowait((key, question))
            except queue.Full:
                self.dropped += 1
                return False
            self._pending.add(key)
        if self._thread is None and self.autostart:
            self.start()
        return True

    def labels(self) -> dict[str, float]:
        """A copy of the labels answered so far."""
        with self._lock:
            return dict(self._labels)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def wait_idle(self) -> None:
        """Block until every queued question has been answered (starts the thread if it is not running)."""
        self.start()
        self._queue.join()

    def close(self) -> None:
        """Stop the thread once the queued questions are answered; later submits are refused."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join()

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            while len(items) < self.batch and items[-1] is not _STOP:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = items[-1] is _STOP
            jobs = [x for x in items if x is not _STOP]
            try:
                verdicts = self.judge.ask([q for _, q in jobs]) if jobs else []
            except Exception:  # a judge that raises must not kill the thread: no labels this time
                verdicts = []
            with self._lock:
                for n, (key, _) in enumerate(jobs):
                    value = verdicts[n].value if n < len(verdicts) else None
                    self._pending.discard(key)
                    if value is None:
                        self.failed += 1
                        continue
                    self._labels[key] = float(value)  # type: ignore[arg-type]
                    self.answered += 1
                    while len(self._labels) > self.cache_size:
                        self._labels.popitem(last=False)
            for _ in items:
                self._queue.task_done()
            if stop:
                return


@dataclass(frozen=True)
class LabelSnapshot:
    """The labels as of one ``update``: what every episode of a batch reads."""

    labels: Mapping[str, float]
    updates: int = 0

    def label(self, key: str) -> float:
        return float(self.labels.get(key, 0.0))


def make_table_judge(spec: Any) -> Judge | RuleJudge:
    """The table's judge: a ``Judge`` as it is; None or ``"rule"``: ``RuleJudge``; an endpoint URL, or a dict with
    ``base_url`` (``LLMClient`` arguments and ``LLMJudge`` arguments mixed, as in a trainer config): ``LLMJudge``."""
    if spec is None or spec == "rule":
        return RuleJudge()
    if isinstance(spec, str):
        if not spec.startswith(("http://", "https://")):
            raise ValueError(f"a table's judge is 'rule', an endpoint URL or a dict with base_url; got {spec!r}")
        spec = {"base_url": spec}
    if isinstance(spec, Mapping):
        if not isinstance(spec.get("base_url"), str):
            raise ValueError(f"a table's judge endpoint needs a base_url, got {dict(spec)!r}")
        import inspect

        from agentgym.rewards.judge import LLMJudge
        from agentgym.tools.llm import LLMClient

        judge_params = set(inspect.signature(LLMJudge).parameters) - {"client"}
        client_params = set(inspect.signature(LLMClient).parameters) - {"model"}
        unknown = sorted(set(spec) - judge_params - client_params)
        if unknown:
            raise ValueError(f"a table's judge takes no {unknown}")
        client = LLMClient(**{k: v for k, v in spec.items() if k in client_params})
        return LLMJudge(client, **{k: v for k, v in spec.items() if k in judge_params})
    if not hasattr(spec, "ask"):
        raise ValueError(f"a table's judge must be a Judge, 'rule' or an endpoint; got {spec!r}")
    return spec


class AnnotationTable:
    """The trainer's table for :class:`LearnedBonus` (see the module docstring): an :class:`Annotator` plus the
    snapshot frozen at each ``update``. ``judge``: a Judge, or a spec (:func:`make_table_judge`: ``"rule"``, the
    default, or an endpoint)."""

    #: what the trainer hands ``update`` (the reached states' anchors; only their number is used)
    items: ClassVar[str] = "anchors"

    def __init__(self, judge: Any = None, maxsize: int = 1024, cache_size: int = 65536, batch: int = 8):
        self.annotator = Annotator(make_table_judge(judge), maxsize, cache_size, batch)
        self.updates = 0
        self._snapshot = LabelSnapshot(MappingProxyType({}), 0)

    def snapshot(self) -> LabelSnapshot:
        return self._snapshot

    def update(self, items: Iterable[Any] = ()) -> None:
        """Freeze the labels answered so far as the snapshot the next batch reads (never waits for the judge)."""
        self.updates += 1
        self._snapshot = LabelSnapshot(MappingProxyType(self.annotator.labels()), self.updates)

    def submit(self, key: str, question: Question) -> bool:
        return self.annotator.submit(key, question)

    def close(self) -> None:
        self.annotator.close()

    def __getstate__(self) -> dict[str, Any]:  # a copy gets its own idle annotator with the labels so far
        a = self.annotator
        return {"judge": a.judge, "args": (a.maxsize, a.cache_size, a.batch), "labels": a.labels(),
                "updates": self.updates, "snapshot": dict(self._snapshot.labels)}  # fmt: skip

    def __deepcopy__(self, memo: dict[int, Any]) -> AnnotationTable:  # the copy shares the judge (a client, say)
        clone = AnnotationTable.__new__(AnnotationTable)
        clone.__setstate__(self.__getstate__())
        return clone

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.annotator = Annotator(state["judge"], *state["args"])
        self.annotator._labels.update(state["labels"])
        self.updates = state["updates"]
        self._snapshot = LabelSnapshot(MappingProxyType(state["snapshot"]), self.updates)


def _progressed(progress: float, start: float) -> bool:
    return progress > start


class LearnedBonus(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """ONI's bonus ``coef * label(info[anchor_key])`` from the table's snapshot taken at reset (component ``name``);
    every step also submits the reached state to the table's annotator (see the module docstring). ``table``: the
    table the trainer shares between envs; a mapping is the arguments of a new one, None a default one."""

    snapshot_attrs: ClassVar[tuple[str, ...]] = ("_snapshot", "_start", "_task")
    table_type: ClassVar[type] = AnnotationTable

    def __init__(self, env: gym.Env, table: Any = None, coef: float = 0.1, name: str = "oni",
                 anchor_key: str = "anchor", progress_key: str = "progress"):  # fmt: skip
        gym.utils.RecordConstructorArgs.__init__(
            self, table=table, coef=coef, name=name, anchor_key=anchor_key, progress_key=progress_key
        )
        gym.Wrapper.__init__(self, env)
        if table is None or isinstance(table, Mapping):
            table = AnnotationTable(**dict(table or {}))
        self.table: AnnotationTable = table
        self.coef, self.name = float(coef), name
        self.anchor_key, self.progress_key = anchor_key, progress_key
        self._snapshot = table.snapshot()
        self._start: float | None = None
        self._task = ""

    def question(self, obs: Any, info: Mapping[str, Any]) -> Question:
        """The yes/no question about the state a step reached (its rule: verified progress above the reset's)."""
        prompt = (f"Task:\n{self._task}\n\nObservation:\n{observation_text(obs)}\n\n"
                  "Does this observation show the agent making progress on the task?")  # fmt: skip
        rule = None
        if self._start is not None and self.progress_key in info:
            progress, start = float(info[self.progress_key]), self._start

            def rule() -> bool:
                return _progressed(progress, start)

        return Question("yesno", prompt, rule=rule)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._snapshot = self.table.snapshot()
        self._start = float(info[self.progress_key]) if self.progress_key in info else None
        self._task = observation_text(obs)
        return obs, info

    def step(self, action: Any) -> StepReturn:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.anchor_key not in info:
            raise KeyError(f"LearnedBonus: info has no {self.anchor_key!r} (the canonical state key)")
        anchor = str(info[self.anchor_key])
        self.table.submit(anchor, self.question(obs, info))
        reward, info = add_component(reward, info, self.name, self.coef * self._snapshot.label(anchor))
        return obs, reward, terminated, truncated, info


METHODS: tuple[Method, ...] = (
    Method("oni", "ONI", "bonus",
           "coef * an asynchronous judge's label of the reached state, looked up by anchor in a per-batch snapshot",
           needs=("judge", "learned_model", "anchors"), paper=cite("ONI"), code=f"{__name__}:LearnedBonus",
           choices=("hashing variant: the reward model is a lookup of the label by info['anchor'] (0 if unseen); "
                    "the classification and ranking variants are not built",
                    "label: yes/no 'does this observation show progress on the task'; rule: verified progress above "
                    "the reset's",
                    "labels are frozen per batch (the trainer's table update), so siblings read the same labels",
                    "bounded queue (drops when full, table knob maxsize) and cache (oldest first, cache_size); the "
                    "thread answers up to batch questions per judge call",
                    "coef = 0.1 (knob); the bonus is added to the step reward"),
           train={"algo": "grpo", "reward_components": "all", "reward_wrappers": [{"name": "oni"}]},
           knobs_into="wrapper"),
)  # fmt: skip
