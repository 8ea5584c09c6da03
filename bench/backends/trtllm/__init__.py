"""The trtllm backend: its declaration (config) and its runtime (backend)."""
