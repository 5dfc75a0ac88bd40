"""Cards for the reference papers' systems that have no code of their own here yet: ``status="missing"`` (nothing
built) or ``"partial"`` (an existing piece does part of it; ``code`` names that piece and ``missing`` says what is
left). A card with the same name in a module's ``METHODS`` replaces the planned one, so building a method means
writing its card beside its code; nothing here has to be edited for it to show as built."""

from __future__ import annotations

from agentgym.rewards.catalogue import Method
from agentgym.rewards.papers import cite

_JUDGE = "agentgym.rewards.judge:JudgeScorer"


def _missing(name: str, system: str, kind: str, summary: str, needs: tuple[str, ...], missing: str) -> Method:
    return Method(name, system, kind, summary, needs=needs, paper=cite(system), status="missing",  # type: ignore[arg-type]
                  missing=missing)  # fmt: skip


def _partial(name: str, system: str, kind: str, summary: str, needs: tuple[str, ...], code: str,
             missing: str) -> Method:  # fmt: skip
    return Method(name, system, kind, summary, needs=needs, paper=cite(system), code=code,  # type: ignore[arg-type]
                  status="partial", missing=missing)  # fmt: skip


PLANNED: tuple[Method, ...] = (
    # (a) estimators
    _missing("gopo", "GOPO", "estimator", "rank-only group advantages (discards reward magnitudes)",
             ("outcome", "group"), "the estimator"),
    _missing("lampo", "LamPO", "estimator", "pairwise advantages weighted by sequence log-prob confidence",
             ("outcome", "group", "logprobs"), "the estimator and the rollout log-probs in the batch"),
    _missing("par", "PAR", "transform", "bounded preference-as-reward transform sigmoid(r - r_ref)",
             ("judge", "reference"), "the transform and a reference-reward provider"),
    _missing("bt", "BT reward transform", "transform", "sum of log-sigmoid property rewards (a logical AND)",
             ("judge", "reference"), "the aggregator"),
    _missing("serl", "SERL", "estimator", "outcome sign, env-feedback magnitude per turn",
             ("outcome", "group", "turn_signal"), "the estimator and criticality features"),
    _missing("hiper", "HiPER", "estimator", "hierarchical advantages over subgoal segments",
             ("outcome", "group", "segments"), "the estimator and a subgoal format"),
    _missing("tl_grpo", "TL-GRPO", "branch", "same-state groups scored by immediate or best-to-go turn reward",
             ("snapshots", "group"), "the immediate and max-to-go targets of the tree estimator"),
    _missing("portool", "PORTool", "branch", "prefix tree of tool-call rollouts, fork and trajectory blend",
             ("snapshots", "group", "turn_signal"), "prefix forks, the step bonus and the blend"),
    _missing("dual_track", "TRUST-SQL", "estimator", "dual-track masked advantages for exploration and execution",
             ("outcome", "group", "segments"), "the estimator; its SQL env"),
    # (b) bonuses
    _missing("rnd", "RND", "bonus", "random network distillation novelty bonus, predictor refit per iteration",
             (), "the bonus wrapper and its table"),
    _missing("s2d", "S2D", "trainer", "sparse-to-dense schedule on a potential-based shaping",
             ("turn_signal",), "the schedule"),
    _missing("airs", "AIRS", "trainer", "online choice among intrinsic bonuses by the extrinsic return they bring",
             ("outcome",), "the bandit controller"),
    _missing("maxinforl", "MaxInfoRL", "bonus", "ensemble-disagreement bonus (information about the dynamics)",
             (), "the ensemble table and the wrapper"),
    # (c) judge, rubric and LLM-feedback rewards
    _partial("faithrl", "FaithRL", "scorer", "geometric step-faithfulness reward and advantage modulation",
             ("judge", "outcome", "group"), _JUDGE, "a step-support scorer and the faith estimator"),
    _partial("cm2", "CM2", "scorer", "checklist of evidence-grounded binary criteria per turn",
             ("judge",), _JUDGE, "the checklist scorer and its checklists"),
    _missing("ppr", "PPR", "scorer", "principle-based process rewards renormalised with the outcome",
             ("judge", "outcome"), "a principles rubric and the ReNorm transform"),
    _missing("cpo", "CPO", "scorer", "group-wise judge comparison with explicit criteria (CharacterArena)",
             ("judge", "group"), "a group judge scorer"),
    _missing("arenarl", "ArenaRL", "scorer", "tournament of pairwise process-aware judgements, ranked",
             ("judge", "group"), "a tournament judge (ranks feed gopo)"),
    _missing("scribe", "SCRIBE", "scorer", "skill-prototype rubrics routed per subgoal span",
             ("judge", "segments"), "skill prototypes and the rubric scorer"),
    _missing("calm", "CALM", "scorer", "LLM subgoal decomposition and achievement judgements as turn credit",
             ("judge",), "the subgoal scorer"),
    _missing("tp_grpo", "TP-GRPO", "transform", "thought-level credit from step correctness labels",
             ("judge", "outcome"), "the thought-segment transform"),
    _missing("pow3r", "POW3R", "transform", "rubric criteria with human weights aggregated per rollout",
             ("judge",), "the aggregator"),
    _missing("alarm", "ALaRM", "transform", "holistic reward refined by aspect rewards",
             ("judge",), "the hierarchical aggregator"),
    _missing("herl", "HeRL", "trainer", "resampling with hindsight guidance from unmet rubric criteria",
             ("judge",), "the trainer mode"),
    _missing("corver", "CorVer", "scorer", "corpus co-occurrence verification of claims, on token spans",
             ("reference",), "claim extraction and the span scorer"),
    _missing("co_reward", "Co-Reward", "scorer", "label-free agreement across analogical question pairs",
             ("group",), "paired groups and the scorer"),
    _missing("statefactory", "StateFactory", "wrapper", "similarity of the current to the goal object state",
             ("reference",), "state facts from the envs and the wrapper"),
    _missing("goal_qa", "QG/QA auxiliary shaping", "scorer", "cloze questions about the goal answered from the state",
             ("scoring_model",), "the question generator and scorer"),
    _missing("oni", "ONI", "bonus", "asynchronous LLM annotations distilled into an intrinsic reward model",
             ("judge", "learned_model"), "the annotator and the learned bonus"),
    _missing("dllm", "DLLM", "scorer", "LLM hint subgoals rewarded on achievement (model-based)",
             ("judge",), "the hint scorer (marginal)"),
    # (d) learned models and trainer modes
    _missing("sweet_rl", "SWEET-RL", "trainer", "critic with privileged training-time information",
             ("learned_model", "reference"), "the privileged critic; its collaborative env"),
    _missing("oprl", "OPRL", "trainer", "implicit process reward model trained online from preferences",
             ("learned_model", "outcome"), "the second model and the trainer mode"),
    _missing("archer", "ArCHer", "trainer", "hierarchical off-policy turn-level critic with a token actor",
             ("learned_model",), "Q and V heads, the replay buffer, target copies"),
    _partial("spa", "SPA", "scorer", "learned stepwise progress that sums to the outcome, plus grounding",
             ("learned_model", "outcome", "turn_signal"), "agentgym.rewards.wrappers:ProgressReward",
             "the learned progress estimator (verified progress is built)"),
    _missing("geli", "GELI", "scorer", "turn rewards decomposed from a dialogue-level reward with local signals",
             ("learned_model", "outcome"), "the learned turn-reward model"),
    _missing("ipr", "IPR", "branch", "forks along the expert path, step-level DPO on Monte-Carlo values",
             ("expert", "snapshots"), "expert-prefix forks and the DPO loss"),
    _missing("lare", "LaRe", "scorer", "LLM-written latent reward code over the symbolic state",
             ("judge", "learned_model"), "the generator and the learned scorer"),
    _missing("hint_sd", "HINT-SD", "trainer", "hindsight self-distillation of failed trajectories",
             ("judge",), "the trainer mode"),
    _missing("rc_grpo", "RC-GRPO", "trainer", "reward-conditioned prompts with reward tokens",
             ("outcome",), "the reward tokens and the SFT data builder"),
    _missing("epo", "EPO", "trainer", "entropy smoothing band and phase-based entropy weight",
             (), "the penalty and the schedule"),
    _missing("branpo", "BranPO", "branch", "tail branching with difficulty-aware frequency and step masking",
             ("snapshots", "group"), "tail forks, difficulty-aware frequency, masking"),
    _missing("at2po", "AT^2PO", "branch", "entropy-guided multi-level turn trees with a turn-level objective",
             ("snapshots", "group"), "entropy-guided expansion, multi-level trees, turn ratios"),
    _missing("t2po", "T^2PO", "branch", "resampling turns without progress, thinking interventions",
             ("snapshots",), "the rollout hooks"),
    _missing("m_ask", "M-ASK", "trainer", "two roles (search behaviour, knowledge management) in one model",
             ("outcome",), "the two-role env wrapper"),
    _missing("soar", "SOAR", "trainer", "a teacher proposing tasks rewarded by the student's gain (marginal)",
             ("learned_model",), "the teacher loop"),
    _missing("behavior_alignment", "Behavior-alignment bi-level", "trainer",
             "outer loop tunes heuristic reward weights for the primary return (marginal)", ("outcome",),
             "the bi-level loop"),
    _missing("learn", "LEARN", "scorer", "instruction-action relatedness classifier as intermediate reward (marginal)",
             ("learned_model",), "the classifier"),
    _missing("rubric_arrow", "RUBRIC-ARROW", "scorer", "probability-based rubric scoring (marginal)",
             ("scoring_model",), "the probability rubric scorer"),
)  # fmt: skip
