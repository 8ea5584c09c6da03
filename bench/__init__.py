"""bench: benchmark and performance-regression harness for LLM inference.

Data flows one way: spec -> workload -> backends (in worker processes) -> results store ->
reports. Heavy libraries (torch, transformers, plotly, tensorrt_llm) are imported only by the
modules that need them, so `bench --help` and the spec/store code stay fast.
"""

__version__ = "0.1.0"

# Bumped whenever a stored result's meaning changes; part of every cell_id.
SCHEMA_VERSION = 1
