"""Backend registry. Importing a backend module is cheap: heavy libraries load inside methods.

Each backend module defines a class derived from `bench.backends.base.Backend` that declares
its precisions and options (used by the matrix validation before any run) and implements
build / load / run / close in the worker process.
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
