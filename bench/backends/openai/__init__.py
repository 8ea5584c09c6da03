"""The openai backend: its declaration (config) and its runtime (backend)."""
