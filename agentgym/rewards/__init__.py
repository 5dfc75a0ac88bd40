"""Dense turn-level rewards: step wrappers, post-episode turn scorers and advantage estimators."""
