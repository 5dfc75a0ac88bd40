"""Method contrasts: the turn-level credit-assignment methods of the reference trainer (baselines/trainer.py) differ as
theory says, on small hand-made batches whose numbers are derived by hand in the comments.

The six configurations: ``grpo`` and ``rloo`` (one value per episode), ``gtpo`` (reward-to-go z-scored over every
(rollout, turn) of the group), ``progress`` (gtpo over env rewards + progress differences, i.e. ``ProgressReward``),
``gigpo`` (anchors = the state each action was taken in) and ``turn_ppo`` (GAE over turns with a critic). Checked:

1. GRPO/RLOO give every turn of an episode the same advantage; GiGPO and GTPO (with differing turn rewards) do not.
2. GiGPO compares turns that share an anchor state; a unique anchor gets only the episode term; omega=0 is GRPO;
   state anchors spare the turns after a mistake, observation anchors blame them.
3. Progress on Chain puts the blame on the mistake turn; sparse GTPO gives a failed rollout one value on all turns.
4. Umbrella: GTPO credits distractor noise, progress moves credit onto the decisive turn, GRPO counts distractors.
5. turn_ppo with a perfect critic: 0 on decided turns; gamma=lam=1 gives return minus value.
6. Permutation equivariance of every estimator; tied groups give GRPO/RLOO zeros (GTPO pools turns, so it need not).

The last test plays a real Chain-v0 group and checks contrasts 1 and 3 on the env's own rewards, progress and anchors.
"""

import math

import gymnasium
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import agentgym  # noqa: F401  (registers the envs)
from agentgym.envs.diagnostics.agents import OPTIONS_MARK
from agentgym.rewards.advantages import TurnBatch, get_estimator, turn_returns
from agentgym.rewards.wrappers import ProgressReward

FAST = settings(max_examples=30, deadline=None, derandomize=True)
TOL = 1e-5  # the estimators' eps=1e-6 in the std moves the hand values by ~1e-6
SQRT2 = math.sqrt(2.0)


def approx(x):
    return pytest.approx(x, abs=TOL)


def adv(name, batch, **kwargs):
    """Per-turn advantages of the registered estimator ``name`` (trainer defaults unless given)."""
    return get_estimator(name)(batch, **kwargs)


def with_progress(rewards, progress):
    """The trainer's ``progress`` turn rewards: env reward + (progress_t - progress_{t-1}), progress 0 at reset."""
    out = []
    for r, p in zip(rewards, progress, strict=True):
        prev = np.concatenate([[0.0], p[:-1]])
        out.append(np.asarray(r, dtype=float) + np.asarray(p, dtype=float) - prev)
    return out


def assert_rows(got, want):
    """Ragged rows equal up to ``TOL``, row by row."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g, dtype=float) == approx(w)


def constant_per_episode(rows):
    return all(np.all(a == a[0]) for a in rows)


# ----------------------------------------------------------------------------------------------------------------
# Chain-like group (H=3, every turn decisive, outcome 1 at the last turn iff all three choices were right):
# r0, r1 all right; r2 errs at turn index 1; r3 errs at turn index 0.
CHAIN_REWARDS = [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
# progress after each step: t/3 while all right, 0 after a mistake
CHAIN_PROGRESS = [[1 / 3, 2 / 3, 1.0], [1 / 3, 2 / 3, 1.0], [1 / 3, 0.0, 0.0], [0.0, 0.0, 0.0]]
# the state each action was taken in: "<task>:<stage>:ok" or ":x" after a mistake
CHAIN_ANCHORS = [
    ["0:0:ok", "0:1:ok", "0:2:ok"],
    ["0:0:ok", "0:1:ok", "0:2:ok"],
    ["0:0:ok", "0:1:ok", "0:2:x"],
    ["0:0:ok", "0:1:x", "0:2:x"],
]
CHAIN_OBS_ANCHORS = [["0:0", "0:1", "0:2"]] * 4  # anchor_by="observation": the hidden mistake flag dropped
G4 = ["chain"] * 4

# Umbrella-like group (H=3, r=0.1): turn 0 decides the outcome paid at turn 2, turns 1 and 2 pay +-0.1 distractors:
# r0 win (+, +), r1 win (-, +), r2 lose (+, -), r3 lose (-, -)
UMBRELLA_REWARDS = [[0.0, 0.1, 1.1], [0.0, -0.1, 1.1], [0.0, 0.1, -0.1], [0.0, -0.1, -0.1]]
UMBRELLA_PROGRESS = [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]  # = outcome from turn 0 on


def chain_batch(rewards=CHAIN_REWARDS, anchors=CHAIN_ANCHORS):
    return TurnBatch(rewards, G4, anchors=anchors)


# ----------------------------------------------------------------------------------------------------------------
# 1. one value per episode (GRPO, RLOO) versus per-turn values (GiGPO, GTPO)


def test_grpo_and_rloo_give_every_turn_of_an_episode_the_same_advantage():
    b = chain_batch()
    # outcomes 1, 1, 0, 0: mean 0.5, population std 0.5 -> z = +-1
    grpo = adv("grpo", b)
    assert constant_per_episode(grpo)
    assert [a[0] for a in grpo] == approx([1.0, 1.0, -1.0, -1.0])
    # RLOO: 1 - (1 + 0 + 0)/3 = 2/3 and 0 - (1 + 1 + 0)/3 = -2/3, no std
    rloo = adv("rloo", b)
    assert constant_per_episode(rloo)
    assert [a[0] for a in rloo] == approx([2 / 3, 2 / 3, -2 / 3, -2 / 3])


def test_gigpo_tells_the_turns_of_an_erring_episode_apart():
    a = adv("gigpo", chain_batch())  # omega=1, gamma=0.95
    # A^E = grpo = [1, 1, -1, -1]. Step returns (gamma 0.95): r0, r1 [0.9025, 0.95, 1]; r2, r3 [0, 0, 0].
    # anchor 0:0:ok (all four): [.9025, .9025, 0, 0] -> +-1
    # anchor 0:1:ok (r0, r1, r2): [.95, .95, 0], binary with p = 2/3 -> sqrt(1/2) for r0, r1 and -sqrt(2) for r2
    # anchors 0:1:x (r3 alone) -> 0; 0:2:ok (r0, r1: 1, 1 tie) -> 0; 0:2:x (r2, r3: 0, 0 tie) -> 0
    assert a[0] == approx([2.0, 1.0 + 1 / SQRT2, 1.0])
    assert a[1] == approx(a[0])
    assert a[2] == approx([-2.0, -1.0 - SQRT2, -1.0])
    assert a[3] == approx([-2.0, -1.0, -1.0])
    # the mistake turn is the lowest of its episode: index 1 of r2, index 0 of r3
    assert int(np.argmin(a[2])) == 1
    assert int(np.argmin(a[3])) == 0
    assert not constant_per_episode(a)


def test_gtpo_tells_turns_apart_only_when_the_turn_rewards_differ():
    # sparse Chain rewards: reward-to-go 1, 1, 1 or 0, 0, 0 -> GTPO is one value per episode, like GRPO
    sparse = adv("gtpo", chain_batch())
    assert constant_per_episode(sparse)
    assert [a[0] for a in sparse] == approx([1.0, 1.0, -1.0, -1.0])
    # with a distractor reward on turn index 1 (Umbrella-like r0 below): reward-to-go 1.2, 1.2, 1.1 -> differs
    umbrella = adv("gtpo", TurnBatch(UMBRELLA_REWARDS, G4))
    assert umbrella[0][1] != approx(umbrella[0][2])


# ----------------------------------------------------------------------------------------------------------------
# 2. GiGPO's anchor groups


def test_gigpo_compares_turns_that_share_an_anchor_state():
    rewards = [[0.0, 1.0], [0.0, 0.0], [0.0, 1.0], [0.0, 5.0]]
    anchors = [["s0", "A"], ["s0", "A"], ["s0", "B"], ["s0", "A"]]
    b = TurnBatch(rewards, ["g", "g", "g", "h"], anchors=anchors)
    a = adv("gigpo", b)
    episode = adv("grpo", b)
    step = [x - e for x, e in zip(a, episode, strict=True)]  # omega=1: A^S = A - A^E
    # A^E: outcomes 1, 0, 1 in group g -> sqrt(1/2), -sqrt(2), sqrt(1/2); h is a singleton -> 0
    assert [e[0] for e in episode] == approx([1 / SQRT2, -SQRT2, 1 / SQRT2, 0.0])
    # turn 1 of r0 and r1 share anchor A: returns 1 and 0 are compared -> +1 and -1
    assert [step[0][1], step[1][1]] == approx([1.0, -1.0])
    # r2's turn 1 earned the same return as r0's, but its anchor B is unique: episode term only, exactly
    assert a[2][1] == episode[2][1]
    # turn 0 (anchor s0 in g): returns 0.95, 0, 0.95 -> the same z as the outcomes
    assert [step[i][0] for i in range(3)] == approx([1 / SQRT2, -SQRT2, 1 / SQRT2])
    # the same anchor names in another task group never pool: r3 (group h) gets 0, and its return 5 did not
    # move group g's anchor A (else r0's step term would not be +1)
    assert a[3] == approx([0.0, 0.0])


def test_gigpo_with_omega_zero_is_grpo_exactly():
    b = chain_batch()
    for got, want in zip(adv("gigpo", b, omega=0.0), adv("grpo", b), strict=True):
        assert np.array_equal(got, want)


@FAST
@given(
    st.lists(st.lists(st.sampled_from([0.0, 1.0, -0.5, 2.0]), min_size=1, max_size=3), min_size=1, max_size=6),
    st.data(),
)
def test_gigpo_with_omega_zero_is_grpo_on_any_batch(rewards, data):
    n = len(rewards)
    gids = data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    anchor = st.sampled_from(["a", "b", None])
    anchors = [data.draw(st.lists(anchor, min_size=len(r), max_size=len(r))) for r in rewards]
    b = TurnBatch(rewards, gids, anchors=anchors)
    for got, want in zip(adv("gigpo", b, omega=0.0), adv("grpo", b), strict=True):
        assert np.array_equal(got, want)


def test_gigpo_state_anchors_spare_turns_after_a_mistake_observation_anchors_blame_them():
    state = adv("gigpo", chain_batch())
    obs = adv("gigpo", chain_batch(anchors=CHAIN_OBS_ANCHORS))
    # observation anchors pool every rollout at every stage: returns [1, 1, 0, 0] (times gamma powers) -> +-1 at
    # every turn, so A = A^E +- 1 = +-2 on every turn: twice GRPO, no turn told apart
    for a, sign in zip(obs, [1, 1, -1, -1], strict=True):
        assert a == approx([2.0 * sign] * 3)
    # state anchors: r2's last turn was taken after its mistake (outcome already lost); it is compared only with
    # r3's equally lost turn -> step term 0, so it gets -1 instead of the -2 observation anchors give it
    assert state[2][2] == approx(-1.0)
    assert obs[2][2] == approx(-2.0)


# ----------------------------------------------------------------------------------------------------------------
# 3. potential-based progress on Chain


def test_progress_blames_the_mistake_turn_and_sparse_gtpo_does_not():
    shaped = with_progress(CHAIN_REWARDS, CHAIN_PROGRESS)
    # shaped rewards: r0, r1 [1/3, 1/3, 4/3]; r2 [1/3, -1/3, 0]; r3 [0, 0, 0]
    assert shaped[2] == approx([1 / 3, -1 / 3, 0.0])
    a = adv("gtpo", TurnBatch(shaped, G4))
    # reward-to-go: r0, r1 [2, 5/3, 4/3]; r2 [0, -1/3, 0]; r3 [0, 0, 0]. Pooled 12 values: mean 29/36,
    # E[G^2] = 155/108, var = 1019/1296 -> A = (36 G - 29) / sqrt(1019)
    z = lambda g: (36 * g - 29) / math.sqrt(1019)
    assert a[0] == approx([z(2), z(5 / 3), z(4 / 3)])
    assert a[2] == approx([z(0), z(-1 / 3), z(0)])
    assert a[3] == approx([z(0)] * 3)
    # the mistake turn (r2, index 1) is below the right turn before it
    assert a[2][1] < a[2][0] - 0.3  # gap (1/3)/std = 12/sqrt(1019) = 0.376
    # without progress: every turn of a failed rollout has reward-to-go 0 -> one shared value, no blame
    sparse = adv("gtpo", chain_batch())
    assert sparse[2] == approx([-1.0, -1.0, -1.0])
    assert sparse[2][1] == sparse[2][0]
    # telescoping: the first turn's reward-to-go is outcome + final progress (0 for both failures), so the right
    # first turn of r2 and the wrong first turn of r3 get the same advantage
    assert a[2][0] == approx(a[3][0])


# ----------------------------------------------------------------------------------------------------------------
# 4. Umbrella-like batch


def test_umbrella_gtpo_is_misled_by_distractor_rewards():
    a = adv("gtpo", TurnBatch(UMBRELLA_REWARDS, G4))
    # reward-to-go: r0 [1.2, 1.2, 1.1], r1 [1.0, 1.0, 1.1], r2 [0, 0, -0.1], r3 [-0.2, -0.2, -0.1]
    # pooled: mean 0.5, squared deviations 4 * (.49 + .25 + .36) / 12 -> var 11/30
    z = lambda g: (g - 0.5) / math.sqrt(11 / 30)
    assert a[0] == approx([z(1.2), z(1.2), z(1.1)])
    assert a[1] == approx([z(1.0), z(1.0), z(1.1)])
    # r0 and r1 differ only in turn 1's distractor draw (+0.1 versus -0.1): GTPO's turn-1 advantage follows it
    assert a[0][1] - a[1][1] == approx(0.2 / math.sqrt(11 / 30))
    # ... and so does the decisive turn 0, though both winners made the same decisive choice
    assert a[0][0] > a[1][0] + 0.3


def test_umbrella_progress_separates_winners_on_the_decisive_turn():
    plain = adv("gtpo", TurnBatch(UMBRELLA_REWARDS, G4))
    shaped = with_progress(UMBRELLA_REWARDS, UMBRELLA_PROGRESS)
    # shaped: r0 [1, 0.1, 1.1], r1 [1, -0.1, 1.1], r2 and r3 unchanged (progress stays 0)
    a = adv("gtpo", TurnBatch(shaped, G4))
    # reward-to-go: r0 [2.2, 1.2, 1.1], r1 [2.0, 1.0, 1.1], r2 [0, 0, -0.1], r3 [-0.2, -0.2, -0.1]
    # pooled: sum 8 -> mean 2/3; sum of squares 13.8 -> E[G^2] 1.15, var 1.15 - 4/9 = 127/180
    s = math.sqrt(127 / 180)
    assert [x[0] for x in a] == approx([(g - 2 / 3) / s for g in (2.2, 2.0, 0.0, -0.2)])
    # the decisive turn: smallest winner minus largest loser is (2.0 - 0)/s = 2.381 with progress and
    # (1.0 - 0)/sqrt(11/30) = 1.651 without
    gap = lambda rows: min(rows[0][0], rows[1][0]) - max(rows[2][0], rows[3][0])
    assert gap(a) == approx(2.0 / s)
    assert gap(plain) == approx(1.0 / math.sqrt(11 / 30))
    assert gap(a) > gap(plain)
    # progress moves the winners' credit back onto turn 0: above their distractor turns, where GTPO had a tie
    assert a[0][0] > a[0][1] and a[1][0] > a[1][1]
    assert plain[0][0] == plain[0][1]


def test_umbrella_grpo_episode_value_includes_the_distractor_sum():
    a = adv("grpo", TurnBatch(UMBRELLA_REWARDS, G4))
    # outcomes are the sums 1.2, 1.0, 0.0, -0.2: mean 0.5, var (.49 + .25 + .25 + .49)/4 = 0.37
    assert [x[0] for x in a] == approx([(g - 0.5) / math.sqrt(0.37) for g in (1.2, 1.0, 0.0, -0.2)])
    # two winners with the same decisive choice get different credit from the distractor draws
    assert a[0][0] - a[1][0] == approx(0.2 / math.sqrt(0.37))
    # on the outcome alone they tie
    outcome_only = adv("grpo", TurnBatch(UMBRELLA_REWARDS, G4, outcomes=[1.0, 1.0, 0.0, 0.0]))
    assert outcome_only[0][0] == outcome_only[1][0]


# ----------------------------------------------------------------------------------------------------------------
# 5. turn_ppo with a perfect critic


def test_turn_ppo_with_a_perfect_critic_is_zero_on_decided_turns():
    # Chain H=3, a policy right with probability 1/2 per turn: V(stage t, ok) = (1/2)^(3-t), V(after a mistake) = 0
    rewards = CHAIN_REWARDS[1:]  # success, error at index 1, error at index 0
    values = [[1 / 8, 1 / 4, 1 / 2], [1 / 8, 1 / 4, 0.0], [1 / 8, 0.0, 0.0]]
    b = TurnBatch(rewards, ["chain"] * 3, values=values)
    a = adv("turn_ppo", b, gamma=1.0, lam=0.95)
    # success: deltas 1/8, 1/4, 1/2 -> A2 = .5, A1 = .25 + .95 * .5 = .725, A0 = .125 + .95 * .725 = .81375
    assert a[0] == approx([0.81375, 0.725, 0.5])
    # error at index 1: deltas 1/8, -1/4, 0 -> A = [.125 - .95 * .25, -.25, 0]; the lost last turn gets 0
    assert a[1] == approx([-0.1125, -0.25, 0.0])
    # error at index 0: the two turns after it are decided (V = 0, reward 0) -> 0
    assert a[2] == approx([-0.125, 0.0, 0.0])
    # gamma = lam = 1: return minus value, 1 - V on the success, 0 - V on the failures
    a1 = adv("turn_ppo", b, gamma=1.0, lam=1.0)
    assert a1[0] == approx([7 / 8, 3 / 4, 1 / 2])
    assert a1[1] == approx([-1 / 8, -1 / 4, 0.0])
    # Umbrella without distractors: turn 0 decides (p = 1/2), V = 0.5 then the outcome; turns 1, 2 are decided
    u = TurnBatch([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]], ["u", "u"], values=[[0.5, 1.0, 1.0], [0.5, 0.0, 0.0]])
    assert_rows(adv("turn_ppo", u, gamma=1.0, lam=0.95), [[0.5, 0.0, 0.0], [-0.5, 0.0, 0.0]])


@FAST
@given(
    st.lists(
        st.tuples(st.floats(-3, 3, allow_subnormal=False), st.floats(-3, 3, allow_subnormal=False)),
        min_size=1,
        max_size=5,
    )
)
def test_turn_ppo_with_gamma_and_lambda_one_is_return_minus_value(turns):
    rewards = [r for r, _ in turns]
    values = [v for _, v in turns]
    a = adv("turn_ppo", TurnBatch([rewards], [0], values=[values]), gamma=1.0, lam=1.0)[0]
    # A_t = sum_{k>=t} (r_k + V_{k+1} - V_k) telescopes to sum_{k>=t} r_k - V_t (V after the last turn = 0)
    expected = [math.fsum(rewards[t:]) - values[t] for t in range(len(turns))]
    assert a == pytest.approx(expected, abs=1e-9)
    assert a == pytest.approx(turn_returns(rewards) - np.array(values), abs=1e-9)


# ----------------------------------------------------------------------------------------------------------------
# 6. sanity: permutation equivariance and ties

CONFIGS = {
    "grpo": lambda b: adv("grpo", b),
    "rloo": lambda b: adv("rloo", b),
    "gtpo": lambda b: adv("gtpo", b),  # also the progress method: gtpo on other turn rewards
    "gigpo": lambda b: adv("gigpo", b),
    "turn_ppo": lambda b: adv("turn_ppo", b, gamma=1.0, lam=0.95),
}


@st.composite
def batches_and_orders(draw):
    n = draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    cell = lambda values, t: draw(st.lists(values, min_size=t, max_size=t))
    rewards = [cell(st.sampled_from([0.0, 1.0, 0.1, -0.1, 1 / 3]), t) for t in lengths]
    anchors = [cell(st.sampled_from(["s0", "s1", None]), t) for t in lengths]
    values = [cell(st.floats(0, 1, allow_subnormal=False), t) for t in lengths]
    gids = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    return TurnBatch(rewards, gids, anchors=anchors, values=values), draw(st.permutations(range(n)))


@FAST
@given(batches_and_orders())
def test_every_method_is_permutation_equivariant(case):
    batch, order = case
    shuffled = batch.permuted(order)
    for name, method in CONFIGS.items():
        before, after = method(batch), method(shuffled)
        for j, i in enumerate(order):
            assert np.array_equal(after[j], before[i]), name


def test_a_tied_group_gives_grpo_and_rloo_zeros_but_not_gtpo():
    # three rollouts with the same total 1.0, reached at different turns
    b = TurnBatch([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]], ["g"] * 3)
    for name in ("grpo", "rloo"):
        assert all(np.array_equal(a, np.zeros(2)) for a in adv(name, b)), name
    # GTPO sees when the reward came: reward-to-go [1, 1], [1, 0], [1, 0.5]; pooled mean 0.75,
    # var (4 * .0625 + .5625 + .0625)/6 = 0.875/6
    s = math.sqrt(0.875 / 6)
    assert adv("gtpo", b)[1] == approx([0.25 / s, -0.75 / s])


def test_identical_rollouts_zero_for_group_methods_but_progress_gtpo_ranks_turns():
    rewards, progress = CHAIN_REWARDS[:2], CHAIN_PROGRESS[:2]  # two identical successful Chain rollouts
    b = TurnBatch(rewards, ["g", "g"], anchors=CHAIN_ANCHORS[:2])
    for name in ("grpo", "rloo", "gtpo", "gigpo"):
        assert all(np.array_equal(a, np.zeros(3)) for a in adv(name, b)), name
    # GTPO pools turns, so with progress the earlier turns (longer reward-to-go 2, 5/3, 4/3) beat the later ones
    # even though no rollout did better than another: mean 5/3, std sqrt(2/27) -> +-sqrt(3/2), 0
    a = adv("gtpo", TurnBatch(with_progress(rewards, progress), ["g", "g"]))
    assert a[0] == approx([math.sqrt(1.5), 0.0, -math.sqrt(1.5)])


# ----------------------------------------------------------------------------------------------------------------
# a real Chain-v0 group


def play_chain(wrong_at, horizon=3, task=0):
    """One Chain-v0 episode through ``ProgressReward``: the gold choice every turn except ``wrong_at`` (a turn index,
    or None), where it picks another listed option. Returns env rewards, shaped rewards, progress, anchors."""
    env = ProgressReward(gymnasium.make("agentgym/Chain-v0", horizon=horizon))
    obs, info = env.reset(options={"task_index": task})
    gold = info["gold"]["choices"]
    anchors, env_rewards, shaped, progress = [info["anchor"]], [], [], []
    for t in range(horizon):
        options = obs[-1]["content"].rsplit(OPTIONS_MARK, 1)[1].rstrip(".").split()
        choice = gold[t] if t != wrong_at else next(o for o in options if o != gold[t])
        obs, reward, terminated, _, info = env.step(f"<answer> {choice} </answer>")
        components = info["reward_components"]
        env_rewards.append(math.fsum(v for k, v in components.items() if k != "progress"))
        shaped.append(reward)
        progress.append(info["progress"])
        anchors.append(info["anchor"])
        assert info["correct"] is (t != wrong_at)
    assert terminated
    env.close()
    return env_rewards, shaped, progress, anchors[:-1]  # a turn's anchor: the state its action was taken in


def test_real_chain_group_shows_the_contrasts():
    plays = [play_chain(w) for w in (None, None, 1, 0)]  # the same mix as the hand-made Chain batch
    env_rewards, shaped, progress, anchors = (list(x) for x in zip(*plays, strict=True))
    # the env agrees with the hand-made batch, and ProgressReward with the trainer's progress differences
    assert_rows(env_rewards, CHAIN_REWARDS)
    assert_rows(progress, CHAIN_PROGRESS)
    assert anchors == CHAIN_ANCHORS
    assert_rows(shaped, with_progress(env_rewards, progress))
    gids = ["chain-v0:0"] * 4
    # contrast 1: GRPO and RLOO one value per episode; GiGPO tells the erring episodes' turns apart
    for name in ("grpo", "rloo"):
        assert constant_per_episode(adv(name, TurnBatch(env_rewards, gids))), name
    gigpo = adv("gigpo", TurnBatch(env_rewards, gids, anchors=anchors))
    assert gigpo[2] == approx([-2.0, -1.0 - SQRT2, -1.0])
    assert int(np.argmin(gigpo[2])) == 1 and int(np.argmin(gigpo[3])) == 0
    # contrast 3: with progress the mistake turn is below the turn before it; without, the failure is flat
    z = lambda g: (36 * g - 29) / math.sqrt(1019)
    with_prog = adv("gtpo", TurnBatch(shaped, gids))
    assert with_prog[2] == approx([z(0), z(-1 / 3), z(0)])
    assert with_prog[2][1] < with_prog[2][0]
    sparse = adv("gtpo", TurnBatch(env_rewards, gids))
    assert sparse[2] == approx([-1.0] * 3) and sparse[3] == approx([-1.0] * 3)
