"""The pluggable reward parts of a training run, resolved by name: the post-episode turn scorer (``TrainConfig.scorer``)
and the env's reward wrappers (``TrainConfig.reward_wrappers``), each checked when the config is built.

- A scorer is a catalogue card of kind ``"scorer"`` (``agentgym methods``), one of :data:`FALLBACK_SCORERS`, or an
  import path ``"package.module:Class"`` of a :class:`~agentgym.rewards.base.TurnScorer` subclass. Its constructor's
  inputs are filled by the trainer (:data:`SCORER_INPUTS`): ``scorer`` (an ``AnswerScorer``: the policy itself, as
  ``LocalAnswerScorer(model, tokenizer)``), ``tokenizer``, ``policy`` (the policy model itself, which a learned
  scorer copies), ``client`` (an ``LLMClient`` built from ``scorer_kwargs["client"]``: a base URL or a dict of
  ``LLMClient`` arguments) and ``judge`` (a :class:`~agentgym.rewards.verdicts.Judge` built from
  ``scorer_kwargs["judge"]`` by :func:`make_judge`: ``"rule"`` for ``RuleJudge``, an endpoint for ``LLMJudge``);
  every other ``scorer_kwargs`` entry must be a constructor parameter.
- A reward wrapper entry is ``{"name": NAME, **kwargs}``: NAME a card of kind ``"wrapper"`` or ``"bonus"``, one of
  :data:`FALLBACK_WRAPPERS`, or an import path of a ``gymnasium.Wrapper`` subclass. ``"component"`` sets the
  wrapper's own ``name`` (its reward component); ``"table"`` holds the arguments of its cross-batch table. A
  ``potential`` argument given as a string is an info key (:class:`InfoPotential`).

Tables. A wrapper whose constructor takes a table (a parameter named ``table`` or ``counts``, annotated with a class
that has ``update`` and ``snapshot``: ``CountTable`` for ``NoveltyBonus``) gets one table per entry, shared by every
training env; the trainer calls ``table.update(items)`` once per iteration, after all rollouts, with the items the
table's class names in its class attribute ``items`` (:func:`items_kind`; without one: ``"observations"`` where
the wrapper declares a ``table_type``, as ``RNDBonus`` does, else ``"anchors"``):

- ``"anchors"``: every step's ``info["anchor"]`` (the reached states);
- ``"observations"``: every step's observation as one string (``observation_text``: its messages' contents joined
  by newlines), or ``str(info[key])`` where the wrapper has a ``key`` argument set (RND's);
- ``"transitions"``: ``(obs, action, next_obs)`` string triples, one per step (obs of the first step: the reset's;
  with a ``key``, ``info[key]`` in place of each observation), as MaxInfoRL's ``DisagreementTable`` reads them.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.rewards.text_features import observation_text

__all__ = ["FALLBACK_SCORERS", "FALLBACK_WRAPPERS", "SCORER_INPUTS", "TABLE_ITEMS", "InfoPotential", "WrapperSpec",
           "build_scorer", "check_values", "did_you_mean", "items_kind", "judge_endpoint", "make_client", "make_judge",
           "resolve_class", "scorer_class", "table_items", "wrapper_specs"]  # fmt: skip

#: Scorer names that work before (or without) their catalogue cards.
FALLBACK_SCORERS: Mapping[str, str] = {
    "info_gain": "agentgym.rewards.information:InformationGain",
    "info_potential": "agentgym.rewards.information:InformationPotential",
    "siop": "agentgym.rewards.information:SelfInducedOutcomePotential",
    "infopo": "agentgym.rewards.information:CounterfactualInformationGain",
    "tool_match": "agentgym.rewards.matching:ToolCallMatching",
    "judge": "agentgym.rewards.judge:JudgeScorer",
}
#: Wrapper names that work before (or without) their catalogue cards.
FALLBACK_WRAPPERS: Mapping[str, str] = {
    "potential_shaping": "agentgym.rewards.wrappers:PotentialShaping",
    "progress": "agentgym.rewards.wrappers:ProgressReward",
    "format_penalty": "agentgym.rewards.wrappers:FormatPenalty",
    "step_cost": "agentgym.rewards.wrappers:StepCost",
    "novelty": "agentgym.rewards.wrappers:NoveltyBonus",
}
#: Scorer constructor parameters the trainer fills (never ``scorer_kwargs`` entries, except client/judge settings).
SCORER_INPUTS = ("scorer", "tokenizer", "policy", "client", "judge")
#: What a table can ask ``update`` for (its class attribute ``items``).
TABLE_ITEMS = ("anchors", "observations", "transitions")
_TABLE_PARAMS = ("table", "counts")


def did_you_mean(name: str, known: Iterable[str], aliases: Mapping[str, str] | None = None) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``known`` (or of ``aliases``' names, which suggest their
    value), or ``""`` when nothing is close.

    >>> did_you_mean("lerning_rate", ["lr", "seed"], {"learning_rate": "lr"}), did_you_mean("zzz", ["horizon"])
    (" (did you mean 'lr'?)", '')
    """
    names = {k: k for k in known} | dict(aliases or {})
    close = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean {names[close[0]]!r}?)" if close else ""


def resolve_class(name: str, kinds: Sequence[str], fallback: Mapping[str, str], what: str) -> type:
    """The class a config names: an import path ``"pkg.mod:Class"``, a catalogue card of one of ``kinds``, or a
    fallback name. ``ValueError`` (with the closest names) otherwise."""
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"{what} {name!r}: cannot import it ({exc})") from None
        return obj
    from agentgym.baselines.methods import catalogue

    cards = {c.name: c for c in catalogue() if c.kind in kinds and c.code is not None}
    if name in cards:
        return cards[name].load()  # type: ignore[return-value]
    if name in fallback:
        return resolve_class(fallback[name], kinds, fallback, what)
    known = sorted({*cards, *fallback})
    raise ValueError(f"unknown {what} {name!r}{did_you_mean(name, known)}; known: {', '.join(known)} "
                     "(or an import path 'package.module:Class')")  # fmt: skip


def scorer_class(name: str) -> Callable[..., Any]:
    """The :class:`TurnScorer` subclass ``name`` stands for, or a function returning one (a transform card's
    factory, such as G-RA over verified progress); ``ValueError`` when it is neither."""
    from agentgym.rewards.base import TurnScorer

    cls: Any = resolve_class(name, ("scorer", "transform"), FALLBACK_SCORERS, "scorer")
    if inspect.isfunction(cls):
        try:
            made = typing.get_type_hints(cls).get("return")
        except Exception:  # an annotation that does not resolve: not a factory this can check
            made = None
        if isinstance(made, type) and issubclass(made, TurnScorer):
            return cls
    if not (isinstance(cls, type) and issubclass(cls, TurnScorer)):
        raise ValueError(f"scorer {name!r} is {cls!r}, not a TurnScorer subclass or a function returning one")
    return cls


def _hints(cls: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls.__init__ if isinstance(cls, type) else cls)  # type: ignore[misc]
    except Exception:  # an annotation that does not resolve here: read the raw strings
        return {k: p.annotation for k, p in inspect.signature(cls).parameters.items()}


def check_values(fn: Callable[..., Any], kwargs: Mapping[str, Any], what: str) -> None:
    """``ValueError`` (one line) where a value of ``kwargs`` cannot stand for ``fn``'s parameter of that name, judged
    by its annotation (``agentgym.contract.trust.value_fits``, as env arguments are)."""
    from agentgym.contract.trust import type_text, value_fits

    hints = _hints(fn)
    for key, value in kwargs.items():
        hint = hints.get(key, Any)
        if not value_fits(value, hint):
            raise ValueError(f"{what}: {key} must be {type_text(hint)}, got {value!r}")


def _required(p: inspect.Parameter) -> bool:
    return p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)


def check_scorer(name: str, kwargs: Mapping[str, Any]) -> Callable[..., Any]:
    """The scorer's class, after checking ``kwargs`` against its constructor (``ValueError`` names what is wrong)."""
    cls = scorer_class(name)
    params = inspect.signature(cls).parameters
    hints = _hints(cls)
    if "scorer" in params and "AnswerScorer" not in str(hints.get("scorer", "")):
        raise ValueError(f"scorer {name!r} takes a scorer of type {hints.get('scorer')!r}; the trainer builds only an "
                         "AnswerScorer (the policy) for it")  # fmt: skip
    for key in ("scorer", "tokenizer", "policy"):
        if key in kwargs:
            raise ValueError(f"scorer_kwargs: {key!r} is filled by the trainer (the policy and its tokenizer)")
    if "client" in params and _required(params["client"]) and "client" not in kwargs:
        raise ValueError(f"scorer {name!r} needs scorer_kwargs['client']: an OpenAI-compatible endpoint URL or a "
                         "dict of LLMClient arguments with base_url")  # fmt: skip
    if "judge" in params and _required(params["judge"]) and "judge" not in kwargs:
        raise ValueError(f"scorer {name!r} needs scorer_kwargs['judge']: {JUDGE_SPEC}")
    if "client" in kwargs:
        make_client(kwargs["client"], check_only=True)
    if "judge" in kwargs:
        make_judge(kwargs["judge"], check_only=True)
    unknown = sorted(k for k in kwargs if k not in params or k in ("self",))
    if unknown:
        raise ValueError(f"scorer {name!r} takes no {unknown}; its arguments: "
                         f"{', '.join(k for k in params if k not in SCORER_INPUTS)}")  # fmt: skip
    missing = [k for k, p in params.items() if _required(p) and k not in SCORER_INPUTS and k not in kwargs]
    if missing:
        raise ValueError(f"scorer {name!r} needs scorer_kwargs {missing}")
    check_values(cls, {k: v for k, v in kwargs.items() if k not in SCORER_INPUTS}, f"scorer {name!r}")
    return cls


def make_client(settings: Any, *, check_only: bool = False) -> Any:
    """An ``LLMClient`` from a base URL or a dict of its arguments (``base_url`` required)."""
    if isinstance(settings, str):
        settings = {"base_url": settings}
    if not isinstance(settings, Mapping) or not isinstance(settings.get("base_url"), str):
        raise ValueError(f"a judge client is an endpoint URL or a dict with base_url, got {settings!r}")
    from agentgym.tools.llm import LLMClient

    args = {k: v for k, v in settings.items() if k != "base_url"}
    allowed = set(inspect.signature(LLMClient).parameters) - {"base_url"}
    unknown = sorted(set(args) - allowed)
    if unknown:
        raise ValueError(f"LLMClient takes no {unknown}; its arguments: {', '.join(sorted(allowed))}")
    return None if check_only else LLMClient(settings["base_url"], **args)


#: What ``scorer_kwargs["judge"]`` may be (the one-line errors quote it).
JUDGE_SPEC = ("'rule' (the rule judge: answers from the env's gold), an OpenAI-compatible endpoint URL, or a dict "
              "with base_url plus LLMClient arguments and LLMJudge arguments (model, answer, cache_size, max_workers, "
              "...)")  # fmt: skip


def judge_endpoint(spec: Any) -> dict[str, Any] | None:
    """The ``LLMClient`` arguments (``base_url`` included) of a judge spec, None for the rule judge; ``ValueError``
    where ``spec`` is no judge spec (:func:`make_judge` checks the rest).

    >>> judge_endpoint("rule"), judge_endpoint({"base_url": "http://127.0.0.1:8000/v1", "answer": "logprob"})
    (None, {'base_url': 'http://127.0.0.1:8000/v1'})
    """
    if spec == "rule":
        return None
    if isinstance(spec, str):
        if not spec.startswith(("http://", "https://")):
            raise ValueError(f"scorer_kwargs['judge'] must be {JUDGE_SPEC}; got {spec!r}")
        spec = {"base_url": spec}
    if not isinstance(spec, Mapping) or not isinstance(spec.get("base_url"), str):
        raise ValueError(f"scorer_kwargs['judge'] must be {JUDGE_SPEC}; got {spec!r}")
    from agentgym.tools.llm import LLMClient

    client_params = set(inspect.signature(LLMClient).parameters) - {"model"}
    return {k: v for k, v in spec.items() if k in client_params}


def make_judge(spec: Any, *, check_only: bool = False) -> Any:
    """The judge ``scorer_kwargs["judge"]`` names: ``"rule"`` -> ``RuleJudge()``; an endpoint URL, or a dict with
    ``base_url`` (its ``LLMClient`` arguments and ``LLMJudge`` arguments mixed; ``model`` goes to the judge) ->
    ``LLMJudge``. ``ValueError`` (one line) for anything else, an unknown argument or a value the judge refuses.

    >>> make_judge("rule")
    RuleJudge(name='rule')
    >>> make_judge({"base_url": "http://127.0.0.1:8000/v1", "answer": "maybe"}, check_only=True)
    Traceback (most recent call last):
    ...
    ValueError: scorer_kwargs['judge']: answer must be one of 'text', 'logprob', got 'maybe'
    """
    from agentgym.rewards.verdicts import RuleJudge

    client_args = judge_endpoint(spec)
    if client_args is None:
        return None if check_only else RuleJudge()
    spec = {"base_url": spec} if isinstance(spec, str) else spec
    from agentgym.rewards.judge import LLMJudge
    from agentgym.tools.llm import LLMClient

    judge_params = set(inspect.signature(LLMJudge).parameters) - {"client"}
    client_params = set(client_args) | (set(inspect.signature(LLMClient).parameters) - {"model"})
    unknown = sorted(set(spec) - judge_params - client_params)
    if unknown:
        raise ValueError(f"scorer_kwargs['judge'] takes no {unknown}; LLMClient arguments: "
                         f"{', '.join(sorted(client_params))}; LLMJudge arguments: "
                         f"{', '.join(sorted(judge_params))}")  # fmt: skip
    judge_args = {k: v for k, v in spec.items() if k in judge_params}
    check_values(LLMJudge, judge_args, "scorer_kwargs['judge']")
    check_values(LLMClient, client_args, "scorer_kwargs['judge']")
    try:
        client = LLMClient(**client_args)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"scorer_kwargs['judge']: {exc}") from None
    try:
        judge = LLMJudge(client, **judge_args)
    except (TypeError, ValueError) as exc:
        client.close()
        raise ValueError(f"scorer_kwargs['judge']: {exc}") from None
    if check_only:
        client.close()
        return None
    return judge


def build_scorer(name: str, kwargs: Mapping[str, Any], model: Any, tokenizer: Any) -> Any:
    """The scorer ``name`` over the current policy weights (IGPO, TIPS, SIOP, InfoPO score with the policy)."""
    cls = check_scorer(name, kwargs)
    params = inspect.signature(cls).parameters
    args = {k: v for k, v in kwargs.items() if k not in ("client", "judge")}
    if "scorer" in params:
        from agentgym.rewards.answer_scoring import LocalAnswerScorer

        args["scorer"] = LocalAnswerScorer(model, tokenizer)
    if "tokenizer" in params:
        args["tokenizer"] = tokenizer
    if "policy" in params:  # a learned scorer (OPRL, SWEET-RL) copies the live policy
        args["policy"] = model
    if "client" in kwargs:
        args["client"] = make_client(kwargs["client"])
    if "judge" in kwargs:
        args["judge"] = make_judge(kwargs["judge"])
    return cls(**args)


@dataclass(frozen=True)
class InfoPotential:
    """A potential read off the env's info: ``Phi(s) = scale * info[key]`` (picklable, for env pools). A reset info
    without the key raises ``KeyError``; a step info without it reads as 0."""

    key: str
    scale: float = 1.0

    def __call__(self, observation: Any, info: Mapping[str, Any]) -> float:
        return self.scale * float(info[self.key])


@dataclass(frozen=True)
class WrapperSpec:
    """One ``reward_wrappers`` entry, resolved: the wrapper class, its keyword arguments (strings already turned into
    potentials), the parameter taking its table (None: no table) with the table's class and arguments, and the
    reward component it records."""

    name: str
    cls: type
    kwargs: Mapping[str, Any]
    table_param: str | None = None
    table_cls: type | None = None
    table_kwargs: Mapping[str, Any] | None = None
    component: str = ""

    def make_table(self) -> Any:
        return None if self.table_cls is None else self.table_cls(**dict(self.table_kwargs or {}))

    def wrap(self, env: Any, table: Any = None) -> Any:
        kwargs = dict(self.kwargs)
        if isinstance(kwargs.get("potential"), str):
            kwargs["potential"] = InfoPotential(kwargs["potential"])
        if self.table_param is not None:
            kwargs[self.table_param] = table
        return self.cls(env, **kwargs)


def _table_class(cls: type) -> tuple[str | None, type | None]:
    params = inspect.signature(cls).parameters
    declared = getattr(cls, "table_type", None)  # a wrapper may name its table class (RNDBonus does)
    if isinstance(declared, type):
        for key in _TABLE_PARAMS:
            if key in params:
                return key, declared
    hints = _hints(cls)
    for key in _TABLE_PARAMS:
        if key in params:
            ann = hints.get(key)
            if isinstance(ann, type) and hasattr(ann, "update") and hasattr(ann, "snapshot"):
                return key, ann
    return None, None


def wrapper_specs(entries: Sequence[Mapping[str, Any]]) -> list[WrapperSpec]:
    """Resolve and check ``reward_wrappers`` (``ValueError`` on an unknown name, or an argument the wrapper or its
    table does not take)."""
    import gymnasium

    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise ValueError(f"reward_wrappers[{i}] must be a dict with a 'name', got {entry!r}")
        name = entry["name"]
        cls = resolve_class(name, ("wrapper", "bonus"), FALLBACK_WRAPPERS, "reward wrapper")
        if not (isinstance(cls, type) and issubclass(cls, gymnasium.Wrapper)):
            raise ValueError(f"reward wrapper {name!r} is {cls!r}, not a gymnasium.Wrapper subclass")
        kwargs = {k: v for k, v in entry.items() if k not in ("name", "component", "table")}
        if "component" in entry:
            kwargs["name"] = entry["component"]
        params = inspect.signature(cls).parameters
        table_param, table_cls = _table_class(cls)
        unknown = sorted(k for k in kwargs if k not in params or k in ("env", table_param))
        if unknown:
            known = [k for k in params if k not in ("env", "self", table_param)]
            raise ValueError(f"reward wrapper {name!r} takes no {unknown}; its arguments: {', '.join(known)}")
        table_kwargs = entry.get("table") or {}
        if table_cls is None and "table" in entry:
            raise ValueError(f"reward wrapper {name!r} keeps no table (its 'table' arguments have nowhere to go)")
        if not isinstance(table_kwargs, Mapping):
            raise ValueError(f"reward_wrappers[{i}]['table'] must be a dict of the table's arguments")
        check_values(cls, kwargs, f"reward wrapper {name!r}")
        if table_cls is not None:
            tparams = inspect.signature(table_cls).parameters
            bad = sorted(set(table_kwargs) - set(tparams))
            if bad:
                raise ValueError(f"{table_cls.__name__} (the table of {name!r}) takes no {bad}")
            what = f"{table_cls.__name__} (the table of {name!r})"
            check_values(table_cls, table_kwargs, what)
            try:  # built once here, so arguments it refuses stop the run before it starts
                table_cls(**dict(table_kwargs))
            except Exception as exc:
                raise ValueError(f"{what}: {dict(table_kwargs)} do not build it: {exc}") from None
            items = items_kind(cls, table_cls)
            if items not in TABLE_ITEMS:
                raise ValueError(f"{table_cls.__name__}.items must be one of {TABLE_ITEMS}, got {items!r}")
        missing = [k for k, p in params.items() if _required(p) and k not in ("env", table_param) and k not in kwargs]
        if missing:
            raise ValueError(f"reward wrapper {name!r} needs {missing}")
        if "potential" in kwargs and not (isinstance(kwargs["potential"], str) or callable(kwargs["potential"])):
            raise ValueError(f"reward wrapper {name!r}: potential must be an info key (a string)")
        default = params["name"].default if "name" in params else ""
        component = str(kwargs.get("name", default if isinstance(default, str) else ""))
        out.append(WrapperSpec(name, cls, kwargs, table_param, table_cls, dict(table_kwargs), component))
    return out


def items_kind(wrapper_cls: type, table_cls: type) -> str:
    """What a table's ``update`` reads: its class attribute ``items``; without one, ``"observations"`` for a wrapper
    that declares its ``table_type`` (RND's convention) and ``"anchors"`` otherwise (``CountTable``)."""
    declared = getattr(table_cls, "items", None)
    if isinstance(declared, str):
        return declared
    return "observations" if isinstance(getattr(wrapper_cls, "table_type", None), type) else "anchors"


def table_items(spec: WrapperSpec, rollouts: Sequence[Any]) -> list[Any]:
    """What the table of ``spec`` reads from an iteration's rollouts (:func:`items_kind`; module docstring). A
    wrapper's ``anchor_key`` / ``key`` argument names the info entry read instead of ``"anchor"`` / the observation."""
    assert spec.table_cls is not None
    kind = items_kind(spec.cls, spec.table_cls)
    if kind == "anchors":
        anchor = str(spec.kwargs.get("anchor_key", "anchor"))
        return [str(i[anchor]) for r in rollouts for i in r.infos if i.get(anchor) is not None]
    key = spec.kwargs.get("key")
    if kind == "observations":
        if isinstance(key, str):
            return [str(i[key]) for r in rollouts for i in r.infos if i.get(key) is not None]
        return [observation_text(o) for r in rollouts for o in r.observations]
    out = []
    for r in rollouts:
        if isinstance(key, str):  # the wrapper reads info[key] (the reset's for the first observation)
            obs = [str(r.reset_info[key]), *(str(i[key]) for i in r.infos)]
        else:
            obs = [observation_text(r.initial_observation), *(observation_text(o) for o in r.observations)]
        out += [(obs[t], observation_text(a), obs[t + 1]) for t, a in enumerate(r.actions[: len(r.observations)])]
    return out
