"""What refuses to start a training run and what stops one, kept out of the trainer's loop: the start checks of
``agentgym train`` (:func:`check_start`: the model, and the env arguments against the env's constructor;
:func:`claim_out_dir`: the run folder; :func:`undo_failed_start`: what a failed start wrote), the token budget
(:func:`budget_stop`), the collapse check (:func:`check_collapse`), and :class:`RunGuard`, which carries the
sampled-token count and the reasons to stop from one iteration to the next (and across a resume)."""

from __future__ import annotations

import contextlib
import json
import math
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.baselines.config import TrainConfig, did_you_mean

__all__ = ["RUN_FILES", "RunGuard", "budget_stop", "check_collapse", "check_endpoints", "check_env_args", "check_model",
           "check_start", "claim_out_dir", "run_files", "undo_failed_start"]  # fmt: skip

#: What a run writes into its ``out_dir``: a folder holding any of them holds a run.
RUN_FILES = ("checkpoint.pt", "metrics.jsonl", "config.json", "metrics.png", "methods.pt", "rollouts.jsonl")


def check_env_args(env_id: str, kwargs: Mapping[str, Any], field: str = "env_kwargs") -> None:
    """Raise ``ValueError`` (one line) where ``kwargs`` cannot build ``env_id``: a name its constructor does not take
    (with the closest one it does), a value of another type than the parameter's annotation, or a constructor that
    refuses them (the env is built once and closed). Nothing else is built."""
    import gymnasium

    import agentgym  # noqa: F401  (registers the envs)
    from agentgym.contract.trust import WRAPPER_ARGS, constructor_signature, value_fits

    entry = gymnasium.spec(env_id).entry_point
    try:
        creator = gymnasium.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
        if creator is None:
            raise TypeError(f"{env_id} has no entry point")
        params, owners, open_ended = constructor_signature(creator)
    except Exception:  # an entry point that does not import or inspect: gymnasium.make below says why
        params, owners, open_ended = {}, {}, True
    for name, value in kwargs.items():
        if name in WRAPPER_ARGS:
            continue
        if name not in params:
            if open_ended:
                continue
            raise ValueError(f"{field}: {env_id} takes no argument {name!r}{did_you_mean(name, params)}; it takes: "
                             f"{', '.join(sorted(params)) or 'none'}")  # fmt: skip
        try:
            hint = typing.get_type_hints(owners[name]).get(name, Any)
        except Exception:  # an annotation that does not resolve here checks nothing
            hint = Any
        if not value_fits(value, hint):
            shown = getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
            raise ValueError(f"{field}: {env_id}'s {name!r} must be {shown}, got {value!r}")
    try:
        env = gymnasium.make(env_id, **kwargs)
    except Exception as exc:
        raise ValueError(f"{field} {json.dumps(dict(kwargs), default=str)} do not build {env_id}: {exc}") from None
    env.close()


def check_model(model: str) -> None:
    """Raise ``ValueError`` unless ``model`` is ``tiny``, a named model whose weights are here, or a local folder
    (nothing is downloaded)."""
    from agentgym.tools.named_models import NAMED_MODELS, model_names

    if not model:
        raise ValueError("no model: give a local model directory with --model PATH (nothing is downloaded)")
    if model in NAMED_MODELS:
        try:
            NAMED_MODELS[model].gguf_path()
        except RuntimeError as exc:
            raise ValueError(str(exc)) from None
    elif model != "tiny" and not Path(model).is_dir():
        raise ValueError(f"no model directory at {model} (--model: a local folder with config.json, or a named model: "
                         f"{', '.join(('tiny', *model_names()))})")  # fmt: skip


def check_start(config: TrainConfig) -> None:
    """Raise ``ValueError`` (one line) where ``config`` cannot start: its model (:func:`check_model`), the env
    arguments of its training and eval envs (:func:`check_env_args`), or a scorer's judge endpoint
    (:func:`check_endpoints`)."""
    check_model(config.model)
    check_env_args(config.env_id, config.env_kwargs)
    if config.eval_env_kwargs is not None:
        check_env_args(config.env_id, config.eval_env_kwargs, "eval_env_kwargs")
    check_endpoints(config)


def check_endpoints(config: TrainConfig) -> None:
    """Each LLM endpoint of the scorer's settings (``scorer_kwargs["client"]`` / ``["judge"]``) answers its model
    list (``GET /models``, as vLLM's and OpenAI's do): a judge that is down would otherwise mark every turn
    unscorable, iteration after iteration."""
    from agentgym.baselines.components import judge_endpoint, make_client
    from agentgym.tools.llm import LLMError

    for key in ("client", "judge"):
        if config.scorer is None or key not in config.scorer_kwargs:
            continue
        settings = config.scorer_kwargs[key] if key == "client" else judge_endpoint(config.scorer_kwargs[key])
        if settings is None:  # the rule judge has no endpoint
            continue
        client = make_client(settings)
        try:
            client.models()
        except LLMError as exc:
            raise ValueError(f"scorer_kwargs[{key!r}]: the endpoint {client.base_url} does not answer GET /models "
                             f"({exc})") from None  # fmt: skip
        finally:
            client.close()


def claim_out_dir(out_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """Make ``out_dir`` ready for a run: a folder holding a run (:func:`run_files`) needs ``resume`` (continue it) or
    ``overwrite`` (its run files are removed here); both at once, or neither, raise ``ValueError``."""
    found = run_files(out_dir)
    if found and resume and overwrite:
        raise ValueError("--resume continues the run in the output folder, --overwrite replaces it: give one")
    if found and not resume:
        if not overwrite:
            raise ValueError(f"{out_dir} holds a run ({', '.join(found)}); pass --resume to continue it, --overwrite "
                             "to replace it, or choose another --out-dir")  # fmt: skip
        for name in found:
            (out_dir / name).unlink()


def run_files(out_dir: Path) -> list[str]:
    """The :data:`RUN_FILES` in ``out_dir`` that make it hold a run. A folder left by a start that failed before its
    first record (a ``config.json`` and an empty ``metrics.jsonl``, no checkpoint) holds none: it is started afresh."""
    found = [name for name in RUN_FILES if (out_dir / name).is_file()]
    metrics = out_dir / "metrics.jsonl"
    if "checkpoint.pt" not in found and (not metrics.is_file() or not metrics.read_text(encoding="utf-8").strip()):
        found = [name for name in found if name not in ("config.json", "metrics.jsonl")]
    return found


@contextlib.contextmanager
def undo_failed_start(out_dir: Path) -> Iterator[None]:
    """Where the body fails before ``out_dir`` holds a run (:func:`run_files`: no record, no checkpoint), remove what
    the start wrote there (``config.json``, ``metrics.jsonl``; the folder itself when it made it and left it empty),
    so the corrected command is not refused as a run folder."""
    made = not out_dir.exists()
    try:
        yield
    except BaseException:
        if not run_files(out_dir):
            for name in ("config.json", "metrics.jsonl"):
                (out_dir / name).unlink(missing_ok=True)
            if made and out_dir.is_dir() and not any(out_dir.iterdir()):
                out_dir.rmdir()
        raise


def budget_stop(total: int, config: TrainConfig) -> str | None:
    """Why the run stops for its token budget (None: it does not): ``total`` sampled tokens reached
    ``max_sampled_tokens``. A resumed run checks its count again, so raising the budget continues it."""
    if config.max_sampled_tokens is None or total < config.max_sampled_tokens:
        return None
    return f"token budget: {total} sampled tokens >= max_sampled_tokens {config.max_sampled_tokens}"


def _fall_z(before: float, now: float, n: int) -> float:
    """One-sided two-proportion z of a fall from ``before`` to ``now``, each a share of ``n`` episodes (pooled
    variance; inf when both shares are 0 or 1 and differ, 0 when they are equal).

    >>> round(_fall_z(11 / 80, 4 / 80, 80), 2), round(_fall_z(0.5, 0.1, 80), 2)
    (1.9, 5.52)
    """
    pooled = (before + now) / 2
    se = math.sqrt(pooled * (1 - pooled) * 2 / n) if n > 0 else 0.0
    return (before - now) / se if se > 0 else (math.inf if before > now else 0.0)


def check_collapse(history: Sequence[dict[str, Any]], config: TrainConfig) -> str | None:
    """Why the run has collapsed (None: it has not), from its RL iterations' records (iteration >= 1):

    - a non-finite loss or gradient norm in the latest iteration;
    - the mean valid-action share of the latest ``collapse_window`` iterations below ``collapse_ratio`` x that of
      the first ``collapse_window`` (the start);
    - the same for training success, when the start's is at least ``collapse_min_success`` and the fall is
      significant (a one-sided two-proportion z-test over the two windows' episodes of at least
      ``collapse_success_z``): on Chain H = 8, 11 successes in 80 episodes and then 4 is a halving and noise;
    - the mean pre-clipping gradient norm of the latest window above ``collapse_grad_factor`` x the start's
      (iterations whose groups all tied, norm 0, are left out of both).

    The windows never overlap: nothing is checked before ``2 * collapse_window`` iterations."""
    rl = [h for h in history if h.get("iteration", 0) >= 1]
    if not rl:
        return None
    last = rl[-1]
    for key in ("loss", "grad_norm", "grad_norm_max"):
        if key in last and (last[key] is None or not np.isfinite(last[key])):
            return f"non-finite {key} ({last[key]}) at iteration {last['iteration']}"
    w = config.collapse_window
    if len(rl) < 2 * w:
        return None
    start, recent = rl[:w], rl[-w:]

    def span(records: Sequence[dict[str, Any]]) -> str:
        first, last = records[0]["iteration"], records[-1]["iteration"]
        return f"iteration {first}" if first == last else f"iterations {first}-{last}"

    def mean(records: Sequence[dict[str, Any]], key: str, nonzero: bool = False) -> float | None:
        vals = [float(r[key]) for r in records if r.get(key) is not None and not (nonzero and r[key] == 0)]
        return float(np.mean(vals)) if vals else None

    ratio = config.collapse_ratio
    for key, name, floor in (("valid_action_frac", "valid-action share", 0.0),
                             ("success_rate", "training success", config.collapse_min_success)):  # fmt: skip
        before, now = mean(start, key), mean(recent, key)
        if before is not None and now is not None and before > 0 and before >= floor and now < ratio * before:
            n = w * config.batch_tasks * config.groups_per_task * config.group_size  # the episodes of w iterations
            if key == "success_rate" and _fall_z(before, now, n) < config.collapse_success_z:
                continue
            return (f"{name} fell from {before:.3f} ({span(start)}) to {now:.3f} ({span(recent)}), below "
                    f"collapse_ratio {ratio} x the start")  # fmt: skip
    before, now = mean(start, "grad_norm", True), mean(recent, "grad_norm", True)
    if before is not None and now is not None and now > config.collapse_grad_factor * before:
        return (f"gradient norm exploded from {before:.3g} ({span(start)}) to {now:.3g} ({span(recent)}), above "
                f"collapse_grad_factor {config.collapse_grad_factor} x the start")  # fmt: skip
    return None


@dataclass
class RunGuard:
    """The run's reasons to stop, carried from iteration to iteration: the sampled-token count against
    ``max_sampled_tokens`` (every token sampled in the RL iterations so far, main rollouts and forks) and the
    collapse check. :meth:`of` rebuilds it from a resumed run's history: a run that collapsed stops again (unless
    ``collapse_check`` is now off) and a spent budget stops it unless raised."""

    config: TrainConfig
    total: int = 0  # sampled tokens so far
    stopped: str | None = None  # the budget's reason
    collapsed: str | None = None  # the collapse check's reason

    @classmethod
    def of(cls, history: Sequence[dict[str, Any]], config: TrainConfig) -> RunGuard:
        collapsed = next((h["collapse_reason"] for h in history if h.get("collapse_reason")), None)
        totals = (h["sampled_tokens_total"] for h in reversed(history) if h.get("sampled_tokens_total") is not None)
        total = next(totals, 0)
        return cls(config, total, budget_stop(total, config), collapsed if config.collapse_check else None)

    @property
    def done(self) -> bool:
        """A collapse is a reported failure, not a data point; a spent budget ends the run."""
        return bool(self.collapsed or self.stopped)

    def count(self, metrics: dict[str, Any]) -> None:
        """Add the iteration's sampled tokens; record the running total and, once spent, the budget's reason."""
        self.total += int(metrics.get("sampled_tokens", 0))
        metrics["sampled_tokens_total"] = self.total
        self.stopped = budget_stop(self.total, self.config)
        if self.stopped:
            metrics["stop_reason"] = self.stopped

    def check(self, history: Sequence[dict[str, Any]], metrics: dict[str, Any]) -> None:
        """The collapse check over ``history`` and the iteration's ``metrics`` (recorded in them when it fires)."""
        if self.config.collapse_check:
            self.collapsed = check_collapse([*history, metrics], self.config)
            if self.collapsed:
                metrics.update(collapsed=True, collapse_reason=self.collapsed)
