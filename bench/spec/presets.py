"""The driver of `bench presets`: the built-in matrices (bench/presets/*.toml), each with what it needs to run here.

Listing imports no backend library: a backend's requirements come from its declaration.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from bench.errors import BenchInputError


@dataclass(frozen=True)
class PresetEntry:
    """One built-in matrix as `bench presets` lists it: its cells and what it needs, or why it cannot be loaded here."""

    name: str
    cells: int = 0
    description: str = ""
    needs: tuple[str, ...] = ()
    error: str | None = None  # cannot be loaded here

    def text(self) -> str:
        """Return its lines in the listing."""
        if self.error is not None:
            return f"{self.name:28s} cannot be loaded here: {self.error}"
        return (f"{self.name:28s} {self.cells:4d} cells  {self.description}\n"
                f"{'':28s} needs: {', '.join(self.needs) if self.needs else 'nothing beyond the install (CPU)'}")


def preset_needs(matrix) -> list[str]:
    """Return what a matrix needs to run, e.g. ["a CUDA GPU", "torchao (precision 'int4wo'; not installed)"]."""
    from importlib import util

    from bench.backends.registry import backend_class
    from bench.spec.matrix import requirements

    needs = []
    if any(str(c.device).startswith("cuda") for c in matrix.cells):
        needs.append("a CUDA GPU")
    if any(c.backend == "trtllm" for c in matrix.cells):  # run inside TensorRT-LLM's own environment (docs/guide/trtllm.md)
        needs.append("tensorrt_llm (backend 'trtllm'" + ("" if util.find_spec("tensorrt_llm") else "; NOT installed") + ")")
    for req in requirements(matrix.cells):
        whys = sorted({r.why for c in matrix.cells for r in backend_class(c.backend).requirements(c)
                       if r.package == req.package})
        needs.append(f"{req.package} ({', '.join(whys)}" + ("" if req.installed() else "; NOT installed") + ")")
    return needs


def preset_entries() -> list[PresetEntry]:
    """Return every built-in matrix, in name order, with its cells and needs."""
    from bench.spec.matrix import list_presets, load_matrix

    entries = []
    for name in list_presets():
        try:
            with warnings.catch_warnings():  # "no GPU here to check against": listing runs nothing
                warnings.simplefilter("ignore")
                m = load_matrix(name, preset=True, check_installed=False)
        except BenchInputError as exc:
            entries.append(PresetEntry(name, error=str(exc)))
            continue
        entries.append(PresetEntry(name, len(m.cells), m.description, tuple(preset_needs(m))))
    return entries
