"""Search-augmented QA."""
