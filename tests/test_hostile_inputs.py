"""A catalogue of hostile inputs: each is an argv (with a matrix text or a store where it needs one), the exit status
it must get and a piece of the message that names the problem. Run in-process (bench.cli.main), so the catalogue
stays fast; an exception escaping main is a traceback a user would see, and fails the case as TRACEBACK.

Grow it: every input that once gave a traceback or a misleading message gets a line here. Plus property-based
tests (hypothesis) of the matrix parser and of the command line's value coercion: a valid matrix or a
BenchInputError with a message, never another exception.
"""

from __future__ import annotations

import json
import os
import string

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bench.cli import main
from bench.errors import BenchInputError
from bench.results.store import ResultStore
from tests.support.records import make_record

LONG = "a" * 300  # longer than any common file system's name limit (255 bytes)

TOP = {"name": '"hostile"', "backends": '["fake"]', "model": '"qwen-tiny"', "precisions": '["bf16"]',
       "max_batch_sizes": "[1]", "workloads": '["w"]', "device": '"cpu"', "trials": "1",
       "baseline": '{ backend = "fake" }'}
SYNTHETIC = {"source": '"synthetic"', "input_len": "8", "output_len": "4", "num_requests": "2"}


def matrix(top: dict | None = None, options: dict | None = None, workload: dict | None = None, *,
           replace_workload: bool = False) -> str:
    """Return matrix TOML: the valid fake matrix with keys changed (values are TOML literals; None removes a key)."""
    t = {k: v for k, v in {**TOP, **(top or {})}.items() if v is not None}
    w = {k: v for k, v in ({**(workload or {})} if replace_workload else {**SYNTHETIC, **(workload or {})}).items()
         if v is not None}
    lines = [f"{k} = {v}" for k, v in t.items()]
    if options:
        lines += ["[options]"] + [f"{k} = {v}" for k, v in options.items()]
    lines += ["[workload.w]"] + [f"{k} = {v}" for k, v in w.items()]
    return "\n".join(lines) + "\n"


def M(**kw) -> str:
    return matrix(**kw)


RUN = ["run", "--matrix", "{matrix}", "--no-progress"]

# (id, matrix text or None, argv, exit status, a piece of the message)
CASES = [
    # numbers in a matrix: finite, integral where they count, in range
    ("option nan", M(options={"step_ms": "nan"}), RUN, 2, "step_ms for backend 'fake' must be a finite number"),
    ("option inf", M(options={"step_ms": "inf"}), RUN, 2, "must be a finite number"),
    ("option -inf", M(options={"slowdown": "-inf"}), RUN, 2, "must be a finite number"),
    ("option negative", M(options={"step_ms": "-1"}), RUN, 2, "must be a non-negative number"),
    ("option text", M(options={"step_ms": '"fast"'}), RUN, 2, "must be a number"),
    ("option bool", M(options={"step_ms": "true"}), RUN, 2, "must be a number"),
    ("option int 1.5", M(options={"seed": "1.5"}), RUN, 2, "option seed=1.5 for backend 'fake' must be an integer"),
    ("option band > 1", M(options={"oom_flaky_band": "2"}), RUN, 2, "between 0 and 1"),
    ("option nested list", M(options={"step_ms": "[[1, 2]]"}), RUN, 2, "must be a number"),
    ("option unknown", M(options={"turbo": "1"}), RUN, 2, "unknown option 'turbo'"),
    ("tensor_parallel 0", M(options={"tensor_parallel_size": "0"}), RUN, 2, "tensor_parallel_size"),
    ("seed 1.5", M(workload={"seed": "1.5"}), RUN, 2, "seed must be an integer, got 1.5"),
    ("seed -1", M(workload={"seed": "-1"}), RUN, 2, "seed must be a non-negative integer"),
    ("seed nan", M(workload={"seed": "nan"}), RUN, 2, "seed must be a finite number"),
    ("num_requests 1e9", M(workload={"num_requests": "1000000000"}), RUN, 2, "holds at most 100000 requests"),
    ("num_requests 0", M(workload={"num_requests": "0"}), RUN, 2, "num_requests must be a positive integer"),
    ("num_requests 4.0", M(workload={"num_requests": "4.0"}), RUN, 2, "num_requests must be an integer"),
    ("num_requests true", M(workload={"num_requests": "true"}), RUN, 2, "num_requests must be a positive integer"),
    ("input_len nan", M(workload={"input_len": "nan"}), RUN, 2, "input_len must be a finite number"),
    ("input_stdev inf", M(workload={"input_stdev": "inf"}), RUN, 2, "input_stdev must be a finite number"),
    ("burstiness nan", M(workload={"burstiness": "nan"}), RUN, 2, "burstiness must be a finite number"),
    ("request_rate -1", M(workload={"request_rate": "-1"}), RUN, 2, "request_rate must be a positive number"),
    ("workload unknown key", M(workload={"lenght": "3"}), RUN, 2, "unknown key 'lenght'"),
    ("trials 0", M(top={"trials": "0"}), RUN, 2, "trials (--trials) must be a positive integer"),
    ("trials true", M(top={"trials": "true"}), RUN, 2, "trials (--trials) must be a positive integer"),
    ("trials 1.5", M(top={"trials": "1.5"}), RUN, 2, "must be an integer"),
    ("trials huge", M(top={"trials": "100000000"}), RUN, 2, "<= 10000"),
    ("runs nan", M(top={"runs": "nan"}), RUN, 2, "runs (--runs) must be a finite number"),
    ("warmup -1", M(top={"warmup": "-1"}), RUN, 2, "warmup must be an integer between 0 and"),
    ("timeout nan", M(top={"timeout_s": "nan"}), RUN, 2, "timeout_s must be a finite number"),
    ("timeout inf", M(top={"timeout_s": "inf"}), RUN, 2, "timeout_s must be a finite number"),
    ("timeout 0", M(top={"timeout_s": "0"}), RUN, 2, "timeout_s must be a positive number"),
    ("gpu_memory_gb nan", M(top={"gpu_memory_gb": "nan"}), RUN, 2, "gpu_memory_gb (--gpu-memory-gb) must be a finite"),
    ("gpu_memory_gb -1", M(top={"gpu_memory_gb": "-1"}), RUN, 2, "must be a positive number"),
    ("gpu_memory_gb text", M(top={"gpu_memory_gb": '"24"'}), RUN, 2, "must be a positive number"),
    ("batch size 1.5", M(top={"max_batch_sizes": "[1.5]"}), RUN, 2, "positive integers"),
    ("batch sizes empty", M(top={"max_batch_sizes": "[]"}), RUN, 2, "max_batch_sizes"),
    ("not toml", "this = is [ not toml", RUN, 2, "not valid TOML"),
    ("binary matrix", "\x00\x01\x02\xff", RUN, 2, "matrix"),
    # workload files
    ("empty sharegpt", M(workload={"path": '"{tmp}/empty.json"', "num_requests": "2"}, replace_workload=True), RUN, 2,
     "'empty.json' is empty (0 bytes)"),
    ("sharegpt []", M(workload={"path": '"{tmp}/emptyarr.json"', "num_requests": "2"}, replace_workload=True), RUN, 2,
     "holds no records"),
    ("sharegpt no conversations", M(workload={"path": '"{tmp}/shape.json"'}, replace_workload=True), RUN, 2,
     "holds no usable conversation"),
    # command-line numbers and selections
    ("--requests 0", M(), [*RUN, "--requests", "0"], 2, "--requests must be a positive integer"),
    ("--requests 1e9", M(), [*RUN, "--requests", "1000000000"], 2, "at most 100000 requests"),
    ("--requests 1.5", M(), [*RUN, "--requests", "1.5"], 2, "invalid int value"),
    ("--trials 0", M(), [*RUN, "--trials", "0"], 2, "trials (--trials) must be a positive integer"),
    ("--runs -1", M(), [*RUN, "--runs", "-1"], 2, "runs (--runs) must be a positive integer"),
    ("--only none", M(), [*RUN, "--only", "precision=fp64"], 2, "matches none"),
    ("--baseline none", M(), [*RUN, "--baseline", "backend=hf,precision=bf16"], 2, "matches none of the matrix's 1"),
    ("--baseline garbage", M(), [*RUN, "--baseline", "fast"], 2, "key=value"),
    # paths a run writes
    ("--store folder", M(), [*RUN, "--store", "{tmp}/folder"], 2, "is a folder"),
    ("--store long name", M(), [*RUN, "--store", f"{{tmp}}/{LONG}.jsonl"], 2, "longer than the file system's limit"),
    ("--store under a file", M(), [*RUN, "--store", "{tmp}/plain.txt/s.jsonl"], 2, "is a file, not a folder"),
    ("--report-dir a file", M(), [*RUN, "--report-dir", "{tmp}/plain.txt"], 2, "is an existing file, not a folder"),
    ("--report-dir long", M(), [*RUN, "--report-dir", f"{{tmp}}/{LONG}"], 2, "longer than the file system's limit"),
    # oom and profile flags
    ("oom cap nan", M(), ["oom", "--matrix", "{matrix}", "--gpu-memory-gb", "nan"], 2, "must be a finite number"),
    ("oom cap inf", M(), ["oom", "--matrix", "{matrix}", "--gpu-memory-gb", "inf"], 2, "must be a finite number"),
    ("oom cap -3", M(), ["oom", "--matrix", "{matrix}", "--gpu-memory-gb", "-3"], 2, "must be a positive number"),
    ("oom lower 0", M(), ["oom", "--matrix", "{matrix}", "--lower", "0"], 2, "positive integer"),
    ("oom bounds inverted", M(), ["oom", "--matrix", "{matrix}", "--lower", "8", "--upper", "2"], 2, "inverted"),
    ("oom lengths", M(), ["oom", "--matrix", "{matrix}", "--lengths", "1x"], 2, "INPUTxOUTPUT"),
    ("oom decode steps", M(), ["oom", "--matrix", "{matrix}", "--decode-steps", "0"], 2, "decode_steps"),
    ("profile timeout nan", M(), ["profile", "--matrix", "{matrix}", "--timeout", "nan"], 2, "--timeout must be a finite"),
    ("profile steps 0", M(), ["profile", "--matrix", "{matrix}", "--decode-steps", "0"], 2, "--decode-steps must be"),
    ("profile processes 0", M(), ["profile", "--matrix", "{matrix}", "--processes", "0"], 2, "--processes must be"),
    ("compare profile processes 0", None, ["compare", "{tmp}/ok.jsonl", "{tmp}/ok.jsonl", "--profile",
                                           "--profile-processes", "0"], 2, "--profile-processes must be"),
    # timeouts, jump factors and counts where they enter (issue 47.7)
    ("build_timeout -1", M(top={"build_timeout_s": "-1"}), RUN, 2, "build_timeout_s must be a positive number"),
    ("build_timeout nan", M(top={"build_timeout_s": "nan"}), RUN, 2, "build_timeout_s must be a finite number"),
    ("timeout -1", M(top={"timeout_s": "-1"}), RUN, 2, "timeout_s must be a positive number"),
    ("accuracy timeout nan", M(), ["accuracy", "--matrix", "{matrix}", "--timeout", "nan"], 2,
     "--timeout must be a finite number"),
    ("accuracy timeout -1", M(), ["accuracy", "--matrix", "{matrix}", "--timeout", "-1"], 2,
     "--timeout must be a positive number"),
    ("accuracy prompts 1e9", M(), ["accuracy", "--matrix", "{matrix}", "--prompts", "1000000000"], 2,
     "[accuracy]: prompts must be a positive integer <= 100000, got 1000000000"),
    ("accuracy tokens 1e9", M(), ["accuracy", "--matrix", "{matrix}", "--answer-tokens", "1000000000"], 2,
     "answer_tokens must be a positive integer <= 1000000"),
    ("parity jump nan", M(), ["parity", "--matrix", "{matrix}", "--layers", "a=1", "b=2", "--jump-factor", "nan"], 2,
     "--jump-factor must be a finite number"),
    ("parity jump 1", M(), ["parity", "--matrix", "{matrix}", "--layers", "a=1", "b=2", "--jump-factor", "1"], 2,
     "--jump-factor must be a number > 1"),
    ("parity min-error nan", M(), ["parity", "--matrix", "{matrix}", "--layers", "a=1", "b=2", "--min-error", "nan"], 2,
     "--min-error must be a finite number"),
    ("parity min-error inf", M(), ["parity", "--matrix", "{matrix}", "--layers", "a=1", "b=2", "--min-error", "inf"], 2,
     "--min-error must be a finite number"),
    ("parity timeout -1", M(), ["parity", "--matrix", "{matrix}", "--layers", "a=1", "b=2", "--timeout", "-1"], 2,
     "--timeout must be a positive number"),
    ("parity prompts 1e9", M(), ["parity", "--matrix", "{matrix}", "--layers", "a=1", "b=2", "--prompts", "1000000000"],
     2, "--prompts must be a positive integer <= 100000"),
    ("capacity batch 1e15", M(), ["capacity", "--matrix", "{matrix}", "--axis", "max_batch_size", "--upper", "1e15",
                                  "--slo", "ttft_p99_ms=500"], 2, "--upper of axis max_batch_size must be a positive"),
    ("capacity upper nan", M(), ["capacity", "--matrix", "{matrix}", "--upper", "nan", "--slo", "ttft_p99_ms=500"], 2,
     "--upper of axis request_rate must be a finite number"),
    ("capacity lower above workload", M(), ["capacity", "--matrix", "{matrix}", "--axis", "max_batch_size", "--lower",
                                            "8", "--upper", "16", "--slo", "ttft_p99_ms=500"], 2,
     "--lower 8 is above the 2 requests workload 'w' holds"),
    # bench kernels on files that are not what they say (issue 47.7)
    ("kernels undecodable csv", None, ["kernels", "{tmp}/k/undecodable.csv", "--out", "{tmp}/ko"], 2,
     "ncu CSV '{tmp}/k/undecodable.csv' is not UTF-8 text"),
    ("kernels truncated csv", None, ["kernels", "{tmp}/k/truncated.csv", "--out", "{tmp}/ko"], 2,
     "ncu CSV '{tmp}/k/truncated.csv': row 4 has 5 column(s), the header 16: a truncated or edited file"),
    ("kernels nan csv", None, ["kernels", "{tmp}/k/nan.csv", "--out", "{tmp}/ko"], 2,
     "ncu CSV '{tmp}/k/nan.csv': data row 1 cannot be read ('nan' is not a finite, non-negative number)"),
    ("kernels negative csv", None, ["kernels", "{tmp}/k/negative.csv", "--out", "{tmp}/ko"], 2,
     "'-4000' is not a finite, non-negative number"),
    ("kernels odd columns", None, ["kernels", "{tmp}/k/odd.csv", "--out", "{tmp}/ko"], 2,
     "ncu CSV '{tmp}/k/odd.csv': row 2 has 14 column(s), the header 16"),
    ("kernels no ID column", None, ["kernels", "{tmp}/k/noid.csv", "--out", "{tmp}/ko"], 2, "lacks the ID column"),
    ("kernels truncated gz", None, ["kernels", "{tmp}/k/trunc.csv.gz", "--out", "{tmp}/ko"], 2,
     "ncu CSV '{tmp}/k/trunc.csv.gz' cannot be read (EOFError"),
    ("kernels not gzip", None, ["kernels", "{tmp}/k/bad.csv.gz", "--out", "{tmp}/ko"], 2, "(BadGzipFile: Not a gzipped"),
    ("kernels garbage sqlite", None, ["kernels", "{tmp}/k/garbage.sqlite", "--out", "{tmp}/ko"], 2,
     "'{tmp}/k/garbage.sqlite' is not an SQLite database"),
    ("kernels truncated sqlite", None, ["kernels", "{tmp}/k/trunc.sqlite", "--out", "{tmp}/ko"], 2,
     "'{tmp}/k/trunc.sqlite' is not an SQLite database (database disk image is malformed)"),
    ("kernels text times sqlite", None, ["kernels", "{tmp}/k/text.sqlite", "--out", "{tmp}/ko"], 2,
     "'{tmp}/k/text.sqlite' holds a value nsys does not write"),
    ("kernels infinite sqlite", None, ["kernels", "{tmp}/k/inf.sqlite", "--out", "{tmp}/ko"], 2,
     "kernel 'k' runs from 0 to inf ns"),
    ("kernels odd columns sqlite", None, ["kernels", "{tmp}/k/nocols.sqlite", "--out", "{tmp}/ko"], 2,
     "'{tmp}/k/nocols.sqlite': CUPTI_ACTIVITY_KIND_KERNEL has no kernel-name column"),
    ("kernels bandwidth nan", None, ["kernels", "{tmp}/k/nan.csv", "--copy-bandwidth", "nan"], 2,
     "--copy-bandwidth must be a finite number"),
    ("kernels top 0", None, ["kernels", "{tmp}/k/nan.csv", "--top", "0"], 2, "--top must be a positive integer"),
    ("kernels session.json garbage", None, ["kernels", "{tmp}/k/s/ncu_raw.csv", "--out", "{tmp}/ko"], 2,
     "session.json' beside the ncu CSV cannot be read"),
    # reports of odd stores
    ("report missing", None, ["report", "{tmp}/nope.jsonl"], 2, "does not exist"),
    ("report binary", None, ["report", "{tmp}/bin.jsonl"], 2, "is not a bench result store"),
    ("report other schema", None, ["report", "{tmp}/other.jsonl"], 2, "is not a bench result store"),
    ("report empty", None, ["report", "{tmp}/empty.jsonl"], 2, "empty"),
    ("report folder", None, ["report", "{tmp}/folder"], 2, "holds no result stores"),
    ("report all errors", None, ["report", "{tmp}/err.jsonl"], 0, "no cell ran ok"),
    ("report all oom", None, ["report", "{tmp}/oom.jsonl"], 0, "no cell ran ok"),
    ("report NaN store", None, ["report", "{tmp}/nan.jsonl"], 0, "NaN or infinite"),
    ("report --out a file", None, ["report", "{tmp}/ok.jsonl", "--out", "{tmp}/plain.txt"], 2, "existing file"),
    ("report --out long", None, ["report", "{tmp}/ok.jsonl", "--out", f"{{tmp}}/{LONG}"], 2, "longer than"),
    ("report --baseline none", None, ["report", "{tmp}/ok.jsonl", "--baseline", "backend=hf"], 2, "choose one"),
    # comparisons
    ("compare errors head", None, ["compare", "{tmp}/ok.jsonl", "{tmp}/err.jsonl"], 1, "holds only failures"),
    ("compare errors both", None, ["compare", "{tmp}/err.jsonl", "{tmp}/err.jsonl"], 0, "error on both sides"),
    ("compare oom both", None, ["compare", "{tmp}/oom.jsonl", "{tmp}/oom.jsonl"], 0, "oom on both sides"),
    ("compare NaN head", None, ["compare", "{tmp}/ok.jsonl", "{tmp}/nan.jsonl"], 4, "no metric could be judged"),
    ("compare binary", None, ["compare", "{tmp}/bin.jsonl", "{tmp}/ok.jsonl"], 2, "is not a bench result store"),
    ("compare ignore unknown", None, ["compare", "{tmp}/ok.jsonl", "{tmp}/ok.jsonl", "--ignore-option", "slowdwn"], 2,
     "valid option names are"),
    ("compare factor nan", None, ["compare", "{tmp}/ok.jsonl", "{tmp}/ok.jsonl", "--factor", "nan"], 2, "--factor"),
    ("compare factor inf", None, ["compare", "{tmp}/ok.jsonl", "{tmp}/ok.jsonl", "--factor", "inf"], 2, "--factor"),
    ("compare confidence 2", None, ["compare", "{tmp}/ok.jsonl", "{tmp}/ok.jsonl", "--confidence", "2"], 2,
     "--confidence"),
    ("compare --markdown under a file", None,
     ["compare", "{tmp}/ok.jsonl", "{tmp}/ok.jsonl", "--markdown", "{tmp}/plain.txt/x.md"], 2, "is a file, not a folder"),
    ("compare --markdown folder", None, ["compare", "{tmp}/ok.jsonl", "{tmp}/ok.jsonl", "--markdown", "{tmp}/folder"], 2,
     "is a folder"),
    # workload commands
    ("workload num_requests 1e9", M(), ["workload", "build", "--matrix", "{matrix}", "--set", "num_requests=1e9"], 2,
     "num_requests must be an integer"),
    ("workload seed 1.5", M(), ["workload", "build", "--matrix", "{matrix}", "--set", "seed=1.5"], 2, "seed must be"),
    ("workload seed nan", M(), ["workload", "build", "--matrix", "{matrix}", "--set", "seed=nan"], 2, "finite"),
    ("workload --out folder", M(), ["workload", "build", "--matrix", "{matrix}", "--out", "{tmp}/folder"], 2,
     "is a folder"),
    ("workload show missing", None, ["workload", "show", "{tmp}/nope.json"], 2, "does not exist"),
    ("workload export long", None, ["workload", "export", "{tmp}/nope.json", "--out", f"{{tmp}}/{LONG}.jsonl"], 2,
     "longer than"),
]


@pytest.fixture
def files(tmp_path):
    """Write the stores and files the catalogue names under tmp_path; return tmp_path."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "plain.txt").write_text("a file\n")
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "emptyarr.json").write_text("[]")
    (tmp_path / "shape.json").write_text('[{"id": "x"}]')
    (tmp_path / "bin.jsonl").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "other.jsonl").write_text('{"name": "not a record"}\n{"a": 1}\n')
    (tmp_path / "empty.jsonl").write_text("")
    cell = {"backend": "fake", "model": "m", "precision": "bf16", "max_batch_size": 1, "device": "cpu",
            "options": {"slowdown": 1.0}, "workload": {"name": "w"}}
    env = {"cpu": "x", "torch": "2"}
    ok, err, oom = (ResultStore(tmp_path / f"{n}.jsonl") for n in ("ok", "err", "oom"))
    for run in range(2):
        ok.append(make_record("a", run=run, cell=cell, env=env, baseline={"backend": "fake"},
                              output_throughput=10.0 + run, request_throughput=1.0))
    err.append(make_record("a", status="error", cell=cell, env={}, baseline={"backend": "fake"}))
    oom.append(make_record("a", status="oom", cell=cell, env=env, baseline={"backend": "fake"}))
    _kernel_files(tmp_path / "k")
    line = json.loads((tmp_path / "ok.jsonl").read_text().splitlines()[0])
    line["metrics"]["output_throughput"] = float("nan")
    line["metrics"]["request_throughput"] = float("inf")
    second = json.loads((tmp_path / "ok.jsonl").read_text().splitlines()[1])
    (tmp_path / "nan.jsonl").write_text(json.dumps(line) + "\n" + json.dumps(second) + "\n")
    return tmp_path


def _kernel_files(k) -> None:
    """Write the profiler exports `bench kernels` must refuse with the file's name: ncu CSVs and nsys SQLite files
    that are undecodable, truncated, hold NaN or odd columns."""
    import gzip
    import sqlite3
    from pathlib import Path

    data = Path(__file__).parent / "data"
    csv = (data / "ncu" / "decode_step_raw.csv").read_text()
    lines = csv.splitlines()
    k.mkdir()
    (k / "undecodable.csv").write_bytes(b"\xff\xfe\x00garbage\x81")
    (k / "truncated.csv").write_text(csv[:700])
    (k / "nan.csv").write_text(csv.replace('"4000"', '"nan"'))
    (k / "negative.csv").write_text(csv.replace('"4000"', '"-4000"'))
    (k / "odd.csv").write_text("\n".join(lines[:3] + [ln.rsplit(",", 2)[0] for ln in lines[3:]]) + "\n")
    (k / "noid.csv").write_text(csv.replace('"ID",', '"Index",'))
    (k / "trunc.csv.gz").write_bytes(gzip.compress(csv.encode())[:200])
    (k / "bad.csv.gz").write_bytes(b"not gzip")
    (k / "s").mkdir()
    (k / "s" / "ncu_raw.csv").write_text(csv)
    (k / "s" / "session.json").write_text("{not json")
    sqlite = (data / "nsys" / "saxpy-mpi-cuda_nsys2022.2.sqlite").read_bytes()
    (k / "trunc.sqlite").write_bytes(sqlite[:300_000])
    (k / "garbage.sqlite").write_text("hello world")
    for name, columns, row in (("text.sqlite", "start, end, correlationId, globalPid, demangledName",
                                "('abc', 'x', 1, 2, 1)"),
                               ("inf.sqlite", "start, end, correlationId, globalPid, demangledName", "(0, 9e999, 1, 2, 1)"),
                               ("nocols.sqlite", "a, b", "(1, 2)")):
        con = sqlite3.connect(k / name)
        con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({columns})")
        con.execute("CREATE TABLE StringIds (id, value)")
        con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES {row}")
        con.execute("INSERT INTO StringIds VALUES (1, 'k')")
        con.commit()
        con.close()


def run_cli(argv: list[str]) -> int:
    """Return main's exit status; an exception escaping main fails the case as a TRACEBACK."""
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own refusals (exit 2 with a usage line)
        return exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:  # noqa: BLE001 - what a user would see as a traceback
        pytest.fail(f"TRACEBACK: {type(exc).__name__}: {str(exc)[:300]}", pytrace=False)


@pytest.mark.parametrize("text, argv, code, needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input(files, capsys, text, argv, code, needle):
    tmp = str(files)
    subs = {"tmp": tmp, "matrix": str(files / "m.toml")}
    if text is not None:
        (files / "m.toml").write_text(text.replace("{tmp}", tmp))
    got = run_cli([a.format(**subs) for a in argv])
    out = capsys.readouterr()
    both = out.out + out.err
    assert "Traceback" not in both
    assert got == code, both[-2000:]
    assert needle.format(**subs) in both, both[-2000:]


def test_catalogue_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


# ---- properties: a valid matrix or a BenchInputError, never another exception ----------------------------------

# A few seconds by default; BENCH_HYPOTHESIS_EXAMPLES=3000 for a deeper search (a minute or two).
PROPERTY = settings(max_examples=int(os.environ.get("BENCH_HYPOTHESIS_EXAMPLES", "80")), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.function_scoped_fixture])

# TOML literals a user might write, plausible and hostile
LITERALS = st.sampled_from([
    "0", "1", "-1", "2", "8", "1.5", "-0.0", "1e9", "100000000000000000000", "nan", "inf", "-inf", "true", "false",
    '""', '"x"', '"fake"', '"hf"', '"cpu"', '"cuda"', '"bf16"', '"none"', '"inf"', '"synthetic"', '"sharegpt"',
    "[]", "[1]", "[1, 2]", "[0]", "[1.5]", '["fake"]', '["bf16", "int4"]', '["x"]', "[[1]]", "[true]",
    "{}", "{ a = 1 }", '{ backend = "fake" }', '{ backend = "fake", precision = "bf16" }',
])
TOP_KEYS = st.sampled_from(["name", "backends", "model", "precisions", "max_batch_sizes", "workloads", "device",
                            "devices", "trials", "warmup", "runs", "timeout_s", "build_timeout_s", "gpu_memory_gb",
                            "baseline", "executor", "ray_address", "include", "exclude", "description", "unknown"])
OPTION_KEYS = st.sampled_from(["step_ms", "step_ms_per_seq", "noise", "slowdown", "memory_gb", "seed", "fail",
                               "oom_flaky_band", "short_rows", "wall_ms", "tensor_parallel_size", "kv_bytes_per_token",
                               "turbo"])
WORKLOAD_KEYS = st.sampled_from(["source", "num_requests", "seed", "input_len", "output_len", "max_input_len",
                                 "max_total_len", "min_len", "length_dist", "input_stdev", "input_min", "input_max",
                                 "output_min", "output_max", "request_rate", "burstiness", "max_concurrency",
                                 "oversample", "prompt_format", "tokenizer", "lenght"])


def _load(tmp_path, text: str):
    from bench.spec.matrix import load_matrix

    path = tmp_path / "p.toml"
    path.write_text(text)
    try:
        return load_matrix(str(path))
    except BenchInputError as exc:
        assert str(exc).strip(), "a BenchInputError must say what is wrong"
        return None


@PROPERTY
@given(top=st.dictionaries(TOP_KEYS, LITERALS, max_size=4), options=st.dictionaries(OPTION_KEYS, LITERALS, max_size=3),
       workload=st.dictionaries(WORKLOAD_KEYS, LITERALS, max_size=3))
def test_matrix_parser_gives_a_matrix_or_a_clear_error(tmp_path, top, options, workload):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. device 'cuda' without NVML: a warning, not the property
        m = _load(tmp_path, matrix(top=top, options=options or None, workload=workload))
    if m is not None:  # what loads is valid all through: finite numbers, cells that name their backend
        assert m.cells and all(c.max_batch_size >= 1 for c in m.cells)
        assert m.settings.trials >= 1 and m.settings.runs >= 1
        for c in m.cells:
            for v in c.options_dict.values():
                assert not (isinstance(v, float) and v != v)


@PROPERTY
@given(st.text(alphabet=string.printable, max_size=120))
def test_arbitrary_text_is_a_matrix_or_a_clear_error(tmp_path, text):
    _load(tmp_path, text)


@PROPERTY
@given(key=OPTION_KEYS, text=st.one_of(st.sampled_from(["nan", "inf", "-inf", "1e309", "1.5", "-1", "0", "true",
                                                         "none", "null", "fast", "", "1_0", "0x10", "  3 "]),
                                        st.text(max_size=8)))
def test_command_line_values_coerce_to_a_valid_option_or_a_clear_error(key, text):
    from bench.backends.fake.backend import FakeBackend
    from bench.spec.narrow import coerce_cli_value

    value = coerce_cli_value(text)
    try:
        opts = FakeBackend.normalize_options({key: value})
    except BenchInputError as exc:
        assert key in str(exc)
        return
    v = opts[key]
    assert not (isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))))


@PROPERTY
@given(key=WORKLOAD_KEYS, text=st.one_of(st.sampled_from(["nan", "inf", "1e9", "1.5", "-1", "0", "4", "true", "none",
                                                           "synthetic", "uniform"]), st.text(max_size=8)))
@example(key="tokenizer", text="~0")  # found by this test in CI: pathlib raised "Could not determine home directory"
@example(key="path", text="~0")
def test_workload_set_values_give_a_spec_or_a_clear_error(key, text):
    from bench.spec.cells import WorkloadSpec
    from bench.spec.narrow import coerce_cli_value

    data = {"source": "synthetic", "input_len": 8, "output_len": 4, key: coerce_cli_value(text)}
    try:
        spec = WorkloadSpec.from_dict("w", data)
    except BenchInputError as exc:
        assert str(exc).startswith("workload 'w'")
        return
    assert 1 <= spec.num_requests <= 100_000 and isinstance(spec.seed, int)


def test_records_with_ids_and_figure_blocks_of_the_wrong_type_are_read_without_a_traceback():
    """A stored record's run_id that is not text, and an extra.profile or extra.accuracy that is not a table: the
    record still reads, its ids can be grouped and matched (bench.results.profile_windows, the accuracy schedule), and
    its figure block reads as empty."""
    from bench.results.query import session_peaks
    from bench.results.records import parse

    ctx = {"run_id": ["a", 1], "command": 7, "started_at": 1000.0}
    prof = parse({"kind": "profile", "cell_id": "c", "context": ctx, "run": 0, "status": "ok",
                  "extra": {"profile": ["timed process"], "kernel_table": "t.json"}})
    acc = parse({"kind": "accuracy", "cell_id": "c", "context": ctx, "run": 0, "status": "ok",
                 "extra": {"accuracy": [46e9]}})
    assert prof.context.run_id == "['a', 1]" and prof.context.command == "7"
    assert {prof.process_key} == {("['a', 1]", 0)}  # hashable: grouped and matched as text
    assert prof.profile == {} and prof.from_timed_process is False and prof.tool is None
    assert acc.accuracy == {} and session_peaks([acc]) == {}


def test_a_path_under_an_unknown_users_home_is_a_clear_error_not_a_traceback(capsys):
    """`~0/...`: pathlib raises RuntimeError ("Could not determine home directory") for a user the machine does not
    have; every path the user names goes through bench.files.user_path, which says so and how to mean the folder."""
    from bench.cli import main
    from bench.files import user_path

    assert main(["run", "--matrix", "~0/m.toml"]) == 2
    err = capsys.readouterr().err
    assert "matrix file '~0/m.toml': Could not determine home directory" in err and "'./~0/m.toml'" in err
    assert "Traceback" not in err
    assert str(user_path("~/x")).endswith("/x") and not str(user_path("~/x")).startswith("~")


def test_a_records_stored_extra_figures_and_host_probe_are_no_figure_where_not_finite():
    """Metrics are made finite when a record is read; `extra`'s figures and the host probe are as stored: an int of
    400 digits there made Record.metric's float() raise OverflowError (bench compare's host notes read the probe), and
    nan or inf read as figures. Record.metric now gives None for each, as for a missing one."""
    from bench.results.records import HOST_PROBE, parse

    def record(probe, unwarmed):
        return parse({"schema_version": 2, "kind": "measurement", "cell_id": "c" * 16, "cell": {}, "status": "ok",
                      "context": {"run_id": "r"}, "metrics": {"tpot_median_ms": 1.0},
                      "extra": {"host_load": {HOST_PROBE: probe}, "unwarmed_batches": unwarmed}})

    for bad in (10**400, -(10**400), float("nan"), float("inf"), "1.2", True):
        r = record(bad, bad)
        assert r.metric(HOST_PROBE) is None and r.metric("unwarmed_batches") is None, bad
    assert record(1.25, 3).metric(HOST_PROBE) == 1.25 and record(1.25, 3).metric("unwarmed_batches") == 3.0
