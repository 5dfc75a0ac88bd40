"""Questions over generated data (tables, logs, number puzzles) answered by running Python in a sandbox."""
