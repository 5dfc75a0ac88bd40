"""Tool back-ends (importable as ``agentgym.tools``)."""
