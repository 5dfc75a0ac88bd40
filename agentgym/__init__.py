"""agentgym: Gymnasium-compatible multi-turn environments for LLM agents."""
