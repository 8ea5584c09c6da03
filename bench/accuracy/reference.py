"""The baseline's reference: what each cell is measured against, computed once through the baseline's own runtime.

llama.cpp's `--kl-divergence-base`: the base model's logits on the scored text are saved once,
and every quantized (or otherwise changed) model is compared with the saved file. Here the
baseline's accuracy session writes, in its folder (results/accuracy/<matrix>/<baseline cell_id>/):

- reference.safetensors: per scored sequence i, the tensor `logits.<i>` [answer positions, vocab]
  of the baseline's teacher-forced logits, in the dtype its lm_head computed them (lossless),
  read lazily (safetensors: a reference is data and never runs code when read, unlike a pickle);
- reference.json: the format, the baseline cell, the settings key, the sequences (prompt and
  answer ids), the reference kind, the baseline's greedy ids by request, its noise floors and
  determinism, and the SHA-256 of the .safetensors file (a reference whose tensors changed is refused).

Each cell's session then reads the folder, in its own process: the two models never share a
process, so process-wide settings (Inductor's) never clash and a cell holds no second model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchInputError
from bench.files import file_sha256

FORMAT = 1
TENSORS = "reference.safetensors"
META = "reference.json"


@dataclass
class Reference:
    """A baseline's saved reference, opened for reading (reference.json's fields; logits read on demand)."""

    folder: Path
    meta: dict
    _handle: object = field(default=None, repr=False)

    @classmethod
    def open(cls, folder: str | Path, check_digest: bool = True) -> Reference:
        """Return the reference in `folder`; BenchInputError naming the file and the fix when it is missing or damaged."""
        folder = Path(folder)
        meta_path, tensors = folder / META, folder / TENSORS
        if not meta_path.is_file() or not tensors.is_file():
            raise BenchInputError(f"no baseline reference in {folder} ({META} and {TENSORS}): run `bench accuracy` "
                                  "for the baseline first (it writes them)")
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise BenchInputError(f"baseline reference {meta_path} cannot be read ({exc}): delete the folder and run "
                                  "`bench accuracy` again") from exc
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise BenchInputError(f"baseline reference {meta_path} has format {meta.get('format') if isinstance(meta, dict) else None!r}, "
                                  f"not {FORMAT}: delete the folder and run `bench accuracy` again")
        if check_digest and file_sha256(tensors) != meta.get("tensors_sha256"):
            raise BenchInputError(f"baseline reference {tensors} does not match the SHA-256 in {META} (changed or "
                                  "damaged): delete the folder and run `bench accuracy` again")
        return cls(folder, meta)

    @property
    def sequences(self) -> list[tuple[list[int], list[int]]]:
        return [(list(p), list(a)) for p, a in self.meta["sequences"]]

    def logits(self, i: int):
        """Return sequence i's baseline logits [positions, vocab] (a CPU tensor)."""
        if self._handle is None:
            from safetensors import safe_open

            self._handle = safe_open(str(self.folder / TENSORS), framework="pt")
        return self._handle.get_tensor(f"logits.{i}")


def write_meta(folder: Path, meta: dict) -> Path:
    """Write reference.json (atomically) with the format stamped; return its path."""
    path = Path(folder) / META
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"format": FORMAT, **meta}))
    tmp.replace(path)
    return path


class Scorer:
    """position_stats of a runtime's logits against a Reference's, accumulated as the runtime hands them over.

    Each sequence's baseline logits go to the logits' device once, when its first position arrives;
    the oldest are dropped past `hold` sequences (two batches: a runtime feeds one batch at a time), so
    answer x vocab is never held for all sequences at once.
    """

    def __init__(self, reference: Reference, hold: int = 64):
        self.reference = reference
        self.answers = [a for _, a in reference.sequences]
        self.hold = max(1, hold)
        self.chunks: list[dict] = []
        self._held: dict[int, object] = {}

    def __call__(self, indices: list[int], k: int, logits) -> None:
        import torch

        from bench.accuracy.figures import position_stats

        base_rows, targets = [], []
        for i in indices:
            if i not in self._held:
                while len(self._held) >= self.hold:
                    self._held.pop(next(iter(self._held)))
                self._held[i] = self.reference.logits(i).to(logits.device)
            held = self._held[i]
            if k >= held.shape[0]:
                raise ValueError(f"sequence {i}: position {k} was not scored by the baseline ({held.shape[0]} were)")
            base_rows.append(held[k])
            targets.append(self.answers[i][k])
        self.chunks.append(position_stats(torch.stack(base_rows), logits, torch.tensor(targets)))

    def parity(self):
        """Return the TokenParity of everything scored so far."""
        from bench.accuracy.figures import token_parity

        return token_parity(self.chunks)
