"""Advantage estimators: the properties stated in docs/rewards.md, 'Advantage estimators' as hypothesis tests (GRPO's
invariances, env tokens that are not GAE steps, explicit turn spans, A^2TGPO's cells and clip bounds, GiGPO's anchor
groups, and determinism and permutation equivariance on any batch), plus a worked example per estimator (numbers
computed by hand or by an independent numpy formula)."""

import doctest
import importlib
import math
import pkgutil
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards import advantages as adv_mod
from agentgym.rewards.advantages import (
    ESTIMATORS,
    OUTCOME_ESTIMATORS,
    EstimatorSpec,
    TurnBatch,
    a2tgpo_advantages,
    adaptive_clip_scale,
    broadcast_to_tokens,
    broadcast_to_tokens_batch,
    dr_grpo,
    get_estimator,
    gigpo,
    group_zscore,
    grpo,
    gtpo,
    igpo_advantages,
    mapo_mixed,
    masked_whiten,
    matchtir_dual,
    normalize_turn_returns,
    place_turn_rewards,
    registry,
    rloo,
    siop_advantages,
    token_gae,
    token_gae_torch,
    turn_gae,
    turn_group_normalize,
    turn_returns,
    userrl_advantages,
    userrl_trajectory_score,
    userrl_turn_credits,
)

EPS = 1e-6
FAST = settings(max_examples=40, deadline=None, derandomize=True)  # reproducible; the file runs in ~15 s

finite = st.floats(-10, 10, allow_nan=False, allow_infinity=False, allow_subnormal=False)
reward = st.one_of(finite, st.sampled_from([0.0, 1.0, -1.0, 0.5]))  # small set -> frequent ties
gid = st.integers(0, 3)


@st.composite
def outcome_batches(draw, max_n=12, values=reward):
    n = draw(st.integers(0, max_n))
    return np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype=float), draw(
        st.lists(gid, min_size=n, max_size=n)
    )


@st.composite
def ragged(draw, max_n=8, min_t=0, max_t=5, values=reward):
    n = draw(st.integers(0, max_n))
    rows = [np.array(draw(st.lists(values, min_size=min_t, max_size=max_t)), dtype=float) for _ in range(n)]
    return rows, draw(st.lists(gid, min_size=n, max_size=n))


@st.composite
def turn_batches(draw, max_n=8, min_t=1, max_t=5):
    rows, gids = draw(ragged(max_n, min_t, max_t))
    anchors = [
        draw(st.lists(st.sampled_from(["s0", "s1", "s2", None]), min_size=r.size, max_size=r.size)) for r in rows
    ]
    values = [np.array(draw(st.lists(finite, min_size=r.size, max_size=r.size))) for r in rows]
    lengths = [np.array(draw(st.lists(st.integers(1, 6), min_size=r.size, max_size=r.size))) for r in rows]
    outcomes = draw(st.one_of(st.none(), st.lists(reward, min_size=len(rows), max_size=len(rows))))
    observations = [draw(st.lists(st.sampled_from(["o0", "o1"]), min_size=r.size, max_size=r.size)) for r in rows]
    signal = st.one_of(st.none(), st.booleans(), reward)
    signals = [draw(st.lists(signal, min_size=r.size, max_size=r.size)) for r in rows]
    # the fields of lampo, serl, hiper and dual_track
    logprobs = draw(st.lists(st.floats(-5, 0), min_size=len(rows), max_size=len(rows)))
    crit = [draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 0.25]), min_size=r.size, max_size=r.size)) for r in rows]
    steps = [draw(st.lists(st.integers(0, 2), min_size=r.size, max_size=r.size)) for r in rows]
    segments = [np.cumsum(s) for s in steps]
    phases = [draw(st.lists(st.sampled_from(["exploration", "execution"]), min_size=r.size, max_size=r.size))
              for r in rows]  # fmt: skip
    exp_rewards = draw(st.lists(reward, min_size=len(rows), max_size=len(rows)))
    return TurnBatch(rows, gids, outcomes, anchors, values, lengths, observations, signals, logprobs, crit, segments,
                     phases, exp_rewards)  # fmt: skip


def groups(keys):
    out = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return [np.array(v) for v in out.values()]


def check_zscored(x, z, eps=EPS):
    """``z`` is the population z-score of ``x`` (one set): mean 0 and std s/(s+eps); exact 0 for a tie/singleton."""
    if x.size <= 1 or np.all(x == x[0]):
        assert np.array_equal(z, np.zeros(x.size))
        return
    s = x.std()
    assert abs(z.mean()) < 1e-9
    assert z.std() == pytest.approx(s / (s + eps), rel=1e-9)
    if s > 1e-3:
        assert z.std() == pytest.approx(1.0, abs=1e-3)


def test_module_docstring_examples_run():
    """The examples of the package and of every module in it (one module per method family) run."""
    names = [adv_mod.__name__] + [f"{adv_mod.__name__}.{m.name}" for m in pkgutil.iter_modules(adv_mod.__path__)]
    results = [doctest.testmod(importlib.import_module(name)) for name in names]
    assert sum(r.attempted for r in results) > 20 and sum(r.failed for r in results) == 0


# --- GRPO, Dr. GRPO, RLOO (docs/rewards.md, 'GRPO, Dr. GRPO, RLOO') --------------------------------------------


def test_grpo_worked_example():
    a = grpo([1.0, 0.0, 0.0, 1.0, 3.0, 2.0, 2.0, 5.0], ["a", "a", "a", "a", "b", "c", "c", "d"])
    # group a: mean 0.5, population std 0.5; b and d are singletons; c ties
    assert a[:4] == pytest.approx(np.array([1, -1, -1, 1]) * 0.5 / (0.5 + EPS), abs=1e-15)
    assert a[4:].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert grpo([3.0, 1.0], [0, 0], eps=0.0).tolist() == [1.0, -1.0]
    assert grpo([3.0, 1.0], [0, 0], scale=False).tolist() == [1.0, -1.0]
    assert grpo([], []).shape == (0,)


@FAST
@given(outcome_batches())
def test_grpo_per_group_mean_zero_unit_std_or_all_zero(batch):
    r, g = batch
    a = grpo(r, g)
    assert np.isfinite(a).all()
    for ix in groups(g):
        check_zscored(r[ix], a[ix])


@FAST
@given(outcome_batches(values=st.integers(-5, 5).map(float)), st.floats(0.1, 10), st.floats(-10, 10))
def test_grpo_invariant_to_positive_affine_maps(batch, scale, shift):
    r, g = batch
    # eps=0: the exact invariance; with eps>0 it holds up to eps/std
    assert np.allclose(grpo(scale * r + shift, g, eps=0.0), grpo(r, g, eps=0.0), atol=1e-9)
    assert np.allclose(grpo(scale * r + shift, g), grpo(r, g), atol=1e-4)


@FAST
@given(
    st.lists(st.lists(finite, min_size=1, max_size=5), min_size=1, max_size=6),
    st.data(),
    st.floats(-5, 5),
    st.floats(0.5, 1.0),
)
def test_potential_shared_at_s0_leaves_grpo_unchanged(rows, data, phi0, gamma):
    """Property 2: r'_t = r_t + gamma Phi(s_{t+1}) - Phi(s_t) with Phi(terminal) = 0 and Phi(s_0) shared in the
    group gives R' = R - Phi(s_0), so GRPO advantages do not move."""
    plain, shaped = [], []
    for r in rows:
        r = np.array(r)
        inner = data.draw(st.lists(st.floats(-5, 5), min_size=r.size - 1, max_size=r.size - 1))
        phi = np.array([phi0, *inner, 0.0])
        plain.append(turn_returns(r, gamma)[0])
        shaped.append(turn_returns(r + gamma * phi[1:] - phi[:-1], gamma)[0])
    assert np.allclose(np.array(shaped), np.array(plain) - phi0, atol=1e-9)
    gids = [0] * len(rows)
    assert np.allclose(grpo(shaped, gids), grpo(plain, gids), atol=1e-6)


def test_dr_grpo_worked_example():
    assert dr_grpo([1.0, 0.0, 0.0, 5.0], ["a", "a", "a", "b"]).tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3, 0.0])
    assert dr_grpo([4.0, 0.0], [0, 0], norm_length=8).tolist() == [0.25, -0.25]
    with pytest.raises(ValueError):
        dr_grpo([1.0], [0], norm_length=0)


@FAST
@given(outcome_batches())
def test_dr_grpo_is_grpo_without_std(batch):
    r, g = batch
    assert np.array_equal(dr_grpo(r, g), grpo(r, g, scale=False))
    for ix in groups(g):
        assert abs(dr_grpo(r, g)[ix].sum()) < 1e-9


def test_rloo_worked_example():
    # A_1 = 3 - (0+0)/2, A_2 = 0 - (3+0)/2, A_3 = 0 - (3+0)/2; singleton -> 0
    assert rloo([3.0, 0.0, 0.0, 9.0], [1, 1, 1, 2]).tolist() == [3.0, -1.5, -1.5, 0.0]


@FAST
@given(outcome_batches())
def test_rloo_sums_to_zero_and_is_a_rescaled_mean_baseline(batch):
    r, g = batch
    a = rloo(r, g)
    for ix in groups(g):
        assert abs(a[ix].sum()) < 1e-9
        if ix.size > 1:  # A_i = G/(G-1) (R_i - mean)
            assert np.allclose(a[ix], ix.size / (ix.size - 1) * (r[ix] - r[ix].mean()), atol=1e-9)
        else:
            assert a[ix].tolist() == [0.0]


def test_group_zscore_with_tuple_keys():
    z = group_zscore([1.0, 3.0, 1.0, 3.0], [("q", 0), ("q", 0), ("q", 1), ("p", 1)], eps=0.0)
    assert z.tolist() == [-1.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        group_zscore([1.0], [0], eps=-1.0)


# --- token GAE: env tokens are not steps (docs/rewards.md, 'Token-level PPO GAE') ------------------------------


def test_token_gae_worked_example_with_interleaved_env_tokens():
    """By hand, gamma = lam = 0.5, tokens P P E E P (E: observation tokens, mask 0, values/rewards ignored):
    t4: delta = 2 + 0.5*0 - 1 = 1,            A = 1
    t1: delta = 1 + 0.5*V4 - 2 = -0.5,        A = -0.5 + 0.25*1 = -0.25
    t0: delta = 0 + 0.5*V1 - 1 = 0,           A = 0 + 0.25*(-0.25) = -0.0625
    returns = A + V on policy tokens."""
    r = [0.0, 1.0, 9.0, -9.0, 2.0]
    v = [1.0, 2.0, 9.0, 7.0, 1.0]
    m = [1, 1, 0, 0, 1]
    a, ret = token_gae(r, v, m, gamma=0.5, lam=0.5)
    assert a.tolist() == [-0.0625, -0.25, 0.0, 0.0, 1.0]
    assert ret.tolist() == [0.9375, 1.75, 0.0, 0.0, 2.0]
    # batched with a padded row; bootstrap value 4 for the first row: t4 delta = 2 + 0.5*4 - 1 = 3
    a2, _ = token_gae(
        [r, [1.0, 0, 0, 0, 0]], [v, [0.5, 0, 0, 0, 0]], [m, [1, 0, 0, 0, 0]], 0.5, 0.5, bootstrap_value=[4.0, 0.0]
    )
    # t4: 2 + 0.5*4 - 1 = 3; t1: -0.5 + 0.25*3 = 0.25; t0: 0 + 0.25*0.25. Padded row: 1 + 0 - 0.5.
    assert a2[0].tolist() == [0.0625, 0.25, 0.0, 0.0, 3.0]
    assert a2[1].tolist() == [0.5, 0.0, 0.0, 0.0, 0.0]


@st.composite
def token_sequences(draw, max_policy=8):
    """A policy-token sequence and the same sequence with mask-0 env tokens (arbitrary r, V) inserted."""
    n = draw(st.integers(0, max_policy))
    r = draw(st.lists(finite, min_size=n, max_size=n))
    v = draw(st.lists(finite, min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(0, 3), min_size=n + 1, max_size=n + 1))
    tr, tv, tm, pos = [], [], [], []
    for k in range(n + 1):
        for _ in range(gaps[k]):
            tr.append(draw(finite))
            tv.append(draw(finite))
            tm.append(0)
        if k < n:
            pos.append(len(tr))
            tr.append(r[k])
            tv.append(v[k])
            tm.append(1)
    return np.array(r), np.array(v), np.array(tr), np.array(tv), np.array(tm), np.array(pos, dtype=int)


@FAST
@given(token_sequences(), st.floats(0, 1), st.floats(0, 1))
def test_gae_inserting_env_tokens_leaves_policy_advantages_unchanged(seq, gamma, lam):
    r, v, tr, tv, tm, pos = seq
    a, ret = token_gae(r, v, np.ones(r.size), gamma, lam)
    ta, tret = token_gae(tr, tv, tm, gamma, lam)
    assert np.array_equal(ta[pos], a) and np.array_equal(tret[pos], ret)
    env = tm == 0
    assert np.all(ta[env] == 0) and np.all(tret[env] == 0)


@FAST
@given(token_sequences(), st.floats(0, 1))
def test_gae_lambda1_value0_is_discounted_reward_to_go(seq, gamma):
    r, _, tr, _, tm, pos = seq
    a, ret = token_gae(tr, np.zeros(tr.size), tm, gamma, 1.0)
    assert np.allclose(a[pos], turn_returns(r, gamma), atol=1e-9)
    assert np.allclose(ret[pos], a[pos])


@FAST
@given(token_sequences(), st.floats(0, 1))
def test_gae_lambda0_is_td_error(seq, gamma):
    r, v, tr, tv, tm, pos = seq
    a, _ = token_gae(tr, tv, tm, gamma, 0.0)
    v_next = np.append(v[1:], 0.0)
    assert np.allclose(a[pos], r + gamma * v_next - v, atol=1e-9)


@FAST
@given(st.lists(token_sequences(max_policy=5), min_size=1, max_size=4), st.floats(0, 1), st.floats(0, 1))
def test_gae_batch_equals_rows_and_torch_equals_numpy(seqs, gamma, lam):
    width = max(s[2].size for s in seqs) + 1
    pad = [lambda x, s=s: np.pad(x, (0, width - x.size)) for s in seqs]
    r = np.stack([p(s[2]) for p, s in zip(pad, seqs, strict=True)])
    v = np.stack([p(s[3]) for p, s in zip(pad, seqs, strict=True)])
    m = np.stack([p(s[4]) for p, s in zip(pad, seqs, strict=True)])
    a, ret = token_gae(r, v, m, gamma, lam)
    for i in range(len(seqs)):
        ai, reti = token_gae(r[i], v[i], m[i], gamma, lam)
        assert np.array_equal(a[i], ai) and np.array_equal(ret[i], reti)
    torch = pytest.importorskip("torch")
    ta, tret = token_gae_torch(torch.from_numpy(r), torch.from_numpy(v), torch.from_numpy(m), gamma, lam)
    assert np.allclose(ta.numpy(), a, atol=1e-12) and np.allclose(tret.numpy(), ret, atol=1e-12)


def test_gae_edge_cases():
    a, ret = token_gae([1.0, 2.0], [3.0, 4.0], [0, 0], 1.0, 1.0)  # all-zero mask
    assert a.tolist() == [0.0, 0.0] and ret.tolist() == [0.0, 0.0]
    a, ret = token_gae(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3)), 1.0, 1.0)
    assert a.shape == ret.shape == (0, 3)
    assert token_gae([], [], [], 0.9, 0.9)[0].shape == (0,)
    with pytest.raises(ValueError):
        token_gae([1.0], [np.nan], [1], 1.0, 1.0)
    with pytest.raises(ValueError):
        token_gae([1.0, 2.0], [1.0], [1, 1], 1.0, 1.0)


def test_turn_gae_matches_token_gae_with_one_token_per_turn():
    r, v = np.array([0.0, 0.5, 1.0]), np.array([0.2, 0.4, 0.1])
    tok_r = np.array([0.0, 0, 0.5, 0, 0, 1.0, 0])  # policy token, then observation tokens
    tok_v = np.array([0.2, 5, 0.4, 5, 5, 0.1, 5])
    tok_m = np.array([1, 0, 1, 0, 0, 1, 0])
    ta, tret = token_gae(tok_r, tok_v, tok_m, 0.9, 0.8)
    a, ret = turn_gae(r, v, 0.9, 0.8)
    assert np.allclose(ta[tok_m == 1], a) and np.allclose(tret[tok_m == 1], ret)


def test_place_turn_rewards_feeds_token_gae():
    spans = [(1, 3), (5, 8)]
    tr = place_turn_rewards([0.5, 1.0], spans, 9)
    assert tr.tolist() == [0, 0, 0.5, 0, 0, 0, 0, 1.0, 0]
    mask = np.zeros(9)
    for s, e in spans:
        mask[s:e] = 1
    a, _ = token_gae(tr, np.zeros(9), mask, 1.0, 1.0)
    assert a.tolist() == [0, 1.5, 1.5, 0, 0, 1.0, 1.0, 1.0, 0]
    assert place_turn_rewards([2.0], [[(0, 1), (3, 4)]], 5).tolist() == [0, 0, 0, 2.0, 0]  # multi-span turn
    with pytest.raises(ValueError):
        place_turn_rewards([1.0], [(2, 2)], 5)  # a turn with no token cannot hold a reward


def test_masked_whiten():
    w = masked_whiten([1.0, 100.0, 3.0], [1, 0, 1], eps=0.0)
    assert w.tolist() == [-1.0, 0.0, 1.0]
    assert masked_whiten([1.0, 2.0], [0, 0]).tolist() == [0.0, 0.0]


# --- broadcast to tokens (explicit turn spans, 0 elsewhere) ----------------------------------------------------


def test_broadcast_worked_example():
    # 3 turns; the middle one has advantage exactly 0 and must not merge with its neighbours
    out = broadcast_to_tokens([1.5, 0.0, -1.0], [(1, 3), (4, 6), (6, 8)], 10, loss_mask=[1] * 7 + [0] + [1] * 2)
    assert out.tolist() == [0, 1.5, 1.5, 0, 0, 0, -1.0, 0, 0, 0]
    out = broadcast_to_tokens([1.5, 0.0, -1.0], [(1, 3), (4, 6), (6, 8)], 10)
    out[4:6] = 9.0  # the zero turn's tokens are exactly its span
    assert broadcast_to_tokens([1.5, 9.0, -1.0], [(1, 3), (4, 6), (6, 8)], 10).tolist() == out.tolist()


@st.composite
def span_layouts(draw):
    length = draw(st.integers(0, 30))
    k = draw(st.integers(0, 5))
    cuts = sorted(draw(st.lists(st.integers(0, length), min_size=2 * k, max_size=2 * k)))
    spans = [(cuts[2 * i], cuts[2 * i + 1]) for i in range(k)]
    advs = draw(st.lists(st.one_of(finite, st.just(0.0)), min_size=k, max_size=k))
    mask = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=length, max_size=length)))
    return advs, spans, length, mask


def owner_of(spans, length):
    owner = np.full(length, -1)
    for k, (s, e) in enumerate(spans):
        owner[s:e] = k
    return owner


@FAST
@given(span_layouts())
def test_broadcast_constant_within_turn_exact_zero_elsewhere(layout):
    advs, spans, length, mask = layout
    out = broadcast_to_tokens(advs, spans, length, mask)
    keep = np.ones(length, bool) if mask is None else np.array(mask, bool)
    owner = owner_of(spans, length)
    for j in range(length):
        if owner[j] >= 0 and keep[j]:
            assert out[j] == advs[owner[j]]
        else:
            assert out[j] == 0.0 and not math.copysign(1.0, out[j]) < 0


@FAST
@given(span_layouts())
def test_broadcast_each_turn_owns_exactly_its_tokens_even_at_zero(layout):
    advs, spans, length, mask = layout
    base = broadcast_to_tokens(advs, spans, length, mask)
    keep = np.ones(length, bool) if mask is None else np.array(mask, bool)
    owner = owner_of(spans, length)
    for k in range(len(spans)):
        bumped = list(advs)
        bumped[k] = advs[k] + 1.0
        changed = broadcast_to_tokens(bumped, spans, length, mask) != base
        assert np.array_equal(changed, (owner == k) & keep)


@FAST
@given(st.lists(span_layouts(), min_size=0, max_size=4))
def test_broadcast_batch_equals_rows(layouts):
    width = max([lay[2] for lay in layouts], default=0)
    rows = [(a, s, [True] * width if m is None else list(m) + [False] * (width - len(m))) for a, s, _, m in layouts]
    out = broadcast_to_tokens_batch([r[0] for r in rows], [r[1] for r in rows], width, [r[2] for r in rows] or None)
    assert out.shape == (len(rows), width)
    for i, (a, s, m) in enumerate(rows):
        assert np.array_equal(out[i], broadcast_to_tokens(a, s, width, m))


def test_broadcast_multi_span_turns_and_errors():
    out = broadcast_to_tokens([2.0, -1.0], [[(0, 1), (3, 4)], (1, 3)], 5)
    assert out.tolist() == [2.0, -1.0, -1.0, 2.0, 0.0]
    assert broadcast_to_tokens([], [], 3).tolist() == [0.0, 0.0, 0.0]
    assert broadcast_to_tokens([1.0], [(0, 2)], 2, loss_mask=[0, 0]).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="overlaps"):
        broadcast_to_tokens([1.0, 2.0], [(0, 3), (2, 4)], 5)
    with pytest.raises(ValueError, match="outside"):
        broadcast_to_tokens([1.0], [(3, 6)], 5)
    with pytest.raises(ValueError):
        broadcast_to_tokens([1.0, 2.0], [(0, 1)], 5)


# --- turn returns, GTPO, turn-PPO ------------------------------------------------------------------------------


def test_turn_returns_and_gtpo_worked_example():
    assert turn_returns([1.0, 0.0, 2.0], 0.5).tolist() == [1.5, 1.0, 2.0]
    assert turn_returns([], 0.9).tolist() == []
    # group a: returns (gamma=1) [3, 2] and [1]; pooled mean 2, population std sqrt(2/3)
    a = gtpo([[1.0, 2.0], [1.0], [4.0]], ["a", "a", "b"], gamma=1.0, eps=0.0)
    s = math.sqrt(2 / 3)
    assert np.allclose(a[0], [1 / s, 0.0]) and np.allclose(a[1], [-1 / s]) and a[2].tolist() == [0.0]


@FAST
@given(ragged(), st.sampled_from(["group", "group_turn", "batch"]))
def test_normalize_turn_returns_statistics(batch, by):
    rows, g = batch
    z = normalize_turn_returns(rows, g, by=by)
    flat, zf = np.concatenate([np.zeros(0), *rows]), np.concatenate([np.zeros(0), *z])
    keys = [{"group": g[i], "group_turn": (g[i], t), "batch": 0}[by] for i, r in enumerate(rows) for t in range(r.size)]
    for ix in groups(keys):
        check_zscored(flat[ix], zf[ix])


def test_turn_gae_worked_example_and_bootstrap():
    # gamma=1, lam=0.5: t1 delta = 1 - 0.5 = 0.5; t0 delta = 0 + 0.5 - 0.5 = 0, A0 = 0 + 0.5*0.5
    a, ret = turn_gae([0.0, 1.0], [0.5, 0.5], gamma=1.0, lam=0.5)
    assert a.tolist() == [0.25, 0.5] and ret.tolist() == [0.75, 1.0]
    a, _ = turn_gae([0.0, 1.0], [0.5, 0.5, 2.0], gamma=1.0, lam=0.5)  # bootstrap V(s_3) = 2
    assert a.tolist() == [0.0 + 0.5 * 2.5, 2.5]
    with pytest.raises(ValueError):
        turn_gae([0.0, 1.0], [0.5])


@FAST
@given(st.lists(finite, max_size=6), st.floats(0, 1), st.data())
def test_turn_gae_limits(r, gamma, data):
    v = np.array(data.draw(st.lists(finite, min_size=len(r), max_size=len(r))))
    a, _ = turn_gae(r, np.zeros(len(r)), gamma, 1.0)
    assert np.allclose(a, turn_returns(r, gamma), atol=1e-9)
    a, _ = turn_gae(r, v, gamma, 0.0)
    assert np.allclose(a, np.array(r) + gamma * np.append(v[1:], 0.0) - v, atol=1e-9)


# --- IGPO, SIOP ------------------------------------------------------------------------------------------------


def test_igpo_worked_example_separate_and_joint():
    ig, out, g = [[0.1, 0.3], [0.2]], [1.0, 0.0], [7, 7]
    # separate: IG pooled {0.1, 0.3, 0.2} -> -sqrt(1.5), +sqrt(1.5), 0; outcomes {1, 0} -> +1, -1; then reward-to-go
    sep = igpo_advantages(ig, out, g, "separate", eps=0.0)
    k = math.sqrt(1.5)
    assert np.allclose(sep[0], [-k + k + 1, k + 1, 1]) and np.allclose(sep[1], [0 - 1, -1])
    # joint: all five rewards z-scored together
    x = np.array([0.1, 0.3, 1.0, 0.2, 0.0])
    z = (x - x.mean()) / x.std()
    joint = igpo_advantages(ig, out, g, "joint", eps=0.0)
    assert np.allclose(joint[0], [z[0] + z[1] + z[2], z[1] + z[2], z[2]]) and np.allclose(joint[1], [z[3] + z[4], z[4]])
    # gamma discounts the reward-to-go
    assert np.allclose(igpo_advantages(ig, out, g, "separate", gamma=0.5, eps=0.0)[1], [0 - 0.5, -1])
    with pytest.raises(ValueError):
        igpo_advantages(ig, out, g, "both")


@FAST
@given(ragged(min_t=0, max_t=4), st.data())
def test_igpo_separate_structure(batch, data):
    ig, g = batch
    out = np.array(data.draw(st.lists(reward, min_size=len(ig), max_size=len(ig))))
    a = igpo_advantages(ig, out, g, "separate", gamma=1.0)
    assert [x.size for x in a] == [r.size + 1 for r in ig]
    if ig:
        # the last turn carries the group-normalised outcome; differences of consecutive turns are the z'd IG
        assert np.allclose([x[-1] for x in a], grpo(out, g), atol=1e-12)
        z_ig = normalize_turn_returns(ig, g, by="group")
        for x, z in zip(a, z_ig, strict=True):
            assert np.allclose(x[:-1] - x[1:], z, atol=1e-9)
        joint = igpo_advantages(ig, out, g, "joint")
        assert all(
            np.allclose(j, s, atol=1e-12)
            for j, s in zip(
                joint, siop_advantages([np.append(r, o) for r, o in zip(ig, out, strict=True)], g), strict=True
            )
        )


def test_siop_worked_example():
    # pooled over the group {1, 0, 0, 1}: mean 0.5, std 0.5 -> +-1; then reward-to-go
    a = siop_advantages([[1.0, 0.0], [0.0, 1.0], [3.0]], [0, 0, 1], eps=0.0)
    assert [x.tolist() for x in a] == [[0.0, -1.0], [0.0, 1.0], [0.0]]
    assert siop_advantages([[1.0, 0.0], [0.0, 1.0]], [0, 0], gamma=0.5, eps=0.0)[0].tolist() == [0.5, -1.0]


# --- A^2TGPO (docs/rewards.md, 'A^2TGPO') ----------------------------------------------------------------------


def test_a2tgpo_worked_example():
    rows, g = [[1.0, 4.0, 2.0], [3.0, 0.0]], ["q", "q"]
    # cells (q,0): {1, 3} -> -1, +1; (q,1): {4, 0} -> +1, -1; (q,2): {2} singleton -> 0
    assert [x.tolist() for x in turn_group_normalize(rows, g, eps=0.0)] == [[-1.0, 1.0, 0.0], [1.0, -1.0]]
    a = a2tgpo_advantages(rows, g, gamma=1.0, eps=0.0)
    assert np.allclose(a[0], [0.0 / math.sqrt(3), 1.0 / math.sqrt(2), 0.0]) and np.allclose(a[1], [0.0, -1.0])
    b = a2tgpo_advantages(rows, g, gamma=0.5, sqrt_scale=False, eps=0.0)
    assert b[0].tolist() == [-1.0 + 0.5, 1.0, 0.0] and b[1].tolist() == [0.5, -1.0]


@FAST
@given(ragged(max_n=10))
def test_turn_group_normalisation_per_prompt_turn_cell(batch):
    rows, g = batch
    z = turn_group_normalize(rows, g)
    assert [x.size for x in z] == [r.size for r in rows]
    cells = {}
    for i, r in enumerate(rows):
        for t in range(r.size):
            cells.setdefault((g[i], t), []).append((r[t], z[i][t]))
    for pairs in cells.values():
        x, zz = np.array(pairs).T
        check_zscored(x, zz)


@FAST
@given(ragged(), st.floats(0, 1))
def test_a2tgpo_is_scaled_reward_to_go_of_cell_z(batch, gamma):
    rows, g = batch
    a = a2tgpo_advantages(rows, g, gamma)
    for x, z in zip(a, turn_group_normalize(rows, g), strict=True):
        assert np.allclose(x * np.sqrt(np.arange(z.size, 0, -1)), turn_returns(z, gamma), atol=1e-9)


@FAST
@given(st.lists(st.floats(-30, 30), max_size=20), st.floats(0.01, 0.99))
def test_adaptive_clip_scale_bounds(r, beta):
    s = adaptive_clip_scale(np.array(r), beta)
    assert np.all((1 - beta < s) & (s < 1 + beta))
    ref = 1 + beta * (2 / (1 + np.exp(-np.array(r))) - 1)
    assert np.allclose(s, ref, atol=1e-12)
    assert adaptive_clip_scale([0.0], beta).tolist() == [1.0]


@FAST
@given(st.lists(st.floats(-1e300, 1e300), max_size=20), st.floats(0, 0.99))
def test_adaptive_clip_scale_closed_bounds_and_monotone(r, beta):
    x = np.sort(np.array(r))
    s = adaptive_clip_scale(x, beta)
    assert np.all((1 - beta <= s) & (s <= 1 + beta)) and np.all(np.diff(s) >= 0)
    with pytest.raises(ValueError):
        adaptive_clip_scale([0.0], 1.0)


# --- GiGPO (docs/rewards.md, 'GiGPO') --------------------------------------------------------------------------


def test_gigpo_worked_example():
    outcomes = [1.0, 0.0, 1.0]
    steps = [[0.0, 1.0], [0.0, 0.0, 0.0], [1.0]]
    anchors = [["s0", "s1"], ["s0", "s1", "s0"], ["s0"]]
    a = gigpo(outcomes, steps, anchors, ["q", "q", "p"], omega=0.5, gamma=0.5, eps=0.0)
    # A^E: group q {1, 0} -> +1, -1; group p singleton -> 0
    # G (gamma .5): [0.5, 1], [0, 0, 0], [1]. anchor (q,s0): {0.5, 0, 0} (s0 repeats within rollout 2);
    # (q,s1): {1, 0}; (p,s0): singleton -> 0
    x = np.array([0.5, 0.0, 0.0])
    zs0 = (x - x.mean()) / x.std()
    assert np.allclose(a[0], [1 + 0.5 * zs0[0], 1 + 0.5 * 1])
    assert np.allclose(a[1], [-1 + 0.5 * zs0[1], -1 + 0.5 * -1, -1 + 0.5 * zs0[2]])
    assert a[2].tolist() == [0.0]


@FAST
@given(turn_batches(), st.floats(0, 2))
def test_gigpo_singleton_anchors_and_omega0_reduce_to_grpo(batch, omega):
    out, g = batch.outcome_array, batch.group_ids
    expected = [np.full(r.size, e) for r, e in zip(batch.turn_rewards, grpo(out, g), strict=True)]
    unique = [[f"{i}/{t}" for t in range(r.size)] for i, r in enumerate(batch.turn_rewards)]
    for a, e in zip(gigpo(out, batch.turn_rewards, unique, g, omega=omega), expected, strict=True):
        assert np.array_equal(a, e)
    nones = [[None] * r.size for r in batch.turn_rewards]
    for a, e in zip(gigpo(out, batch.turn_rewards, nones, g, omega=omega), expected, strict=True):
        assert np.array_equal(a, e)
    for a, e in zip(gigpo(out, batch.turn_rewards, batch.anchors, g, omega=0.0), expected, strict=True):
        assert np.array_equal(a, e)


@FAST
@given(turn_batches(), st.permutations(range(8)))
def test_gigpo_permutation_invariant(batch, perm):
    order = [i for i in perm if i < len(batch.turn_rewards)]
    a = gigpo(batch.outcome_array, batch.turn_rewards, batch.anchors, batch.group_ids)
    p = batch.permuted(order)
    b = gigpo(p.outcome_array, p.turn_rewards, p.anchors, p.group_ids)
    assert all(np.array_equal(b[j], a[i]) for j, i in enumerate(order))
    # renaming groups or anchors consistently changes nothing either
    renamed = [[None if x is None else x + "'" for x in an] for an in batch.anchors]
    c = gigpo(batch.outcome_array, batch.turn_rewards, renamed, [f"g{k}" for k in batch.group_ids])
    assert all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


# --- MatchTIR, MAPO, UserRL ------------------------------------------------------------------------------------


def test_matchtir_dual_worked_example():
    rows, g = [[1.0, 0.5], [0.0, 1.0], [2.0]], ["q", "q", "p"]
    a = matchtir_dual(rows, g, gamma=0.9, eps=0.0)
    # trajectory sums {1.5, 1.0} -> +1, -1. returns (gamma .9): [1.45, 0.5], [0.9, 1.0]
    # cells (q,0): {1.45, 0.9} -> +1, -1; (q,1): {0.5, 1.0} -> -1, +1; group p singleton -> 0
    assert np.allclose(a[0], [(1 + 1) / 2, (1 - 1) / 2]) and np.allclose(a[1], [(-1 - 1) / 2, (-1 + 1) / 2])
    assert a[2].tolist() == [0.0]


def test_mapo_worked_example():
    rows, g = [[2.0, 0.0], [0.0], [4.0]], ["a", "a", "b"]
    x = np.array([2.0, 0.0, 0.0, 4.0])  # batch pool, flattened
    zb = (x - x.mean()) / x.std()
    a = mapo_mixed(rows, g, alpha=0.5, eps=0.0)
    # cells (a,0): {2, 0} -> +1, -1; (a,1) and (b,0) singletons -> 0
    assert np.allclose(a[0], [0.5 * 1 + 0.5 * zb[0], 0.5 * 0 + 0.5 * zb[1]])
    assert np.allclose(a[1], [0.5 * -1 + 0.5 * zb[2]]) and np.allclose(a[2], [0.5 * zb[3]])
    assert np.allclose(np.concatenate(mapo_mixed(rows, g, alpha=0.0, eps=0.0)), zb)
    with pytest.raises(ValueError):
        mapo_mixed(rows, g, alpha=1.5)


def test_userrl_credits_and_scores():
    r = [1.0, 0.0, 1.0]
    assert userrl_turn_credits(r, "equalized").tolist() == [1.0, 1.0, 1.0]
    assert np.allclose(userrl_turn_credits(r, "r2g", gamma=0.8), [1 + 0.64, 0.8, 1.0])
    assert np.allclose(
        userrl_turn_credits([0.0, 0.5, 1.0], "em"), [0.5, 0.5 + 0.5 * (1 - math.exp(-1)) / (1 - math.exp(-2)), 1.0]
    )
    assert userrl_trajectory_score(r, "sum") == 2.0
    assert userrl_trajectory_score(r, "R2G", gamma=0.8) == pytest.approx(1.64)
    assert userrl_trajectory_score([], "r2g") == 0.0
    with pytest.raises(ValueError):
        userrl_turn_credits(r, "naive")
    with pytest.raises(ValueError):
        userrl_trajectory_score(r, "mean")


def test_userrl_advantages_worked_example():
    rows, g = [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]], [0, 0]
    # Sum scores {2, 0} -> A = +1, -1
    eq = userrl_advantages(rows, g, "equalized", "sum", eps=0.0)
    assert [x.tolist() for x in eq] == [[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]
    # EM credits [1, .5, 1] with 1, 2, 1 tokens: token-weighted mean .75 -> A*c/.75; all-.5 credits -> A
    em = userrl_advantages(rows, g, "em", "sum", turn_lengths=[[1, 2, 1], [1, 1, 1]], eps=0.0)
    assert np.allclose(em[0], [4 / 3, 2 / 3, 4 / 3]) and np.allclose(em[1], [-1.0, -1.0, -1.0])
    # R2G credits of the failed rollout are all 0, so it gets 0 (UserRL's rule for a zero credit sum)
    r2g = userrl_advantages(rows, g, "r2g", "r2g", gamma=0.5, eps=0.0)
    assert np.allclose(r2g[0], np.array([1.25, 0.5, 1.0]) / (2.75 / 3)) and r2g[1].tolist() == [0.0, 0.0, 0.0]


@FAST
@given(turn_batches(), st.sampled_from(["equalized", "r2g", "em"]), st.sampled_from(["sum", "r2g"]))
def test_userrl_token_weighted_mean_is_the_trajectory_advantage(batch, turn_method, traj_method):
    rows, g, w = batch.turn_rewards, batch.group_ids, batch.turn_lengths
    a = userrl_advantages(rows, g, turn_method, traj_method, turn_lengths=w)
    scores = [userrl_trajectory_score(r, traj_method) for r in rows]
    for x, r, wi, ai in zip(a, rows, w, grpo(scores, g), strict=True):
        c = userrl_turn_credits(r, turn_method)
        nz = c != 0
        if nz.any() and (w_c := (wi[nz] * c[nz]).sum()) != 0:
            assert (wi[nz] * x[nz]).sum() / wi[nz].sum() == pytest.approx(
                ai, abs=1e-9 * max(1, abs(ai)) / min(1, abs(w_c))
            )
        else:
            assert np.all(x == 0)


# --- registry and the batch-level properties (determinism, equivariance) ---------------------------------------

NAMES = ["grpo", "dr_grpo", "rloo", "gtpo", "turn_ppo", "igpo", "siop", "a2tgpo", "gigpo", "gigpo_obs", "matchtir",
         "mapo", "userrl", "mt_grpo", "gopo", "lampo", "serl", "hiper", "dual_track", "faith"]  # fmt: skip
#: The estimators the generic property tests below draw batches for: faith reads binary support labels, which the
#: generated turn signals are not (tests/rewards/test_faith.py holds its properties).
GENERIC = [n for n in NAMES if n != "faith"]


def extra_fields(rows):
    """The fields lampo, serl, hiper and dual_track read, for a batch of ``rows`` (lists of turn rewards)."""
    return {"seq_logprobs": [-1.0] * len(rows), "criticality": [[0.5] * len(r) for r in rows],
            "segments": [list(range(len(r))) for r in rows], "phases": [["execution"] * len(r) for r in rows],
            "exploration_rewards": [0.0] * len(rows)}  # fmt: skip


def test_registry_names_and_unknown_name():
    assert sorted(ESTIMATORS) == sorted(NAMES)
    assert get_estimator("gigpo") is ESTIMATORS["gigpo"]
    with pytest.raises(KeyError, match="known"):
        get_estimator("ppo2")
    with pytest.raises(TypeError):
        ESTIMATORS["mine"] = lambda b: []  # read-only


def test_registry_is_collected_from_every_estimator_module():
    """``ESTIMATORS`` is exactly the union of the ``REGISTERED`` tuples of the package's modules: a module that
    registers an estimator but is missing from ``registry.MODULES`` fails here, as does a name registered twice."""
    modules = [importlib.import_module(f"{adv_mod.__name__}.{m.name}") for m in pkgutil.iter_modules(adv_mod.__path__)]
    registering = {m.__name__ for m in modules if hasattr(m, "REGISTERED")}
    assert registering == {m.__name__ for m in registry.MODULES}
    specs = [spec for m in registry.MODULES for spec in m.REGISTERED]
    assert all(isinstance(spec, EstimatorSpec) for spec in specs)
    assert [spec.name for spec in specs] == list(ESTIMATORS)
    assert all(ESTIMATORS[spec.name] is spec.fn for spec in specs)
    assert tuple(spec.name for spec in specs if spec.outcome_only) == OUTCOME_ESTIMATORS
    assert set(OUTCOME_ESTIMATORS) == {"grpo", "dr_grpo", "rloo", "mt_grpo", "gopo", "lampo", "serl", "dual_track",
                                       "faith"}  # fmt: skip
    twice = SimpleNamespace(__name__="twice", REGISTERED=(EstimatorSpec("grpo", ESTIMATORS["rloo"]),))
    with pytest.raises(ValueError, match=r"'grpo' is registered by \S+\.group and twice"):
        registry.collect_specs([*registry.MODULES, twice])


@pytest.mark.parametrize("name", GENERIC)
@settings(FAST, max_examples=25)
@given(batch=turn_batches(), perm=st.permutations(range(8)))
def test_every_estimator_finite_deterministic_and_permutation_equivariant(name, batch, perm):
    est = get_estimator(name)
    a = est(batch)
    assert [x.size for x in a] == batch.lengths
    assert all(np.isfinite(x).all() for x in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, est(batch), strict=True))
    order = [i for i in perm if i < len(batch.lengths)]
    b = est(batch.permuted(order))
    assert all(np.array_equal(b[j], a[i]) for j, i in enumerate(order))


@pytest.mark.parametrize("name", GENERIC)
def test_every_estimator_on_empty_batch_and_single_turns(name):
    est = get_estimator(name)
    assert est(TurnBatch([], [], anchors=[], values=[], observations=[], turn_signals=[], **extra_fields([]))) == []
    one = TurnBatch([[1.0], [0.0], [0.5]], ["a", "a", "b"], anchors=[["x"], ["x"], ["x"]], values=[[0.0]] * 3,
                    observations=[["o"]] * 3, turn_signals=[[1.0], [0.0], [True]],
                    **extra_fields([[1.0]] * 3))  # fmt: skip
    out = est(one)
    assert [x.size for x in out] == [1, 1, 1] and all(np.isfinite(x).all() for x in out)
    if name != "turn_ppo":  # critic-based: no group baseline
        assert out[2].tolist() == [0.0]  # singleton group
    tied = TurnBatch([[1.0], [1.0]], [0, 0], anchors=[["x"], ["x"]], values=[[1.0], [1.0]], observations=[["o"]] * 2,
                     turn_signals=[[1.0], [1.0]], **extra_fields([[1.0]] * 2))  # fmt: skip
    assert all(np.all(x == 0) for x in est(tied))


@pytest.mark.parametrize("name", [n for n in NAMES if n != "igpo"])
def test_estimators_accept_zero_turn_trajectories(name):
    b = TurnBatch([[], [1.0, 0.0], [0.0]], [0, 0, 0], anchors=[[], ["a", "b"], ["a"]], values=[[], [0, 0], [0]],
                  observations=[[], ["a", "b"], ["a"]], turn_signals=[[], [1, None], [0]],
                  **extra_fields([[], [1.0, 0.0], [0.0]]))  # fmt: skip
    out = get_estimator(name)(b)
    assert [x.size for x in out] == [0, 2, 1] and all(np.isfinite(x).all() for x in out)


def test_estimator_params_and_missing_inputs():
    b = TurnBatch([[0.0, 1.0], [0.0, 0.0]], [0, 0], anchors=[["s", "t"], ["s", "u"]])
    assert np.allclose(get_estimator("gigpo")(b, omega=0.0)[0], 1.0, atol=1e-5)
    assert get_estimator("dr_grpo")(b, norm_length=2)[0].tolist() == [0.25, 0.25]
    with pytest.raises(ValueError, match="values"):
        get_estimator("turn_ppo")(b)
    with pytest.raises(ValueError, match="anchors"):
        get_estimator("gigpo")(TurnBatch([[1.0]], [0]))
    with pytest.raises(ValueError, match="at least one turn"):
        get_estimator("igpo")(TurnBatch([[]], [0]))


def test_inputs_nan_raise_and_torch_accepted():
    with pytest.raises(ValueError, match="NaN"):
        grpo([1.0, float("nan")], [0, 0])
    with pytest.raises(ValueError, match="NaN"):
        TurnBatch([[1.0, float("inf")]], [0])
    with pytest.raises(ValueError):
        grpo([1.0, 2.0], [0])
    torch = pytest.importorskip("torch")
    r = torch.tensor([1.0, 0.0, 0.5], requires_grad=True)
    assert np.array_equal(grpo(r, torch.tensor([0, 0, 1])), grpo([1.0, 0.0, 0.5], [0, 0, 1]))
    rows = [torch.tensor([1.0, 0.0]), torch.tensor([0.0])]
    got = siop_advantages(rows, np.array(["a", "a"]), eps=0.0)
    want = siop_advantages([[1.0, 0.0], [0.0]], ["a", "a"], eps=0.0)
    assert all(np.array_equal(x, y) for x, y in zip(got, want, strict=True))
    assert np.allclose(want[0], [math.sqrt(0.5), -math.sqrt(0.5)]) and np.allclose(want[1], [-math.sqrt(0.5)])
    out = broadcast_to_tokens(torch.tensor([1.0]), [(0, 2)], 3, loss_mask=torch.tensor([1, 0, 1]))
    assert out.tolist() == [1.0, 0.0, 0.0]


def test_turn_batch_from_trajectories():
    def traj(seed, rewards, anchors, group=None):  # anchors: the reset's, then one after each step
        t = Trajectory("agentgym/X-v0", seed, "task", "a", [], {"anchor": anchors[0]}, group_id=group)
        for k, (r, an) in enumerate(zip(rewards, anchors[1:], strict=True)):
            info = {"reward_components": {"outcome": r} if k == len(rewards) - 1 else {"ig": 0.1}, "anchor": an}
            t.turns.append(Turn("x", [], r, False, False, info, token_spans=[(0, 2 + k)]))
        return t

    b = TurnBatch.from_trajectories(
        [traj(0, [0.0, 1.0], ["s0", "s", None]), traj(0, [0.0], ["s0", "s"]), traj(1, [1.0], ["s0", "s"], "g")]
    )
    assert b.group_ids == [("agentgym/X-v0", "task", 0), ("agentgym/X-v0", "task", 0), "g"]
    assert b.anchors == [["s0", "s"], ["s0"], ["s0"]]  # each turn keyed by the state its action was taken in
    assert [x.tolist() for x in b.turn_lengths] == [[2.0, 3.0], [2.0], [2.0]]
    assert b.outcome_array.tolist() == [1.0, 0.0, 1.0]
    ig = TurnBatch.from_trajectories(
        [traj(0, [0.0, 1.0], ["s0", "s", None])], reward_component="ig", outcome_component="outcome"
    )
    assert ig.turn_rewards[0].tolist() == [0.1, 0.0] and ig.outcome_array.tolist() == [1.0]
