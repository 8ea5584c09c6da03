"""What the timed passes computed: each request's generated ids, compared between rows, free for every matrix.

Every measured pass stores, per request, a digest of the ids it generated and their first 64
(bench.metrics.request_samples). Here they are read back and compared, with no extra run:

- `run_outputs(records)`: {cell key: {run key: {request id: (digest, first ids)}}}, from the first
  ok trial of each run (one worker process) of each cell;
- `output_parity(cell, base)`: how a row's outputs compare with the baseline row's, request by
  request: identical (equal digests: every generated id equal) and the first position where they
  part (the common prefix of the stored ids; 64 or more reads "at 64+");
- `own_floor(runs)`: the same comparison of the baseline with itself across processes (its first two
  runs), or across two trials of one process when it ran once: the floor a row's figure is read
  against (greedy decoding on a GPU is not always bit-reproducible);
- `session_vs_timed(greedy_ids, timed)`: where the accuracy session's greedy tokens (bench accuracy,
  through the same batch function) differ from the timed pass's tokens of the same cell.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.metrics import common_prefix


@dataclass(frozen=True)
class OutputParity:
    """One set of timed outputs against another, over the requests both hold."""

    requests: int
    identical: int
    mean_first_divergence: float  # over every compared request (an identical one counts its stored length)
    what: str = ""

    @property
    def rate(self) -> float:
        return self.identical / self.requests if self.requests else 0.0

    def text(self) -> str:
        return f"{self.identical}/{self.requests} identical" + (
            "" if self.identical == self.requests else f", first divergence at token {self.mean_first_divergence:.1f} on average")


def run_outputs(records) -> dict:
    """Return {(cell_id, gpu_memory_gb): {run_key: {request id: (digest, ids)}}} of ok records whose samples hold ids."""
    out: dict = {}
    chosen: dict = {}
    for rec in records:
        if not rec.ok or not rec.samples:
            continue
        outputs = {str(s["id"]): (s.get("digest"), list(s.get("ids") or [])) for s in rec.samples
                   if isinstance(s, dict) and s.get("digest") is not None and s.get("id") is not None}
        if not outputs:
            continue
        cell = (rec.cell_id, rec.gpu_memory_gb)
        run = f"{rec.context.run_id}#{rec.run}"
        if (cell, run) in chosen and chosen[(cell, run)] <= rec.trial:
            continue  # the run's first trial stands for the run
        chosen[(cell, run)] = rec.trial
        out.setdefault(cell, {})[run] = outputs
    return out


def output_parity(cell: dict, base: dict, what: str = "") -> OutputParity | None:
    """Return cell's outputs against base's over the requests both hold ({request id: (digest, ids)}), or None."""
    shared = [rid for rid in cell if rid in base]
    if not shared:
        return None
    identical = sum(1 for rid in shared if cell[rid][0] == base[rid][0])
    divergence = [len(cell[rid][1]) if cell[rid][0] == base[rid][0] else common_prefix(cell[rid][1], base[rid][1])
                  for rid in shared]
    return OutputParity(len(shared), identical, sum(divergence) / len(divergence), what)


def first_run(runs: dict) -> dict:
    """Return the outputs of a cell's first run (its runs ordered by run key)."""
    return runs[sorted(runs)[0]]


def own_floor(runs: dict) -> OutputParity | None:
    """Return the baseline against itself: its first two runs (separate processes), else None."""
    keys = sorted(runs)
    if len(keys) >= 2:
        return output_parity(runs[keys[1]], runs[keys[0]], "process to process")
    return None


def session_vs_timed(greedy_ids: dict, timed: dict) -> tuple[int, int]:
    """Return (requests compared, requests whose tokens differ) between an accuracy session's greedy ids
    ({request id: ids}) and a timed pass's ({request id: (digest, first ids)}), over the prefix both hold."""
    compared = differ = 0
    for rid, ids in greedy_ids.items():
        if rid not in timed:
            continue
        stored = timed[rid][1]
        n = min(len(ids), len(stored))
        if n == 0:
            continue
        compared += 1
        differ += list(ids[:n]) != list(stored[:n])
    return compared, differ
