"""The trust model for env constructor arguments: which of them may come from outside.

The operator (who starts ``agentgym serve``, runs ``agentgym replay``, writes the code) is trusted; env-server
clients, trajectory files and dataset rows are not. An argument that names a file, a URL, an environment variable,
a cache directory or code must never come from them, and an expensive choice (SearchQA's ``dataset="100k"``) only
when the operator allowed it. So each env class declares, in ``public_args``, the constructor arguments that are
safe from outside and the values each may take (an :class:`Arg`: a bounded number, a flag, a choice among fixed
values, a bounded list of those, a dict of fixed keys). An argument not declared is the operator's (secure by
default). :func:`checked_kwargs` is the one check: the server, replay and the trainer integrations call it on
outside kwargs before anything is built, and it raises :class:`UntrustedArgumentError` (a ``ValueError``) naming
the argument and why. Besides the declared values, an outside caller may always pass an argument's own default
(the code's choice), any value the operator listed in ``allow``, and an operator-fixed argument's own value.

>>> import agentgym
>>> checked_kwargs("agentgym/SearchQA-v0", {"dataset": "tiny", "max_turns": 4})
{'dataset': 'tiny', 'max_turns': 4}
>>> try:
...     checked_kwargs("agentgym/SearchQA-v0", {"cache_dir": "/tmp/x"})
... except UntrustedArgumentError as e:
...     print(e.argument, "refused:", e.why[:16])
cache_dir refused: is operator-only
>>> checked_kwargs("agentgym/SearchQA-v0", {"dataset": "100k"}, allow={"dataset": ["100k"]})
{'dataset': '100k'}
"""

from __future__ import annotations

import collections.abc
import inspect
import json
import math
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import gymnasium as gym

__all__ = [
    "WRAPPER_ARGS",
    "Arg",
    "UntrustedArgumentError",
    "checked_kwargs",
    "constructor_params",
    "constructor_signature",
    "declare",
    "env_class",
    "flag",
    "integer",
    "list_of",
    "number",
    "one_of",
    "operator_args_for",
    "public_args",
    "record",
    "split_allowed_args",
    "split_operator_args",
]

#: Most constructor arguments an outside caller may pass at once.
MAX_OUTSIDE_ARGS = 64


class UntrustedArgumentError(ValueError):
    """An outside caller passed a constructor argument it may not set, or a value outside what is allowed."""

    def __init__(self, env_id: str, argument: str, why: str) -> None:
        super().__init__(f"{env_id}: argument {argument!r} {why}")
        self.env_id, self.argument, self.why = env_id, argument, why


@dataclass(frozen=True)
class Arg:
    """The values an outside caller may give one constructor argument (build one with :func:`integer`,
    :func:`number`, :func:`flag`, :func:`one_of`, :func:`list_of` or :func:`record`)."""

    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] = ()
    item: Arg | None = None
    max_items: int = 0
    fields: tuple[tuple[str, Arg], ...] = ()
    optional: bool = False

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not allowed (one line), or None when it is."""
        if value is None:
            return None if self.optional else "must not be null"
        if self.kind == "choice":
            if any(_same(value, c) for c in self.choices):
                return None
            return f"must be one of {list(self.choices)}, got {_short(value)}"
        if self.kind == "bool":
            return None if isinstance(value, bool) else f"must be true or false, got {_short(value)}"
        if self.kind in ("int", "float"):
            ok = isinstance(value, int) or (self.kind == "float" and isinstance(value, float))
            if isinstance(value, bool) or not ok:
                return f"must be {'an integer' if self.kind == 'int' else 'a number'}, got {_short(value)}"
            if isinstance(value, float) and not math.isfinite(value):
                return f"must be finite, got {value}"
            if not (self.low is None or value >= self.low) or not (self.high is None or value <= self.high):
                return f"must be in [{self.low:g}, {self.high:g}], got {_short(value)}"
            return None
        if self.kind == "list":
            if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
                return f"must be a list, got {_short(value)}"
            if not 1 <= len(value) <= self.max_items:
                return f"must have 1 to {self.max_items} items, got {len(value)}"
            assert self.item is not None
            for i, v in enumerate(value):
                why = self.item.problem(v)
                if why is not None:
                    return f"item {i} {why}"
            return None
        if self.kind == "record":
            if not isinstance(value, Mapping):
                return f"must be an object, got {_short(value)}"
            known = dict(self.fields)
            for key, v in value.items():
                if key not in known:
                    return f"has no key {_short(key)}; accepted keys: {sorted(known)}"
                why = known[key].problem(v)
                if why is not None:
                    return f"key {key!r} {why}"
            return None
        raise ValueError(f"unknown Arg kind {self.kind!r}")

    def describe(self) -> str:
        """A short human description (for docs and errors)."""
        opt = " or null" if self.optional else ""
        if self.kind == "choice":
            return f"one of {list(self.choices)}{opt}"
        if self.kind == "bool":
            return f"true/false{opt}"
        if self.kind in ("int", "float"):
            return f"{'integer' if self.kind == 'int' else 'number'} in [{self.low:g}, {self.high:g}]{opt}"
        if self.kind == "list":
            assert self.item is not None
            return f"list of 1-{self.max_items} x {self.item.describe()}{opt}"
        return "{" + ", ".join(f"{k}: {a.describe()}" for k, a in self.fields) + "}" + opt


def declare(*bases: Mapping[str, Arg], **args: Arg) -> Mapping[str, Arg]:
    """An env class's ``public_args`` (read-only): the ``bases``' declarations, then ``args``.

    >>> sorted(declare({"a": flag()}, b=integer(0, 3)))
    ['a', 'b']
    """
    merged: dict[str, Arg] = {}
    for base in bases:
        merged.update(base)
    merged.update(args)
    return MappingProxyType(merged)


def integer(low: int, high: int, *, optional: bool = False) -> Arg:
    """An integer in ``[low, high]`` (not a bool)."""
    return Arg("int", low=low, high=high, optional=optional)


def number(low: float, high: float, *, optional: bool = False) -> Arg:
    """A finite number in ``[low, high]``."""
    return Arg("float", low=low, high=high, optional=optional)


def flag(*, optional: bool = False) -> Arg:
    """``True`` or ``False``."""
    return Arg("bool", optional=optional)


def one_of(*choices: Any, optional: bool = False) -> Arg:
    """One of fixed values (JSON scalars). Free text is never public: a string argument lists its choices."""
    if not choices:
        raise ValueError("one_of needs at least one choice")
    return Arg("choice", choices=tuple(choices), optional=optional)


def list_of(item: Arg, *, max_items: int, optional: bool = False) -> Arg:
    """A list of 1 to ``max_items`` values, each allowed by ``item``."""
    return Arg("list", item=item, max_items=max_items, optional=optional)


def record(*, optional: bool = True, **fields: Arg) -> Arg:
    """A dict whose keys are among ``fields`` (each value allowed by its ``Arg``), e.g. ``user_knobs``."""
    return Arg("record", fields=tuple(fields.items()), optional=optional)


#: Arguments of the wrappers ``gymnasium.make`` adds that an outside caller may pass.
WRAPPER_ARGS: Mapping[str, Arg] = {"max_episode_steps": integer(1, 100_000, optional=True)}


def _canon(value: Any) -> str | None:
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _same(a: Any, b: Any) -> bool:
    """JSON equality (tuples equal lists; ``True`` is not ``1``)."""
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    ca = _canon(a)
    return ca is not None and ca == _canon(b)


def _short(value: Any, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:  # a value whose repr fails is still reported
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "...'"


def env_class(env_id: str) -> type | None:
    """The class a registered env id builds, or None (an unknown id, or an entry point that is a function)."""
    spec = gym.registry.get(env_id)
    if spec is None:
        return None
    entry: object = spec.entry_point
    if isinstance(entry, str):
        try:
            entry = gym.envs.registration.load_env_creator(entry)
        except Exception:  # an entry point that does not import builds nothing
            return None
    return entry if isinstance(entry, type) else None


def constructor_signature(entry: Callable[..., Any]) -> tuple[dict[str, inspect.Parameter], dict[str, Callable], bool]:
    """The keyword parameters of a constructor (a class, following ``**kwargs`` up its hierarchy, or a factory
    function), the function that declares each, and whether it still takes any keyword (``**kwargs`` at the top)."""
    params: dict[str, inspect.Parameter] = {}
    owners: dict[str, Callable] = {}
    if isinstance(entry, type):
        inits = [k.__dict__["__init__"] for k in entry.__mro__ if k is not object and "__init__" in k.__dict__]
    else:
        inits = [entry]
    for fn in inits:
        own = inspect.signature(fn).parameters
        for name, p in own.items():
            if name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in params:
                params[name], owners[name] = p, fn
        if not any(p.kind == p.VAR_KEYWORD for p in own.values()):
            return params, owners, False
    return params, owners, True


def constructor_params(cls: type) -> dict[str, inspect.Parameter]:
    """The keyword parameters of ``cls``'s constructor, following ``**kwargs`` up the class hierarchy."""
    return constructor_signature(cls)[0]


def public_args(cls: type | None) -> dict[str, Arg]:
    """The arguments of ``cls`` an outside caller may set: its ``public_args`` that are constructor parameters."""
    if cls is None:
        return {}
    params = constructor_params(cls)
    declared = getattr(cls, "public_args", None) or {}
    return {k: a for k, a in declared.items() if k in params}


def operator_args_for(env_id: str, pairs: Mapping[str, Any]) -> dict[str, Any]:
    """The operator's ``--env-arg`` pairs that apply to ``env_id``: ``KEY`` when its constructor (or
    ``gymnasium.make``) takes ``KEY``, ``ENV_ID:KEY`` when the id is ``env_id``.

    >>> import agentgym
    >>> operator_args_for("agentgym/SearchQA-v0", {"cache_dir": "/c", "horizon": 8, "agentgym/Chain-v0:noise": 0.1})
    {'cache_dir': '/c'}
    """
    out: dict[str, Any] = {}
    for key, value in pairs.items():
        target, sep, name = key.rpartition(":")
        if (target == env_id or not sep) and (sep or _takes(env_id, name)):
            out[name] = value
    return out


def split_operator_args(env_ids: Sequence[str], pairs: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Operator ``--env-arg`` pairs per env: ``KEY`` goes to every env in ``env_ids`` whose constructor (or
    ``gymnasium.make``) takes it, ``ENV_ID:KEY`` to that env only. A key no env takes is a ``ValueError``."""
    out: dict[str, dict[str, Any]] = {e: {} for e in env_ids}
    for key, value in pairs.items():
        env_id, sep, name = key.rpartition(":")
        targets = [env_id] if sep else list(env_ids)
        if sep and env_id not in out:
            raise ValueError(f"--env-arg {key}: {env_id!r} is not one of the served envs {list(env_ids)}")
        taken = [e for e in targets if _takes(e, name)]
        if not taken:
            raise ValueError(f"--env-arg {key}: no served env takes an argument {name!r}")
        for e in taken:
            out[e][name] = value
    return out


def split_allowed_args(env_ids: Sequence[str], pairs: Mapping[str, Sequence[Any]]) -> dict[str, dict[str, list]]:
    """Operator ``--allow-env-arg`` values per env: ``ENV_ID:KEY`` widens ``KEY`` of that env only; a bare ``KEY``
    only when exactly one env in ``env_ids`` takes it (so one allowance never widens another env's argument of the
    same name). ``ValueError`` (one line) for an env not served, a key it does not take, or a bare key that is
    ambiguous.

    >>> import agentgym
    >>> split_allowed_args(["agentgym/SearchQA-v0"], {"agentgym/SearchQA-v0:dataset": ["100k"]})
    {'agentgym/SearchQA-v0': {'dataset': ['100k']}}
    """
    out: dict[str, dict[str, list]] = {e: {} for e in env_ids}
    for key, values in pairs.items():
        env_id, sep, name = key.rpartition(":")
        if sep and env_id not in out:
            raise ValueError(f"--allow-env-arg {key}: {env_id!r} is not one of the served envs {list(env_ids)}")
        taken = [e for e in ([env_id] if sep else env_ids) if _takes(e, name)]
        if not taken:
            raise ValueError(f"--allow-env-arg {key}: no served env takes an argument {name!r}")
        if len(taken) > 1:
            raise ValueError(f"--allow-env-arg {key}=...: {len(taken)} served envs take {name!r} "
                             f"({', '.join(taken)}); name the one it is for: ENV_ID:{name}=VALUE")  # fmt: skip
        out[taken[0]].setdefault(name, []).extend(values)
    return out


def _takes(env_id: str, name: str) -> bool:
    if name in WRAPPER_ARGS or name == "disable_env_checker":
        return True
    cls = env_class(env_id)
    return cls is None or name in constructor_params(cls)


def checked_kwargs(
    env_id: str,
    kwargs: Any,
    *,
    operator: Mapping[str, Any] | None = None,
    allow: Mapping[str, Sequence[Any]] | None = None,
    operator_wins: bool = False,
) -> dict[str, Any]:
    """The constructor arguments to build ``env_id`` with: ``kwargs`` from outside, checked, plus ``operator``'s.

    Each outside argument must be a constructor parameter (or a ``gymnasium.make`` wrapper argument of
    :data:`WRAPPER_ARGS`) and be one of: declared public with a value its :class:`Arg` allows; one of the values
    ``allow[name]`` lists; equal to the parameter's default. An argument the operator fixed may be repeated with the
    same value; another value is refused, unless ``operator_wins`` (replay: the operator's value replaces the
    record's). Raises :class:`UntrustedArgumentError` (a ``ValueError``) naming the first argument refused and why.
    """
    if not isinstance(kwargs, Mapping):
        raise UntrustedArgumentError(env_id, "env_kwargs", f"must be an object, got {type(kwargs).__name__}")
    if len(kwargs) > MAX_OUTSIDE_ARGS:
        raise UntrustedArgumentError(env_id, "env_kwargs", f"has {len(kwargs)} keys, over {MAX_OUTSIDE_ARGS}")
    operator = dict(operator or {})
    allow = allow or {}
    cls = env_class(env_id)
    params = constructor_params(cls) if cls is not None else {}
    public = public_args(cls)
    out: dict[str, Any] = {}
    for name, value in kwargs.items():
        if not isinstance(name, str):
            raise UntrustedArgumentError(env_id, str(name), "is not a string")
        if name in operator:
            if operator_wins or _same(value, operator[name]):
                continue
            raise UntrustedArgumentError(env_id, name, "is fixed by the operator; a client may not change it")
        if name in allow and any(_same(value, v) for v in allow[name]):
            out[name] = value
            continue
        rule = public.get(name) or WRAPPER_ARGS.get(name)
        param = params.get(name)
        if param is not None and param.default is not param.empty and _same(value, param.default):
            out[name] = value
            continue
        if rule is None:
            if param is None:
                known = sorted({*public, *WRAPPER_ARGS})
                raise UntrustedArgumentError(
                    env_id, name, f"is not an argument it takes from outside; those are {known}"
                )
            raise UntrustedArgumentError(
                env_id, name, "is operator-only (it may name a file, URL, credential, cache or code, or cost more "
                "than a client may ask): the operator passes it, e.g. `agentgym serve --env-arg "
                f"{name}=...` or `agentgym replay --env-arg {name}=...`",
            )  # fmt: skip
        why = rule.problem(value)
        if why is not None:
            hint = f" (the operator may allow more: --allow-env-arg {name}=...)" if rule.kind == "choice" else ""
            raise UntrustedArgumentError(env_id, name, why + hint)
        out[name] = value
    return {**out, **operator}


def type_text(tp: Any) -> str:
    """How an error names an annotation (what ``value_fits`` judges against).

    >>> type_text(int), type_text(str | None), type_text(typing.Literal["tiny", "small"])
    ('an int', 'a string or None', "one of 'tiny', 'small'")
    """
    origin = typing.get_origin(tp)
    if origin is typing.Union or isinstance(tp, types.UnionType):
        return " or ".join(dict.fromkeys(type_text(a) for a in typing.get_args(tp)))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    names = {type(None): "None", bool: "true or false", int: "an int", float: "a number", str: "a string"}
    names.update(dict.fromkeys((list, tuple, Sequence), "a list") | dict.fromkeys((dict, Mapping), "a JSON object"))
    kind = origin or tp
    if kind in names:
        return names[kind]
    if isinstance(kind, type) and issubclass(kind, os.PathLike):
        return "a path"
    return f"a {getattr(kind, '__name__', kind)}"


def value_fits(value: Any, tp: Any) -> bool:
    """Whether a JSON value (what ``--env-arg`` gives) can stand for an argument annotated ``tp``. An annotation this
    cannot judge (``Any``, a type variable, a string it could not resolve) accepts anything.

    >>> value_fits("six", int), value_fits(6, int), value_fits(6, float), value_fits(True, int)
    (False, True, True, False)
    >>> value_fits(None, int | None), value_fits("huge", typing.Literal["tiny", "small"])
    (True, False)
    """
    origin = typing.get_origin(tp)
    if origin is typing.Union or isinstance(tp, types.UnionType):
        return any(value_fits(value, a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(tp))
    if origin is typing.Annotated:
        return value_fits(value, typing.get_args(tp)[0])
    kind = origin or tp
    if tp is None or kind is type(None):
        return value is None
    if not isinstance(kind, type) or kind in (object, typing.Any):
        return True
    if kind is bool:
        return isinstance(value, bool)
    if kind in (int, float):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number and (kind is float or isinstance(value, int))
    if kind is str or issubclass(kind, os.PathLike):
        return isinstance(value, str)
    if kind in (list, tuple, Sequence, collections.abc.Iterable, collections.abc.Collection):
        return isinstance(value, list)
    if kind in (dict, Mapping):
        return isinstance(value, dict)
    try:
        return isinstance(value, kind)
    except TypeError:  # a class isinstance cannot judge (a protocol that is not runtime-checkable)
        return True
