"""Scenario configuration: the typed schema, loading from YAML, and writing it back."""
