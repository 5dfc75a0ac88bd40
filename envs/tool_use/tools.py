"""Typed Python callables as tools: OpenAI function schemas from signatures and docstrings, strict argument checks.

Mark a method with ``@tool``; ``schema_of`` reads its type hints (``str``, ``int``, ``float``, ``bool``,
``list[...]``, ``Literal[...]``, ``X | None``) and its docstring (the first paragraph describes the function, an
``Args:`` section describes the parameters). A parameter with a default is optional. ``validate_arguments`` checks a
call's arguments against the schema before anything runs; a tool signals a domain error ("insufficient funds") by
raising ``ToolError`` before it changes any state.

>>> from typing import Literal
>>> def pay(to: str, amount: float, speed: Literal["slow", "fast"] = "slow") -> str:
...     '''Pay someone.
...
...     Args:
...         to: who is paid.
...         amount: how much.
...         speed: how fast the payment goes.
...     '''
>>> s = schema_of(pay)["function"]
>>> s["parameters"]["required"], s["parameters"]["properties"]["speed"]
(['to', 'amount'], {'type': 'string', 'enum': ['slow', 'fast'], 'description': 'how fast the payment goes.',
'default': 'slow'})
>>> validate_arguments(s, {"to": "bo", "amount": True})
Traceback (most recent call last):
...
agentgym.envs.tool_use.tools.ArgumentError: Argument 'amount' of pay must be a number, got a boolean (True).
"""

from __future__ import annotations

import inspect
import math
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class ToolError(Exception):
    """A domain error raised by a tool (it must raise before it mutates state); the model reads the message."""


class LimitError(ToolError):
    """A call that would take a world past one of its limits (``agentgym.envs.tool_use.limits``): the env refuses it
    as an invalid call and nothing changes; the message names the limit."""


class ArgumentError(ValueError):
    """A call whose arguments do not fit the tool's schema (missing, extra or wrongly typed)."""


def tool(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a method as a tool (its schema comes from ``schema_of``)."""
    fn.__is_tool__ = True  # type: ignore[attr-defined]
    return fn


def tool_names(cls: type) -> list[str]:
    """Names of the ``@tool`` methods of ``cls``, in definition order (base classes first)."""
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if getattr(value, "__is_tool__", False) and name not in names:
                names.append(name)
    return names


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args, current = True, None
            continue
        if in_args:
            if not line.strip():
                current = None
                continue
            m = _ARG_LINE.match(line)
            if m and line.startswith((" ", "\t")) and (current is None or len(line) - len(line.lstrip()) <= 4):
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current is not None:
                params[current] = (params[current] + " " + line.strip()).strip()
            elif not line.startswith((" ", "\t")):
                in_args = False
            continue
        if not summary and not line.strip():
            continue
        if summary and not line.strip():
            in_args = False
            summary.append("\n")
            continue
        summary.append(line.strip())
    text = " ".join(summary).split("\n")[0].strip()
    return text, params


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of a type hint: ``str``, ``int``, ``float``, ``bool``, ``list[X]``, ``Literal``, ``X | None``.

    >>> type_schema(list[int])
    {'type': 'array', 'items': {'type': 'integer'}}
    """
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"only X | None unions are supported, got {hint!r}")
        return type_schema(args[0])
    if origin is Literal:
        values = list(typing.get_args(hint))
        kinds = {type(v) for v in values}
        if len(kinds) != 1 or not kinds <= {str, int}:
            raise TypeError(f"Literal values must all be str or all int, got {hint!r}")
        return {"type": "string" if str in kinds else "integer", "enum": values}
    if origin is list:
        (item,) = typing.get_args(hint) or (str,)
        return {"type": "array", "items": type_schema(item)}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if hint in simple:
        return {"type": simple[hint]}
    raise TypeError(f"unsupported parameter type {hint!r}")


def schema_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """The OpenAI function-calling schema of ``fn`` (``self`` is skipped): ``{"type": "function", "function": ...}``."""
    hints = typing.get_type_hints(fn)
    description, param_docs = _parse_docstring(fn.__doc__)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if name == "self":
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{fn.__name__}: *args and **kwargs cannot be tool parameters")
        if name not in hints:
            raise TypeError(f"{fn.__name__}: parameter {name!r} has no type hint")
        prop = type_schema(hints[name])
        if name in param_docs:
            prop["description"] = param_docs[name]
        if param.default is param.empty:
            required.append(name)
        else:
            prop["default"] = param.default
        properties[name] = prop
    parameters = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"type": "function", "function": {"name": fn.__name__, "description": description, "parameters": parameters}}


#: Deepest nesting of arrays and objects an argument may have (as ``agentgym.contract.parsing.MAX_JSON_DEPTH``).
MAX_ARGUMENT_DEPTH = 64
#: The range of an ``integer`` argument: a signed 64-bit integer.
MAX_INTEGER = 2**63 - 1


def _preview(value: Any, limit: int = 40) -> str:
    """A short, total description of a value's content for error messages (huge ints and deep lists included)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"about {math.floor(value.bit_length() * math.log10(2)) + 1:,} digits"
    if isinstance(value, list):
        return f"{len(value)} item{'s' * (len(value) != 1)}"
    if isinstance(value, dict):
        keys = ", ".join(repr(str(k)[:limit]) for k in list(value)[:5])
        return f"keys {keys}{', ...' if len(value) > 5 else ''}" if value else "no keys"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({value!r})"
    if value is None:
        return "null"
    names = {int: "an integer", float: "a number", str: "a string", list: "an array", dict: "an object"}
    return f"{names.get(type(value), type(value).__name__)} ({_preview(value)})"


def _names(keys: list[Any]) -> str:
    shown = [str(k)[:40] for k in keys[:5]]
    return f"{shown}{f' and {len(keys) - 5} more' if len(keys) > 5 else ''}"


def _too_deep(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``limit`` levels deep (iterative: any depth is safe)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list | dict):
            if depth >= limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def _in_range(value: int | float, kind: str) -> bool:
    if kind == "integer":
        return -MAX_INTEGER - 1 <= value <= MAX_INTEGER
    return math.isfinite(value) if isinstance(value, float) else abs(value) <= _FLOAT_MAX


_FLOAT_MAX = 1.7976931348623157e308
_WANT = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "a boolean",
         "array": "an array", "object": "an object"}  # fmt: skip


def _check(value: Any, prop: dict[str, Any], where: str, depth: int = 1) -> None:
    kind = prop.get("type")
    if kind is None:  # any value
        if _too_deep(value, MAX_ARGUMENT_DEPTH - depth + 1):
            raise ArgumentError(f"{where} is nested more than {MAX_ARGUMENT_DEPTH} levels deep.")
        return
    if depth > MAX_ARGUMENT_DEPTH:
        raise ArgumentError(f"{where} is nested more than {MAX_ARGUMENT_DEPTH} levels deep.")
    ok = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
    }[kind]
    if not ok:
        raise ArgumentError(f"{where} must be {_WANT[kind]}, got {_kind(value)}.")
    if kind in ("integer", "number") and not _in_range(value, kind):
        bounds = f"between {-MAX_INTEGER - 1} and {MAX_INTEGER}" if kind == "integer" else "a finite 64-bit float"
        raise ArgumentError(f"{where} is out of range: it must be {bounds}, got {_kind(value)}.")
    if "enum" in prop and value not in prop["enum"]:
        raise ArgumentError(f"{where} must be one of {prop['enum']}, got {_preview(value, 60)}.")
    if kind == "array" and "items" in prop:
        for i, item in enumerate(value):
            _check(item, prop["items"], f"{where}[{i}]", depth + 1)
    if kind == "object" and "properties" in prop:
        props = prop["properties"]
        extra = [k for k in value if k not in props]
        if extra:
            raise ArgumentError(f"{where} has no key(s) {_names(extra)}; its keys are {list(props)}.")
        required = prop.get("required", [])
        missing = [k for k in required if k not in value]
        if missing:
            raise ArgumentError(f"{where} is missing key(s) {missing}.")
        for key, item in value.items():
            if item is None and key not in required:
                continue
            _check(item, props[key], f"{where}[{key!r}]", depth + 1)
    elif kind in ("array", "object") and _too_deep(value, MAX_ARGUMENT_DEPTH - depth):
        raise ArgumentError(f"{where} is nested more than {MAX_ARGUMENT_DEPTH} levels deep.")


def validate_arguments(function: dict[str, Any], arguments: Any, *, fill_defaults: bool = True) -> dict[str, Any]:
    """Check ``arguments`` against a function schema (``schema["function"]``) and return them: with defaults filled
    in and numbers as floats (``fill_defaults``), or as given (``fill_defaults=False``: the callee's own defaults
    apply, as when BFCL evaluates a call string).

    Raises ``ArgumentError`` for a non-object, a missing or unknown argument or a value of the wrong type, in
    arrays and objects too (``null`` is accepted only for an optional parameter whose default is ``None``; a
    property without a ``type`` takes any value), an ``integer`` outside the signed 64-bit range, a ``number``
    that is not a finite float (a 400-digit integer), and a value nested more than ``MAX_ARGUMENT_DEPTH`` levels.
    It never raises anything else, whatever the arguments hold.
    """
    name = function["name"]
    params = function["parameters"]
    if not isinstance(arguments, dict):
        raise ArgumentError(f"The arguments of {name} must be a JSON object, got {_kind(arguments)}.")
    props = params["properties"]
    extra = [k for k in arguments if k not in props]
    if extra:
        raise ArgumentError(f"{name} has no parameter(s) {_names(extra)}; its parameters are {list(props)}.")
    missing = [k for k in params["required"] if k not in arguments]
    if missing:
        raise ArgumentError(f"{name} is missing required argument(s) {missing}.")
    for key, value in arguments.items():
        if value is None and key not in params["required"] and props[key].get("default") is None:
            continue
        _check(value, props[key], f"Argument {key!r} of {name}")
    if not fill_defaults:
        return dict(arguments)
    out: dict[str, Any] = {}
    for key, prop in props.items():
        value = arguments.get(key, prop.get("default"))
        out[key] = float(value) if prop.get("type") == "number" and value is not None else value
    return out
