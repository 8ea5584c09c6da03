"""The driver of `bench workload build|show|export`: a workload frozen to a file, its statistics, its export.

`workload_spec` reads the spec the flags name (a matrix's workload, a file, or the defaults, with
--set overrides); `build_file` freezes it, `show` gives its statistics (a frozen file as it was
built), `export` writes trtllm-bench's JSONL. Every output path is checked before any work.
"""

from __future__ import annotations

from pathlib import Path

from bench.errors import BenchInputError
from bench.files import check_output_file, user_path, write_atomic


def workload_spec(*, preset: str | None = None, matrix: str | None = None, name: str | None = None,
                  sets: list[str] = (), file: str | None = None):
    """Return the WorkloadSpec named by --preset/--matrix/--name/--set (or a file source)."""
    from bench.spec.cells import WorkloadSpec
    from bench.spec.matrix import load_matrix
    from bench.spec.narrow import coerce_cli_value

    overrides = {}
    for item in sets:
        if "=" not in item:
            raise BenchInputError(f"--set wants KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        overrides[key.strip()] = coerce_cli_value(value.strip())
    if file:
        name = name or Path(file).stem
        data = {"source": "file", "path": file, **overrides}
        data.setdefault("num_requests", _count_requests(file))
        return WorkloadSpec.from_dict(name, data)
    if matrix and preset:
        raise BenchInputError("give either --matrix FILE or --preset NAME, not both")
    if not (matrix or preset):
        return WorkloadSpec.from_dict(name or "sharegpt", overrides)
    loaded = load_matrix(matrix) if matrix else load_matrix(preset, preset=True)
    specs = {c.workload.name: c.workload for c in loaded.cells}
    name = name or next(iter(specs))
    if name not in specs:
        raise BenchInputError(f"--name {name!r} is not a workload of matrix {loaded.name!r}; its workloads are {sorted(specs)}")
    base = {k: v for k, v in specs[name].to_dict().items() if k != "name"}
    return WorkloadSpec.from_dict(name, {**base, **overrides})


def _count_requests(file: str) -> int:
    """Return how many requests a workload JSON or JSONL file holds (to replay all of them)."""
    import json

    path = user_path(file, "workload file")
    if not path.is_file():
        raise BenchInputError(f"workload file {file!r} does not exist")
    text = path.read_text(errors="replace")
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and isinstance(doc.get("requests"), list):
            return max(1, len(doc["requests"]))
    except ValueError:
        pass
    return max(1, sum(1 for line in text.splitlines() if line.strip()))


def build_file(spec, out: str | None = None) -> tuple[str, Path]:
    """Build the workload and write its frozen file (default workloads/<name>.json); return (its statistics, the file)."""
    from bench.workloads.lengths import format_stats
    from bench.workloads.workload import build_workload

    check_output_file(out or f"workloads/{spec.name}.json", "--out")
    wl = build_workload(spec)
    path = write_atomic(out or f"workloads/{spec.name}.json", wl.to_json())
    return format_stats(wl), path


def show(file: str | None = None, **spec_flags) -> str:
    """Return a workload's statistics: a frozen .json file as it was built (with its own drop counts and parse
    report), else the workload the flags name (a file source, a matrix's, the defaults), built now."""
    from bench.workloads.lengths import format_stats
    from bench.workloads.workload import build_workload

    if file and not spec_flags.get("sets") and Path(file).suffix == ".json":
        return format_stats(_read_frozen(file))
    return format_stats(build_workload(workload_spec(file=file, **spec_flags)))


def export(file: str, out: str) -> str:
    """Write a frozen workload file as trtllm-bench's JSONL dataset; return what was written, in words."""
    from bench.workloads.trtllm_dataset import to_trtllm_jsonl

    check_output_file(out, "--out")
    wl = _read_frozen(file)
    path = write_atomic(out, to_trtllm_jsonl(wl))
    return f"wrote {len(wl.requests)} requests to {path} (trtllm-bench --dataset format)"


def _read_frozen(file: str):
    from bench.workloads.workload import Workload

    path = user_path(file, "workload file")
    if not path.is_file():
        raise BenchInputError(f"workload file {file!r} does not exist; make one with `bench workload build`")
    try:
        return Workload.from_json(path.read_text())
    except (ValueError, KeyError, TypeError) as exc:
        raise BenchInputError(f"{file!r} is not a workload file from `bench workload build`: {exc}") from exc
