"""Backends and their registry. Importing a backend module is cheap: heavy libraries load inside methods.

Each backend module defines a class derived from `bench.backends.base.Backend` that declares
its precisions and options (used by the matrix validation before any run) and implements
build / load / run / close in the worker process; `speed_of_light` holds the decode-step
bound and the copy-bandwidth probe. May import: the spec stage, workloads, execution
(environment, memory cap), serving and bench.results.metrics; never the store or reports.
bench.spec looks the registry up lazily (the one listed exception in tests/test_layout.py).
"""

from __future__ import annotations

import importlib

from bench.errors import BenchInputError, choices

# name -> "module:Class"; new backends register here and nowhere else.
BACKENDS = {
    "hf": "bench.backends.hf:HFBackend",
    "fake": "bench.backends.fake:FakeBackend",
    "openai": "bench.backends.openai:OpenAIBackend",
    "trtllm": "bench.backends.trtllm:TRTLLMBackend",
}


def backend_class(name: str):
    """Return the Backend class registered under `name`; BenchInputError listing valid names."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise BenchInputError(f"unknown backend {name!r}: valid backends are {choices(BACKENDS)}") from None
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)
