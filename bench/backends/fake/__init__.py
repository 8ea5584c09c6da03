"""The fake backend: its declaration (config) and its runtime (backend)."""
