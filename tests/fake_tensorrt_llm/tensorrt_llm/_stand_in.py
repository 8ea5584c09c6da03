"""What the stand-in adds to TensorRT-LLM 1.2.1's behaviour: its settings and its call log.

The stand-in package (tests only) is rebuilt from TensorRT-LLM 1.2.1's own source (the 1.2.1
documentation build's `_modules/tensorrt_llm/...` pages): class names, fields, defaults and
validation follow that source, and each module says which file and symbol it mirrors. What
that source cannot show (the C++ executor, TensorRT's builder, CUDA memory) is modelled, and
every such piece is marked ``INVENTED`` where it is defined.

Settings come from the environment, so a worker subprocess sees what the test set:

- ``FAKE_TRTLLM_CONFIG``: JSON object, keys below (all optional).
- ``FAKE_TRTLLM_LOG``: a file; every call the harness makes is appended as one JSON line.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, is_dataclass
from typing import Any

DEFAULTS = {
    "step_ms": 2.0,  # INVENTED: wall time of one executor iteration (one token per active request)
    "prefill_ms_per_token": 0.0,  # INVENTED: extra iteration time per prompt token not served from cache
    "device_memory_gb": 80.0,  # INVENTED: free device memory the KV-cache sizing sees
    # "none" | "build_oom" (TensorRT runs out of memory building the engine) | "kv_oom" (the
    # executor cannot allocate its KV cache) | "run_oom" (the executor fails a request mid-run)
    "fail": "none",
    # "none": synthetic tokens, no logits | "hf": INVENTED, the checkpoint's own numbers (_stand_in_numerics.py)
    "numerics": "none",
}


def config() -> dict:
    """Return the stand-in's settings (DEFAULTS overridden by $FAKE_TRTLLM_CONFIG)."""
    cfg = dict(DEFAULTS)
    text = os.environ.get("FAKE_TRTLLM_CONFIG")
    if text:
        given = json.loads(text)
        unknown = set(given) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"FAKE_TRTLLM_CONFIG: unknown keys {sorted(unknown)}; valid: {sorted(DEFAULTS)}")
        cfg.update(given)
    return cfg


def plain(value: Any) -> Any:
    """Return value as JSON-able data (pydantic models and dataclasses as dicts)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        return {k: plain(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def log(event: str, **data: Any) -> None:
    """Append one call to $FAKE_TRTLLM_LOG (no-op when unset)."""
    path = os.environ.get("FAKE_TRTLLM_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"event": event, **plain(data)}) + "\n")


def warn(message: str) -> None:
    """tensorrt_llm.logger.warning: printed (to stderr here) and logged."""
    os.write(2, f"[TRT-LLM] [W] {message}\n".encode())
    log("warning", message=message)
