"""IGPO, TIPS, SIOP and InfoPO turn scorers on real SearchQA trajectories and the real tiny model (docs/rewards.md,
'Post-episode turn scorers': TIPS and IGPO telescope; determinism, permutation equivariance, empty inputs), plus the
remote scorer's failure marking through a real loopback server. No mocks: the constant-log-prob scorer below is a
complete (if uninformative) ``AnswerScorer``.
"""

import copy
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym

import agentgym  # noqa: F401 - registers the envs
from agentgym.contract.agent import Agent
from agentgym.rewards.answer_scoring import (
    AnswerScorer,
    LocalAnswerScorer,
    RemoteAnswerScorer,
    Suffix,
    encode_suffix,
    render_trajectory,
)
from agentgym.rewards.base import ScorerError, annotate
from agentgym.rewards.information import (
    CounterfactualInformationGain,
    EmbeddingClusterer,
    InformationGain,
    InformationPotential,
    SelfInducedOutcomePotential,
    StringClusterer,
    final_answer,
    infopo_fuse,
    observation_support,
)
from agentgym.running.runner import run, run_episode
from agentgym.tools.tiny_model import build_tiny_model

ENV = "agentgym/SearchQA-v0"


class ConstantScorer(AnswerScorer):
    """Every scored token gets the same log-prob, whatever the context."""

    def __init__(self, value: float = -1.7):
        self.value = value

    def logprobs(self, prefix, cuts, suffixes):
        return [np.full(s.n_scored, self.value) for s in suffixes]


class MemoScorer(AnswerScorer):
    """Memoises another scorer's answers (so hypothesis can replay many scales over one scoring pass)."""

    def __init__(self, inner: AnswerScorer):
        self.inner = inner
        self.memo: dict = {}
        self.tokenizer = getattr(inner, "tokenizer", None)

    def logprobs(self, prefix, cuts, suffixes):
        key = (tuple(prefix), tuple(cuts), tuple(suffixes))
        if key not in self.memo:
            self.memo[key] = self.inner.logprobs(prefix, cuts, suffixes)
        return [x.copy() for x in self.memo[key]]


class Scripted(Agent):
    """Plays a fixed list of actions (then repeats the last one)."""

    name = "scripted"

    def __init__(self, actions):
        super().__init__()
        self.actions = list(actions)
        self.turn = 0

    def reset(self, *, seed=None):
        super().reset(seed=seed)
        self.turn = 0

    def act(self, messages, info):
        self.turn += 1
        return self.actions[min(self.turn, len(self.actions)) - 1]


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model(seed=0)


@pytest.fixture(scope="module")
def local(tiny):
    return MemoScorer(LocalAnswerScorer(*tiny))


@pytest.fixture(scope="module")
def trajectories():
    trajs = []
    for agent in ("oracle", "heuristic", "random"):
        trajs += run(ENV, agent, episodes=4, seed=0, env_kwargs={"dataset": "tiny"}, progress=False)
    return trajs


@pytest.fixture(scope="module")
def group():
    """A GRPO-style group on one task (task_index 0, gold 'Trolkend'): four rollouts that answer, two right (only the
    second found the answer in a search), two wrong ('Port Dababrem' is in its rollout's observations, 'Nowhere' is
    not), and one that runs out of turns without answering."""
    env = gym.make(ENV, dataset="tiny", max_turns=3)
    scripts = [
        ["<answer> Trolkend </answer>"],
        ["<search> Krubrar Zemgozis born birthplace </search>", "<answer> trolkend. </answer>"],
        ["<search> Barnogra Motors founded founder </search>", "<answer> Port Dababrem </answer>"],
        ["<answer> Nowhere </answer>"],
        ["<search> Barnogra </search>", "<search> Motors </search>", "<search> founder </search>"],
    ]
    trajs = [run_episode(env, Scripted(s), seed=0, options={"task_index": 0}, env_id=ENV) for s in scripts]
    env.close()
    assert {t.reset_info["gold"]["answers"][0] for t in trajs} == {"Trolkend"}
    return trajs


def igpo_reference(tiny, traj, answer_prompt, mode, context="observation"):
    """IGPO computed the slow way: one forward per context (the naive scorer), by hand."""
    model, tok = tiny
    r = render_trajectory(traj, tok)
    gold = traj.reset_info["gold"]["answers"][0]
    suffix = encode_suffix(tok, [(r.generation_prompt + answer_prompt, False), (gold, True)])
    cuts = r.cuts(context)[: len(traj.turns)]
    means = [
        float(np.mean(x)) for x in LocalAnswerScorer(model, method="naive").logprobs(r.ids, cuts, [suffix] * len(cuts))
    ]
    series = np.exp(means) if mode == "prob_diff" else np.array(means)
    return [series[t] - series[t - 1] for t in range(1, len(traj.turns))] + [0.0], np.exp(means)


# ------------------------------------------------------------------------------------------- IGPO


@pytest.mark.parametrize("mode", ["prob_diff", "log_prob_diff"])
def test_igpo_matches_per_turn_reference_and_telescopes(tiny, local, trajectories, mode):
    scorer = InformationGain(local, mode=mode)
    scores = scorer(trajectories)
    assert {len(t.turns) for t in trajectories} >= {1, 2, 3, 5}
    for traj, s in zip(trajectories, scores, strict=True):
        T = len(traj.turns)
        ref, p_ref = igpo_reference(tiny, traj, scorer.answer_prompt, mode)
        assert np.allclose(s.rewards, ref, atol=1e-4)
        assert s.all_valid and all(math.isfinite(r) for r in s.rewards)
        p = np.array(s.extras["p"])
        assert len(p) == T and np.allclose(p, p_ref, atol=1e-4)
        assert s.rewards[-1] == 0.0
        if mode == "prob_diff":  # telescoping: sum of IG = p_{T-1} - p_0
            assert math.isclose(sum(s.rewards), p[T - 1] - p[0], abs_tol=1e-12)


def test_igpo_constant_scorer_gives_zero_everywhere(tiny, trajectories):
    for mode in ("prob_diff", "log_prob_diff"):
        for s in InformationGain(ConstantScorer(), tokenizer=tiny[1], mode=mode)(trajectories):
            assert s.rewards == [0.0] * len(s.rewards) and s.all_valid


def test_igpo_final_reward_f1_and_format_penalty(tiny, group):
    scores = InformationGain(ConstantScorer(), tokenizer=tiny[1], final_reward="f1")(group)
    assert [s.rewards[-1] for s in scores] == [1.0, 1.0, 0.0, 0.0, -2.0]


def test_igpo_is_deterministic_and_permutation_equivariant(local, trajectories):
    scorer = InformationGain(local)
    first = scorer(trajectories[:6])
    again = scorer(trajectories[:6])
    perm = [3, 0, 5, 1, 4, 2]
    permuted = scorer([trajectories[i] for i in perm])
    assert [s.rewards for s in first] == [s.rewards for s in again]
    assert [s.rewards for s in permuted] == [first[i].rewards for i in perm]


def test_annotate_adds_igpo_to_the_env_rewards(local, trajectories):
    trajs = copy.deepcopy(trajectories[:4])
    before = [t.total_reward for t in trajs]
    scores = InformationGain(local)(trajs)
    annotate(trajs, scores)
    for t, b, s in zip(trajs, before, scores, strict=True):
        assert math.isclose(t.total_reward, b + sum(s.rewards), abs_tol=1e-12)
        assert all("info_gain" in turn.info["reward_components"] for turn in t.turns)


# ------------------------------------------------------------------------------------------- TIPS


@settings(max_examples=40, deadline=None, derandomize=True)
@given(c=st.floats(0.001, 5.0), w=st.floats(0.1, 3.0))
def test_tips_sum_is_outcome_minus_initial_potential(local, trajectories, c, w):
    """Property 1: after annotate, each trajectory's rewards sum to R - c*w*Phi_0, for any c."""
    trajs = copy.deepcopy(trajectories)
    R = [t.total_reward for t in trajs]
    scores = InformationPotential(local, scale=c, weight=w)(trajs)
    annotate(trajs, scores)
    for t, r, s in zip(trajs, R, scores, strict=True):
        phi = s.extras["phi"]
        assert len(phi) == len(t.turns) and all(math.isfinite(x) for x in phi)
        assert math.isclose(t.total_reward, r - c * w * phi[0], rel_tol=1e-9, abs_tol=1e-9)


def test_tips_potential_is_logsumexp_over_aliases(tiny, local, trajectories):
    _, tok = tiny
    multi = next(t for t in trajectories if len(t.reset_info["gold"]["answers"]) > 1)
    tips = InformationPotential(local)
    (phi,) = tips.potentials([multi])
    r = render_trajectory(multi, tok)
    cuts = r.cuts()[: len(multi.turns)]
    per_alias = []
    for a in multi.reset_info["gold"]["answers"]:
        suffix = encode_suffix(tok, [(r.generation_prompt, False), (f"<answer>{a}</answer>", True)])
        per_alias.append([np.mean(x) for x in local.logprobs(r.ids, cuts, [suffix] * len(cuts))])
    expected = np.log(np.exp(np.array(per_alias)).sum(axis=0))
    assert np.allclose(phi, expected, atol=1e-9)
    unterminated = InformationPotential(local, terminal_zero=False)
    (phi_full,) = unterminated.potentials([multi])
    assert len(phi_full) == len(multi.turns) + 1 and np.allclose(phi_full[:-1], phi)
    s = unterminated([multi])[0]
    assert math.isclose(sum(s.rewards), 0.02 * (phi_full[-1] - phi_full[0]), abs_tol=1e-12)


def test_tips_adaptive_scale(local, trajectories):
    tips = InformationPotential(local, scale="adaptive")
    groups = [trajectories[:4], trajectories[4:]]
    phis = [p for g in groups for p in tips.potentials(g)]
    diffs = np.concatenate([np.abs(np.diff(p)) for p in phis])
    expected = float(np.clip(0.11 / diffs.mean(), 0.02, 0.2))
    assert math.isclose(tips.fit_scale(phis), expected)
    out = tips.score_groups(groups)
    assert {s.extras["scale"] for g in out for s in g} == {expected}
    assert tips.fit_scale([np.array([1.0])]) == 0.2 and tips.fit_scale([]) == 0.2


# ------------------------------------------------------------------------------------------- SIOP


def test_siop_clusters_reliability_and_rewards(local, group):
    siop = SelfInducedOutcomePotential(local)
    labels, q, refs = siop.reliability(group)
    assert labels == [0, 0, 1, 2, None]
    assert refs == {0: ["Trolkend", "trolkend."], 1: ["Port Dababrem"], 2: ["Nowhere"]}
    # evidence: 'Trolkend' is in rollout 1's observations, not in rollout 0's (no search); 'Port Dababrem' is in
    # rollout 2's; 'Nowhere' nowhere
    support = [observation_support(final_answer(t), t) for t in group[:4]]
    assert support == [0.0, 1.0, 1.0, 0.0]
    K = 5
    weights = {0: 2 / K * math.exp(0.5), 1: 1 / K * math.exp(1.0), 2: 1 / K * math.exp(0.0)}
    total = sum(weights.values())
    assert all(math.isclose(q[c], weights[c] / total) for c in weights)
    scores = siop(group)
    for s, traj in zip(scores, group, strict=True):
        assert len(s.rewards) == len(traj.turns) and s.all_valid
    assert scores[4].rewards == [0.0, 0.0, 0.0] and scores[4].extras["cluster"] is None
    for i in range(4):
        phat = np.array(scores[i].extras["phat"])
        logs = np.log(phat + siop.eps)
        expected = q[labels[i]] * np.diff(logs)
        expected[-1] += 0.5 * q[labels[i]]
        assert np.allclose(scores[i].rewards, expected, atol=1e-12)


def test_siop_with_gold_reference_reduces_to_igpo_log_diff(local, trajectories):
    for traj in trajectories:
        if final_answer(traj) is None or len(traj.turns) < 2:
            continue
        siop = SelfInducedOutcomePotential(
            local, lam=1.0, eps=0.0, references_fn=lambda t, g: [t.reset_info["gold"]["answers"][0]]
        )
        (s,) = siop([traj])  # a group of one: one cluster, q = 1
        assert s.extras["q"] == 1.0
        igpo = InformationGain(local, mode="log_prob_diff", context="action", answer_prompt=siop.answer_prompt)
        (g,) = igpo([traj])
        assert np.allclose(s.rewards[:-1], g.rewards[:-1], atol=1e-5)  # float32 passes of different layout


def test_clusterers():
    assert StringClusterer().cluster(["The Ovra", "ovra.", "Mira", "an ovra"]) == [0, 0, 1, 0]

    def trigram_embed(texts):
        out = np.zeros((len(texts), 64))
        for i, t in enumerate(texts):
            padded = f"  {t} "
            for j in range(len(padded) - 2):
                out[i, sum(map(ord, padded[j : j + 3])) % 64] += 1.0
        return out

    labels = EmbeddingClusterer(trigram_embed, threshold=0.8).cluster(["Trolkend", "trolkend city", "Mira", "TROLKEND"])
    assert labels[0] == labels[3] and labels[2] != labels[0]
    assert EmbeddingClusterer(trigram_embed).cluster([]) == []


# ------------------------------------------------------------------------------------------- InfoPO


def test_infopo_matches_counterfactual_forwards(tiny, local, trajectories):
    model, tok = tiny
    naive = LocalAnswerScorer(model, method="naive")
    scorer = CounterfactualInformationGain(local)
    dot = tok(".", add_special_tokens=False)["input_ids"][-1]
    for traj, s in zip(trajectories, scorer(trajectories), strict=True):
        T = len(traj.turns)
        assert len(s.rewards) == T and s.rewards[-1] == 0.0 and s.all_valid
        r = render_trajectory(traj, tok)
        for t in range(T - 1):
            (o0, o1), (a0, a1) = r.turns[t].observation_content[0], r.turns[t + 1].action_content
            factual = list(r.ids[:a1])
            counter = factual[:o0] + [dot] * (o1 - o0) + factual[o1:]
            mask = (False,) * (a0 - o0) + (True,) * (a1 - a0)
            f = naive.logprobs(factual, [o0], [Suffix(tuple(factual[o0:]), mask)])[0]
            c = naive.logprobs(counter, [o0], [Suffix(tuple(counter[o0:]), mask)])[0]
            assert math.isclose(s.rewards[t], float(np.mean(f - c)), abs_tol=1e-4)


def test_infopo_fuse():
    a_out = np.array([1.0, -1.0, 0.5, 0.0])
    a_int = np.array([0.1, 0.3, 0.2, 9.0])
    mask = np.array([1, 1, 1, 0])
    fused = infopo_fuse(a_out, a_int, outcome_std=0.0, beta=2.0, mask=mask)
    z = (a_int[:3] - a_int[:3].mean()) / (a_int[:3].std() + 1e-6)
    assert np.allclose(fused[:3], a_out[:3] + 2.0 * 0.5 * z) and fused[3] == a_out[3]
    # outcomes that already separate the group close the gate
    assert np.allclose(infopo_fuse(a_out, a_int, outcome_std=1.0, beta=2.0), a_out, atol=1e-6)
    assert np.allclose(infopo_fuse(a_out, a_int, 0.0, beta=0.0), a_out)
    with pytest.raises(ValueError):
        infopo_fuse(a_out, a_int[:2], 0.0, 1.0)


# ------------------------------------------------------------------------------------------- edge cases


def test_single_turn_and_empty_trajectories_have_no_nan(tiny, local, trajectories):
    one = [t for t in trajectories if len(t.turns) == 1]
    assert one
    empty = copy.deepcopy(one[0])
    empty.turns = []
    for scorer in (
        InformationGain(local),
        InformationPotential(local),
        SelfInducedOutcomePotential(local),
        CounterfactualInformationGain(local),
    ):
        scores = scorer([*one, empty])
        assert [len(s.rewards) for s in scores] == [1] * len(one) + [0]
        assert all(math.isfinite(r) for s in scores for r in s.rewards) and all(s.all_valid for s in scores)


@pytest.mark.slow
def test_remote_failure_marks_turns_invalid_not_zero(tiny, trajectories):
    fastapi = pytest.importorskip("fastapi")  # noqa: F841
    from agentgym.tools.openai_server import create_app
    from agentgym.tools.serving import BackgroundServer

    model, tok = tiny
    srv = BackgroundServer(create_app(model, tok, model_name="tiny")).start()
    url = srv.url + "/v1"
    trajs = [t for t in trajectories if len(t.turns) >= 3][:2]
    opts = {"max_retries": 0, "timeout": 10}
    with RemoteAnswerScorer(url, "tiny", tokenizer=tok, client_kwargs=opts) as remote:
        live = InformationGain(remote)(trajs)
    srv.stop()
    expected = InformationGain(LocalAnswerScorer(model, tok))(trajs)
    for a, b in zip(live, expected, strict=True):
        assert np.allclose(a.rewards, b.rewards, atol=1e-4)
    with RemoteAnswerScorer(url, "tiny", tokenizer=tok, on_error="mark", client_kwargs=opts) as remote:
        marked = InformationGain(remote)(trajs)
        with pytest.raises(ScorerError):
            InformationPotential(RemoteAnswerScorer(remote.client, tokenizer=tok))(trajs)
    for s in marked:
        assert all(math.isnan(r) for r in s.rewards[:-1]) and s.valid == [False] * (len(s.rewards) - 1) + [True]
        assert 0.0 not in s.rewards[:-1]
    target = copy.deepcopy(trajs)
    with pytest.raises(ScorerError):
        annotate(target, marked)
    annotate(target, marked, strict=False)
    assert all("info_gain" in turn.info["invalid_components"] for turn in target[0].turns[:-1])
