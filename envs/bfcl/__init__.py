"""BFCL-v0: the Berkeley Function Calling Leaderboard (v4) multi-turn categories, played offline from the installed
``bfcl-eval`` wheel (``pip install --no-deps bfcl-eval==2026.3.23 mpmath``)."""
