"""Retrieval."""
