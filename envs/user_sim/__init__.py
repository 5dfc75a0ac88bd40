"""User simulation: envs where the agent must ask, clarify and act for a simulated person (scripted or LLM)."""
