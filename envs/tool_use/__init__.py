"""Multi-turn tool use (function calling) over stateful worlds."""
