"""The trainer's pluggable reward parts and trainer-side methods: any catalogue scorer (a judge on a loopback server,
InfoPO's fusion), reward_wrappers with cross-batch tables, A^2TGPO's per-token clip, MT-GRPO on the tool envs, S2D's
shaping schedule and EPO's entropy band, each against numbers worked by hand."""

from __future__ import annotations

import json
import math
from typing import Any

import gymnasium
import numpy as np
import pytest
import torch
from rule_judge import serve_rule_judge

from agentgym.baselines.components import FALLBACK_SCORERS, build_scorer, table_items, wrapper_specs
from agentgym.baselines.config import TrainConfig, load_config
from agentgym.baselines.credit import (
    EnvMaker,
    clip_scales,
    compute_advantages,
    infopo_advantages,
    scale_components,
    update_tables,
)
from agentgym.baselines.guards import RUN_FILES, check_endpoints
from agentgym.baselines.methods import get_method
from agentgym.baselines.rollout import Rollout
from agentgym.baselines.trainer import main, train
from agentgym.baselines.trainer_methods import MethodState
from agentgym.baselines.update import clip_bounds, entropy_band_penalty, forward_tokens, minibatch_loss
from agentgym.rewards.wrappers import CountTable, NoveltyBonus

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/baselines/conftest.py

PROGRESS_ID = "agentgym_test/ProgressToy-v0"


class ProgressToy(gymnasium.Env):
    """Three steps; info["progress"] is 0.4 at reset, then 0.6, 0.9 (ends at step 3, reward = outcome 1.0); the
    anchor is the step count."""

    observation_space = gymnasium.spaces.Text(64)
    action_space = gymnasium.spaces.Text(4096)
    PROGRESS = (0.4, 0.6, 0.9, 1.0)

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.t = 0
        return [{"role": "user", "content": "go"}], {"progress": self.PROGRESS[0], "anchor": "s0", "task_id": "p"}

    def step(self, action: str):
        self.t += 1
        done = self.t >= 3
        reward = 1.0 if done else 0.0
        info = {"progress": self.PROGRESS[self.t], "anchor": f"s{self.t}", "reward_components": {"outcome": reward},
                "action_valid": True}  # fmt: skip
        if done:
            info["success"] = True
        return ([] if done else [{"role": "user", "content": f"step {self.t}"}]), reward, done, False, info


if PROGRESS_ID not in gymnasium.registry:
    gymnasium.register(id=PROGRESS_ID, entry_point=ProgressToy, disable_env_checker=True)


WORDS_ID = "agentgym_test/WordsToy-v0"


class WordsToy(gymnasium.Env):
    """Two turns; each step's outcome reward = distinct words in the action / 10 (siblings' rewards differ)."""

    observation_space = gymnasium.spaces.Text(64)
    action_space = gymnasium.spaces.Text(4096)

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.t = 0
        return [{"role": "user", "content": f"say words {seed}"}], {"task_id": f"w{seed}", "anchor": "start"}

    def step(self, action: str):
        self.t += 1
        reward = min(len(set(action.split())), 10) / 10.0
        done = self.t >= 2
        info = {"anchor": f"t{self.t}", "reward_components": {"outcome": reward}, "success": done and reward >= 0.5}
        return ([] if done else [{"role": "user", "content": "more"}]), reward, done, False, info


if WORDS_ID not in gymnasium.registry:
    gymnasium.register(id=WORDS_ID, entry_point=WordsToy, disable_env_checker=True)


def config_of(**kw: Any) -> TrainConfig:
    base: dict[str, Any] = {"env_id": PROGRESS_ID, "env_kwargs": {}, "batch_tasks": 1, "group_size": 2, "max_turns": 3,
                            "max_new_tokens": 4, "minibatch_size": 2, "iterations": 1, "plot": False,
                            "progress": False}  # fmt: skip
    return TrainConfig.from_dict({**base, **kw})


def test_method_arguments_of_the_wrong_type_are_refused_before_the_run():
    """Estimator, scorer, wrapper and table arguments are judged against their annotations (as env arguments are),
    and a table is built once at the start, so a bad value is a one-line error, not a traceback mid-run."""
    cases = [
        ({"estimator": "gigpo", "estimator_kwargs": {"omega": [[1]]}}, "estimator 'gigpo': omega must be a number"),
        ({"scorer": "igpo", "scorer_kwargs": {"mode": "weird"}}, "mode must be one of 'prob_diff', 'log_prob_diff'"),
        ({"reward_wrappers": [{"name": "rnd", "coef": "lots"}]}, "reward wrapper 'rnd': coef must be a number"),
        ({"reward_wrappers": [{"name": "rnd", "table": {"dim": 10**20}}]}, r"RNDTable \(the table of 'rnd'\): .* do n"),
    ]
    for settings, message in cases:
        with pytest.raises(ValueError, match=message):
            config_of(**settings)
    config_of(estimator="gigpo", estimator_kwargs={"omega": 1})  # an int is a number
    config_of(reward_wrappers=[{"name": "rnd", "coef": 0.5, "table": {"dim": 64}}])


def play(env: gymnasium.Env, group: int = 0, seed: int = 0) -> Rollout:
    """A rollout record of one episode played with fixed actions (no model): what the trainer records per step."""
    r = Rollout(prompt_ids=[1], group_id=group, seed=seed)
    obs, info = env.reset(seed=seed)
    r.initial_observation, r.reset_info = list(obs), dict(info)
    done = False
    while not done:
        n = len(r.response_ids)
        r.response_ids += [5, 6]
        r.loss_mask += [1, 1]
        r.rollout_logprobs += [0.0, 0.0]
        r.turn_spans.append((n, n + 2))
        r.anchors.append((r.infos[-1] if r.infos else r.reset_info).get("anchor"))
        obs, reward, term, trunc, info = env.step(f"act {len(r.actions)}")
        r.actions.append(f"act {len(r.actions)}")
        r.turn_rewards.append(float(reward))
        r.reward_components.append(dict(info.get("reward_components", {})))
        r.observations.append(list(obs))
        r.infos.append(dict(info))
        done = term or trunc
    r.terminated = True
    return r


# ------------------------------------------------------------------------------------------------------------
# 1. scorers by name


def test_scorer_names_cards_and_import_paths_resolve_and_bad_ones_fail_at_config_time():
    for name in ("info_gain", "siop", "infopo", "tool_match"):
        assert config_of(scorer=name, estimator="gtpo").scorer == name
    path = "agentgym.rewards.process:ComponentScorer"
    config = config_of(scorer=path, scorer_kwargs={"source": "info", "difference": True})
    scorer = build_scorer(path, config.scorer_kwargs, None, None)  # it needs no model
    assert type(scorer).__name__ == "ComponentScorer" and scorer.difference
    with pytest.raises(ValueError, match="did you mean 'info_gain'"):
        config_of(scorer="info_gian")
    with pytest.raises(ValueError, match="not a TurnScorer subclass"):
        config_of(scorer="agentgym.rewards.wrappers:StepCost")
    with pytest.raises(ValueError, match="cannot import"):
        config_of(scorer="agentgym.nowhere:Thing")
    with pytest.raises(ValueError, match=r"takes no \['zz'\]"):
        config_of(scorer="siop", scorer_kwargs={"zz": 1})
    with pytest.raises(ValueError, match="needs scorer_kwargs\\['client'\\]"):
        config_of(scorer="judge")
    with pytest.raises(ValueError, match="LLMClient takes no"):
        config_of(scorer="judge", scorer_kwargs={"client": {"base_url": "http://127.0.0.1:1/v1", "bogus": 1}})
    with pytest.raises(ValueError, match="filled by the trainer"):
        config_of(scorer="info_gain", scorer_kwargs={"tokenizer": "x"})
    assert set(FALLBACK_SCORERS) >= {"info_gain", "info_potential", "siop"}


@pytest.mark.slow
def test_a_scorer_by_import_path_runs_in_the_trainer(tmp_path):
    """ComponentScorer(info "progress", per-turn differences): 0.6 - 0.4, 0.9 - 0.6, 1.0 - 0.9 = 0.2, 0.3, 0.1 on
    every episode, mean 0.2."""
    config = config_of(scorer="agentgym.rewards.process:ComponentScorer", estimator="gtpo",
                       scorer_kwargs={"source": "info", "difference": True}, out_dir=str(tmp_path / "run"))  # fmt: skip
    m = train(config)["last"]
    assert m["scorer_invalid_frac"] == 0.0 and m["scorer_reward_mean"] == pytest.approx(0.2)


@pytest.mark.slow
def test_a_judge_scorer_grades_the_trainers_rollouts_over_a_loopback_endpoint(tmp_path):
    """JudgeScorer through the trainer: scorer="judge" with the endpoint in scorer_kwargs; a rule judge on a real
    loopback server gives every turn 7/10, so the scorer's mean reward is 0.7 exactly."""
    with serve_rule_judge(lambda system, user: "Fine. Score: 7/10") as server:
        client = {"base_url": server.url, "api_key_env": None, "max_retries": 0, "model": "rule"}
        config = config_of(scorer="judge", scorer_kwargs={"client": client}, estimator="gtpo",
                           out_dir=str(tmp_path / "judge"))  # fmt: skip
        check_endpoints(config)  # the start check: the endpoint answers
        m = train(config)["last"]
    with pytest.raises(ValueError, match="does not answer"):  # the server is gone
        check_endpoints(config)
    assert m["scorer_invalid_frac"] == 0.0 and m["scorer_reward_mean"] == pytest.approx(0.7)
    assert len(server.requests) == 2 * 3  # two episodes of three turns, one request per turn


def test_infopo_fusion_on_a_hand_example():
    """Two rollouts of one group, tied outcomes (std 0: gate sigmoid(0) = 0.5), A_out = 0, I = [1, 0] and [3, 0]:
    A_int flattened [1, 0, 3, 0], mean 1, std sqrt((0 + 1 + 4 + 1) / 4) = sqrt(1.5) = 1.224745;
    z = [0, -0.816497, 1.632993, -0.816497]; A = 0 + beta(2) * 0.5 * z = z."""
    config = config_of(scorer="infopo", scorer_coef=2.0)
    assert config.scorer_fusion_mode == "infopo"
    rs = [Rollout(prompt_ids=[1], group_id=0, scored_rewards=[1.0, 0.0]),
          Rollout(prompt_ids=[1], group_id=0, scored_rewards=[3.0, 0.0])]  # fmt: skip
    out = infopo_advantages([np.zeros(2), np.zeros(2)], rs, [[0.0, 1.0], [0.0, 1.0]], config)
    z = 1 / math.sqrt(1.5)
    np.testing.assert_allclose(np.concatenate(out), [0.0, -z, 2 * z, -z], atol=1e-5)  # infopo_fuse's eps 1e-6
    # spread outcomes (std 0.5 with tau 0.05: gate sigmoid(-10) = 4.5e-5): A stays A_out to 1e-4
    spread = infopo_advantages([np.ones(2), -np.ones(2)], rs, [[0.0, 1.0], [0.0, 0.0]], config)
    np.testing.assert_allclose(np.concatenate(spread), [1, 1, -1, -1], atol=2e-4)
    assert config_of(scorer="infopo", scorer_fusion="add").scorer_fusion_mode == "add"
    assert config_of(scorer="siop").scorer_fusion_mode == "add"
    with pytest.raises(ValueError, match="critic-free"):
        config_of(scorer="infopo", algo="ppo")
    with pytest.raises(ValueError, match="dynamic_sampling"):
        config_of(scorer="infopo", dynamic_sampling=True)


@pytest.mark.slow
def test_infopo_trains_end_to_end_and_its_scores_never_join_the_turn_rewards(tmp_path):
    config = load_config("tiny", overrides={"out_dir": str(tmp_path / "infopo"), "iterations": 1, "max_turns": 2,
                                            "max_new_tokens": 4, "batch_tasks": 1, "group_size": 3,
                                            "scorer": "infopo", "estimator": "grpo", "plot": False,
                                            "progress": False})  # fmt: skip
    m = train(config)["last"]
    assert m["scorer_invalid_frac"] == 0.0 and np.isfinite(m["loss"])


# ------------------------------------------------------------------------------------------------------------
# 2. reward wrappers and their tables


def test_reward_wrappers_are_checked_at_config_time():
    with pytest.raises(ValueError, match="did you mean 'novelty'"):
        config_of(reward_wrappers=[{"name": "novelt"}])
    with pytest.raises(ValueError, match=r"takes no \['bta'\]"):
        config_of(reward_wrappers=[{"name": "novelty", "bta": 0.1}])
    with pytest.raises(ValueError, match="takes no"):
        config_of(reward_wrappers=[{"name": "novelty", "table": {"nope": 1}}])
    with pytest.raises(ValueError, match="keeps no table"):
        config_of(reward_wrappers=[{"name": "step_cost", "table": {}}])
    with pytest.raises(ValueError, match="needs \\['potential'\\]"):
        config_of(reward_wrappers=[{"name": "potential_shaping"}])
    with pytest.raises(ValueError, match=r"not a gymnasium\.Wrapper"):
        config_of(reward_wrappers=[{"name": "agentgym.rewards.wrappers:CountTable"}])
    with pytest.raises(ValueError, match="need envs in this process"):
        config_of(reward_wrappers=[{"name": "novelty"}], env_pool="ray")
    with pytest.raises(ValueError, match="leaves out"):
        config_of(reward_wrappers=[{"name": "step_cost"}], reward_components=["outcome"])


def test_env_maker_wraps_in_order_and_every_env_shares_one_table_updated_per_iteration():
    """NoveltyBonus(beta 0.1) then StepCost(0.01): a fresh table gives 0.1 - 0.01 a step; after one update with
    the 2 x 3 anchors of two episodes (s1, s2, s3 twice each) a revisited state gives 0.1 / sqrt(2 + 1)."""
    config = config_of(reward_wrappers=[{"name": "novelty", "beta": 0.1, "table": {"decay": 1.0}},
                                        {"name": "step_cost", "cost": 0.01, "component": "cost"}])  # fmt: skip
    assert config.counted_components == ("outcome", "novelty", "cost")
    maker = EnvMaker.of(config)
    a, b = maker(), maker()
    assert isinstance(a, gymnasium.Wrapper) and isinstance(a.env, NoveltyBonus)
    assert a.env.counts is b.env.counts is maker.tables[0] and isinstance(maker.tables[0], CountTable)
    rs = [play(a), play(b, seed=1)]
    assert rs[0].reward_components[0] == pytest.approx({"outcome": 0.0, "novelty": 0.1, "cost": -0.01})
    assert rs[0].turn_rewards[0] == pytest.approx(0.09)
    assert update_tables(config, maker.tables, rs) == {"table0_items": 6.0}
    assert maker.tables[0].counts == {"s1": 2.0, "s2": 2.0, "s3": 2.0}
    again = play(a)
    assert again.reward_components[0]["novelty"] == pytest.approx(0.1 / math.sqrt(3))
    assert not EnvMaker.of(config, shaped=False).wrappers  # evaluation plays the env unshaped


def test_table_items_follow_the_tables_declared_kind():
    config = config_of(reward_wrappers=[{"name": "novelty"}])
    spec = wrapper_specs(config.reward_wrappers)[0]
    r = play(EnvMaker.of(config)())
    assert table_items(spec, [r]) == ["s1", "s2", "s3"]

    class ObsTable(CountTable):
        items = "observations"

    class TransTable(CountTable):
        items = "transitions"

    for cls, want in [(ObsTable, ["step 1", "step 2", ""]),
                      (TransTable, [("go", "act 0", "step 1"), ("step 1", "act 1", "step 2"),
                                    ("step 2", "act 2", "")])]:  # fmt: skip
        s = type(spec)(spec.name, spec.cls, spec.kwargs, spec.table_param, cls, {}, spec.component)
        assert table_items(s, [r]) == want


def test_rnd_and_maxinforl_tables_read_observations_and_transitions_and_learn_from_them():
    """RNDBonus's table reads the observations each step reached, DisagreementBonus's the (obs, action, next obs)
    triples; after one update on two episodes the bonus of the same first step falls."""
    config = config_of(reward_wrappers=[{"name": "rnd", "coef": 1.0}, {"name": "maxinforl", "coef": 1.0}])
    maker = EnvMaker.of(config)
    specs = wrapper_specs(config.reward_wrappers)
    rs = [play(maker()), play(maker(), seed=1)]
    assert table_items(specs[0], rs[:1]) == ["step 1", "step 2", ""]
    assert table_items(specs[1], rs[:1]) == [("go", "act 0", "step 1"), ("step 1", "act 1", "step 2"),
                                             ("step 2", "act 2", "")]  # fmt: skip
    before = rs[0].reward_components[0]
    assert update_tables(config, maker.tables, rs) == {"table0_items": 6.0, "table1_items": 6.0}
    after = play(maker()).reward_components[0]
    assert after["rnd"] < before["rnd"] and after["disagreement"] < before["disagreement"]


def test_method_state_round_trips_its_tables_and_entropy_ema(tmp_path):
    assert "methods.pt" in RUN_FILES  # --overwrite removes it with the rest of a run
    table = CountTable()
    table.update(["a", "a"])
    state = MethodState((table, None), entropy_ema=1.25)
    state.save(tmp_path / "methods.pt")
    back = MethodState.load(tmp_path / "methods.pt")
    assert back.tables[0].counts == {"a": 2.0} and back.tables[1] is None and back.entropy_ema == 1.25
    # the EMA: 1.25 -> 0.9 * 1.25 + 0.1 * 2.25 = 1.35
    assert back.observe_entropy(2.25, 0.9) == pytest.approx(1.35)


# ------------------------------------------------------------------------------------------------------------
# 3. A^2TGPO's adaptive clip


def test_clip_scales_on_a_hand_example():
    """Two one-turn rollouts of a group with rewards 1 and 0: r~ = (r - 0.5) / 0.5 = +-1 (eps 0), the scale is
    1 +- 0.3 * tanh(0.5) = 1 +- 0.138635, on the turn's tokens; 1 on the others."""
    config = config_of(estimator="a2tgpo", adaptive_clip_beta=0.3, estimator_kwargs={"eps": 0.0},
                       reward_components="all")  # fmt: skip
    rs = []
    for reward in (1.0, 0.0):
        r = Rollout(prompt_ids=[1], response_ids=[5, 6, 7], loss_mask=[1, 1, 0], turn_spans=[(0, 2)],
                    turn_rewards=[reward], group_id=0)  # fmt: skip
        rs.append(r)
    s = 0.3 * math.tanh(0.5)
    scales = clip_scales(rs, config)
    assert scales is not None
    np.testing.assert_allclose(scales[0], [1 + s, 1 + s, 1.0], atol=1e-12)
    np.testing.assert_allclose(scales[1], [1 - s, 1 - s, 1.0], atol=1e-12)
    assert clip_scales(rs, config_of(estimator="a2tgpo", reward_components="all")) is None
    with pytest.raises(ValueError, match="a2tgpo"):
        config_of(estimator="gtpo", adaptive_clip_beta=0.3)


def test_clip_bounds_at_scale_one_are_the_scalar_bounds_bit_for_bit():
    ratio = torch.linspace(0.5, 1.5, 101)
    low, high = clip_bounds(ratio, torch.ones(101), 0.2, 0.28)
    assert torch.equal(torch.clamp(ratio, low, high), torch.clamp(ratio, 1.0 - 0.2, 1.0 + 0.28))


def _loss_inputs(adv: list[float], ratios: list[float]) -> tuple[Any, TrainConfig, dict[str, torch.Tensor]]:
    """The tiny model on one 5-token row whose last len(adv) tokens are sampled; old log-probs set so that each
    sampled token's ratio pi / pi_old is exactly the given one."""
    from agentgym.tools.tiny_model import build_tiny_model

    model, _ = build_tiny_model(0)
    config = config_of(kl_coef=0.0, eps_low=0.2, eps_high=0.2)
    ids = torch.tensor([[3, 8, 13, 21, 34]])
    mask = torch.tensor([[0.0] * (5 - len(adv)) + [1.0] * len(adv)])
    with torch.no_grad():
        lp, _, _ = forward_tokens(model, ids, torch.ones_like(ids), 1.0, token_mask=mask > 0)
    log_r = torch.zeros(1, 5)
    log_r[0, 5 - len(adv) :] = torch.log(torch.tensor(ratios, dtype=torch.float64)).float()
    mb = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": mask,
          "old_logprobs": (lp - log_r) * mask, "advantages": torch.tensor([[0.0] * (5 - len(adv)) + adv])}  # fmt: skip
    return model, config, mb


def test_a_token_with_clip_scale_s_is_clipped_at_one_plus_minus_eps_s():
    """eps 0.2. Token 1: A = +1, ratio 1.5, scale 0.5 -> clip at 1 + 0.1: pg = max(-1.5, -1.1) = -1.1.
    Token 2: A = -1, ratio 0.5, scale 2 -> clip at 1 - 0.4: pg = max(0.5, 0.6) = 0.6. Token-mean: -0.25.
    With scale 1 both clip at 1.2 / 0.8: (-1.2 + 0.8) / 2 = -0.2."""
    model, config, mb = _loss_inputs([1.0, -1.0], [1.5, 0.5])
    base = minibatch_loss(model, None, mb, config)
    ones = minibatch_loss(model, None, {**mb, "clip_scale": torch.ones(1, 5)}, config)
    assert torch.equal(base["loss"], ones["loss"]) and torch.equal(base["pg_loss"], ones["pg_loss"])
    assert float(base["pg_loss"]) == pytest.approx(-0.2, abs=1e-5)
    scaled = minibatch_loss(model, None, {**mb, "clip_scale": torch.tensor([[1.0, 1.0, 1.0, 0.5, 2.0]])}, config)
    assert float(scaled["pg_loss"]) == pytest.approx(-0.25, abs=1e-5)
    assert float(scaled["clip_frac"]) == 1.0  # both clipped: 1.5 > 1.1 with A > 0, 0.5 < 0.6 with A < 0
    wide = minibatch_loss(model, None, {**mb, "clip_scale": torch.tensor([[1.0, 1.0, 1.0, 3.0, 3.0]])}, config)
    assert float(wide["clip_frac"]) == 0.0  # 1 +- 0.6 holds both ratios: pg = (-1.5 + 0.5) / 2
    assert float(wide["pg_loss"]) == pytest.approx(-0.5, abs=1e-5)


@pytest.mark.slow
def test_a2tgpo_with_its_adaptive_clip_trains_and_reports_its_clip_scales(tmp_path):
    """On WordsToy the siblings' turn rewards differ, so r~ != 0 and the clip scales leave 1 (inside 1 +- 0.3)."""
    config = config_of(env_id=WORDS_ID, estimator="a2tgpo", adaptive_clip_beta=0.3, group_size=4, max_turns=2,
                       out_dir=str(tmp_path / "run"))  # fmt: skip
    m = train(config)["last"]
    assert 0.0 < m["clip_scale_maxdev"] < 0.3 and 0.7 < m["clip_scale_mean"] < 1.3 and np.isfinite(m["loss"])


# ------------------------------------------------------------------------------------------------------------
# 5. S2D


@pytest.mark.parametrize("gamma", [1.0, 0.9])
@pytest.mark.parametrize("c", [0.0, 0.5, 1.0])
def test_scaled_potential_shaping_sums_to_minus_c_phi_s0(gamma, c):
    """Phi = progress: 0.4 at reset, then 0.6, 0.9, terminal 0. gamma 1: F = 0.2, 0.3, -0.9, sum -0.4.
    gamma 0.9: F = 0.9*0.6 - 0.4 = 0.14, 0.9*0.9 - 0.6 = 0.21, 0 - 0.9 = -0.9; 0.14 + 0.9*0.21 + 0.81*(-0.9) = -0.4.
    Scaled by c: -0.4 c, whatever gamma."""
    config = config_of(reward_wrappers=[{"name": "potential_shaping", "potential": "progress", "gamma": gamma}],
                       shaping_schedule={"component": "shaping", "start": 3})  # fmt: skip
    r = play(EnvMaker.of(config)())
    scale_components([r], {"shaping": c})
    f = [comps["shaping"] for comps in r.reward_components]
    assert math.fsum(gamma**t * x for t, x in enumerate(f)) == pytest.approx(-c * 0.4, abs=1e-12)
    assert [x - comps["outcome"] for x, comps in zip(r.turn_rewards, r.reward_components, strict=True)] == \
        pytest.approx(f)  # fmt: skip


def test_shaping_schedule_step_and_ramp():
    """step at 3: c = 0, 0, 1, 1; ramp over 4 from 2, final 0.8: 0, 0.2, 0.4, 0.6, 0.8, 0.8."""
    shaping = [{"name": "potential_shaping", "potential": "progress"}]
    step = config_of(reward_wrappers=shaping, shaping_schedule={"start": 3})
    assert [step.shaping_scale(k) for k in range(1, 5)] == [0.0, 0.0, 1.0, 1.0]
    ramp = config_of(reward_wrappers=shaping, shaping_schedule={"start": 2, "ramp": 4, "final": 0.8})
    assert [ramp.shaping_scale(k) for k in range(1, 7)] == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 0.8])
    with pytest.raises(ValueError, match="no reward component"):
        config_of(shaping_schedule={"start": 1})
    with pytest.raises(ValueError, match="start"):
        config_of(reward_wrappers=shaping, shaping_schedule={"start": -1})


def test_grpo_advantages_do_not_change_with_the_shaping_weight_but_gtpo_ones_do():
    """A group of two episodes from the same s_0 (Phi(s_0) = 0.4 shared): shaped returns R - c*0.4 shift together,
    so GRPO's z-scores are the same for every c; GTPO's per-turn returns-to-go differ with c."""

    def advantages(estimator: str, c: float) -> np.ndarray:
        config = config_of(reward_wrappers=[{"name": "potential_shaping", "potential": "progress"},
                                            {"name": "step_cost", "cost": 0.1}],
                           estimator=estimator, reward_components="all")  # fmt: skip
        maker = EnvMaker.of(config)
        rs = [play(maker(), seed=0), play(maker(), seed=0)]
        rs[1].turn_rewards[-1] -= 1.0  # the second episode fails: outcomes differ
        rs[1].reward_components[-1]["outcome"] -= 1.0
        scale_components(rs, {"shaping": c})
        return np.concatenate(compute_advantages(rs, config)[0])

    np.testing.assert_allclose(advantages("grpo", 0.0), advantages("grpo", 1.0), atol=1e-12)
    assert not np.allclose(advantages("gtpo", 0.0), advantages("gtpo", 1.0))


# ------------------------------------------------------------------------------------------------------------
# 6. EPO


def test_entropy_band_penalty_on_hand_numbers():
    """kappa 2, delta 0.1: H 1.5 around 1.0 -> 2 * (0.5 - 0.1) = 0.8; H 0.95 is inside the band -> 0 (and no
    gradient); no reference yet -> 0."""
    h = torch.tensor(1.5, requires_grad=True)
    assert float(entropy_band_penalty(h, 1.0, 2.0, 0.1).detach()) == pytest.approx(0.8)
    inside = torch.tensor(0.95, requires_grad=True)
    entropy_band_penalty(inside, 1.0, 2.0, 0.1).backward()
    assert inside.grad is not None and float(inside.grad) == 0.0
    assert float(entropy_band_penalty(h, None, 2.0, 0.1).detach()) == 0.0


def test_epo_off_gives_a_bit_identical_loss_and_on_adds_the_band():
    model, config, mb = _loss_inputs([1.0, -1.0], [1.2, 0.9])
    config.ent_coef = 0.01
    base = minibatch_loss(model, None, mb, config)
    flat = minibatch_loss(model, None, mb, config, ent_coef=config.ent_coef_at(1), entropy_ref=0.0)
    assert torch.equal(base["loss"], flat["loss"]) and "entropy_penalty" not in flat
    config.entropy_kappa, config.entropy_delta = 2.0, 0.1
    h = float(base["entropy"])
    banded = minibatch_loss(model, None, mb, config, entropy_ref=h - 0.5)  # |H - ref| = 0.5 -> 2 * 0.4 = 0.8
    assert float(banded["entropy_penalty"]) == pytest.approx(0.8, abs=1e-5)
    assert float((banded["loss"] - base["loss"]).detach()) == pytest.approx(0.8, abs=1e-5)


def test_ent_coef_phase_schedule():
    """10 iterations, phase 0.5, 0.02 -> 0: 0.02 through iteration 5, then 0.02 * (1 - (k - 5) / 5)."""
    c = config_of(ent_coef=0.02, ent_coef_final=0.0, ent_coef_phase=0.5, iterations=10)
    assert [c.ent_coef_at(k) for k in (1, 5, 6, 8, 10)] == pytest.approx([0.02, 0.02, 0.016, 0.008, 0.0])
    assert config_of(ent_coef=0.02).ent_coef_at(7) == 0.02
    with pytest.raises(ValueError, match="entropy_ema"):
        config_of(entropy_ema=1.0)


# ------------------------------------------------------------------------------------------------------------
# cards and smoke runs


def test_trainer_method_cards_are_in_the_catalogue_and_their_recipes_build_configs():
    for name in ("a2tgpo_clip", "s2d", "epo"):
        card = get_method(name)
        assert card.kind == "trainer" and card.status == "built" and card.load() is not None
        config_of(**dict(card.train), **({"progress_key": None} if name == "s2d" else {}))


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id, extra",
    [("agentgym/ToolUse-v0", []), ("agentgym/CodeExec-v0", []),
     ("agentgym/BFCL-v0", ["--set", "max_total_tokens=12288", "--set", "batch_tasks=1"])],
)  # fmt: skip
def test_mt_grpo_starts_on_the_tool_envs_with_their_action_valid_signal(tmp_path, env_id, extra):
    argv = ["--preset", "tiny", "--set", f"env_id={env_id}", "--set", "env_kwargs={}", "--set", "estimator=mt_grpo",
            "--set", "iterations=1", "--set", "progress=false", "--set", "plot=false", "--out-dir",
            str(tmp_path / "run"), *extra]  # fmt: skip
    assert main(argv) == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id, env_kwargs",
    [("agentgym/Sokoban-v0", "{}"), ("agentgym/SQL-v0", "{}"), ("agentgym/Shop-v0", '{"catalogue": "tiny"}')],
)
@pytest.mark.parametrize("estimator", ["mt_grpo", "gigpo"])
def test_turn_credit_trains_on_the_seed_papers_benchmarks(tmp_path, env_id, env_kwargs, estimator):
    """mt_grpo (each env's TURN_SIGNALS entry) and gigpo (its anchors) train on Sokoban-v0, SQL-v0 and Shop-v0: a
    short SFT warm start on the env's oracle, two iterations, no collapse."""
    out = tmp_path / "run"
    sets = [f"env_id={env_id}", f"env_kwargs={env_kwargs}", f"estimator={estimator}", "iterations=2", "sft_steps=40",
            "sft_lr=0.003", "progress=false", "plot=false"]  # fmt: skip
    argv = ["--preset", "tiny", "--out-dir", str(out), *(a for x in sets for a in ("--set", x))]
    assert main(argv) == 0
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["iteration"] == 2 and not any(line.get("collapsed") for line in lines)


@pytest.mark.parametrize("env_id", ["agentgym/ToolUse-v0", "agentgym/BFCL-v0", "agentgym/CodeExec-v0"])
def test_the_tool_envs_report_action_valid_on_every_step(env_id):
    """A malformed action is invalid (0), and TURN_SIGNALS reads the key the env reports."""
    from agentgym.rewards.advantages import TURN_SIGNALS

    env = gymnasium.make(env_id)
    _, reset_info = env.reset(seed=0)
    infos = [env.step("no tool call here <tool_call>{oops")[-1]]
    assert all(isinstance(i.get("action_valid"), bool) for i in infos)
    assert TURN_SIGNALS[env_id].read(reset_info, infos) == [0.0]


# ------------------------------------------------------------------------------------------------------------
# 7. AIRS


def test_airs_tries_every_arm_once_then_follows_the_paying_arm():
    """Three arms: the first three steps try 0, 1, 2. A stub where arm 1's update raises the extrinsic return by
    0.1 (plus noise 0.02) and the others by 0 (same noise): after 30 warm-up steps arm 1 is chosen >= 90%."""
    from agentgym.baselines.airs import AIRSController

    ctl = AIRSController(3, c=0.1, window=10)
    rng = np.random.default_rng(0)
    ret, chosen = 0.0, []
    for _ in range(300):
        arm = ctl.step(ret)
        chosen.append(arm)
        ret += (0.1 if arm == 1 else 0.0) + rng.normal(0.0, 0.02)
    assert chosen[:3] == [0, 1, 2]
    assert np.mean(np.array(chosen[30:]) == 1) >= 0.9
    with pytest.raises(ValueError, match="finite"):
        ctl.step(math.nan)


def test_airs_scores_on_hand_numbers():
    """Gains: arm 0 [0.2], arm 1 [0.0, 0.3]; N = 3. Arm 0: 0.2 + 0.1 * sqrt(2 ln 3 / 1) = 0.2 + 0.148230 = 0.348230;
    arm 1 (window 1: last gain 0.3): 0.3 + 0.1 * sqrt(2 ln 3 / 2) = 0.3 + 0.104815 = 0.404815."""
    from agentgym.baselines.airs import AIRSController

    ctl = AIRSController(2, c=0.1, window=1, gains=[[0.2], [0.0, 0.3]])
    assert ctl.score(0) == pytest.approx(0.348230, abs=1e-6) and ctl.score(1) == pytest.approx(0.404815, abs=1e-6)


def test_airs_config_and_extrinsic_return():
    two = [{"name": "step_cost", "cost": 0.1, "component": "a"}, {"name": "step_cost", "cost": 0.2, "component": "b"}]
    config = config_of(reward_wrappers=two, airs_arms=["a", "b"])
    r = play(EnvMaker.of(config)())  # three steps: -0.1 - 0.2 each, outcome 1 at the end
    from agentgym.baselines.credit import extrinsic_return

    assert math.fsum(r.turn_rewards) == pytest.approx(1.0 - 0.9) and extrinsic_return(r, ["a", "b"]) == 1.0
    scale_components([r], {"a": 0.0})  # arm b chosen: a's cost no longer counts
    assert math.fsum(r.turn_rewards) == pytest.approx(1.0 - 0.6)
    for bad in (["a"], ["a", "a"], ["a", "zz"]):
        with pytest.raises(ValueError, match="airs_arms"):
            config_of(reward_wrappers=two, airs_arms=bad)


@pytest.mark.slow
def test_airs_runs_in_the_trainer_and_resumes_with_its_controller(tmp_path):
    """ProgressToy always ends with outcome 1: the gains are 0, so the arms go 0, 1 (each tried), then 0 (a tie
    goes to the first); a resumed run continues the controller saved in methods.pt."""
    two = [{"name": "step_cost", "cost": 0.1, "component": "a"}, {"name": "step_cost", "cost": 0.2, "component": "b"}]
    config = config_of(reward_wrappers=two, airs_arms=["a", "b"], iterations=2, out_dir=str(tmp_path / "run"),
                       reward_components="all", estimator="gtpo")  # fmt: skip
    first = train(config)["history"]
    assert [h["airs_arm"] for h in first] == [0, 1] and first[0]["airs_extrinsic_return"] == 1.0
    config.iterations, config.resume = 3, True
    assert [h["airs_arm"] for h in train(config)["history"]] == [0, 1, 0]
    # the gains credited so far: arm 0 at iteration 2 and arm 1 at 3 (a fresh controller at 3 would hold none)
    assert MethodState.load(tmp_path / "run" / "methods.pt").extra["airs"].gains == [[0.0], [0.0]]


def test_group_options_play_each_task_once_per_entry_and_co_reward_pairs_those_groups(tmp_path):
    """Co-Reward in the trainer: SearchQA's two wordings of each task as adjacent groups, so every group has its
    partner (no invalid turn); without group_options every group is a different task and none has one."""
    searchqa = {"env_id": "agentgym/SearchQA-v0", "env_kwargs": {"dataset": "tiny"}, "batch_tasks": 2,
                "scorer": "co_reward", "estimator": "grpo", "reward_components": ["co_reward"]}  # fmt: skip
    wordings = [{"wording": "original"}, {"wording": "reworded"}]
    paired = train(config_of(**searchqa, group_options=wordings, out_dir=str(tmp_path / "paired")))["last"]
    assert paired["scorer_invalid_frac"] == 0.0 and paired["kept_rollouts"] == 2 * 2 * 2
    alone = train(config_of(**searchqa, out_dir=str(tmp_path / "alone")))["last"]
    assert alone["scorer_invalid_frac"] > 0.0 and alone["kept_rollouts"] == 2 * 2  # each last turn: no partner
    for bad, message in (([{"task_index": 0}], "without task_index"), ([], "non-empty"),
                         (wordings, "group_options .* cannot run with reward_conditioning")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            config_of(**searchqa, group_options=bad, reward_conditioning=bad == wordings)
