"""A cell's accuracy inputs captured in the process that timed it (`bench run --accuracy-capture`, `bench study`).

After a cell's timed trials, its worker feeds the accuracy prompts' reference answers through the
same loaded model, static cache and compiled step (HFLoaded.teacher_forced) and generates the greedy
tokens twice (HFLoaded.greedy), then writes them to the cell's capture folder:

- capture.safetensors: per scored sequence i, `logits.<i>` [positions fed, vocab], in the dtype the
  lm_head computed them (safetensors: reading it never runs code);
- capture.json: the format, the cell, the settings it was captured for (CAPTURE_KEYS), the sequences
  (prompt and answer ids), the positions fed, both greedy passes by request, the static cache lengths, the seconds it
  took, what it compiled, the run and commit that timed it, and the SHA-256 of the tensors.

`bench accuracy` then scores a cell from its capture (bench.accuracy.session) instead of loading
and compiling it again in a session of its own: no second compile of a shape the run compiled, and
the figures come from the very process whose speed is reported. A capture that does not match (other
settings, other sequences, changed tensors, another commit) is not used, and the cell is measured in
a session as before. Only prompts with dataset answers are captured: a baseline-greedy reference
needs the baseline's own tokens, which exist only once its session has run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from bench.checks import is_seconds
from bench.errors import BenchInputError
from bench.execution.compile_counts import COUNTERS, compile_counters, counters_since
from bench.files import file_sha256

FORMAT = 1
TENSORS = "capture.safetensors"
META = "capture.json"
# The accuracy settings a capture depends on: a capture made for other values is not used.
CAPTURE_KEYS = ("prompts", "answer_tokens", "generate_tokens", "reference")
# capture.json's run.made_by where an accuracy session made it before its baseline's Reference existed
# (bench.accuracy.early), not a timed process.
EARLY = "accuracy session"


class LogitsWriter:
    """Collects teacher-forced logits by (sequence, position) as a runtime hands them over; writes them once."""

    def __init__(self, lengths: list[int]):
        self.lengths = list(lengths)
        self.rows: dict[int, object] = {}  # sequence -> [len, vocab] CPU tensor, filled position by position
        self.filled: dict[int, int] = {}

    def __call__(self, indices: list[int], k: int, logits) -> None:
        host = logits.detach().to("cpu")
        for row, i in enumerate(indices):
            if i not in self.rows:
                import torch

                self.rows[i] = torch.empty((self.lengths[i], host.shape[-1]), dtype=host.dtype)
                self.filled[i] = 0
            self.rows[i][k] = host[row]
            self.filled[i] += 1

    def fed(self) -> list[int]:
        """Return how many positions of each sequence were handed over."""
        return [self.filled.get(i, 0) for i in range(len(self.lengths))]

    def save(self, path: Path) -> str:
        """Write the tensors file (each sequence cut to the positions fed) atomically; return its SHA-256."""
        from safetensors.torch import save_file

        tensors = {f"logits.{i}": t[: self.filled[i]].contiguous() for i, t in self.rows.items()}
        path = Path(path)
        tmp = path.with_suffix(".tmp")
        save_file(tensors, str(tmp))
        tmp.replace(path)
        return file_sha256(path)


def capture_key(settings) -> dict:
    """Return the settings a capture is made for (an AccuracySpec or its dict)."""
    get = settings.get if isinstance(settings, dict) else lambda k: getattr(settings, k)
    return {k: get(k) for k in CAPTURE_KEYS}


def capture_dir(matrix_name: str, cell_id: str, settings) -> Path:
    """Return a cell's capture folder for these settings: results/accuracy/<matrix>/captures/<cell>/<settings>."""
    from bench.spec.cells import short_hash

    return (Path("results") / "accuracy" / matrix_name / "captures" / cell_id / short_hash(capture_key(settings))).resolve()


def capture(loaded, cell, spec: dict) -> dict:
    """Feed the accuracy sequences and generate the greedy tokens through `loaded` (the timed model, after its trials);
    write the capture into spec["folder"]; return what capture.json says.

    spec (written by bench.runner.matrix): folder, workload_file and answers_file (the accuracy prompts and their
    reference answers), settings (CAPTURE_KEYS), max_total_len, and the run's context (run_id, commit).
    """
    from bench.workloads.references import scored_sequences
    from bench.workloads.workload import Workload

    settings = spec["settings"]
    requests = Workload.from_json(Path(spec["workload_file"]).read_text()).requests[: settings["prompts"]]
    answers = json.loads(Path(spec["answers_file"]).read_text())["answers"]
    sequences = scored_sequences(requests, answers, settings["answer_tokens"], spec["max_total_len"])
    opts, size = cell.options_dict, cell.max_batch_size
    timed_len = getattr(loaded, "cache_len", None)
    # Grown only where an accuracy prompt the speed run did not have leaves no room (a new shape, said in the record).
    loaded.grow_cache_len(requests, size, opts, max(settings["answer_tokens"], settings["generate_tokens"]))
    before = compile_counters()
    t0 = time.perf_counter()
    writer = LogitsWriter([len(a) for _, a in sequences])
    loaded.teacher_forced(sequences, size, opts, writer)
    first = loaded.greedy(requests, size, opts, settings["generate_tokens"])
    second = loaded.greedy(requests, size, opts, settings["generate_tokens"])
    measure_s = time.perf_counter() - t0
    folder = Path(spec["folder"])
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "cell": cell.to_dict(), "cell_id": cell.cell_id, "settings": capture_key(settings),
            "sequences": sequences, "fed": writer.fed(), "greedy_ids": first,
            "greedy_ids_second": second, "request_ids": [r.id for r in requests],
            "static_cache_len": getattr(loaded, "cache_len", None), "timed_static_cache_len": timed_len,
            "measure_s": measure_s, "compile": counters_since(before), "run": spec.get("run", {}),
            "tensors_sha256": writer.save(folder / TENSORS)}
    tmp = folder / (META + ".tmp")
    tmp.write_text(json.dumps(meta))
    tmp.replace(folder / META)
    return meta


class Capture:
    """A cell's capture, opened for scoring: capture.json's fields, logits read on demand (safetensors)."""

    def __init__(self, folder: Path, meta: dict):
        self.folder, self.meta, self._handle = Path(folder), meta, None

    @classmethod
    def open(cls, folder: str | Path, cell_id: str, settings, check_digest: bool = True, code: dict | None = None
             ) -> Capture:
        """Return the capture in `folder`, made for this cell and settings (and by this code: `code`, the checkout's
        {"commit", "dirty"}, where given); BenchInputError saying why it cannot be used otherwise (the cell is then
        measured in a session). Which sequences it scored is checked where it is scored
        (bench.accuracy.runtime.captured_figures), against the baseline's Reference."""
        folder = Path(folder)
        meta_path, tensors = folder / META, folder / TENSORS
        if not meta_path.is_file() or not tensors.is_file():
            raise BenchInputError(f"no capture in {folder}")
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError) as exc:
            raise BenchInputError(f"capture {meta_path} cannot be read ({exc})") from exc
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise BenchInputError(f"capture {meta_path} is not format {FORMAT}")
        if meta.get("cell_id") != cell_id:
            raise BenchInputError(f"capture {meta_path} is of cell {meta.get('cell_id')!r}, not {cell_id!r}")
        if meta.get("settings") != capture_key(settings):
            raise BenchInputError(f"capture {meta_path} was made for {meta.get('settings')}, not {capture_key(settings)}")
        fed, ids, seqs = meta.get("fed"), meta.get("request_ids"), meta.get("sequences")
        if not (isinstance(seqs, list) and isinstance(fed, list) and len(fed) == len(seqs)
                and all(isinstance(pa, list) and len(pa) == 2 and all(_ids(x) for x in pa) for pa in seqs)
                and all(type(n) is int and 0 <= n <= len(seqs[i][1]) for i, n in enumerate(fed)) and isinstance(ids, list)
                and all(isinstance(meta.get(k), dict) and set(meta[k]) == set(ids)
                        and all(_ids(v) for v in meta[k].values()) for k in ("greedy_ids", "greedy_ids_second"))
                and is_seconds(meta.get("measure_s")) and _compile_counts(meta.get("compile", {}))
                and _run(meta.get("run", {})) and all(meta.get(k) is None or (type(meta[k]) is int and meta[k] > 0)
                                                      for k in ("static_cache_len", "timed_static_cache_len"))):
            raise BenchInputError(f"capture {meta_path} has malformed sequences, positions, greedy tokens, times, "
                                  "compile counts, run or cache lengths")
        made = meta.get("run", {})
        if code and code.get("commit") and made.get("commit") and made.get("commit") != code.get("commit"):
            raise BenchInputError(f"capture {meta_path} was made by commit {str(made['commit'])[:12]}, not this "
                                  f"checkout's {str(code['commit'])[:12]}: the code that timed it is not this code")
        if check_digest and file_sha256(tensors) != meta.get("tensors_sha256"):
            raise BenchInputError(f"capture {tensors} does not match the SHA-256 in {META} (changed or damaged)")
        return cls(folder, meta)

    def logits(self, i: int):
        """Return sequence i's captured logits [positions fed, vocab] (a CPU tensor)."""
        if self._handle is None:
            from safetensors import safe_open

            self._handle = safe_open(str(self.folder / TENSORS), framework="pt")
        return self._handle.get_tensor(f"logits.{i}")


def _compile_counts(value) -> bool:
    """Return whether value has compile_counts' shape: {} or its int counters and {phase: seconds}."""
    if value == {}:
        return True
    return (isinstance(value, dict) and set(value) == {*COUNTERS, "phases_s"} and all(type(value[k]) is int for k in COUNTERS)
            and isinstance(value["phases_s"], dict) and all(isinstance(k, str) and is_seconds(v) for k, v in value["phases_s"].items()))


def _run(value) -> bool:
    """Return whether value is the run a capture names: run_id and commit as text, dirty as a bool (each may be None);
    a capture an accuracy session made before its baseline's Reference existed (bench.accuracy.early) also names its
    maker (made_by: EARLY, nothing else) and the seconds its model took to load (load_s)."""
    return (isinstance(value, dict) and set(value) <= {"run_id", "commit", "dirty", "made_by", "load_s"}
            and value.get("made_by") in (None, EARLY)
            and all(v is None or isinstance(v, str) for k, v in value.items() if k not in ("dirty", "load_s"))
            and value.get("dirty") in (None, True, False) and ("load_s" not in value or is_seconds(value["load_s"])))


def _ids(value) -> bool:
    """Return whether value is a list of token ids (ints, not bools)."""
    return isinstance(value, list) and all(type(t) is int for t in value)
