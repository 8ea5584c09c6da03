"""bench: benchmark and performance-regression harness for LLM inference.

Data flows one way: spec -> workload -> backends (in worker processes) -> results store ->
reports. Heavy libraries (torch, transformers, plotly, tensorrt_llm) are imported only by the
modules that need them, so `bench --help` and the spec/store code stay fast.
"""

__version__ = "0.1.0"

# Layout of a stored result line (bench.results.records); stores of older versions are read too.
SCHEMA_VERSION = 2
# Part of every cell_id and build key hash. Bumped only when a cell's meaning changes, so that
# results stored before and after a change of the record layout keep matching.
CELL_ID_VERSION = 1
