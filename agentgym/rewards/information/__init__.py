"""Information-based turn rewards from answer likelihoods: IGPO, TIPS, SIOP and InfoPO.

The methods, their formulas and properties: docs/rewards.md, 'Post-episode turn scorers'.

Each scorer is a ``TurnScorer``: ``scorer(group)`` -> one ``TurnScores`` per trajectory (reward per agent turn,
validity, and the per-turn probability/potential series in ``extras``). They all ask an ``AnswerScorer``
(``agentgym.rewards.answer_scoring``: a local model scored in one forward pass per trajectory, or an
OpenAI-compatible endpoint) for ``log p(answer | context after turn t)``; a turn whose likelihood could not be
computed is NaN and invalid, never 0. Contexts are rendered with the scoring tokenizer's chat template; the
pseudo-answer suffix starts with the template's generation prompt (a new assistant turn).

- ``InformationGain`` (IGPO): ``p_t = exp(mean log p(gold | h_t, answer prompt))``, ``r_t = p_t - p_{t-1}`` for
  non-final turns. Not policy-invariant: it is a difference of potentials *without* the terminal ``-p_{T-1}``, so the
  shaped return ``p_{T-1} - p_0`` depends on the trajectory and can change the optimal policy.
- ``InformationPotential`` (TIPS): ``Phi_t = logsumexp_k mean log p("<answer>"+a_k+"</answer>" | h_t)``, potential-
  based shaping with ``Phi(terminal) = 0``: policy-invariant.
- ``SelfInducedOutcomePotential`` (SIOP): label-free; clusters the group's final answers and rewards the growth of
  the support of the rollout's own cluster, weighted by the cluster's reliability.
- ``CounterfactualInformationGain`` (InfoPO): how much observation ``o_t`` changed the log-probs of the next action.

One module per method: ``gain`` (IGPO), ``potential`` (TIPS), ``siop``, ``infopo``; ``common`` holds the helpers they
share (gold and final answers, the scoring tokenizer, ``TurnScores`` from rewards).

Example (``annotate`` adds ``reward_components["info_gain"]`` to every turn)::

    scorer = InformationGain(LocalAnswerScorer(model, tok))
    annotate(group, scorer(group))
"""

from __future__ import annotations

from agentgym.rewards.information.common import final_answer, gold_answers
from agentgym.rewards.information.gain import IGPO_ANSWER_PROMPT, InformationGain
from agentgym.rewards.information.infopo import CounterfactualInformationGain, infopo_fuse
from agentgym.rewards.information.potential import InformationPotential
from agentgym.rewards.information.siop import (
    AnswerClusterer,
    EmbeddingClusterer,
    SelfInducedOutcomePotential,
    StringClusterer,
    observation_support,
)

__all__ = [
    "IGPO_ANSWER_PROMPT",
    "AnswerClusterer",
    "CounterfactualInformationGain",
    "EmbeddingClusterer",
    "InformationGain",
    "InformationPotential",
    "SelfInducedOutcomePotential",
    "StringClusterer",
    "final_answer",
    "gold_answers",
    "infopo_fuse",
    "observation_support",
]
