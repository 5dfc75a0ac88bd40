"""CodeExec-v0: answer questions over generated data (tables, logs, number puzzles) by running Python in a sandbox.

An episode is one task of ``agentgym.envs.code_exec.tasks``: the user asks a question whose answer needs a program
(the data files, when there are any, lie in the program's working directory). Each agent turn either calls tools
(Hermes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, or an OpenAI assistant message as JSON
with ``tool_calls``) or replies in plain text:

* ``python(code)`` runs ``code`` as a whole program in a fresh sandboxed process (``agentgym.tools.sandbox``): the
  task's files in its working directory, no standard input, nothing kept between calls, ``timeout`` seconds. The
  ``tool`` message holds what it printed (stdout, then stderr after a ``[stderr]`` line, each cut to
  ``MAX_OUTPUT_CHARS``) and a bracketed note when the run did not end normally (a time limit, the memory limit, a
  non-zero exit status). Tracebacks show the agent's code only (``File "main.py", line N``), never the sandbox's.
* ``submit_answer(answer)`` or a plain-text reply holding ``<answer>...</answer>`` ends the episode (calls after
  ``submit_answer`` in the same turn do not run); only that one answer counts. Outcome (reward component
  ``outcome``): 1.0 if it matches the generator's value (``check_answer``: integers exactly, floats within half a
  unit of the requested last decimal place, strings normalised; in any common written form, such as
  ``**3,464,999,702**``, ``The answer is 42.`` or ``17:00`` for an hour), else 0.0.

A malformed call (bad JSON, unknown function, missing, extra or wrongly typed argument, an empty answer) or a
plain reply without ``<answer>`` comes back as an explanatory message, makes the step invalid (``parse_error``) and
the episode goes on. Code that fails, loops forever or exhausts memory is a valid call: its error or the time-limit
note is the observation. The same seed gives the same trajectory: observations never include timings, and a
deterministic program prints the same on either back-end (``backend="pool"``, warm fork servers, ~10 ms a call;
``"subprocess"``, a fresh interpreter per call).

With ``backend="pool"``, every env of a process with the same sandbox configuration (its ``isolation``; the
``timeout`` is per call and does not count) shares one ``PooledSandbox`` of ``SHARED_WORKERS`` fork servers
(``min(os.cpu_count(), 4)``, ~13 MB resident each; ``agentgym.tools.sandbox.local.SHARED``): an env takes a share at
its first python call and gives it back at ``close`` (or when it is dropped unclosed); the last share closes the
pool, and its fork servers exit. An env server of 1,024 sessions so holds one pool, not 1,024 fork servers. Calls
from all sessions queue for a worker; one that gets none in ``SHARED_WORKER_WAIT`` seconds (120) comes back as a tool
message holding ``sandbox: no free worker in 120 s (all N busy)`` (a valid call; the episode goes on). Sharing
changes no observation: runs are fresh processes, and observations hold no timings.

``agentgym serve`` prints, before it listens, one line per back-end a served CodeExec-v0 may use (both, unless the
operator's ``--env-arg backend=...`` fixes one) with what its probe measured on this host
(``CodeExecEnv.sandbox_capabilities``, ``Capabilities.summary``): process containment, network, root, memory
scope, read-only root, privileges and notes, e.g. ``sandbox pooled for agentgym/CodeExec-v0: pid-namespace, network
isolated, private root, memory per cgroup, read-only root, unprivileged``. With ``isolation="none"`` the line starts
``NO ISOLATION``.

>>> import gymnasium as gym, agentgym
>>> env = gym.make("agentgym/CodeExec-v0", family="numbers")
>>> obs, info = env.reset(options={"task_index": 20})
>>> obs[-1]["content"]
'What is the sum of the decimal digits of 69^545? Answer with an integer.'
>>> code = json.dumps({"name": "python", "arguments": {"code": "print(sum(map(int, str(69 ** 545))))"}})
>>> obs, *_ = env.step(f"<tool_call>{code}</tool_call>")
>>> obs[0]["content"]
'4545\\n'
>>> obs, reward, terminated, truncated, info = env.step("<answer>4545</answer>")
>>> reward, terminated, info["metrics"]["python_calls"]
(1.0, True, 1.0)
>>> env.close()
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentgym.contract.env import AgentEnv, EnvUnavailableError, StepResult
from agentgym.contract.parsing import NoActionError, ParseError, ToolCall, is_blank, parse_tag_action, parse_tool_turn
from agentgym.contract.trust import declare, number, one_of
from agentgym.envs.code_exec.agents import OracleAgent, RandomAgent
from agentgym.envs.code_exec.tasks import FAMILIES, TASKS_PER_FAMILY, answer_text, check_answer, make_task
from agentgym.envs.tool_use.tools import ArgumentError, schema_of, tool, tool_names, validate_arguments
from agentgym.tools.sandbox import Capabilities, PoolKey, RunResult, Sandbox, SubprocessSandbox, isolation_refused
from agentgym.tools.sandbox.local import SHARED

BACKENDS = ("pool", "subprocess")
#: ``isolation=``: ``"namespaces"`` (the sandbox's own root, namespaces, a uid or user namespace of its own; the env
#: refuses to start where the kernel does not allow them) or ``"none"``, the operator's opt-in to run the code with
#: rlimits only where namespaces cannot be had (it can then read what the caller can and reach the host's network).
ISOLATION = ("namespaces", "none")
#: Sandbox statuses, as counted in ``info["metrics"]`` (``runs_<status>``).
STATUSES = ("ok", "error", "timeout", "memory", "killed")
MAX_CALLS_PER_TURN = 8
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Characters kept of each of stdout and stderr in a tool message (the head and the tail of longer output).
MAX_OUTPUT_CHARS = 4_000

SYSTEM = (
    "You answer the user's question by writing and running Python programs. The functions you may call are listed "
    "as JSON schemas between <tools> and </tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call functions, put one JSON object per call in your turn, each inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>\n'
    '(or answer with an OpenAI assistant message as JSON: {{"tool_calls": [{{"type": "function", "function": '
    '{{"name": ..., "arguments": "<JSON string>"}}}}]}}). Each result comes back as a tool message. '
    "Each python call runs a whole program in a fresh Python 3 process (standard library available, no network, no "
    "input) whose working directory holds the task's files; nothing is kept between calls, so each program must "
    "read the files and print what you need. A program may run for {timeout:g} seconds; you see what it prints, cut "
    "to {limit} characters. When you know the answer, call submit_answer or reply with <answer>your answer</answer>: "
    "either ends the episode, and only that answer counts."
)


class CodeTools:
    """The tools of CodeExec-v0; the env runs them (their schemas come from these signatures and docstrings)."""

    @tool
    def python(self, code: str) -> str:
        """Run a Python 3 program in a fresh sandboxed process and return what it printed (stdout and stderr).

        Args:
            code: the whole program; the task's files are in its working directory, and nothing is kept between
                calls.
        """
        raise NotImplementedError  # the env runs the code in its sandbox

    @tool
    def submit_answer(self, answer: str) -> str:
        """Submit the final answer to the user's question; this ends the episode.

        Args:
            answer: the answer alone, in the format the question asks for.
        """
        return answer


def tool_schemas() -> dict[str, dict[str, Any]]:
    """``{name: OpenAI function schema}`` of the env's tools.

    >>> list(tool_schemas()), tool_schemas()["python"]["function"]["parameters"]["required"]
    (['python', 'submit_answer'], ['code'])
    """
    return {name: schema_of(getattr(CodeTools, name)) for name in tool_names(CodeTools)}


def _cut(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """``text`` with its middle cut out past ``limit`` characters (two thirds kept from the head, one from the tail).

    >>> _cut("abcdefghij", 6)
    'abcd\\n[... 4 characters cut ...]\\nij'
    """
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[len(text) - tail :]}"


def format_run(result: RunResult, timeout: float) -> str:
    """The tool message of one run: stdout, stderr and a note on how the run ended, without timings.

    >>> format_run(RunResult("timeout", "1\\n", "", None, 5.01), 5.0)
    '1\\n[the program was stopped: it ran past its 5 s time limit]'
    """
    parts = []
    if result.stdout:
        parts.append(_cut(result.stdout))
    if result.stderr:
        parts.append("[stderr]\n" + _cut(result.stderr))
    code = result.exit_code
    if result.status == "killed":
        killed_by = "it printed too much" if result.truncated else f"signal {-code}" if code and code < 0 else None
        note = f"[the program was killed: {killed_by}]" if killed_by else "[the program was killed]"
    elif result.status == "error":
        note = f"[the program exited with status {code}]" if code is not None else "[the sandbox failed to run it]"
    else:
        note = {"timeout": f"[the program was stopped: it ran past its {timeout:g} s time limit]",
                "memory": "[the program ran out of memory]"}.get(result.status)  # fmt: skip
    if note is None and not parts:
        note = "[no output: print() what you want to see]"
    text = "".join(p if p.endswith("\n") else p + "\n" for p in parts)
    return text + note if note else text


@dataclass
class Episode:
    """The env's own episode state: the task (never mutated) and what the agent did."""

    task: dict[str, Any]
    codes: frozenset[str] = frozenset()
    python_calls: int = 0
    invalid_calls: int = 0
    runs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    submitted: str | None = None

    def copy(self) -> Episode:
        return dataclasses.replace(self, runs=dict(self.runs))


class CodeExecEnv(AgentEnv):
    """Questions answered by running Python in a sandbox (see the module docstring).

    Args:
        family: ``"table"``, ``"logs"``, ``"numbers"`` or ``"all"`` (10,000 tasks per family; with ``"all"``, task
            index ``i`` is task ``i // 3`` of family ``i % 3``, so the first tasks cover every family).
        backend: ``"pool"`` (warm fork servers: the ``PooledSandbox`` this process's envs of the same isolation
            share, see the module docstring) or ``"subprocess"`` (a fresh interpreter per call, ~40 ms slower).
        timeout: wall-clock seconds of each python call.
        max_turns: agent turns before truncation.
        invalid_action_penalty: subtracted (component ``format``) for each invalid step.
        isolation: ``"namespaces"`` (default) or ``"none"`` (``ISOLATION``); never from a client. With
            ``"namespaces"`` the env checks at construction that the sandbox can isolate code here and raises
            ``EnvUnavailableError`` naming what the kernel refused where it cannot (inside a Docker container with the
            default seccomp profile, or where user namespaces are restricted).
    """

    agents: ClassVar[Mapping[str, Any]] = {"oracle": OracleAgent, "random": RandomAgent}

    public_args = declare(AgentEnv.public_args, family=one_of("all", *FAMILIES), backend=one_of(*BACKENDS),
                   timeout=number(0.1, 10.0))  # fmt: skip

    def __init__(
        self,
        *,
        family: str = "all",
        backend: str = "pool",
        timeout: float = 5.0,
        max_turns: int = 10,
        invalid_action_penalty: float = 0.0,
        isolation: str = "namespaces",
        render_mode: str | None = None,
    ):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty, render_mode=render_mode)
        if isolation not in ISOLATION:
            raise ValueError(f"isolation must be one of {list(ISOLATION)}, got {isolation!r}")
        if isolation == "namespaces" and (why := isolation_refused()) is not None:
            raise EnvUnavailableError(
                f"CodeExec-v0 cannot isolate the code it runs here: {why}. Run it where the kernel allows new "
                "namespaces, or opt in to rlimits alone with isolation='none' (the code can then read what this "
                "user can and reach the network)"
            )
        self.isolation = isolation
        if family != "all" and family not in FAMILIES:
            raise ValueError(f"family must be 'all' or one of {list(FAMILIES)}, got {family!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        self.families = list(FAMILIES) if family == "all" else [family]
        self.backend = backend
        self.timeout = float(timeout)
        self.num_tasks = TASKS_PER_FAMILY * len(self.families)
        self._schemas = tool_schemas()
        self._system = SYSTEM.format(
            tools="\n".join(json.dumps(s) for s in self._schemas.values()), timeout=self.timeout, limit=MAX_OUTPUT_CHARS
        )
        self._ep: Episode | None = None
        self._sandbox: Sandbox | None = None
        self._finalizer: weakref.finalize | None = None

    # -- the sandbox --------------------------------------------------------------------------------------
    @classmethod
    def sandbox_capabilities(cls, env_kwargs: Mapping[str, Any]) -> list[Capabilities]:
        """The measured capabilities of the back-end ``env_kwargs["backend"]`` names, else of both (a client may pick
        either), with the operator's ``isolation``; the pool's are those of the shared pool the envs would use."""
        backend = env_kwargs.get("backend")
        key = PoolKey(namespaces=env_kwargs.get("isolation", "namespaces") == "namespaces")
        out = []
        for name in [backend] if backend in BACKENDS else BACKENDS:
            if name == "pool":
                pool = SHARED.acquire(key)
                try:
                    out.append(pool.capabilities())
                finally:
                    SHARED.release(key, pool)
            else:
                out.append(SubprocessSandbox(key.limits, namespaces=key.namespaces).capabilities())
        return out

    @property
    def sandbox(self) -> Sandbox:
        """The env's sandbox, taken at first use (so envs that never run code hold none). With ``backend="pool"``
        it is the process's shared pool for this configuration (``SHARED.acquire``), released by ``close`` or, for an
        env dropped without ``close``, by its finalizer."""
        if self._sandbox is None:
            key = PoolKey(namespaces=self.isolation == "namespaces")
            if self.backend == "pool":
                self._sandbox = pool = SHARED.acquire(key)
                self._finalizer = weakref.finalize(self, SHARED.release, key, pool)
            else:
                self._sandbox = SubprocessSandbox(key.limits, namespaces=key.namespaces)
                self._finalizer = weakref.finalize(self, self._sandbox.close)
        return self._sandbox

    def run_code(self, code: str) -> RunResult:
        """Run ``code`` as the python tool does: a fresh sandboxed process with the task's files in its working
        directory (``/tmp/work`` wherever the sandbox has mount namespaces). A lone surrogate in ``code`` (it cannot
        be written as UTF-8) reaches the sandbox as U+FFFD, as one in an action does."""
        files = self._ep.task["files"] if self._ep is not None else {}
        if not code.isascii():
            code = _SURROGATE.sub("\ufffd", code)
        return self.sandbox.run(code, timeout=self.timeout, files=files)

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # releases the shared pool (or closes the sandbox) once
        self._sandbox = self._finalizer = None
        super().close()

    # -- tasks --------------------------------------------------------------------------------------------
    def task_index_of(self, task_id: str) -> int:
        family, _, local = task_id.partition("/")
        if family not in self.families or not local.isdigit() or int(local) >= TASKS_PER_FAMILY:
            raise ValueError(f"unknown task_id {task_id!r}: ids look like '{self.families[0]}/17'")
        return int(local) * len(self.families) + self.families.index(family)

    def _reset(self, task_index: int, options: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
        # families interleave (index i: family i % F, its task i // F), so any first N tasks cover every family
        family, local = self.families[task_index % len(self.families)], task_index // len(self.families)
        task = make_task(family, local)
        self._ep = Episode(task)
        obs = [{"role": "system", "content": self._system}, {"role": "user", "content": task["question"]}]
        return obs, {"task_id": task["task_id"], "gold": make_gold(task), **self._info()}

    @property
    def task(self) -> dict[str, Any] | None:
        """The task being played (its files included); None before the first reset."""
        return self._ep.task if self._ep is not None else None

    # -- steps --------------------------------------------------------------------------------------------
    def _step(self, action: str) -> StepResult:
        try:
            turn = parse_tool_turn(action, MAX_CALLS_PER_TURN)
        except ParseError as e:
            return self._invalid(f"Error: {e}")
        if turn.calls is not None:
            return self._run_calls(list(turn.calls))
        assert turn.text is not None
        try:
            answer = parse_tag_action(turn.text, ("answer",), truncated_at=self.truncated_at, require_visible=True)
        except NoActionError:
            return self._invalid(
                "Error: no tool call and no <answer> found. Call python to run code, then give your final answer "
                "with submit_answer or as <answer>...</answer>.",
                role="user",
            )
        except ParseError as e:
            return self._invalid(f"Error: {e}", role="user")
        return self._submit(answer.content, [])

    def _invalid(self, message: str, role: str = "tool") -> StepResult:
        assert self._ep is not None
        self._ep.invalid_calls += 1
        return StepResult([{"role": role, "content": message}], action_valid=False, parse_error=message,
                          info=self._info())  # fmt: skip

    def _run_calls(self, calls: list[ToolCall]) -> StepResult:
        assert self._ep is not None
        out: list[dict[str, Any]] = []
        errors: list[str] = []
        statuses: list[str] = []
        for call in calls:
            msg: dict[str, Any] = {"role": "tool", "name": call.name}
            if call.id is not None:
                msg["tool_call_id"] = call.id
            error = None
            if call.name not in self._schemas:
                error = f"Error: unknown function {call.name!r}; available functions: {list(self._schemas)}."
            else:
                try:
                    args = validate_arguments(self._schemas[call.name]["function"], call.arguments)
                except ArgumentError as e:
                    error = f"Error: {e}"
                else:
                    if call.name == "submit_answer" and is_blank(args["answer"]):
                        error = "Error: the answer is empty. Pass the answer alone, e.g. submit_answer(answer='42')."
            if error is not None:
                self._ep.invalid_calls += 1
                errors.append(error)
                out.append({**msg, "content": error})
            elif call.name == "submit_answer":  # ends the episode: later calls of the turn do not run
                out.append({**msg, "content": "Answer submitted."})
                return self._submit(args["answer"], out, errors, statuses)
            else:
                result = self.run_code(args["code"])
                self._ep.python_calls += 1
                self._ep.runs[result.status] += 1
                self._ep.codes = self._ep.codes | {args["code"]}
                statuses.append(result.status)
                out.append({**msg, "content": format_run(result, self.timeout)})
        info = {**self._info(), "run_statuses": statuses}
        if errors:
            return StepResult(out, action_valid=False, parse_error=" ".join(errors)[:2000], info=info)
        return StepResult(out, info=info)

    def _submit(
        self, answer: str, out: list[dict[str, Any]], errors: list[str] | None = None, statuses: list[str] | None = None
    ) -> StepResult:
        assert self._ep is not None
        self._ep.submitted = answer
        success = check_answer(self._ep.task, answer)
        info = {**self._info(), "run_statuses": statuses or [], "submitted": answer, "metrics": self._metrics(success)}
        return StepResult(out, {"outcome": float(success)}, terminated=True, success=success,
                          action_valid=not errors, parse_error=" ".join(errors)[:2000] if errors else None,
                          info=info)  # fmt: skip

    def _metrics(self, success: bool) -> dict[str, float]:
        assert self._ep is not None
        ep = self._ep
        runs = {f"runs_{s}": float(n) for s, n in ep.runs.items()}
        return {"success": float(success), "python_calls": float(ep.python_calls),
                "invalid_calls": float(ep.invalid_calls), **runs}  # fmt: skip

    def _truncated_info(self) -> dict[str, Any]:
        return {"metrics": self._metrics(False)}

    def _info(self) -> dict[str, Any]:
        assert self._ep is not None
        return {"family": self._ep.task["family"], "template": self._ep.task["template"],
                "python_calls": self._ep.python_calls}  # fmt: skip

    def anchor(self) -> str:
        """The task and the set of programs run so far: runs are stateless and deterministic, so histories that ran
        the same programs (in any order, any number of times) know the same and share it."""
        assert self._ep is not None
        digest = hashlib.blake2b(json.dumps(sorted(self._ep.codes)).encode(), digest_size=8).hexdigest()
        return f"{self._task_id}:{digest}"

    # -- branching ----------------------------------------------------------------------------------------
    def _snapshot_state(self) -> Any:
        assert self._ep is not None
        return self._ep.copy()

    def _restore_state(self, state: Any) -> None:
        self._ep = state.copy()


def make_gold(task: dict[str, Any]) -> dict[str, Any]:
    """Gold for oracles and reward shapers: the answer text, the reference ``solution``, and ``calls`` / ``turns``
    (run the solution, then submit what it prints) as ``ToolCallMatching`` and ToolUse's gold read them."""
    answer = answer_text(task)
    run = {"name": "python", "arguments": {"code": task["solution"]}}
    submit = {"name": "submit_answer", "arguments": {"answer": answer}}
    return {
        "answer": answer,
        "answer_kind": task["answer_kind"],
        "decimals": task["decimals"],
        "exact": task["exact"],
        "family": task["family"],
        "category": task["family"],  # summaries (``agentgym run``, ``agentgym bench``) break results down by it
        "template": task["template"],
        "solution": task["solution"],
        "calls": [[run], [submit]],
        "turns": [{"calls": [run], "reply": None}, {"calls": [submit], "reply": None}],
    }
