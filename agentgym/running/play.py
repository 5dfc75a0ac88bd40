"""Play an env by hand: a person types each turn, sees what the env answered, undoes turns and saves the episode.

A ``PlaySession`` holds one env and the episode being played on it. ``reset`` starts an episode, ``step`` plays
one turn (any text: a malformed turn is the env's invalid action, and nothing a caller sends makes it raise),
``undo`` takes the last turn back, ``trajectory`` is the episode recorded as ``run_episode`` records an agent's,
and ``save`` appends it to a JSONL file as a one-episode run that ``agentgym replay`` re-executes. Every method
that changes the state returns ``view()``: the state as plain JSON data (the keys are listed in ``VIEW_KEYS``), for
a terminal (``agentgym play``) or a web page.

Undo puts the env back in the state before the last turn: by restoring a snapshot taken before that turn where the
env supports snapshots (``agentgym.contract.branching``), otherwise by resetting it with the episode's seed and
options and playing the episode's earlier turns again (envs are deterministic given the seed; a replay that does
not reproduce the recorded turns is reported in the view's ``error``). ``view()["undo_mode"]`` says which.

>>> import agentgym
>>> play = PlaySession("agentgym/Household-v0", {"split": "train"})
>>> view = play.reset(seed=0, options={"task_index": 3})
>>> view["turn"], view["undo_mode"]
(0, 'snapshot')
>>> view = play.step("go to cabinet 10")
>>> view["observation"][0]["content"], view["turn"], view["can_undo"]
('You arrive at cabinet 10. The cabinet 10 is closed.', 1, True)
>>> play.undo()["turn"]
0
>>> play.close()
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym.contract.branching import restore, snapshot
from agentgym.contract.env import MAX_ACTION_CHARS, Snapshot, SnapshotError
from agentgym.contract.trajectory import (
    MAX_RECORD_BYTES,
    RecordTooLarge,
    RunHeader,
    Trajectory,
    TrajectoryWriter,
    Turn,
    canonical,
    normalize,
    trajectory_key,
)
from agentgym.running.episode import env_kwargs_of

#: The agent label of a person's episodes (``Trajectory.agent``, the run header's ``agent``).
HUMAN = "human"
#: Turns a session plays at most when the env states no turn limit of its own (``AgentEnv.max_turns``).
MAX_TURNS = 1000
#: ``info`` keys shown as the turn's verified signals when present (plus the env's own ``TURN_SIGNALS`` key).
SIGNAL_KEYS = ("success", "won", "correct", "progress", "action_valid", "parse_error", "action_truncated")
#: ``info`` keys never shown in the view: privileged task data (the answer) the player must not see.
HIDDEN_INFO = ("gold",)
#: The keys of ``PlaySession.view()``.
VIEW_KEYS = (
    "env_id", "env_kwargs", "agent", "seed", "options", "task_id", "started", "turn", "max_turns", "terminated",
    "truncated", "done", "success", "total_reward", "messages", "observation", "turns", "signals", "info",
    "can_undo", "undo_mode", "message", "error", "replayable",
)  # fmt: skip


class PlayError(ValueError):
    """A request the session cannot carry out in its state (saving before any episode, an episode whose task
    replay cannot check); the message says why."""


def _clean(value: Any) -> Any:
    """``value`` as JSON data any encoder takes: lone surrogates become U+FFFD, non-finite floats their text,
    tuples lists, other objects their ``repr``."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(_clean(k)): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return _clean(repr(value))


def _signal_keys(env_id: str) -> tuple[str, ...]:
    """``SIGNAL_KEYS`` plus the key of the env's verified per-turn signal (``TURN_SIGNALS``), if it has one."""
    from agentgym.rewards.advantages.signals import TURN_SIGNALS

    own = TURN_SIGNALS.get(env_id)
    return SIGNAL_KEYS if own is None or own.key in SIGNAL_KEYS else (*SIGNAL_KEYS, own.key)


@dataclass
class PlaySession:
    """One env played by hand (see the module docstring).

    Args:
        env_id: the env's registered id (what the saved record names and replay makes).
        env_kwargs: its constructor arguments; the env is ``gymnasium.make(env_id, **env_kwargs)`` unless ``env``
            is given.
        env: an env already made (e.g. a ``RemoteEnv``); the session closes it only when ``own_env``.
        agent: the label the records carry (``"human"``).
        own_env: whether ``close`` closes ``env`` (always for an env the session made).
    """

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    env: gym.Env | None = None
    agent: str = HUMAN
    own_env: bool = False
    seed: int | None = field(default=None, init=False)
    options: dict[str, Any] = field(default_factory=dict, init=False)
    _traj: Trajectory | None = field(default=None, init=False, repr=False)
    _snapshots: list[Snapshot] = field(default_factory=list, init=False, repr=False)
    _snapshots_ok: bool | None = field(default=None, init=False, repr=False)
    _message: str | None = field(default=None, init=False, repr=False)
    _error: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.env_kwargs = dict(self.env_kwargs)
        if self.env is None:
            self.env = gym.make(self.env_id, **self.env_kwargs)
            self.own_env = True
        self._signals = _signal_keys(self.env_id)

    # -- limits --------------------------------------------------------------------------------------------
    @property
    def _env(self) -> gym.Env:
        assert self.env is not None
        return self.env

    @property
    def max_turns(self) -> int:
        """The env's turn limit (``MAX_TURNS`` for an env without one): what the session holds at most."""
        limit = getattr(self._env.unwrapped, "max_turns", None)
        return limit if isinstance(limit, int) and limit > 0 else MAX_TURNS

    @property
    def max_action_chars(self) -> int:
        """A turn is cut to one character over the env's ``max_action_chars`` before it is played (and recorded):
        the env sees the same text and the same ``action_truncated`` as for the whole turn."""
        limit = getattr(self._env.unwrapped, "max_action_chars", None)
        return limit if isinstance(limit, int) and limit > 0 else MAX_ACTION_CHARS

    @property
    def undo_mode(self) -> str:
        """``"snapshot"`` (the env restores the state before a turn) or ``"replay"`` (the episode is reset and its
        earlier turns played again); ``"snapshot"`` until a snapshot fails."""
        return "replay" if self._snapshots_ok is False else "snapshot"

    @property
    def done(self) -> bool:
        return self._traj is not None and self._traj.done

    # -- playing -------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Start an episode (``seed`` None: a random one, shown in the view, so the episode can be replayed);
        ``options`` as ``env.reset`` takes them (``task_index``, ...). Both may come from a client: an error (a
        negative seed, a bad option) is the view's ``error`` and leaves no episode."""
        return self._reset(seed, options)

    def _reset(self, seed: Any, options: Any) -> dict[str, Any]:
        self._message = self._error = None
        self._traj, self._snapshots = None, []
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            self._error = f"the seed must be a non-negative integer, got {_clean(repr(seed))[:80]}"
            return self.view()
        if options is not None and not isinstance(options, Mapping):
            self._error = f"options must be an object (a dict), got {type(options).__name__}"
            return self.view()
        self.seed = secrets.randbelow(2**31) if seed is None else seed
        self.options = dict(options or {})
        traj = Trajectory(env_id=self.env_id, seed=self.seed, task_id="", agent=self.agent, initial_observation=[],
                          reset_info={}, env_kwargs=self._recorded_kwargs(), options=dict(self.options))  # fmt: skip
        try:
            obs, info = self._env.reset(seed=self.seed, options=self.options or None)
        except Exception as e:  # a bad option, an env that cannot start: said, not raised
            self._error = f"reset failed: {_one_line(e)}"
            return self.view()
        traj.task_id, traj.initial_observation, traj.reset_info = str(info.get("task_id", "")), list(obs), info
        self._traj = traj
        self._message = f"episode started: seed {self.seed}, task {traj.task_id}"
        return self.view()

    def step(self, action: Any) -> dict[str, Any]:
        """Play one turn: ``action`` is the whole turn as text (cut to ``max_action_chars`` + 1 characters). A turn
        that is not text, or one played with no episode running, is refused in the view's ``error``; an env that
        fails on it leaves the episode as it was and says so there."""
        self._message = self._error = None
        traj = self._traj
        if traj is None:
            self._error = "no episode is running: reset first"
            return self.view()
        if traj.done:
            self._error = "the episode has ended: undo the last turn or reset"
            return self.view()
        if len(traj.turns) >= self.max_turns:
            self._error = f"the session's limit of {self.max_turns} turns is reached: undo or reset"
            return self.view()
        if isinstance(action, bytes | bytearray):
            action = bytes(action).decode("utf-8", "replace")
        if not isinstance(action, str):
            self._error = f"a turn is text, got {type(action).__name__}"
            return self.view()
        if len(action) > self.max_action_chars + 1:
            action = action[: self.max_action_chars + 1]
            self._message = f"the turn was cut to {self.max_action_chars} characters (the env's limit)"
        snap = self._take_snapshot()
        try:
            obs, reward, terminated, truncated, info = self._env.step(action)
        except Exception as e:  # an env failure (a lost server): the turn is not played
            self._error = f"the env failed on this turn: {_one_line(e)}"
            self._resync(snap)
            return self.view()
        traj.turns.append(Turn(action, list(obs), float(reward), bool(terminated), bool(truncated), info))
        if snap is not None:
            self._snapshots.append(snap)
        return self.view()

    def undo(self) -> dict[str, Any]:
        """Take the last turn back: the env is in the state before it, as if it had never been played."""
        self._message = self._error = None
        traj = self._traj
        if traj is None or not traj.turns:
            self._error = "nothing to undo"
            return self.view()
        if self._snapshots_ok and len(self._snapshots) == len(traj.turns):
            try:
                restore(self._env, self._snapshots[-1])
            except Exception as e:  # e.g. a server that lost the snapshot: fall back to replaying the episode
                self._snapshots_ok, self._snapshots = False, []
                self._message = f"the snapshot could not be restored ({_one_line(e)}); replayed the episode instead"
            else:
                self._snapshots.pop()
                traj.turns.pop()
                self._message = f"undone: back to turn {len(traj.turns)} (snapshot restored)"
                return self.view()
        turns = traj.turns[:-1]
        failure = self._replay(turns)
        traj.turns = turns
        self._snapshots = []
        if failure:
            self._error = failure
        else:
            note = f"undone: back to turn {len(turns)} (the episode was reset and its {len(turns)} turn(s) replayed)"
            self._message = f"{self._message}; {note}" if self._message else note
        return self.view()

    def _replay(self, turns: list[Turn]) -> str | None:
        """Reset the env as the episode was and play ``turns`` again; why it did not give the recorded episode."""
        traj = self._traj
        assert traj is not None
        try:
            obs, info = self._env.reset(seed=self.seed, options=self.options or None)
            if canonical([obs, info]) != canonical([traj.initial_observation, traj.reset_info]):
                return "undo replayed the episode, but its reset differs from the recorded one (the env is not " \
                       "deterministic): reset to start again"  # fmt: skip
            for k, turn in enumerate(turns, 1):
                obs, reward, terminated, truncated, info = self._env.step(turn.action)
                got = [obs, float(reward), bool(terminated), bool(truncated), info]
                if canonical(got) != canonical([turn.observation, turn.reward, turn.terminated, turn.truncated,
                                                turn.info]):  # fmt: skip
                    return f"undo replayed the episode, but turn {k} differs from the recorded one (the env is not " \
                           "deterministic): reset to start again"  # fmt: skip
        except Exception as e:
            return f"undo could not replay the episode: {_one_line(e)}"
        return None

    def _take_snapshot(self) -> Snapshot | None:
        if self._snapshots_ok is False:
            return None
        try:
            snap = snapshot(self._env)
        except (SnapshotError, NotImplementedError, TypeError, ValueError):
            self._snapshots_ok, self._snapshots = False, []
            return None
        except Exception:  # e.g. a server that refuses one more snapshot: undo replays instead
            self._snapshots_ok, self._snapshots = False, []
            return None
        self._snapshots_ok = True
        return snap

    def _resync(self, snap: Snapshot | None) -> None:
        """After an env failure mid-turn: put the env back in the state before the turn (``AgentEnv`` undoes the
        turn count and transcript of a turn whose ``_step`` raised, not what ``_step`` changed before raising)."""
        try:
            if snap is not None:
                restore(self._env, snap)
                return
        except Exception:  # replayed below
            pass
        assert self._traj is not None
        failure = self._replay(self._traj.turns)
        if failure:
            self._error = f"{self._error}; {failure}"

    # -- records -------------------------------------------------------------------------------------------
    def _recorded_kwargs(self) -> dict[str, Any]:
        kwargs = env_kwargs_of(self._env, self.env_kwargs)
        if getattr(self._env.unwrapped, "remote_class", None) is not None:  # a RemoteEnv's spec names its env too
            kwargs.pop("env_id", None)
        return kwargs

    def trajectory(self) -> Trajectory:
        """The episode so far, recorded as ``run_episode`` records an agent's (a copy: later turns do not change
        it). ``PlayError`` before any episode."""
        if self._traj is None:
            raise PlayError("no episode has been played: reset first")
        return dataclasses.replace(self._traj, turns=list(self._traj.turns))

    def replay_plan(self) -> str | None:
        """The run header's ``tasks`` that gives this episode's options (``"random"``: none, the seed picks the
        task; ``"sequential"``: task 0), or None when a run's plan cannot hold them (then ``save`` refuses)."""
        if not self.options:
            return "random"
        if self.options == {"task_index": 0}:
            return "sequential"
        return None

    def save(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Append the episode to the JSONL file ``path`` as a run of one episode (a ``RunHeader``, then the
        record), signed with ``$AGENTGYM_TRAJECTORY_KEY`` when it is set; ``agentgym replay path`` re-executes it.
        An episode saved before it ended carries ``error`` ("unfinished ..."), which replay accepts as where the
        record stops. Returns what was written (``path``, ``run_id``, ``turns``, ``finished``, ``signed``).

        ``PlayError`` when there is no episode, or its options choose a task a run's plan cannot say (replay
        checks each episode's options against the plan: pick the task by seed, or task 0); ``OSError`` when the
        file cannot be written."""
        traj = self.trajectory()
        tasks = self.replay_plan()
        if tasks is None:
            raise PlayError(f"cannot save an episode reset with options {_clean(canonical(self.options))[:200]}: a "
                            "saved run replays episodes whose task the seed picks (no options) or task 0 "
                            "(task_index 0); reset with a seed instead")  # fmt: skip
        if not traj.done:
            traj.error = f"unfinished: saved after turn {len(traj.turns)}, before the episode ended"
        assert self.seed is not None
        header = RunHeader(env_id=self.env_id, env_kwargs=normalize(traj.env_kwargs), agent=self.agent,
                           agent_name=None, agent_kwargs=None, seed=self.seed, tasks=tasks, group_size=1,
                           episodes=1)  # fmt: skip
        key = trajectory_key()
        record = dataclasses.replace(traj, run_id=header.run_id, index=0)
        size = len(canonical(record.to_dict()).encode("utf-8"))  # checked before the header is written
        if size > MAX_RECORD_BYTES - 4096:  # room for the checksum and the seal
            raise PlayError(f"the episode is too large to save: {size} bytes of record, over {MAX_RECORD_BYTES}")
        with TrajectoryWriter(path, key=key) as writer:
            try:
                writer.write(header)
                writer.write(record)
            except RecordTooLarge as e:
                raise PlayError(f"the episode is too large to save: {e}") from None
        self._message = f"saved {len(traj.turns)} turn(s) to {os.fspath(path)}"
        return {"path": os.fspath(path), "run_id": header.run_id, "turns": len(traj.turns), "finished": traj.done,
                "signed": key is not None}  # fmt: skip

    # -- the view --------------------------------------------------------------------------------------------
    def signals(self, info: Mapping[str, Any]) -> dict[str, Any]:
        """The verified signals of one ``info`` (``SIGNAL_KEYS`` and the env's own turn signal) that it holds."""
        return {k: _clean(info[k]) for k in self._signals if k in info}

    def _turn_view(self, k: int, t: Turn) -> dict[str, Any]:
        return {"turn": k, "action": t.action, "observation": t.observation, "reward": t.reward,
                "reward_components": t.reward_components, "signals": self.signals(t.info),
                "terminated": t.terminated, "truncated": t.truncated}  # fmt: skip

    def view(self) -> dict[str, Any]:
        """The session's state as JSON data (``VIEW_KEYS``): ``messages`` (the whole conversation), ``observation``
        (the env's last messages), ``turns`` (each turn's ``action``, ``observation``, ``reward``,
        ``reward_components``, ``signals``, ``terminated``, ``truncated``), the last ``signals`` and ``info``
        (without privileged ``gold``), flags and counts, ``can_undo`` and ``undo_mode``, and the last operation's
        ``message`` and ``error`` (None when it went well)."""
        traj = self._traj
        turns = traj.turns if traj is not None else []
        last_info: Mapping[str, Any] = turns[-1].info if turns else traj.reset_info if traj is not None else {}
        last = turns[-1] if turns else None
        view = {
            "env_id": self.env_id,
            "env_kwargs": traj.env_kwargs if traj is not None else self.env_kwargs,
            "agent": self.agent,
            "seed": self.seed if traj is not None else None,
            "options": self.options if traj is not None else {},
            "task_id": traj.task_id if traj is not None else None,
            "started": traj is not None,
            "turn": len(turns),
            "max_turns": self.max_turns,
            "terminated": bool(last and last.terminated),
            "truncated": bool(last and last.truncated),
            "done": self.done,
            "success": bool(traj.success) if traj is not None and traj.done else None,
            "total_reward": traj.total_reward if traj is not None else 0.0,
            "messages": traj.messages if traj is not None else [],
            "observation": last.observation if last else traj.initial_observation if traj is not None else [],
            "turns": [self._turn_view(k, t) for k, t in enumerate(turns, 1)],
            "signals": self.signals(last_info),
            "info": {k: v for k, v in last_info.items() if k not in HIDDEN_INFO},
            "can_undo": bool(turns),
            "undo_mode": self.undo_mode,
            "message": self._message,
            "error": self._error,
            "replayable": self.replay_plan() is not None,
        }
        return _clean(view)

    # -- lifetime --------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the env if the session made it (or was given it with ``own_env``)."""
        self._snapshots = []
        if self.own_env and self.env is not None:
            self.env.close()

    def __enter__(self) -> PlaySession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the terminal -----------------------------------------------------------------------------------------------

TERMINAL_HELP = """\
Type a turn and press Enter to send it. Lines starting with ':' are commands:
  :multi          start a multi-line turn; end it with a line holding only '.' (or ':send'); ':cancel' drops it
  :undo           take the last turn back
  :save [PATH]    append the episode to PATH (default: --save) as a run that `agentgym replay PATH` checks
  :reset [SEED]   start a new episode (a random seed when none is given)
  :show           print the whole conversation; :info prints the last step's info (without the gold answer)
  :help           this text; :quit (or end of input) leaves
A turn starting with ':' is typed as '::' (the first ':' is dropped); an empty line sends nothing.
In a multi-line turn a line '..' stands for a line '.'."""


def _printable(text: str) -> str:
    """``text`` safe to print: lone surrogates replaced, control characters other than newline and tab escaped."""
    text = _clean(text)
    return "".join(c if c.isprintable() or c in "\n\t" else ascii(c)[1:-1] for c in text)


def _number(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


@dataclass
class Terminal:
    """``agentgym play``'s loop over a ``PlaySession``: reads turns and commands from ``stdin`` (a TTY or a pipe;
    lines longer than the env's action limit are cut, so memory stays bounded), prints to ``out``. ``save``: where
    ``:save`` writes by default, and where each episode is saved when it ends."""

    session: PlaySession
    stdin: Any
    out: Any
    save: str | None = None
    interactive: bool = False

    def print(self, text: str = "") -> None:
        print(_printable(text), file=self.out, flush=True)

    def read_line(self, prompt: str) -> str | None:
        """One line without its newline, at most the session's action limit + 1 characters; None at end of input."""
        limit = self.session.max_action_chars + 2
        if self.interactive:
            print(prompt, end="", file=self.out, flush=True)
        line = self.stdin.readline(limit)
        if not line:
            return None
        if not line.endswith("\n") and len(line) >= limit:  # a longer line: the rest is dropped, never held
            while (rest := self.stdin.readline(limit)) and not rest.endswith("\n"):
                pass
        return line.rstrip("\r\n")

    def show_observation(self, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            self.print(f"[{m.get('role', '?')}] {m.get('content', '')}")

    def show_start(self, view: dict[str, Any]) -> None:
        self.print(f"== {view['env_id']} | seed {view['seed']} | task {view['task_id']} | up to {view['max_turns']} "
                   "turns (:help for commands)")  # fmt: skip
        self.show_observation(view["observation"])

    def show_turn(self, view: dict[str, Any]) -> None:
        turn = view["turns"][-1]
        self.show_observation(turn["observation"])
        parts = ", ".join(f"{k} {_number(v)}" for k, v in turn["reward_components"].items())
        line = f"-- turn {view['turn']}/{view['max_turns']} | reward {_number(turn['reward'])}"
        line += f" ({parts})" if parts else ""
        shown = {k: v for k, v in turn["signals"].items() if v is not None and (k != "action_truncated" or v)}
        signals = " ".join(f"{k}={_number(v)}" for k, v in shown.items())
        self.print(line + (f" | {signals}" if signals else ""))
        if view["done"]:
            how = "terminated" if view["terminated"] else "truncated"
            self.print(f"== episode over ({how}): success {view['success']}, return {_number(view['total_reward'])}; "
                       ":undo, :save or :reset")  # fmt: skip

    def report(self, view: dict[str, Any]) -> None:
        if view["error"]:
            self.print(f"error: {view['error']}")
        elif view["message"]:
            self.print(view["message"])

    def do_save(self, path: str | None) -> None:
        path = path or self.save
        if not path:
            self.print("error: no file to save to: give one (:save PATH) or start with --save PATH")
            return
        try:
            done = self.session.save(path)
        except (PlayError, OSError, ValueError) as e:
            self.print(f"error: not saved: {_one_line(e) if isinstance(e, OSError) else e}")
            return
        state = "finished" if done["finished"] else "unfinished"
        self.print(f"saved the {state} episode ({done['turns']} turns) to {done['path']}; check it with: agentgym "
                   f"replay {done['path']}")  # fmt: skip

    def play_turn(self, action: str) -> None:
        view = self.session.step(action)
        if view["error"] or not view["turns"] or view["turn"] == 0:
            self.report(view)
            return
        if view["message"]:
            self.print(view["message"])
        self.show_turn(view)
        if view["done"] and self.save:
            self.do_save(self.save)

    def command(self, line: str) -> bool:
        """Run a ``:command``; False when it ends the session."""
        name, _, arg = line[1:].strip().partition(" ")
        arg = arg.strip()
        if name in ("quit", "q", "exit"):
            return False
        if name == "help":
            self.print(TERMINAL_HELP)
        elif name == "undo":
            view = self.session.undo()
            self.report(view)
            if not view["error"] and view["started"]:
                self.show_observation(view["observation"])
        elif name == "save":
            self.do_save(arg or None)
        elif name == "reset":
            if arg and not arg.isdigit():
                self.print(f"error: :reset takes a non-negative integer seed, got {arg[:40]!r}")
                return True
            view = self.session.reset(int(arg) if arg else None, self.session.options or None)
            if view["error"]:
                self.report(view)
            else:
                self.show_start(view)
        elif name == "show":
            self.show_observation(self.session.view()["messages"])
        elif name == "info":
            import json

            self.print(json.dumps(self.session.view()["info"], indent=1, ensure_ascii=False))
        elif name in ("send", "cancel"):
            self.print(f"error: :{name} ends a multi-line turn, and none is open (:multi starts one)")
        else:
            self.print(f"error: unknown command :{name[:40]} (:help lists them)")
        return True

    def run(self) -> int:
        """Play until ``:quit`` or the end of input; returns the exit status (0)."""
        view = self.session.view()
        if view["started"]:
            self.show_start(view)
        buffer: list[str] | None = None  # the lines of an open multi-line turn
        size = 0
        while True:
            line = self.read_line("... " if buffer is not None else "> ")
            if line is None:
                if buffer is not None:
                    self.print("end of input inside a multi-line turn: the turn was not sent")
                return 0
            if buffer is not None:
                if line in (".", ":send"):
                    text, buffer = "\n".join(buffer), None
                    self.play_turn(text)
                elif line == ":cancel":
                    buffer = None
                    self.print("the multi-line turn was dropped")
                elif size <= self.session.max_action_chars:  # beyond the env's limit, lines are not kept
                    buffer.append("." if line == ".." else line)
                    size += len(line) + 1
                continue
            if line.startswith("::"):
                self.play_turn(line[1:])
            elif line.startswith(":"):
                if line.strip() == ":multi":
                    buffer, size = [], 0
                elif not self.command(line):
                    return 0
            elif line.strip():
                self.play_turn(line)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())[:300]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


__all__ = ["HUMAN", "MAX_TURNS", "SIGNAL_KEYS", "TERMINAL_HELP", "VIEW_KEYS", "PlayError", "PlaySession", "Terminal"]
