"""Model-backed agents: ``openai_agent`` (any OpenAI-compatible endpoint), ``hf_agent`` (a local transformers or
GGUF model) and ``tool_calls`` (the Hermes and OpenAI tool-call formats both speak). The ``Agent`` interface itself
is part of the contract (``agentgym.contract.agent``); each env ships its own scripted agents.

May import: agentgym.contract, agentgym.tools.
"""
