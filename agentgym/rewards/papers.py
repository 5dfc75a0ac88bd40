"""The bibliography of the method catalogue: the paper each method follows, by the system's name.

>>> cite("GRPO").year
2024
>>> cite("no such system") is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from agentgym.rewards.catalogue import Paper

#: System name -> the paper that introduced it.
BIBLIOGRAPHY: Mapping[str, Paper] = MappingProxyType({
    "GRPO": Paper("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models", 2024,
                  "2402.03300"),
    "Dr. GRPO": Paper("Understanding R1-Zero-Like Training: A Critical Perspective", 2025, "2503.20783"),
    "RLOO": Paper(
        "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs",
        2024,
        "2402.14740",
    ),
    "PPO": Paper("Proximal Policy Optimization Algorithms", 2017, "1707.06347"),
    "GAE": Paper("High-Dimensional Continuous Control Using Generalized Advantage Estimation", 2015, "1506.02438"),
    "VinePPO": Paper("VinePPO: Refining Credit Assignment in RL Training of LLMs", 2024, "2410.01679"),
    "TreeRPO": Paper("TreeRPO: Tree Relative Policy Optimization", 2025, "2506.05183"),
    "IGPO": Paper(
        "Information Gain-based Policy Optimization: A Simple and Effective Approach for Multi-Turn LLM Agents",
        2025,
        "2510.14967",
    ),
    "TIPS": Paper("TIPS: Turn-Level Information-Potential Reward Shaping for Search-Augmented LLMs", 2026,
                  "2603.22293"),
    "SIOP": Paper("Self-Induced Outcome Potential: Turn-Level Credit Assignment for Agents without Verifiers", 2026,
                  "2605.04984"),
    "A^2TGPO": Paper("A^2TGPO: Agentic Turn-Group Policy Optimization with Adaptive Turn-level Clipping", 2026,
                     "2605.06200"),
    "GiGPO": Paper("Group-in-Group Policy Optimization for LLM Agent Training", 2025, "2505.10978"),
    "GTPO": Paper("Empowering Multi-Turn Tool-Integrated Reasoning with Group Turn Policy Optimization", 2025,
                  "2511.14846"),
    "turn-PPO": Paper(
        "Turn-PPO: Turn-Level Advantage Estimation with PPO for Improved Multi-Turn RL in Agentic LLMs",
        2025,
        "2512.17008",
    ),
    "MAPO": Paper("MAPO: Mixed Advantage Policy Optimization for Long-Horizon Multi-Turn Dialogue", 2026, "2603.06194"),
    "MatchTIR": Paper("MatchTIR: Fine-Grained Supervision for Tool-Integrated Reasoning via Bipartite Matching", 2026,
                      "2601.10712"),
    "G-RA": Paper("Stabilizing Long-term Multi-turn Reinforcement Learning with Gated Rewards", 2025, "2508.10548"),
    "PRM Clip/Delta": Paper("On Designing Effective RL Reward at Training Time for LLM Reasoning", 2024, "2410.15115"),
    "InfoPO": Paper("InfoPO: Information-Driven Policy Optimization for User-Centric Agents", 2026, "2603.00656"),
    "UserRL": Paper("UserRL: Training Interactive User-Centric Agent via Reinforcement Learning", 2025, "2509.19736"),
    "MT-GRPO": Paper("Reinforcing Multi-Turn Reasoning in LLM Agents via Turn-Level Credit Assignment", 2025,
                     "2505.11821"),
    "Potential-based shaping": Paper(
        "Policy Invariance Under Reward Transformations: Theory and Application to Reward Shaping",
        1999,
        None,
    ),
    "RND": Paper("Exploration by Random Network Distillation", 2018, "1810.12894"),
    "GOPO": Paper("GOPO: Policy Optimization using Ranked Rewards", 2026, "2602.03876"),
    "LamPO": Paper("LamPO: A Lambda Style Policy Optimization for Reasoning Language Models", 2026, "2605.21235"),
    "PAR": Paper("Reward Shaping to Mitigate Reward Hacking in RLHF", 2025, "2502.18770"),
    "BT reward transform": Paper("Transforming and Combining Rewards for Aligning Large Language Models", 2024,
                                 "2402.00742"),
    "SERL": Paper("What and When to Distill: Selective Hindsight Distillation for Multi-Turn Agents", 2026,
                  "2605.19447"),
    "HiPER": Paper(
        "HiPER: Hierarchical Reinforcement Learning with Explicit Credit Assignment for Large Language Model Agents",
        2026,
        "2602.16165",
    ),
    "TL-GRPO": Paper("TL-GRPO: Turn-Level RL for Reasoning-Guided Iterative Optimization", 2026, "2601.16480"),
    "PORTool": Paper("PORTool: Tool-Use LLM Training with Rewarded Tree", 2025, "2510.26020"),
    "TRUST-SQL": Paper(
        "TRUST-SQL: Tool-Integrated Multi-Turn Reinforcement Learning for Text-to-SQL over Unknown Schemas",
        2026,
        "2603.16448",
    ),
    "S2D": Paper(
        "From Sparse to Dense: Toddler-inspired Reward Transition in Goal-Oriented Reinforcement Learning",
        2025,
        "2501.17842",
    ),
    "AIRS": Paper("Automatic Intrinsic Reward Shaping for Exploration in Deep Reinforcement Learning", 2023,
                  "2301.10886"),
    "MaxInfoRL": Paper(
        "MaxInfoRL: Boosting exploration in reinforcement learning through information gain maximization",
        2024,
        "2412.12098",
    ),
    "FaithRL": Paper("Learning to Reason Faithfully through Step-Level Faithfulness Maximization", 2026, "2602.03507"),
    "CM2": Paper(
        "CM2: Reinforcement Learning with Checklist Rewards for Multi-Turn and Multi-Step Agentic Tool Use",
        2026,
        "2602.12268",
    ),
    "PPR": Paper("Hybrid Reward Normalization for Process-supervised Non-verifiable Agentic Tasks", 2025, "2509.25598"),
    "CPO": Paper("CPO: Addressing Reward Ambiguity in Role-playing Dialogue via Comparative Policy Optimization", 2025,
                 "2508.09074"),
    "ArenaRL": Paper("ArenaRL: Scaling RL for Open-Ended Agents via Tournament-based Relative Ranking", 2026,
                     "2601.06487"),
    "SCRIBE": Paper("SCRIBE: Structured Mid-Level Supervision for Tool-Using Language Models", 2026, "2601.03555"),
    "CALM": Paper("Assessing the Zero-Shot Capabilities of LLMs for Action Evaluation in RL", 2024, "2409.12798"),
    "TP-GRPO": Paper(
        "Good Learners Think Their Thinking: Generative PRM Makes Large Reasoning Model More Efficient Math Learner",
        2025,
        "2507.23317",
    ),
    "POW3R": Paper("Not Every Rubric Teaches Equally: Policy-Aware Rubric Rewards for RLVR", 2026, "2605.20164"),
    "ALaRM": Paper("ALaRM: Align Language Models via Hierarchical Rewards Modeling", 2024, "2403.06754"),
    "HeRL": Paper(
        "Experience is the Best Teacher: Motivating Effective Exploration in Reinforcement Learning for LLMs",
        2026,
        "2603.20046",
    ),
    "CorVer": Paper(
        "Verifiable Rewards Beyond Math and Code: Lightweight Corpus-Grounded Process Supervision for "
        "Factual Question Answering",
        2026,
        "2605.29648",
    ),
    "Co-Reward": Paper(
        "Co-Reward: Self-supervised Reinforcement Learning for Large Language Model Reasoning via "
        "Contrastive Agreement",
        2025,
        "2508.00410",
    ),
    "StateFactory": Paper("Reward Prediction with Factorized World States", 2026, "2603.09400"),
    "QG/QA auxiliary shaping": Paper(
        "EAGER: Asking and Answering Questions for Automatic Reward Shaping in Language-guided RL",
        2022,
        "2206.09674",
    ),
    "ONI": Paper("Online Intrinsic Rewards for Decision Making Agents from Large Language Model Feedback", 2024,
                 "2410.23022"),
    "DLLM": Paper("World Models with Hints of Large Language Models for Goal Achieving", 2024, "2406.07381"),
    "SWEET-RL": Paper("SWEET-RL: Training Multi-Turn LLM Agents on Collaborative Reasoning Tasks", 2025, "2503.15478"),
    "OPRL": Paper("Online Process Reward Leanring for Agentic Reinforcement Learning", 2025, "2509.19199"),
    "ArCHer": Paper("ArCHer: Training Language Model Agents via Hierarchical Multi-Turn RL", 2024, "2402.19446"),
    "SPA": Paper("SPA-RL: Reinforcing LLM Agents via Stepwise Progress Attribution", 2025, "2505.20732"),
    "GELI": Paper(
        "Improving Dialogue Agents by Decomposing One Global Explicit Annotation with Local Implicit "
        "Multimodal Feedback",
        2024,
        "2403.11330",
    ),
    "IPR": Paper("Watch Every Step! LLM Agent Learning via Iterative Step-Level Process Refinement", 2024,
                 "2406.11176"),
    "LaRe": Paper("Latent Reward: LLM-Empowered Credit Assignment in Episodic Reinforcement Learning", 2024,
                  "2412.11120"),
    "HINT-SD": Paper("HINT-SD: Targeted Hindsight Self-Distillation for Long-Horizon Agents", 2026, "2605.17873"),
    "RC-GRPO": Paper(
        "RC-GRPO: Reward-Conditioned Group Relative Policy Optimization for Multi-Turn Tool Calling Agents",
        2026,
        "2602.03025",
    ),
    "EPO": Paper("EPO: Entropy-regularized Policy Optimization for LLM Agents Reinforcement Learning", 2025,
                 "2509.22576"),
    "BranPO": Paper("Training Multi-Turn Search Agent via Contrastive Dynamic Branch Sampling", 2026, "2602.03719"),
    "AT^2PO": Paper("AT^2PO: Agentic Turn-based Policy Optimization via Tree Search", 2026, "2601.04767"),
    "T^2PO": Paper(
        "T^2PO: Uncertainty-Guided Exploration Control for Stable Multi-Turn Agentic Reinforcement Learning",
        2026,
        "2605.02178",
    ),
    "M-ASK": Paper(
        "Beyond Monolithic Architectures: A Multi-Agent Search and Knowledge Optimization Framework for Agentic Search",
        2026,
        "2601.04703",
    ),
    "SOAR": Paper("Teaching Models to Teach Themselves: Reasoning at the Edge of Learnability", 2026, "2601.18778"),
    "Behavior-alignment bi-level": Paper("Behavior Alignment via Reward Function Optimization", 2023, "2310.19007"),
    "LEARN": Paper("Using Natural Language for Reward Shaping in Reinforcement Learning", 2019, "1903.02020"),
    "RUBRIC-ARROW": Paper(
        "RUBRIC-ARROW: Alternating Pointwise Rubric Reward Modeling for LLM Post-training in Non-verifiable Domains",
        2026,
        "2605.29156",
    ),
})  # fmt: skip


def cite(system: str) -> Paper | None:
    """The paper of ``system`` (None where the bibliography has none)."""
    return BIBLIOGRAPHY.get(system)
