"""The agentgym contract: ``AgentEnv``, the base class of every environment in the suite.

An agent's *turn* is one ``step``: the action is the agent's whole turn as raw text (what the model
generated), the observation is the list of new chat messages the environment produced in reply.

``info`` carries stable, JSON-serialisable keys on every ``reset`` and ``step``:

=====================  =============================================================================
``turn``               agent turns taken so far (0 after ``reset``)
``task_id``            identifier of the task being played
``action_valid``       whether the last action parsed and was legal (``True`` after ``reset``)
``parse_error``        ``None`` or a human-readable message explaining why the action was invalid
``reward_components``  ``{name: float}`` for this step; the env reward is their sum
``anchor``             canonical key of the current state (identical states share a key)
``gold``               privileged task data for reward shapers and trainers, never shown to the policy
                       (required after ``reset``; an env may repeat it on every step)
``success``            present once the episode has ended (terminated or truncated)
``action_truncated``   on ``step``: whether the action was cut at ``max_action_chars``
=====================  =============================================================================

A subclass writes only what is its own (see ``docs/architecture.md``, "Adding an environment"):

- ``num_tasks``: how many tasks ``reset`` can play (``options={"task_index": i}`` picks one; otherwise the
  seed does);
- ``_reset(task_index, options)``: start that task and return its first messages and extra ``info``
  (``gold``, and ``task_id`` unless the index is the id);
- ``_step(action)``: apply one agent turn and return a ``StepResult``;
- optionally ``anchor()``, ``task_index_of(task_id)``, ``_truncated_info()``, and ``_snapshot_state()`` /
  ``_restore_state(state)`` to support branching (``snapshot`` / ``restore``).

The base class does the rest: per-env seeding, choosing the task from ``options`` (unknown keys and bad
indices raise a ``ValueError`` listing what is accepted), sanitising and truncating actions, the turn limit,
the invalid-action penalty (component ``format``), assembling ``info``, recording the constructor arguments
(``spec_kwargs``, used by trajectory records and replay), snapshots and pickling.

>>> import agentgym, gymnasium as gym
>>> env = gym.make("agentgym/SearchQA-v0")
>>> obs, info = env.reset(seed=0)
>>> obs[-1]["role"], info["turn"]
('user', 0)
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import numpy as np

from agentgym.contract.spaces import Chat, UnicodeText
from agentgym.contract.trust import Arg, declare, integer, number, one_of

if TYPE_CHECKING:
    from agentgym.contract.agent import Agent
    from agentgym.tools.sandbox import Capabilities

Message = dict[str, Any]

#: Actions longer than this many characters are truncated before parsing (``info["action_truncated"]``).
MAX_ACTION_CHARS = 16_384
#: The ``reset`` options every env accepts.
TASK_OPTIONS = ("task_index", "task_id")


@dataclass
class StepResult:
    """What an env's ``_step`` returns; ``AgentEnv.step`` turns it into the Gymnasium 5-tuple.

    The step reward is ``sum(reward_components.values())``, so every reward has a name. An invalid action
    (``action_valid=False``) should say why in ``parse_error`` and in the observation; the base class adds the
    env's invalid-action penalty as the ``format`` component. ``truncated`` ends the episode outside the task's own
    terms (a simulated user that failed): trainers then bootstrap instead of treating the state as terminal; the
    turn limit truncates without it.
    """

    observation: list[Message]
    reward_components: dict[str, float] = field(default_factory=dict)
    terminated: bool = False
    action_valid: bool = True
    parse_error: str | None = None
    success: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    truncated: bool = False


@dataclass(frozen=True)
class Snapshot:
    """A picklable copy of an episode's state at one turn (``AgentEnv.snapshot``).

    ``env`` and ``spec`` name the env class and its constructor arguments: a snapshot restores into any env
    built the same way, in any process. ``wrappers`` holds the state of the wrappers around the env when the
    snapshot was taken with ``agentgym.contract.branching.snapshot``.
    """

    env: str
    spec: str
    base: tuple[Any, ...]
    state: Any
    wrappers: tuple[tuple[str, dict[str, Any]], ...] = ()


class EnvUnavailableError(RuntimeError):
    """An env cannot run here (its package or data is missing); the message says how to fix it.

    ``env_unavailable = True`` lets callers (``agentgym bench``) recognise it by attribute.
    """

    env_unavailable = True


class SnapshotError(TypeError):
    """The env (or a wrapper around it) cannot snapshot its episode state."""


def sanitize_action(action: Any, max_chars: int = MAX_ACTION_CHARS) -> tuple[str, str | None, bool]:
    """Coerce any action into valid Unicode text of at most ``max_chars`` characters.

    A ``dict`` (an OpenAI-style assistant message, e.g. ``{"role": "assistant", "tool_calls": [...]}``) becomes its
    JSON text, which tool-calling envs parse. Returns ``(text, error, truncated)``: ``error`` explains an action of
    another type, ``truncated`` says whether the text was cut. Lone surrogates (invalid Unicode) become U+FFFD.

    >>> sanitize_action({"role": "assistant", "content": "hi"})
    ('{"role": "assistant", "content": "hi"}', None, False)
    """
    error = None
    if isinstance(action, bytes | bytearray):
        action = bytes(action).decode("utf-8", errors="replace")
    elif isinstance(action, dict):  # an OpenAI-style assistant message (e.g. with ``tool_calls``): its JSON text
        try:
            action = json.dumps(action, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            error, action = f"The action is a message dict that is not JSON data ({e}).", ""
    elif not isinstance(action, str):
        error = f"The action must be text (a string), got {type(action).__name__}."
        action = ""
    truncated = len(action) > max_chars
    if truncated:
        action = action[:max_chars]
    try:
        action.encode("utf-8")
    except UnicodeEncodeError:
        action = action.encode("utf-8", errors="surrogatepass").decode("utf-8", errors="replace")
    return action, error, truncated


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (tuples become lists), or ``_NOT_JSON`` when it has no JSON form."""
    if isinstance(value, tuple | list):
        items = [_jsonable(v) for v in value]
        return _NOT_JSON if any(v is _NOT_JSON for v in items) else items
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return _NOT_JSON
        fields = {k: _jsonable(v) for k, v in value.items()}
        return _NOT_JSON if any(v is _NOT_JSON for v in fields.values()) else fields
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _NOT_JSON
    return _NOT_JSON


_NOT_JSON = object()


def _rebuild(cls: type[AgentEnv], args: tuple[Any, ...], kwargs: dict[str, Any], snap: Snapshot | None) -> AgentEnv:
    """Unpickle an env: construct it again, then restore its episode (see ``AgentEnv.__reduce__``)."""
    env = cls(*args, **kwargs)
    if snap is not None:
        env.restore(snap)
    return env


class AgentEnv(gym.Env[list, str]):
    """Base class for multi-turn text environments (see the module docstring for the contract).

    Args:
        max_turns: agent turns before the episode is truncated.
        invalid_action_penalty: subtracted (as reward component ``format``) for each invalid action.
        max_action_chars: actions are cut to this many characters before parsing.
        render_mode: ``None`` or ``"ansi"`` (``render`` returns the transcript as text).
    """

    # A class attribute, as gymnasium uses it (gym.Env annotates it without ClassVar).
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}  # type: ignore[misc]
    #: Built-in agents for this env: name -> factory, called as ``factory(**agent_kwargs) -> Agent``
    #: (an ``Agent`` subclass is such a factory).
    agents: ClassVar[Mapping[str, Callable[..., Agent]]] = {}
    #: The agent whose episodes trainers imitate in supervised warm starts: a built-in agent's name or an ``Agent``
    #: class (``agentgym.baselines.rollout.demonstration_episode``).
    demo_agent: ClassVar[str | type[Agent]] = "oracle"
    #: ``reset`` options this env accepts besides ``task_index`` and ``task_id`` (a class or instance attribute:
    #: ``RemoteEnv`` reads its own from the server).
    reset_options: tuple[str, ...] = ()
    #: How many tasks ``reset`` can play; subclasses set it (a class or instance attribute, or a property).
    num_tasks: int
    #: Why this env cannot run here (a missing package or data), or None; ``reset`` raises it.
    unavailable_reason: str | None = None
    #: Constructor arguments an outside caller (an env-server client, a trajectory file, a dataset row) may set, and
    #: the values each may take (``agentgym.contract.trust``); any other argument is the operator's. Each env class
    #: declares its own (usually ``declare(AgentEnv.public_args, name=...)``): never a file, URL, credential, cache
    #: or code.
    public_args: ClassVar[Mapping[str, Arg]] = declare(
        max_turns=integer(1, 1000),
        invalid_action_penalty=number(-1e6, 1e6),
        max_action_chars=integer(1, MAX_ACTION_CHARS),
        render_mode=one_of("ansi", optional=True),
    )

    #: The outermost constructor call's (args, kwargs): ``spec_kwargs`` and pickling recreate the env from them.
    _init_call: tuple[tuple[Any, ...], dict[str, Any]]
    _spec_json: str | None

    def __new__(cls, *args: Any, **kwargs: Any) -> AgentEnv:
        self = super().__new__(cls)
        self._init_call = (args, kwargs)
        self._spec_json = None
        return self

    def __init__(
        self,
        *,
        max_turns: int,
        invalid_action_penalty: float = 0.0,
        max_action_chars: int = MAX_ACTION_CHARS,
        render_mode: str | None = None,
    ):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.max_turns = max_turns
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.max_action_chars = max_action_chars
        self.render_mode = render_mode
        self.observation_space = Chat()
        self.action_space = UnicodeText(max_length=max_action_chars)
        self._turn = 0
        self._done = True
        self._action_cut = False
        self._transcript: list[Message] = []
        self._task_index: int | None = None
        self._task_id = ""
        self._task_rng: np.random.Generator | None = None

    @classmethod
    def sandbox_capabilities(cls, env_kwargs: Mapping[str, Any]) -> list[Capabilities]:
        """What each sandbox back-end that envs of this class built with the operator's ``env_kwargs`` may run code
        in enforces here, measured (``Sandbox.capabilities()``, a probe run in it): one per back-end, those a client
        may pick included. Empty (this default) for envs that run no sandbox. ``agentgym serve`` prints them before
        it listens."""
        return []

    # -- to implement -------------------------------------------------------------------------------
    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[Message], dict[str, Any]]:
        """Start task ``task_index`` (``0 <= task_index < num_tasks``); return its first messages and extra info.

        The extra info must hold ``gold``, and ``task_id`` when the id is not ``str(task_index)``. ``options``
        holds only this env's own ``reset_options``.
        """
        raise NotImplementedError

    def _step(self, action: str) -> StepResult:
        """Apply one sanitised agent turn."""
        raise NotImplementedError

    def anchor(self) -> str:
        """Canonical key of the current state (identical states share a key; reward methods group by it).

        The default is the task id and a digest of the transcript: two episodes of a task with the same
        history share it. Override it when different histories can reach the same state.
        """
        digest = hashlib.blake2b(json.dumps(self._transcript, sort_keys=True).encode(), digest_size=8).hexdigest()
        return f"{self._task_id}#{digest}"

    def task_index_of(self, task_id: str) -> int:
        """The index of task ``task_id`` (for ``options={"task_id": ...}``); the default reads the id as the index."""
        if not task_id.isdigit():
            raise ValueError(f"unknown task_id {task_id!r}: task ids of this env are task indices")
        return int(task_id)

    def _truncated_info(self) -> dict[str, Any]:
        """Extra ``info`` for an episode that the turn limit ended (e.g. zero episode metrics)."""
        return {}

    def _snapshot_state(self) -> Any:
        """The env's own episode state as a picklable value that later steps never mutate."""
        raise SnapshotError(f"{type(self).__name__} does not support snapshots")

    def _restore_state(self, state: Any) -> None:
        """Put the env in the episode state ``state`` (from ``_snapshot_state``) without aliasing it.

        Called after the base state (``task_index``, ``turn``, the RNGs) is restored.
        """
        raise SnapshotError(f"{type(self).__name__} does not support snapshots")

    # -- the Gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list, dict]:
        """Start an episode.

        ``options``: ``task_index`` (an int in ``range(num_tasks)``) or ``task_id`` pick the task, plus the
        env's own ``reset_options``. Without them the task is drawn from a task stream seeded by ``seed``: the
        n-th reset after ``reset(seed=s)`` plays the same task whatever happened in between, so k envs reset
        with one seed stay a group across automatic resets.
        """
        super().reset(seed=seed)
        if self.unavailable_reason is not None:
            raise EnvUnavailableError(self.unavailable_reason)
        if seed is not None or self._task_rng is None:
            self._task_rng = np.random.default_rng(seed if seed is not None else self.np_random.integers(2**63))
        own = self._check_options(options or {})
        drawn = int(self._task_rng.integers(self.num_tasks))
        index = self._task_index_from(options or {}, drawn)
        self._turn = 0
        self._done = False
        self._task_index = index
        obs, extra = self._reset(index, own)
        self._task_id = str(extra.get("task_id", index))
        self._transcript = [dict(m) for m in obs]
        info = {"turn": 0, "task_id": self._task_id, "action_valid": True, "parse_error": None,
                "reward_components": {}, "anchor": self.anchor()}  # fmt: skip
        info.update(extra)
        return obs, info

    def step(self, action: str) -> tuple[list, float, bool, bool, dict]:
        """Play one agent turn. A bad action never raises (``_step`` makes it an invalid action); if ``_step`` raises
        anyway (an env bug or failure), the turn is undone (``turn`` and the transcript are as before) and the
        exception propagates, so pools can replace the env and bugs stay visible."""
        if self._done:
            raise RuntimeError("The episode has ended (or never started): call reset() before step().")
        text, type_error, cut = sanitize_action(action, self.max_action_chars)
        self._turn += 1
        self._action_cut = cut
        if type_error is not None:
            result = StepResult(observation=[{"role": "user", "content": type_error}], action_valid=False,
                                parse_error=type_error)  # fmt: skip
        else:
            try:
                result = self._step(text)
            except BaseException:  # an env bug, not a bad action (those are invalid actions): undo the turn
                self._turn -= 1
                self._action_cut = False
                raise
        limit = not result.terminated and not result.truncated and self._turn >= self.max_turns
        truncated = not result.terminated and (result.truncated or limit)
        self._done = result.terminated or truncated
        components = {k: float(v) for k, v in result.reward_components.items()}
        if not result.action_valid and self.invalid_action_penalty and "format" not in components:
            components["format"] = -self.invalid_action_penalty
        self._transcript.append({"role": "assistant", "content": text})
        self._transcript.extend(map(dict, result.observation))
        info = {
            "turn": self._turn,
            "task_id": self._task_id,
            "action_valid": result.action_valid,
            "parse_error": result.parse_error,
            "reward_components": components,
            "action_truncated": cut,
            "anchor": self.anchor(),
        }
        info.update(result.info)
        if limit:
            info.update(self._truncated_info())
        if self._done:
            info["success"] = bool(result.success)
        return result.observation, float(sum(components.values())), result.terminated, truncated, info

    # -- options ----------------------------------------------------------------------------------------
    def _check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The env's own options; unknown keys raise a ``ValueError`` that lists the accepted ones."""
        if not isinstance(options, Mapping):
            raise ValueError(f"options must be a dict, got {type(options).__name__}")
        accepted = (*TASK_OPTIONS, *self.reset_options)
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown} for {type(self).__name__}; accepted: {list(accepted)}")
        if "task_index" in options and "task_id" in options:
            raise ValueError("give task_index or task_id, not both")
        return {k: v for k, v in options.items() if k not in TASK_OPTIONS}

    def _task_index_from(self, options: Mapping[str, Any], drawn: int) -> int:
        if "task_id" in options:
            if not isinstance(options["task_id"], str):
                raise ValueError(f"task_id must be a str, got {type(options['task_id']).__name__}")
            index = self.task_index_of(options["task_id"])
        elif "task_index" in options:
            index = options["task_index"]
            if isinstance(index, bool) or not isinstance(index, int | np.integer):
                raise ValueError(f"task_index must be an int, got {type(index).__name__} {index!r}")
        else:
            return drawn
        if not 0 <= index < self.num_tasks:
            raise ValueError(f"task_index {index} is out of range: this env has tasks 0..{self.num_tasks - 1}")
        return int(index)

    # -- branching and pickling ------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The current episode state (picklable). ``restore`` puts this or any env of the same spec back in it.

        Raises ``SnapshotError`` if the env does not support snapshots. To include the wrappers around an env
        use ``agentgym.contract.branching.snapshot(env)``.
        """
        state = self._snapshot_state() if self._task_index is not None else None
        rngs = tuple(None if g is None else g.bit_generator.state for g in (self._np_random, self._task_rng))
        base = (self._turn, self._done, self._task_index, self._task_id, tuple(self._transcript), rngs)
        return Snapshot(env=self._class_name(), spec=self._spec_key(), base=base, state=state)

    def restore(self, snapshot: Snapshot) -> None:
        """Put the env in the state of ``snapshot`` (taken from this env or another built with the same spec)."""
        if not isinstance(snapshot, Snapshot):
            raise TypeError(f"restore() takes a Snapshot, got {type(snapshot).__name__}")
        if snapshot.env != self._class_name():
            raise ValueError(f"snapshot of {snapshot.env} cannot restore into {self._class_name()}")
        if snapshot.spec != self._spec_key():
            theirs, ours = json.loads(snapshot.spec), self.spec_kwargs()
            diff = sorted(k for k in {*theirs, *ours} if theirs.get(k) != ours.get(k))
            raise ValueError(f"snapshot comes from an env built with other arguments (differing: {diff})")
        turn, done, index, task_id, transcript, (rng, task_rng) = snapshot.base
        self._turn, self._done, self._task_index, self._task_id = turn, done, index, task_id
        self._transcript = list(transcript)
        self._np_random, self._task_rng = _generator(self._np_random, rng), _generator(self._task_rng, task_rng)
        if snapshot.state is not None:
            self._restore_state(snapshot.state)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as constructor arguments plus a snapshot of the current episode (so Ray and process pools work)."""
        try:
            snap = self.snapshot()
        except SnapshotError:
            if self._task_index is not None and not self._done:
                raise SnapshotError(
                    f"cannot pickle {type(self).__name__} mid-episode: it does not support snapshots"
                ) from None
            snap = None
        return _rebuild, (type(self), *self._init_call, snap)

    def _class_name(self) -> str:
        return f"{type(self).__module__}:{type(self).__qualname__}"

    def _spec_key(self) -> str:
        """``spec_kwargs`` as JSON, computed once (the constructor arguments do not change)."""
        if self._spec_json is None:
            self._spec_json = json.dumps(self._constructor_kwargs())
        return self._spec_json

    # -- conveniences -------------------------------------------------------------------------------
    @property
    def turn(self) -> int:
        """Agent turns taken in the current episode."""
        return self._turn

    @property
    def truncated_at(self) -> int | None:
        """``max_action_chars`` while ``_step`` handles an action that was cut to it, else None (for parsers: an
        answer cut by the limit must not be read as the whole answer)."""
        return self.max_action_chars if self._action_cut else None

    @property
    def task_index(self) -> int | None:
        """Index of the task being played (None before the first ``reset``)."""
        return self._task_index

    @property
    def transcript(self) -> list[Message]:
        """The whole conversation so far (env messages and the agent's sanitised actions)."""
        return [dict(m) for m in self._transcript]

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m['role']}] {m['content']}" for m in self._transcript)

    def spec_kwargs(self) -> dict[str, Any]:
        """Constructor arguments that recreate this env (trajectory records and replay use them).

        Every argument of the constructor call with its default filled in, as JSON data; arguments left at a
        ``None`` default, ``render_mode`` and values with no JSON form (objects such as a ``Retriever``) are
        left out.
        """
        return json.loads(self._spec_key())  # a fresh copy each call: callers may change it

    def _constructor_kwargs(self) -> dict[str, Any]:
        sig = inspect.signature(type(self).__init__)
        args, kwargs = self._init_call
        given = sig.bind_partial(None, *args, **kwargs).arguments
        out: dict[str, Any] = {}
        for name, param in sig.parameters.items():
            if param.kind == param.VAR_KEYWORD:
                values = given.get(name, {})
            elif name in ("self", "render_mode") or param.kind == param.VAR_POSITIONAL:
                continue
            else:
                value = given.get(name, param.default)
                if value is param.empty or (value is None and param.default is None):
                    continue
                values = {name: value}
            for key, value in values.items():
                if (value := _jsonable(value)) is not _NOT_JSON:
                    out[key] = value
        return out


def _generator(gen: np.random.Generator | None, state: dict[str, Any] | None) -> np.random.Generator | None:
    """``gen`` (or a new generator when it has another kind of bit generator) put in the given state."""
    if state is None:
        return None
    if gen is None or type(gen.bit_generator).__name__ != state["bit_generator"]:
        gen = np.random.Generator(getattr(np.random, state["bit_generator"])())
    gen.bit_generator.state = state
    return gen
