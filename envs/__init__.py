"""Environment packages (importable as ``agentgym.envs``)."""
