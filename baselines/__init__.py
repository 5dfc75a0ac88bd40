"""Reference trainer (importable as ``agentgym.baselines``)."""
