"""BFCL v4 multi-turn data, read at run time from the installed ``bfcl-eval`` wheel (nothing of it is copied here).

The wheel ships the four multi-turn categories (``bfcl_eval/data/BFCL_v4_multi_turn_{category}.json``, JSON lines,
200 tasks each), their gold calls (``data/possible_answer/``, one list of Python call strings per user turn), the
function docs of each API class (``data/multi_turn_func_doc/``) and the classes themselves
(``eval_checker/multi_turn_eval/func_source_code/``). The package is located with ``importlib.util.find_spec``; its
``__init__`` files are empty, so importing the backend classes, ``constants.executable_backend_config`` and
``eval_checker.multi_turn_eval.multi_turn_checker`` pulls in none of the wheel's pinned dependencies (numpy 1.26,
faiss, LLM SDKs): install it with ``--no-deps`` (``MathAPI`` needs ``mpmath``, the only one used here).

Gold calls are parsed with ``ast`` (never evaluated); function docs become OpenAI tool schemas, against which
``check_arguments`` validates a call's arguments:

>>> parse_call("mv(source='a.txt', destination='tmp')")
('mv', [], {'source': 'a.txt', 'destination': 'tmp'})
>>> doc = {"name": "tail", "description": "Show the last lines.", "parameters": {"type": "dict",
...        "properties": {"file_name": {"type": "string"}, "lines": {"type": "integer", "default": 10}},
...        "required": ["file_name"]}}
>>> fn = tool_schema(doc)["function"]
>>> fn["parameters"]["type"], check_arguments(fn, {"file_name": "log.txt"})
('object', {'file_name': 'log.txt'})
>>> check_arguments(fn, {"file_name": "log.txt", "lines": "5"})
Traceback (most recent call last):
...
agentgym.envs.tool_use.tools.ArgumentError: Argument 'lines' of tail must be an integer, got a string ('5').
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from agentgym.contract.env import EnvUnavailableError
from agentgym.envs.tool_use.tools import validate_arguments

BFCL_VERSION = "2026.3.23"
INSTALL_HINT = f"pip install --no-deps bfcl-eval=={BFCL_VERSION} mpmath"
CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
#: Where the wheel's multi-turn pieces live, relative to the ``bfcl_eval`` package.
TASK_FILE = "data/BFCL_v4_multi_turn_{category}.json"
GOLD_FILE = "data/possible_answer/BFCL_v4_multi_turn_{category}.json"
DOC_DIR = "data/multi_turn_func_doc"
BACKEND_CONFIG = "bfcl_eval.constants.executable_backend_config"
CHECKER = "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker"


class BFCLUnavailable(EnvUnavailableError):
    """``bfcl-eval`` (or ``mpmath``) is not installed; the message says how to install it."""


@functools.cache
def unavailable_reason() -> str | None:
    """Why the BFCL data cannot be used here, or None when the wheel and ``mpmath`` are installed."""
    why = (
        f"agentgym/BFCL-v0 needs the bfcl-eval wheel (its data, API classes and checker): {INSTALL_HINT} "
        "(--no-deps because bfcl-eval pins numpy==1.26.4, faiss-cpu and a dozen LLM SDKs that the multi-turn "
        "categories never use; mpmath is the one dependency they need)"
    )
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        return why
    if importlib.util.find_spec("mpmath") is None:
        return why + "; mpmath is missing"
    root = Path(next(iter(spec.submodule_search_locations)))
    missing = [f for c in CATEGORIES for f in (TASK_FILE, GOLD_FILE) if not (root / f.format(category=c)).is_file()]
    if missing:
        try:
            version = metadata.version("bfcl-eval")
        except metadata.PackageNotFoundError:
            version = "unknown"
        return f"{why}; the installed bfcl-eval {version} lacks {missing[0]}"
    return None


def package_dir() -> Path:
    """The installed ``bfcl_eval`` package folder (raises ``BFCLUnavailable`` when it cannot be used)."""
    reason = unavailable_reason()
    if reason is not None:
        raise BFCLUnavailable(reason)
    spec = importlib.util.find_spec("bfcl_eval")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def bfcl_module(name: str) -> ModuleType:
    """A module of the wheel that imports nothing beyond the standard library (and mpmath)."""
    package_dir()
    return importlib.import_module(name)


def _json_lines(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass(frozen=True)
class Task:
    """One BFCL multi-turn task.

    ``turns[k]`` holds the user messages of turn k (empty for the turn of ``miss_func`` where withheld functions
    come back); ``ground_truth[k]`` the gold call strings of turn k; ``missed_function`` maps a turn to the
    functions withheld until it; ``excluded_function`` is present in the data but unused by BFCL's own pipeline.
    """

    id: str
    category: str
    turns: tuple[tuple[dict[str, str], ...], ...]
    initial_config: dict[str, Any]
    involved_classes: tuple[str, ...]
    ground_truth: tuple[tuple[str, ...], ...]
    missed_function: dict[int, tuple[str, ...]]
    excluded_function: tuple[str, ...]

    @property
    def long_context(self) -> bool:
        """Whether the API classes load the long-context variant of the scenario (BFCL: by the id's category)."""
        category = self.id.rsplit("_", 1)[0]
        return "long_context" in category or "composite" in category


@functools.cache
def load_tasks(category: str) -> tuple[Task, ...]:
    """The tasks of one category (``base``, ``miss_func``, ``miss_param``, ``long_context``), in BFCL's order."""
    if category not in CATEGORIES:
        raise ValueError(f"category must be one of {CATEGORIES}, got {category!r}")
    root = package_dir()
    entries = _json_lines(root / TASK_FILE.format(category=category))
    gold = {g["id"]: g["ground_truth"] for g in _json_lines(root / GOLD_FILE.format(category=category))}
    tasks = []
    for e in entries:
        turns = tuple(tuple(dict(m) for m in turn) for turn in e["question"])
        truth = tuple(tuple(turn) for turn in gold[e["id"]])
        if len(truth) != len(turns):
            raise ValueError(f"{e['id']}: {len(turns)} user turns but {len(truth)} gold turns")
        tasks.append(
            Task(
                id=e["id"],
                category=category,
                turns=turns,
                initial_config=e.get("initial_config", {}),
                involved_classes=tuple(e["involved_classes"]),
                ground_truth=truth,
                missed_function={int(k): tuple(v) for k, v in e.get("missed_function", {}).items()},
                excluded_function=tuple(e.get("excluded_function", ())),
            )
        )
    return tuple(tasks)


@functools.cache
def function_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """BFCL's function docs of one API class (its ``multi_turn_func_doc`` file)."""
    mapping = bfcl_module(BACKEND_CONFIG).MULTI_TURN_FUNC_DOC_FILE_MAPPING
    return tuple(_json_lines(package_dir() / DOC_DIR / mapping[class_name]))


@functools.cache
def function_class(class_name: str) -> type:
    """The Python class behind an API (``GorillaFileSystem``, ``TradingBot``, ...), imported from the wheel."""
    module = bfcl_module(bfcl_module(BACKEND_CONFIG).CLASS_FILE_PATH_MAPPING[class_name])
    return getattr(module, class_name)


def is_stateless(class_name: str) -> bool:
    """Whether BFCL builds the class without loading a scenario (``MathAPI``)."""
    return class_name in bfcl_module(BACKEND_CONFIG).STATELESS_CLASSES


@functools.cache
def method_owners(class_names: tuple[str, ...]) -> dict[str, str]:
    """Public method name -> the class that runs it; when classes share a name the later class wins, as in BFCL's
    ``execute_multi_turn_func_call`` (its name -> instance map is filled class by class). Cached: do not mutate."""
    owners: dict[str, str] = {}
    for name in class_names:
        for method, _ in inspect.getmembers(function_class(name), inspect.isfunction):
            if not method.startswith("_"):
                owners[method] = name
    return owners


# -- schemas ----------------------------------------------------------------------------------------------------
#: BFCL doc types -> JSON schema types ("any" has no type constraint).
_JSON_TYPES = {"string": "string", "integer": "integer", "float": "number", "number": "number", "boolean": "boolean",
               "array": "array", "tuple": "array", "list": "array", "dict": "object", "object": "object"}  # fmt: skip


def _json_schema(prop: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kind = prop.get("type", "any")
    if kind not in ("any", "Any"):
        out["type"] = _JSON_TYPES.get(kind, "string")
    for key, value in prop.items():
        if key == "type":
            continue
        if key == "items":
            out["items"] = _json_schema(value)
        elif key == "properties":
            out["properties"] = {k: _json_schema(v) for k, v in value.items()}
        elif key == "default":
            out["default"] = None if value == "None" else value  # BFCL writes Python's None as the string 'None'
        else:
            out[key] = value
    return out


def tool_schema(doc: dict[str, Any]) -> dict[str, Any]:
    """A BFCL function doc as an OpenAI tool schema ``{"type": "function", "function": {...}}`` (``dict`` becomes
    ``object``, ``float`` ``number``; the doc's ``response`` schema is kept)."""
    params = doc.get("parameters", {})
    props = {k: _json_schema(v) for k, v in params.get("properties", {}).items()}
    function = {
        "name": doc["name"],
        "description": doc.get("description", ""),
        "parameters": {"type": "object", "properties": props, "required": list(params.get("required", []))},
    }
    if "response" in doc:
        function["response"] = _json_schema(doc["response"])
    return {"type": "function", "function": function}


def check_arguments(function: dict[str, Any], arguments: Any) -> dict[str, Any]:
    """Check a call's ``arguments`` against a tool schema's ``function`` part; return them unchanged (a copy).

    Unknown or missing arguments and wrongly typed values raise ``ArgumentError``. Values are not converted (an
    integer stays an integer for a ``number``, as in BFCL, where the call string is evaluated); defaults are not
    filled in (the Python default applies). ``null`` is accepted for an optional argument whose default is null.
    """
    return validate_arguments(function, arguments, fill_defaults=False)


# -- gold calls -------------------------------------------------------------------------------------------------
def parse_call(text: str) -> tuple[str, list[Any], dict[str, Any]]:
    """A Python call string such as ``"cd(folder='tmp')"`` as ``(name, positional, keyword)``, read with ``ast``
    (arguments must be literals; nothing is evaluated). Raises ``ValueError`` otherwise."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"not a Python call: {text!r} ({e.msg})") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text!r}")
    if any(k.arg is None for k in node.keywords):
        raise ValueError(f"**kwargs in a gold call: {text!r}")
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    except ValueError:
        raise ValueError(f"a gold call with a non-literal argument: {text!r}") from None
    return node.func.id, args, kwargs


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def call_dict(text: str, owners: dict[str, str]) -> dict[str, Any]:
    """A gold call string as ``{"name", "arguments"}`` JSON data (positional arguments named after the method's
    signature; tuples become lists)."""
    name, args, kwargs = parse_call(text)
    if args:
        if name not in owners:
            raise ValueError(f"gold call {text!r}: no involved class has a method {name!r}")
        sig = inspect.signature(getattr(function_class(owners[name]), name))
        params = [p for p in sig.parameters if p != "self"]
        if len(args) > len(params):
            raise ValueError(f"gold call {text!r}: {len(args)} positional arguments for {params}")
        kwargs = {**dict(zip(params, args, strict=False)), **kwargs}
    return {"name": name, "arguments": _jsonable(kwargs)}
