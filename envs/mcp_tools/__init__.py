"""Tool use over an external MCP server's tools (MCPTools-v0)."""
