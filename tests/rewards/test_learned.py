"""SPA's progress estimator (agentgym.rewards.learned): the worked example, the fit, Chain's verified correctness,
grounding, determinism, the replay, pickling and the trunk features."""

from __future__ import annotations

import importlib.util
import math
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from agentgym.contract.trajectory import Trajectory, Turn
from agentgym.rewards import catalogue, learned
from agentgym.rewards.learned import HashedTurnFeatures, ProgressEstimator, turn_context

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "learned_signal_quality.py"


def _bench():
    spec = importlib.util.spec_from_file_location("learned_signal_quality", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _bench()


def episode(
    actions: list[str], outcome: float, valid: list[bool] | None = None, prompt: str = "", reply: str = ""
) -> Trajectory:
    """One episode: the outcome paid on the last turn, ``valid`` the env's action_valid per turn, ``reply`` the env's
    text after each turn (empty: the turns' features are the actions' words only)."""
    valid = valid or [True] * len(actions)
    turns = [
        Turn(a, [{"role": "user", "content": reply}], 0.0, False, False,
             {"reward_components": {"outcome": outcome if k == len(actions) - 1 else 0.0}, "action_valid": ok})
        for k, (a, ok) in enumerate(zip(actions, valid, strict=True))
    ]  # fmt: skip
    return Trajectory("e", 0, "t", "a", [{"role": "user", "content": prompt}], {}, turns)


def unigram_estimator(**knobs) -> ProgressEstimator:
    """Features: the action's words only (empty prompts, no crossed pairs, no bias), so the weights are readable."""
    return ProgressEstimator(ngrams=(1,), cross=False, bias=False, **knobs)


def test_worked_example_one_turn_episodes():
    # x_yes and x_no are single (signed) features; ridge on the sum of squares: (w - 1)^2 + ridge * w^2 is least at
    # w = 1 / (1 + ridge), so c(yes) = 1/2 at ridge 1 and c(no) = 0; a valid turn adds alpha.
    spa = unigram_estimator(ridge=1.0, alpha=0.25)
    yes, no = episode(["yes"], 1.0), episode(["no"], 0.0, valid=[False])
    scores = spa([yes, no])
    assert scores[0].rewards == pytest.approx([0.75]) and scores[1].rewards == pytest.approx([0.0])
    assert scores[0].extras == {"progress": pytest.approx([0.5]), "grounding": [1.0]}
    assert scores[1].extras == {"progress": pytest.approx([0.0]), "grounding": [0.0]}


def test_worked_example_two_turn_credit():
    # Episodes "a b" (R = 1) and "a c" (R = 0): features a, b, c. With ridge -> 0 the fit interpolates:
    # w_a + w_b = 1 and w_a + w_c = 0; the minimum-norm solution is w_a = 1/3, w_b = 2/3, w_c = -1/3.
    spa = unigram_estimator(ridge=1e-9, alpha=0.0)
    good, bad = spa([episode(["a", "b"], 1.0), episode(["a", "c"], 0.0)])
    assert good.rewards == pytest.approx([1 / 3, 2 / 3], abs=1e-6)
    assert bad.rewards == pytest.approx([1 / 3, -1 / 3], abs=1e-6)
    assert sum(good.rewards) == pytest.approx(1.0, abs=1e-6) and sum(bad.rewards) == pytest.approx(0.0, abs=1e-6)


def test_hashed_features_cross_observation_and_action():
    phi = HashedTurnFeatures(dim=1 << 16, ngrams=(1, 2))
    assert "x:signal red|red" in phi.keys("Signal: red.", "<answer> red </answer>")
    assert "x:signal red|blue" not in phi.keys("Signal: red.", "<answer> red </answer>")
    traj = episode(["x", "y"], 0.0, prompt="start", reply="next")
    assert turn_context(traj, 0) == "start" and turn_context(traj, 1) == "next"


@pytest.mark.parametrize("model", ["linear", "mlp"])
def test_the_mse_of_the_summed_contributions_falls(model):
    trajs = bench.play("agentgym/Chain-v0", 4, 64, p=0.75, seed=0)
    spa = ProgressEstimator(model=model, steps=100)
    spa.score_groups([trajs])
    fit = spa.last_fit
    assert fit is not None and fit.episodes == 64 and fit.turns == 256
    assert fit.mse_after < 0.5 * fit.mse_before
    if model == "mlp":
        assert len(fit.curve) == 100
        assert np.mean(fit.curve[-10:]) < 0.5 * np.mean(fit.curve[:10])


@pytest.mark.parametrize(("horizon", "floor"), [(4, 0.5), (8, 0.4)])
def test_progress_correlates_with_chain_correctness(horizon, floor):
    """c_t against the verified info["correct"] of a p = 0.75 agent, 512 episodes (bench: H=4 0.82, H=8 0.51; the
    broadcast outcome gets 0.39 and 0.17). At H=8 success is 0.1 and the estimator falls below 0.5."""
    trajs = bench.play("agentgym/Chain-v0", horizon, 512, p=0.75, seed=0)
    scores = ProgressEstimator().score_groups([trajs])[0]
    q = bench.quality(trajs, [s.extras["progress"] for s in scores])
    broadcast = bench.quality(trajs, [[float(t.success)] * len(t.turns) for t in trajs])
    assert q["corr"] > floor and q["corr"] > broadcast["corr"] + 0.2
    assert q["auc"] > 0.8


def test_invalid_actions_get_no_grounding():
    trajs = bench.play("agentgym/Chain-v0", 4, 64, p=0.75, invalid=0.3, seed=0)
    spa = ProgressEstimator(alpha=0.5)
    scores = spa.score_groups([trajs])[0]
    kinds = set()
    for traj, s in zip(trajs, scores, strict=True):
        for turn, r, c, g in zip(traj.turns, s.rewards, s.extras["progress"], s.extras["grounding"], strict=True):
            kinds.add(turn.action_valid)
            assert g == (1.0 if turn.action_valid else 0.0)
            assert r == pytest.approx(c + 0.5 * g)
    assert kinds == {True, False}


@pytest.mark.parametrize("model", ["linear", "mlp"])
def test_same_data_same_contributions(model):
    trajs = bench.play("agentgym/Chain-v0", 4, 32, p=0.75, seed=3)
    first = ProgressEstimator(model=model, steps=20).score_groups([trajs[:16], trajs[16:]])
    again = ProgressEstimator(model=model, steps=20).score_groups([trajs[:16], trajs[16:]])
    assert [[s.rewards for s in g] for g in first] == [[s.rewards for s in g] for g in again]


def test_replay_keeps_a_bounded_number_of_batches_and_pickles():
    trajs = bench.play("agentgym/Chain-v0", 2, 30, p=0.75, seed=0)
    spa = ProgressEstimator(replay=1)
    for k, expected in enumerate([10, 20, 20]):
        spa.score_groups([trajs[10 * k : 10 * k + 10]])
        assert spa.last_fit is not None and spa.last_fit.episodes == expected
    copy = pickle.loads(pickle.dumps(spa))
    assert copy.scorer is None and copy.last_fit == spa.last_fit
    assert copy.turn_features(trajs[0]) @ copy._weights["w"] == pytest.approx(
        spa.turn_features(trajs[0]) @ spa._weights["w"]
    )


def test_state_dict_resumes_the_replay():
    trajs = bench.play("agentgym/Chain-v0", 2, 30, p=0.75, seed=0)
    spa, resumed = ProgressEstimator(replay=1), ProgressEstimator(replay=1)
    spa.score_groups([trajs[:10]])
    resumed.load_state_dict(spa.state_dict())
    first, second = spa.score_groups([trajs[10:20]]), resumed.score_groups([trajs[10:20]])
    assert [s.rewards for s in first[0]] == [s.rewards for s in second[0]]
    assert resumed.last_fit is not None and resumed.last_fit.episodes == 20


def test_card_and_knobs():
    card = {c.name: c for c in catalogue.collect([learned])}["spa"]
    assert card.name == "spa" and card.system == "SPA" and card.paper is not None
    assert card.paper.arxiv == "2505.20732" and card.load() is ProgressEstimator
    knobs = card.knobs()
    assert knobs["alpha"] == 0.1 and knobs["features"] == "hashed" and "scorer" not in knobs
    assert card.train["scorer"] == "spa"


@pytest.mark.parametrize("bad", [{"features": "words"}, {"model": "tree"}, {"ridge": 0.0}, {"replay": -1}])
def test_bad_knobs_are_refused(bad):
    with pytest.raises(ValueError):
        ProgressEstimator(**bad)


def test_trunk_needs_the_policy():
    with pytest.raises(ValueError, match="needs the policy"):
        ProgressEstimator(features="trunk").turn_features(episode(["a"], 1.0, prompt="go"))


@pytest.mark.slow
def test_trunk_features_are_the_hidden_state_at_the_turns_last_token():
    import torch

    from agentgym.rewards.answer_scoring import LocalAnswerScorer, render_trajectory
    from agentgym.tools.tiny_model import build_tiny_model

    model, tok = build_tiny_model(seed=0)
    traj = bench.play("agentgym/Chain-v0", 3, 1, p=0.5, seed=0)[0]
    spa = ProgressEstimator(scorer=LocalAnswerScorer(model, tok), features="trunk")
    x = spa.turn_features(traj)
    assert x.shape == (3, model.config.hidden_size + 1) and (x[:, -1] == 1.0).all()
    rendered = render_trajectory(traj, tok)
    for t, spans in enumerate(rendered.turns):  # the state sees nothing after the turn: a prefix gives the same row
        prefix = torch.tensor([rendered.ids[: spans.action[1]]])
        with torch.no_grad():
            last = model(input_ids=prefix, output_hidden_states=True).hidden_states[-1][0, -1]
        assert x[t, :-1] == pytest.approx(last.double().numpy(), abs=1e-4)
    scores = spa.score_groups([[traj, *bench.play("agentgym/Chain-v0", 3, 3, p=0.5, seed=1)]])[0]
    assert len(scores) == 4 and all(np.isfinite(s.rewards).all() for s in scores)


# --- LaRe ------------------------------------------------------------------------------------------------------

SUCCESS_LATENT = """\
def latent(state):
    task, stage, flag = state.split(":")
    return [1.0 if stage == "4" and flag == "ok" else 0.0]
"""
CRASHES = "def latent(state):\n    return [1 / 0]\n"
RANDOM = "import random\n\ndef latent(state):\n    return [random.random()]\n"
STATEFUL = "calls = []\n\ndef latent(state):\n    calls.append(state)\n    return [float(len(calls))]\n"
RAGGED = "def latent(state):\n    return [0.0] * (len(state) % 2 + 1)\n"


@pytest.fixture(scope="module")
def code_box():
    from agentgym.tools.sandbox import SubprocessSandbox

    return SubprocessSandbox()


@pytest.mark.parametrize(
    ("source", "reason"),
    [(CRASHES, "ZeroDivisionError"), (RANDOM, "non-deterministic"), (STATEFUL, "non-deterministic"),
     (RAGGED, "widths"), ("def latent(state):\n    return [float('nan')]\n", "non-finite"),
     ("while True:\n    pass\n", "crashed (timeout)")],
)  # fmt: skip
def test_crashing_or_nondeterministic_candidates_are_rejected(source, reason, code_box):
    check = learned.check_candidate(source, ["0:1:ok", "0:2:ok", "0:3:x"], code_box, timeout=2.0)
    assert not check.ok and reason in check.reason


def test_candidate_code_runs_only_in_the_sandbox(code_box, tmp_path):
    marker = tmp_path / "ran"
    source = f"open({str(marker)!r}, 'w').write('x')\n\ndef latent(state):\n    return [1.0]\n"
    check = learned.check_candidate(source, ["a"], code_box)
    assert not marker.exists()  # the sandbox's file system is read-only outside its work dir
    assert not check.ok and "crashed" in check.reason


def test_agreement_keeps_candidates_that_give_the_same_latents(code_box):
    twin = SUCCESS_LATENT.replace("1.0 if", "1.0 if True and")
    other = "def latent(state):\n    return [2.0]\n"
    checks = learned.select_candidates([SUCCESS_LATENT, twin, other, CRASHES], ["0:4:ok", "0:1:x"], code_box,
                                       min_agree=2)  # fmt: skip
    assert [c.ok for c in checks] == [True, True, True, False]
    assert [c.kept for c in checks] == [True, True, False, False]
    assert checks[0].values == ((1.0,), (0.0,))


def test_lare_sums_to_the_outcome():
    """latent = 1[stage 4 reached with every choice right], so sum_t latent_t = R exactly: r_theta fits
    w * 1[success] + 4 * b = R with w -> 1, b -> 0 as the ridge vanishes."""
    trajs = bench.play("agentgym/Chain-v0", 4, 64, p=0.75, seed=0)
    lare = learned.LatentReward(candidates=(SUCCESS_LATENT, CRASHES, RANDOM), ridge=1e-6)
    scores = lare.score_groups([trajs[:32], trajs[32:]])
    assert [c.kept for c in lare.checks] == [True, False, False]
    flat = [s for group in scores for s in group]
    assert {t.success for t in trajs} == {True, False}
    for traj, s in zip(trajs, flat, strict=True):
        assert sum(s.rewards) == pytest.approx(float(traj.success), abs=1e-3)
    again = lare.score_groups([trajs[:8]])  # later batches reuse the kept candidate (one code_box run)
    assert [sum(s.rewards) for s in again[0]] == pytest.approx([float(t.success) for t in trajs[:8]], abs=1e-3)


def test_a_kept_candidate_failing_on_later_states_invalidates_only_those_trajectories():
    # kept on a first batch without a wrong third step; later, the trajectories wrong by step 3 crash it
    fragile = SUCCESS_LATENT.replace("def latent(state):\n", "def latent(state):\n    assert ':3:x' not in state\n")
    assert fragile != SUCCESS_LATENT
    trajs = bench.play("agentgym/Chain-v0", 4, 64, p=0.75, seed=0)
    crashes = [any(t.info["anchor"].endswith(":3:x") for t in traj.turns) for traj in trajs]
    lare = learned.LatentReward(candidates=(fragile,), ridge=1e-6)
    lare.score_groups([[t for t, c in zip(trajs, crashes, strict=True) if not c][:8]])
    assert [c.kept for c in lare.checks] == [True]
    scores = lare.score_groups([trajs[:16]])[0]
    assert 0 < sum(crashes[:16]) < 16
    for s, crashed in zip(scores, crashes[:16], strict=True):
        assert all(math.isnan(r) for r in s.rewards) == crashed and s.all_valid == (not crashed)
        assert ("AssertionError" in s.extras["latent_error"]) if crashed else "latent_error" not in s.extras
    assert lare.last_fit is not None and lare.last_fit.episodes == 8 + 16 - sum(crashes[:16])


def test_lare_without_a_survivor_says_why():
    trajs = bench.play("agentgym/Chain-v0", 2, 4, p=0.75, seed=0)
    with pytest.raises(ValueError, match="ZeroDivisionError"):
        learned.LatentReward(candidates=(CRASHES,)).score_groups([trajs])
    with pytest.raises(ValueError, match="candidates"):
        learned.LatentReward()


def test_lare_asks_a_model_for_candidates():
    from rule_judge import serve_rule_judge

    from agentgym.tools.llm import LLMClient

    reply = f"Here is one:\n```python\n{SUCCESS_LATENT}```"
    trajs = bench.play("agentgym/Chain-v0", 4, 16, p=0.75, seed=0)
    with serve_rule_judge(lambda system, user: reply) as judge:
        client = LLMClient(judge.url, api_key_env=None, max_retries=0)
        try:
            lare = learned.LatentReward(client=client, generate=2)
            lare.score_groups([trajs])
        finally:
            client.close()
    assert [c.source for c in lare.checks] == [SUCCESS_LATENT] * 2 and all(c.kept for c in lare.checks)
    assert ":1:ok" in judge.requests[0]  # the prompt shows states


def test_lare_card():
    cards = {c.name: c for c in catalogue.collect([learned])}
    card = cards["lare"]
    assert card.paper is not None and card.paper.arxiv == "2412.11120" and card.load() is learned.LatentReward
    assert card.train["scorer_kwargs"]["candidates"] == [learned.CHAIN_LATENT]
    knobs = card.knobs()
    assert knobs["candidates"] == () and knobs["state_key"] == "anchor" and knobs["alpha"] == 0.0
    assert "client" not in knobs
