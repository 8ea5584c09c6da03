"""Workloads: the exact requests a cell replays, built in the parent before anything runs.

Owns the driver of `bench workload` (`driver`: build, show and export a frozen file), the
ShareGPT reader (`sharegpt`), the tokenizers (`tokenizers`), vLLM's sampling and filter rules
and frozen workload files with their content hash (`workload`), arrival times (`arrivals`),
length statistics (`lengths`), trtllm-bench's dataset format (`trtllm_dataset`) and token ids
back to text (`prompt_text`). May import: the spec stage (bench.errors, bench.spec,
bench.models) and bench.files; nothing that runs a backend, stores or reports.
"""
