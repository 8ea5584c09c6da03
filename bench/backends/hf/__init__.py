"""The hf backend: its declaration (config) and its runtime (backend)."""
