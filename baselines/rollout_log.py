"""The trainer's episodes on disk: ``rollouts.jsonl`` in the run folder, for ``agentgym view`` (issue 36).

Every ``TrainConfig.log_rollouts_every``-th iteration (iteration 1 included) the trainer calls :func:`log_rollouts`
once, after the advantages are computed: at most ``log_rollouts_max`` of the rollouts it trains on (whole groups
first) become one JSON line each, appended to ``rollouts.jsonl`` in one write and flushed, so a kill at any byte
loses at most the torn last line, which :func:`read_rollouts` skips (and the next write cuts off, as
``agentgym.contract.trajectory.TrajectoryWriter`` does). A resumed run replays the iterations past its checkpoint:
each iteration first cuts off the records of itself and later ones (a short read of the last line when there are
none). Once the file holds ``log_rollouts_max_mb`` MiB,
nothing more is logged (the iteration's metrics say ``rollouts_logged: 0``).

A record (keys in this order; numbers that are not finite are null; lone surrogates escaped by the ASCII JSON)::

    iteration, rollout (its row in the iteration's trained batch), group_id, task_id, seed, env_id,
    success, outcome (sum of the env rewards), return (sum of the rewards the estimator counts), terminated,
    truncated, error, fork_of ({"rollout", "turn", "k"}: a branch fork's origin; null for a main rollout),
    advantages_skipped ({estimator: reason}), turns: [
        {observation_before (the messages the policy saw since its last action: the reset's for turn 1),
         action (the text as sampled), action_valid, parse_error, reward, reward_components,
         scored_reward (the turn scorer's reward: only on the turns a scorer scored),
         correct / progress / success (the env's verified info, where present),
         tokens (the turn's sampled tokens, decoded one by one: joined they are ``action``),
         advantages (per token: the advantage the update used, at float32's shortest text; null where the token is
         not in the loss),
         advantages_by ({estimator: per-token list}: ``log_advantages_of`` on the same batch),
         observation (the env's reply: on the last turn only; a turn's reply is the next turn's observation_before)}]

Strings longer than ``MAX_TEXT`` characters are cut (with a note of how much). Dynamic sampling's dropped groups are
not trained on and not logged.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / ROLLOUTS_FILE
>>> _ = path.write_bytes(b'{"iteration": 1, "turns": []}\\n{"iteration": 2, "turns": []}\\n{"iteration": 2, "tu')
>>> [r["iteration"] for r in read_rollouts(path)], [r["iteration"] for r in read_rollouts(path, iteration=2)]
([1, 2], [2])
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from agentgym.baselines.config import TrainConfig
from agentgym.baselines.credit import compute_advantages, turn_rewards
from agentgym.baselines.rollout import Rollout
from agentgym.contract.parsing import loads_untrusted
from agentgym.contract.trajectory import cut_torn_tail

__all__ = ["MAX_LINE_BYTES", "MAX_TEXT", "ROLLOUTS_FILE", "log_rollouts", "pick_rollouts", "read_rollouts",
           "rollout_record", "token_texts"]  # fmt: skip

ROLLOUTS_FILE = "rollouts.jsonl"
MAX_TEXT = 16_384  # characters of one logged string (an observation, an action)
MAX_LINE_BYTES = 64 << 20  # the reader skips longer lines without holding them
VERIFIED_KEYS = ("correct", "progress", "success")


def log_due(config: TrainConfig, it: int) -> bool:
    """Whether iteration ``it`` (1-based) is logged: every ``log_rollouts_every``-th, the first included."""
    every = config.log_rollouts_every
    return every > 0 and config.log_rollouts_max > 0 and (it - 1) % every == 0


def pick_rollouts(rollouts: Sequence[Rollout], cap: int) -> list[int]:
    """The indexes of at most ``cap`` rollouts: whole groups in order of first appearance while they fit, then the
    first members of the next group to fill the cap (one group larger than the cap: its first ``cap``).

    >>> pick_rollouts([Rollout([0], group_id=g) for g in (0, 0, 1, 1, 2, 2)], 3)
    [0, 1, 2]
    """
    groups: dict[Any, list[int]] = {}
    for i, r in enumerate(rollouts):
        groups.setdefault(r.group_id, []).append(i)
    out: list[int] = []
    for members in groups.values():
        if len(out) + len(members) <= cap:
            out += members
        else:
            out += members[: cap - len(out)]
            break
    return sorted(out)


def token_texts(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token as text, in order, as the rollout decodes actions (``skip_special_tokens``): decoded one by one;
    where those do not join into the whole decode (a character split over tokens, a tokenizer that joins words
    with spaces), each token is the growth of the decoded prefix instead, so the texts join into ``decode(ids)``
    wherever each decoded prefix extends the one before (a prefix that does not is that token's text whole)."""
    ids = [int(i) for i in ids]
    whole = tokenizer.decode(ids, skip_special_tokens=True)
    one = [tokenizer.decode([i], skip_special_tokens=True) for i in ids]
    if "".join(one) == whole:
        return one
    out, before = [], ""
    for k in range(len(ids)):
        text = tokenizer.decode(ids[: k + 1], skip_special_tokens=True)
        out.append(text[len(before) :] if text.startswith(before) else text)
        before = text
    return out


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else f"{text[:MAX_TEXT]}... [{len(text) - MAX_TEXT} characters cut]"


def _safe(x: Any, depth: int = 0) -> Any:
    """``x`` as plain JSON values: non-finite numbers None, numpy scalars Python's, long strings cut, anything else
    its (cut) text; nesting past 16 levels becomes text."""
    if x is None or isinstance(x, (bool, np.bool_)):
        return None if x is None else bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, str):
        return _clip(x)
    if depth < 16 and isinstance(x, dict):
        return {_clip(str(k)): _safe(v, depth + 1) for k, v in x.items()}
    if depth < 16 and isinstance(x, (list, tuple)):
        return [_safe(v, depth + 1) for v in x]
    return _clip(str(x))


def _f32(values: np.ndarray, mask: np.ndarray) -> list[float | None]:
    """float32 values at their shortest text (what the update's float32 tensor holds), None off the mask."""
    return [float(str(v)) if m and np.isfinite(v) else None
            for v, m in zip(values.astype(np.float32), mask, strict=True)]  # fmt: skip


def _loss_mask(r: Rollout, config: TrainConfig) -> np.ndarray:
    """The tokens in the loss, as ``make_batch`` masks them (``mask_truncated`` drops a truncated episode)."""
    if config.mask_truncated and r.truncated and not r.terminated:
        return np.zeros(len(r.response_ids), dtype=bool)
    return np.asarray(r.loss_mask, dtype=bool)


def rollout_record(
    r: Rollout,
    index: int,
    it: int,
    config: TrainConfig,
    tokenizer: Any,
    advantages: np.ndarray,
    others: dict[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """One rollout's record (the module docstring): ``advantages`` are its per-response-token advantages (the
    update's), ``others`` the other estimators' on the same batch."""
    mask = _loss_mask(r, config)
    counted = turn_rewards(r, config)
    turns = []
    for k, (s, e) in enumerate(r.turn_spans):
        info = r.infos[k] if k < len(r.infos) else {}
        before = r.initial_observation if k == 0 else r.observations[k - 1]
        turn: dict[str, Any] = {
            "observation_before": _safe(before),
            "action": r.actions[k] if k < len(r.actions) else "",
            "action_valid": bool(info.get("action_valid", True)),
            "parse_error": info.get("parse_error"),
            "reward": r.turn_rewards[k],
            "reward_components": r.reward_components[k] if k < len(r.reward_components) else {},
        }
        if len(r.scored_rewards) == len(r.turn_spans) and (not r.scored_valid or r.scored_valid[k]):
            turn["scored_reward"] = r.scored_rewards[k]  # only on the turns a scorer scored
        turn.update({key: info[key] for key in VERIFIED_KEYS if key in info})
        turn["tokens"] = token_texts(tokenizer, r.response_ids[s:e])
        turn["advantages"] = _f32(np.asarray(advantages[s:e]), mask[s:e])
        if others:
            turn["advantages_by"] = {name: _f32(np.asarray(a[s:e]), mask[s:e]) for name, a in others.items()}
        if k == len(r.turn_spans) - 1 and k < len(r.observations):
            turn["observation"] = r.observations[k]
        turns.append(_safe(turn))
    return _safe({
        "iteration": it, "rollout": index, "group_id": r.group_id, "task_id": r.task_id, "seed": r.seed,
        "env_id": config.env_id, "success": r.success, "outcome": r.outcome, "return": math.fsum(counted),
        "terminated": r.terminated, "truncated": r.truncated, "error": r.error, "fork_of": None,
        "advantages_skipped": {}, "turns": turns,
    })  # fmt: skip


def _method_defaults() -> dict[str, Any]:
    """The knobs of the run's own method that a critic-free comparison leaves at their defaults: its estimator's
    arguments, the critic's, A^2TGPO's clip and branch credit's (the comparison runs on the main rollouts)."""
    return {
        f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(TrainConfig)
        if f.name.startswith(("branch_", "tree_", "value_", "critic_"))
        or f.name in ("estimator_kwargs", "detach_critic", "adaptive_clip_beta", "step_bonus")
    }


def other_advantages(
    rollouts: Sequence[Rollout], config: TrainConfig
) -> tuple[dict[str, list[np.ndarray]], dict[str, str]]:
    """``config.log_advantages_of``'s advantages on ``rollouts`` (each as a critic-free run with that estimator and
    its default arguments would compute them), and the reason for each that could not run on this batch."""
    out: dict[str, list[np.ndarray]] = {}
    skipped: dict[str, str] = {}
    for name in config.log_advantages_of:
        try:
            fusion = "add" if config.scorer is not None else config.scorer_fusion
            alt = dataclasses.replace(config, **_method_defaults(), algo="grpo", estimator=name, scorer_fusion=fusion)
            out[name] = compute_advantages(rollouts, alt)[0]
        except Exception as exc:  # a comparison never stops the run: the reason is recorded
            skipped[name] = _clip(f"{type(exc).__name__}: {' '.join(str(exc).split())}")[:500]
    return out, skipped


def _is_cut_of(row: Rollout, full: Rollout) -> bool:
    """Whether ``row`` is ``full`` cut after some turn (``branches.first_turn``)."""
    return row.prompt_ids == full.prompt_ids and full.response_ids[: len(row.response_ids)] == row.response_ids


def fork_origins(rows: Sequence[Rollout], branches: Any) -> dict[int, dict[str, int | None]]:
    """For each trained row that is a branch fork (``baselines/branches.py``: the mains come first, then the forks
    cut after the turns they train, in ``BranchSet.rows`` order), its origin: the trained row it forks from (None
    where that row is not trained), the turn, and the fork's index there."""
    if branches is None:
        return {}
    n = len(branches.mains)
    all_rows = branches.rows
    origins = [*branches.origins, *branches.sub_origins]  # the main/row index, turn and fork index of rows n, n+1...
    trained_of: dict[int, int] = {i: i for i in range(n)}  # BranchSet.rows index -> trained row
    out: dict[int, dict[str, int | None]] = {}
    j = n
    for idx in range(n, len(rows)):
        row = rows[idx]
        while j < len(all_rows) and not _is_cut_of(row, all_rows[j]):
            j += 1
        if j >= len(all_rows):
            break
        parent, turn, k = origins[j - n]
        trained_of[j] = idx
        out[idx] = {"rollout": trained_of.get(parent), "turn": turn, "k": k}
        j += 1
    return out


def log_rollouts(
    config: TrainConfig,
    it: int,
    rollouts: Sequence[Rollout],
    advantages: Sequence[np.ndarray],
    tokenizer: Any,
    branches: Any = None,
) -> dict[str, float]:
    """Append iteration ``it``'s records to ``out_dir/rollouts.jsonl`` when it is due (:func:`log_due`):
    ``rollouts`` and ``advantages`` are the rows the update trains on and their token advantages; ``branches``,
    the iteration's ``BranchSet`` (forks name their origin). Returns the iteration's log metrics
    (``rollouts_logged``, ``rollouts_log_bytes``: no timing, so a resumed run's metrics equal the uninterrupted
    run's); nothing when not due."""
    path = Path(config.out_dir) / ROLLOUTS_FILE
    if not log_due(config, it):
        if config.log_rollouts_every > 0 and path.is_file():  # a resumed run's records past its checkpoint go
            with open(path, "rb+") as f:
                _cut_from(f, it)
        return {}
    budget = config.log_rollouts_max_mb * (1 << 20)
    if path.is_file() and path.stat().st_size >= budget and _last_iteration(path) < it:
        warnings.warn(f"{path} holds {config.log_rollouts_max_mb} MiB (log_rollouts_max_mb): no more episodes are "
                      "logged", stacklevel=2)  # fmt: skip
        return {"rollouts_logged": 0, "rollouts_log_bytes": 0}
    chosen = pick_rollouts(rollouts, config.log_rollouts_max)
    forks = fork_origins(rollouts, branches)
    mains = [r for i, r in enumerate(rollouts) if i not in forks]  # the comparison runs on the main rollouts
    others, skipped = other_advantages(mains, config) if config.log_advantages_of else ({}, {})
    main_pos = {i: p for p, i in enumerate(i for i in range(len(rollouts)) if i not in forks)}
    lines = []
    for i in chosen:
        mine = {n: a[main_pos[i]] for n, a in others.items()} if i in main_pos else None
        rec = rollout_record(rollouts[i], i, it, config, tokenizer, advantages[i], mine)
        rec["fork_of"] = forks.get(i)
        rec["advantages_skipped"] = (
            dict(skipped)
            if i in main_pos
            else {n: "a branch fork: the comparison runs on the main rollouts" for n in config.log_advantages_of}
        )
        lines.append(json.dumps(rec, ensure_ascii=True, allow_nan=False, separators=(",", ":")) + "\n")
    data = "".join(lines).encode("ascii")
    _append(path, data, it)
    return {"rollouts_logged": len(chosen), "rollouts_log_bytes": len(data)}


def _iteration_of(line: bytes) -> int | None:
    try:
        d = loads_untrusted(line.decode("utf-8", "replace"), "the line")
    except ValueError:
        return None
    it = d.get("iteration") if isinstance(d, dict) else None
    return it if isinstance(it, int) and not isinstance(it, bool) else None


def _last_line(f: BinaryIO, end: int) -> bytes:
    """The file's last line (it ends at ``end``, with its newline)."""
    pos = end - 1
    while pos > 0:
        step = min(1 << 16, pos)
        f.seek(pos - step)
        i = f.read(step).rfind(b"\n")
        if i >= 0:
            pos = pos - step + i + 1
            break
        pos -= step
    f.seek(max(pos, 0))
    return f.read(end - max(pos, 0))


def _last_iteration(path: Path) -> int:
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        it = _iteration_of(_last_line(f, end)) if end else None
    return it if it is not None else 0


def _cut_from(f: BinaryIO, it: int) -> int:
    """Cut a torn tail and the records of iterations ``>= it`` off the open file (a resumed run plays them again:
    found from the last line, so a file without them costs one short read); returns the new end."""
    cut_torn_tail(f)
    end = f.seek(0, os.SEEK_END)
    last = _iteration_of(_last_line(f, end)) if end else None
    if last is None or last < it:
        return end
    f.seek(0)
    pos = 0
    for line in iter(lambda: f.readline(MAX_LINE_BYTES), b""):
        seen = _iteration_of(line) if len(line) < MAX_LINE_BYTES else None
        if seen is not None and seen >= it:
            break
        pos += len(line)
    f.truncate(pos)
    return pos


def _append(path: Path, data: bytes, it: int) -> None:
    """Append ``data`` in one write and flush, after :func:`_cut_from`. A write that fails on the way is cut back
    off."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab+") as f:
        end = _cut_from(f, it)
        f.seek(end)
        try:
            f.write(data)
            f.flush()
        except BaseException:
            f.truncate(end)
            raise


def read_rollouts(
    path: str | os.PathLike[str], *, iteration: int | None = None, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[dict[str, Any]]:
    """The records of a ``rollouts.jsonl`` (all, or those of ``iteration``), streamed one line at a time: blank,
    torn (a crash mid-write), malformed and non-object lines are skipped, as is a line longer than
    ``max_line_bytes`` (read in chunks, never held whole). Records are in iteration order, so reading one iteration
    stops at the first record past it. Nothing in the file makes this raise (a missing file does)."""
    with open(path, "rb") as f:
        while raw := f.readline(max_line_bytes + 1):
            if not raw.endswith(b"\n") and len(raw) > max_line_bytes:
                while raw and not raw.endswith(b"\n"):
                    raw = f.readline(1 << 20)
                continue
            if not raw.strip():
                continue
            try:
                d = loads_untrusted(raw.decode("utf-8", "replace"), "the line")
            except ValueError:
                continue
            if not isinstance(d, dict):
                continue
            if iteration is not None:
                seen = d.get("iteration")
                if isinstance(seen, int) and seen > iteration:
                    return
                if seen != iteration:
                    continue
            yield d
