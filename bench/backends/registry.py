"""The backend registry: each backend's declaration (config) and runtime, by name. Importing it is cheap.

New backends register here and nowhere else. `backend_config(name)` imports only the light
declaration module (what the matrix validates against); `backend_class(name)` imports the
runtime, in the worker or wherever a backend is run, looked up by name so that the spec stage
never imports a runtime.
"""

from __future__ import annotations

import importlib

from bench.errors import BenchInputError, choices

# name -> ("config module:Class", "runtime module:Class")
BACKENDS = {
    "hf": ("bench.backends.hf.config:HFConfig", "bench.backends.hf.backend:HFBackend"),
    "fake": ("bench.backends.fake.config:FakeConfig", "bench.backends.fake.backend:FakeBackend"),
    "openai": ("bench.backends.openai.config:OpenAIConfig", "bench.backends.openai.backend:OpenAIBackend"),
    "trtllm": ("bench.backends.trtllm.config:TRTLLMConfig", "bench.backends.trtllm.backend:TRTLLMBackend"),
}


def _load(name: str, which: int):
    try:
        target = BACKENDS[name][which]
    except KeyError:
        raise BenchInputError(f"unknown backend {name!r}: valid backends are {choices(BACKENDS)}") from None
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def backend_config(name: str):
    """Return the declaration (BackendConfig subclass) registered under `name`; BenchInputError listing valid names."""
    return _load(name, 0)


def backend_class(name: str):
    """Return the runtime Backend class registered under `name` (it derives from the backend's config)."""
    return _load(name, 1)
