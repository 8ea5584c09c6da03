"""Where a regression's time went (bench.results.attribution): the per-step breakdown a kernel table holds, the
ranked rows against hand-computed numbers, profiles matched to the compared cells, and `bench compare`'s section."""

import json
import math
import re
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import BenchInputError
from bench.execution.kernels import (
    AttributedKernel,
    RangeSpan,
    build_kernel_table,
    decode_step_breakdown,
    host_time_by_module,
)
from bench.results import attribution as A
from bench.results import decode_step as D
from bench.results import profile_windows as PW
from bench.results.records import new_context, new_record
from bench.results.store import ResultStore
from bench.runner.matrix import run_matrix
from bench.spec.matrix import parse_matrix
from tests.support.folders import isolated
from tests.support.matrices import planted_matrix


def K(name, us, *ranges):
    """A kernel launched inside `ranges` (labels, outermost first), each its own instance key."""
    return AttributedKernel(name, us, tuple((label, label) for label in ranges))


def step(k, *modules):
    """The range chain of a kernel of decode step k of batch 0 inside these module ranges."""
    return ("batch:0", f"decode_step:{k}", *modules)


LAYER, MLP, NORM, ATTN = "Qwen2DecoderLayer:model.layers.0", "Qwen2MLP:model.layers.0.mlp", \
    "Qwen2RMSNorm:model.layers.0.input_layernorm", "Qwen2Attention:model.layers.0.self_attn"


def window(mlp_repeats: int, head: bool) -> list[AttributedKernel]:
    """Two decode steps and a prefill: per step MLP 300 µs a repeat, norm 10, attention 50, the layer's residual add 5,
    lm_head 200, outside any module 5 (an embedding copy; head: a gather instead, and an extra silu in the MLP)."""
    out = [K("gemv_mlp", 999.0, "batch:0", "prefill:0", LAYER, MLP)]  # the prefill: never a decode step's
    for k in (1, 2):
        out += [K("gemv_mlp", 300.0, *step(k, LAYER, MLP)) for _ in range(mlp_repeats)]
        out += [K("rms_norm_kernel", 10.0, *step(k, LAYER, NORM)), K("flash_fwd", 50.0, *step(k, LAYER, ATTN)),
                K("elementwise_add", 5.0, *step(k, LAYER)), K("gemv_head", 200.0, *step(k, "lm_head"))]
        out += [K("silu_extra", 20.0, *step(k, LAYER, MLP)), K("index_gather", 5.0, *step(k))] if head else \
            [K("embedding_copy", 5.0, *step(k))]
    out.append(K("argmax_between_steps", 1.0, "batch:0"))  # generate's own work between steps: outside the steps
    return out


def table(kernels, tool="nsys"):
    instances = {}
    for k in kernels:
        for label, key in k.ranges:
            instances.setdefault(label, set()).add(key)
    return build_kernel_table(kernels, instances, source=tool, unit="gpu_kernel").to_dict()


def figures(mlp_repeats, head, step_ms):
    t = json.loads(json.dumps(table(window(mlp_repeats, head))))  # as stored
    return D.step_figures(t, {"step_ms": step_ms, "window": {"kind": "decode", "decode_steps": 2}}, "nsys", "t.json")


class Side:
    """One side of a comparison as the attribution reads it: cell "k" whose step values are `runs` (a list per run)."""

    def __init__(self, runs):
        self.cells = {"k": type("Cell", (), {"values": lambda _self, metric: runs})()}


def test_the_breakdown_counts_each_kernel_once_in_its_innermost_module_inside_its_step():
    b = decode_step_breakdown(window(1, False), {f"decode_step:{k}": {f"decode_step:{k}"} for k in (1, 2)} | {MLP: {MLP}})
    assert b["steps"] == 2 and b["module_ranges"]
    rows = {(m, n): (c, us) for m, n, _, c, us in b["rows"]}
    assert rows[("Qwen2MLP", "gemv_mlp")] == (2, 600.0)  # the prefill's 999 µs is not a step's
    assert rows[("Qwen2DecoderLayer", "elementwise_add")] == (2, 10.0)  # the layer's own, not its children's
    assert rows[("", "embedding_copy")] == (2, 10.0)  # in a step, in no module range
    assert not any(n == "argmax_between_steps" for _, n in rows)
    assert decode_step_breakdown(window(1, False), {"batch:0": {"batch:0"}}) is None  # no step range: nothing
    # every kernel table carries it, whichever collector built it
    assert table(window(1, False))["meta"]["decode_steps"]["steps"] == 2


def test_rows_shares_gaps_and_unexplained_by_hand():
    base, head = figures(1, False, 0.600), figures(2, True, 0.950)
    assert base.busy_us == 570.0 and base.wall_us == 600.0 and head.busy_us == 890.0
    a = A.attribute("k", "hf/bf16/bs1/w", ["regressed: tpot_median_ms"], base, head, (600.0, 1000.0))
    m = {r.name: r for r in a.modules}
    # MLP: 300 -> 600 + 20 µs of a new silu, 1 -> 3 kernels a step: +320 µs of the measured +400 (80 %)
    assert a.modules[0].name == "MLP" and m["MLP"].delta_us == 320.0 and m["MLP"].delta_kernels == 2.0
    assert m["MLP"].share == pytest.approx(0.8)
    assert A.GAPS not in m  # the time no kernel ran is in no module: the module table leaves it to its rest
    assert m[D.OUTSIDE].delta_us == 0.0 and m["lm_head"].base_us == 200.0 and m["decoder layer"].base_us == 5.0
    assert m["RMSNorm"].base_kernels == 1.0 and m["attention"].head_us == 50.0
    assert a.unexplained_us(a.modules) == pytest.approx(80.0)
    # launch gaps and idle, a category: (600 - 570) -> (950 - 890), +30 µs, 7.5 %; the categories explain 87.5 %
    gaps = next(r for r in a.categories if r.name == A.GAPS)
    assert a.categories[1] is gaps and gaps.delta_us == 30.0 and gaps.share == pytest.approx(0.075)
    assert a.explained_share == pytest.approx(0.875)
    c = {r.name: r.delta_us for r in a.categories}
    assert a.categories[0].name == "gemm" and c == {"gemm": 300.0, "norm/reduction": 0.0, "attention": 0.0,
                                                    "elementwise": 20.0, "copy": -5.0, "other": 5.0, A.GAPS: 30.0}
    assert a.unexplained_us(a.categories) == pytest.approx(50.0)
    assert [n for n, _, _ in a.added] == ["silu_extra", "index_gather"] and a.added[0][1:] == (1.0, 20.0)
    assert [n for n, _, _ in a.removed] == ["embedding_copy"]
    md = A.attribution_markdown(a)
    assert "**First row: MLP, +320.0 µs per step, 80 % of the change; the category rows explain 88 %.**" in md
    assert "| MLP | 300.0 | 620.0 | +320.0 | 1 | 3 | +2 | 80 % |" in md
    assert "| *unexplained* (measured change less the rows) | | | +80.0 | | | | 20 % |" in md  # modules
    assert "| *unexplained* (measured change less the rows) | | | +50.0 | | | | 12 % |" in md  # categories
    assert "The profile windows' own unprofiled step: 600.0 → 950.0 µs (+350.0 µs)." in md
    assert "`silu_extra` (1 per step, 20.0 µs)" in md and "`embedding_copy`" in md
    assert not any("not typical" in n for n in a.notes)
    # the head window (950 µs) below every head run (980-1020 µs): named, with the windows' share of the runs' change
    odd = A.attribute("k", "x", ["regressed"], base, head, (600.0, 1000.0), ((590.0, 610.0), (980.0, 1020.0)))
    note = next(n for n in odd.notes if "not typical" in n)
    assert "the head window's 950.0 µs lies below its runs' 980.0-1020 µs" in note and "base window" not in note
    assert "The windows' change is 88 % of the runs'" in note and f"- {note}" in A.attribution_markdown(odd)
    assert not any("not typical" in n for n in A.attribute("k", "x", [], base, head, (600.0, 1000.0),
                                                           ((590.0, 610.0), (940.0, 1020.0))).notes)
    # the runs' range from a store's values: none from fewer than two runs or from a value that is no finite step
    def run_range(runs):
        return A._run_range_us(type("Comparison", (), {"base": Side(runs)})(), "k", "base")

    assert run_range([[0.98, 1.0], [1.02]]) == pytest.approx((990.0, 1020.0))
    assert run_range([[1.0]]) is None
    for hostile in (float("nan"), float("inf"), -1.0, 0.0):
        assert run_range([[1.0], [hostile]]) is None, hostile
    # an improvement ranks the rows that carry the decrease first
    back = A.attribute("k", "x", ["improved: tpot_median_ms"], head, base, (1000.0, 600.0))
    assert back.modules[0].name == "MLP" and back.modules[0].share == pytest.approx(0.8)


def test_windows_of_several_processes_are_averaged_by_hand():
    """Three processes' head windows (MLP once, twice, three times; steps 600, 950, 1300 µs) average to the two-MLP
    window: each row, kernel and host time the mean over the windows (a row one window lacks counts 0 there), the step
    the windows' mean; the markdown says how many processes and their steps' spread."""
    one, two, three = figures(1, False, 0.600), figures(2, True, 0.950), figures(3, True, 1.300)
    mean = D.mean_figures([one, two, three])
    assert mean.windows == 3 and mean.steps == 6 and mean.wall_us == pytest.approx(950.0)
    assert mean.window_walls == (600.0, 950.0, 1300.0) and mean.sources == ("t.json",) * 3
    assert mean.modules["MLP"] == pytest.approx((2 + 2 / 3, 620.0 - 20.0 / 3))  # (1+3+4)/3 kernels; silu in two of three
    assert mean.kernels["silu_extra"] == pytest.approx((2 / 3, 40.0 / 3, "elementwise"))
    assert mean.kernels["embedding_copy"] == pytest.approx((1 / 3, 5.0 / 3, "copy/memset"))
    assert mean.busy_us == pytest.approx((one.busy_us + two.busy_us + three.busy_us) / 3)
    assert D.mean_figures([one]) is one
    # a window without a step time: the mean has none (no gaps row), nor module rows where one window has none
    assert D.mean_figures([one, figures(2, True, None)]).wall_us is None
    assert D.mean_figures([one, D.StepFigures(**{**one.__dict__, "modules": None})]).modules is None
    with pytest.raises(BenchInputError, match="count different things"):
        D.mean_figures([one, D.StepFigures(**{**one.__dict__, "unit": "cpu_op"})])
    a = A.attribute("k", "x", ["regressed"], one, mean, (600.0, 1000.0), ((590.0, 610.0), (960.0, 1020.0)))
    assert next(r for r in a.modules if r.name == "MLP").delta_us == pytest.approx(320.0 - 20.0 / 3)
    md = A.attribution_markdown(a)
    assert "2 and 6 of them, from 1 and 3 session processes (their mean)" in md
    assert "head `t.json` and 2 more (one per process)" in md
    assert "600.0 → 950.0 (3 processes' windows: 600.0-1300 µs) µs" in md
    note = next(n for n in a.notes if "not typical" in n)
    assert "the head 3 windows' mean 950.0 µs lies below its runs' 960.0-1020 µs" in note
    assert A.to_dict(A.Explanation([a]))["attributions"][0]["windows"]["head"] == {
        "processes": 3, "step_us": [600.0, 950.0, 1300.0], "files": ["t.json"] * 3}


def spans_of(attn_us: float) -> list[RangeSpan]:
    """Two decode steps of 1000 µs on the host: the layer from 100 to 900, attention from 200 for attn_us inside it,
    the MLP from 600 to 800; the lm_head from 900 to 950."""
    out = []
    for k, t in ((1, 0.0), (2, 1000.0)):
        out += [RangeSpan(f"decode_step:{k}", t, t + 1000), RangeSpan(LAYER, t + 100, t + 900),
                RangeSpan(ATTN, t + 200, t + 200 + attn_us), RangeSpan(MLP, t + 600, t + 800),
                RangeSpan("lm_head", t + 900, t + 950)]
    return out + [RangeSpan("batch:0", -10.0, 2010.0)]  # a phase range around the steps: no module


def test_host_time_per_module_range_is_each_range_own_by_hand():
    host = host_time_by_module(spans_of(300.0))
    # per step: layer 800 less attention 300 and MLP 200 = 300; outside = 1000 - layer 800 - lm_head 50 = 150
    assert host == {"": 300.0, "Qwen2Attention": 600.0, "Qwen2DecoderLayer": 600.0, "Qwen2MLP": 400.0,
                    "lm_head": 100.0}
    assert host_time_by_module([RangeSpan(MLP, 0.0, 1.0)]) is None  # no decode step: nothing


def test_a_host_bound_regression_names_the_range_whose_host_time_moved():
    """The same kernels on both sides, the step 300 µs longer (the GPU waited for the host): no module's kernels
    explain it, the gaps row does, and the attention range's host time (+300 µs a step) names the cause."""
    def host_figures(attn_us, step_ms, with_spans=True):
        kernels = window(1, False)
        instances = {}
        for k in kernels:
            for label, key in k.ranges:
                instances.setdefault(label, set()).add(key)
        t = build_kernel_table(kernels, instances, source="torch", unit="gpu_kernel",
                               spans=spans_of(attn_us) if with_spans else None).to_dict()
        t = json.loads(json.dumps(t))  # as stored
        return D.step_figures(t, {"step_ms": step_ms, "window": {"kind": "decode", "decode_steps": 2}}, "torch", "t")

    base, head = host_figures(100.0, 0.600), host_figures(400.0, 0.900)
    assert base.host["attention"] == 100.0 and base.host["decoder layer"] == 500.0
    a = A.attribute("k", "x", ["regressed: tpot_median_ms"], base, head, (600.0, 900.0))
    assert a.modules[0].delta_us == 0.0 and a.categories[0].name == A.GAPS and a.categories[0].delta_us == 300.0
    first, table_name = a.first_of
    assert (first.name, table_name, first.delta_us) == ("attention", "host time", 300.0)
    assert first.share == pytest.approx(1.0) and a.host[-1].name == "decoder layer"  # the layer's own lost 300
    md = A.attribution_markdown(a)
    assert "**First row: attention (host time in the range), +300.0 µs per step, 100 % of the change" in md
    assert "| attention | 100.0 | 400.0 | +300.0 |  |  |  | 100 % |" in md
    assert A.to_dict(A.Explanation(attributions=[a]))["attributions"][0]["first"]["table"] == "host time"
    # a table without host spans (an nsys or older profile): the gaps row itself comes first, not a module's 0 µs
    plain = A.attribute("k", "x", ["regressed"], host_figures(100.0, 0.600, False), host_figures(400.0, 0.900, False),
                        (600.0, 900.0))
    assert plain.host is None and plain.first_of[0].name == A.GAPS and plain.first_of[1] == "kernel category"
    # where a module's kernels carry more than the gaps, that module stays first
    assert A.attribute("k", "x", [], figures(1, False, 0.600), figures(2, True, 0.950), (600.0, 1000.0)).first.name \
        == "MLP"
    # a stored host_us is untrusted: what is not a map of finite µs is refused with the fix
    bad = json.loads(json.dumps(table(window(1, False))))
    bad["meta"]["decode_steps"]["host_us"] = {"Qwen2MLP": float("nan")}
    with pytest.raises(BenchInputError, match="host_us.*re-run `bench profile`"):
        D.step_figures(bad, {"step_ms": 0.6}, "torch", "t")
    bad["meta"]["decode_steps"]["host_us"] = ["Qwen2MLP", 3]
    with pytest.raises(BenchInputError, match="host_us"):
        D.step_figures(bad, {"step_ms": 0.6}, "torch", "t")
    # so is the record's unprofiled step time, the gaps row's reference
    good = json.loads(json.dumps(table(window(1, False))))
    for step_ms in ("fast", float("nan"), float("inf"), -5, 0, True):
        with pytest.raises(BenchInputError, match="step_ms .* re-run `bench profile`"):
            D.step_figures(good, {"step_ms": step_ms}, "torch", "t")


def test_without_a_step_time_or_module_ranges_it_says_so():
    base, head = figures(1, False, None), figures(2, True, None)
    a = A.attribute("k", "x", [], base, head, (None, None))
    assert all(r.name != A.GAPS for r in a.categories) and a.explained_share is None and a.modules[0].share is None
    assert any("no launch gaps and idle row" in n for n in a.notes)
    assert A.attribute("k", "x", [], head, base, (None, None)).modules[0].name == "MLP"  # no direction: largest first
    # a table without decode-step ranges (a compiled generate cell): the window per forward pass, categories only
    flat = [K("gemv", 100.0, "batch:0"), K("gemv", 100.0, "batch:0"), K("copy_kernel", 4.0),
            K("batch:0", 300.0)]  # torch.profiler's device-side marker of the batch range: not a kernel
    f = D.step_figures(table(flat), {"window": {"kind": "generate", "batches": 1, "decode_steps": 3}}, "nsys", "t")
    assert f.per == "forward pass (prefill included)" and f.steps == 4 and f.modules is None
    assert f.categories == {"gemm": (0.5, 50.0), "copy": (0.25, 1.0)}
    with pytest.raises(BenchInputError, match="version"):
        D.step_figures({"version": 9}, {}, "nsys", "t")


def test_module_rows_and_profile_store_paths(tmp_path):
    assert [D.module_row(g) for g in ("Qwen2RMSNorm", "LlamaAttention", "Qwen3MLP", "Qwen2DecoderLayer", "lm_head", "",
                                      "Qwen2RotaryEmbedding")] == [
        "RMSNorm", "attention", "MLP", "decoder layer", "lm_head", D.OUTSIDE, "Qwen2RotaryEmbedding"]
    (tmp_path / "results").mkdir()
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "m.jsonl").write_text("")
    found = PW.profile_stores([tmp_path / "results" / "s.jsonl"], {"m"}, None)  # here, and beside results/: once
    assert [p.resolve() for p in found] == [tmp_path / "profiles" / "m.jsonl"]
    with pytest.raises(BenchInputError, match="does not exist"):
        PW.profile_stores([], {"m"}, tmp_path / "nope.jsonl")
    # a table is opened only under its store's folder: as stored, or its last three parts there
    store = tmp_path / "profiles" / "m.jsonl"
    inside = tmp_path / "profiles" / "m" / "c-torch" / "kernel_table.json"
    inside.parent.mkdir(parents=True)
    inside.write_text("{}")
    assert PW.table_file(str(inside), store) == inside
    assert PW.table_file("/elsewhere/m/c-torch/kernel_table.json", store) == inside  # a store copied from elsewhere
    outside = tmp_path / "secret.json"
    outside.write_text("{}")
    assert PW.table_file(str(outside), store) is None and PW.table_file("../secret.json", store) is None


def fake_matrix(name, slowdown):
    return parse_matrix({
        "name": name, "backends": ["fake"], "model": "qwen-tiny", "device": "cpu", "precisions": ["bf16"],
        "max_batch_sizes": [1, 2], "workloads": ["syn"], "trials": 1, "runs": 2, "warmup": 0, "timeout_s": 60,
        "options": {"noise": 0.0, "slowdown": slowdown},
        "workload": {"syn": {"source": "synthetic", "num_requests": 4, "input_len": 8, "output_len": 6}},
    })


def profile_record(cell, table_path, context, step_ms=0.6):
    outcome = {"trial": 0, "status": "ok", "metrics": None, "started_at": 1.0, "ended_at": 2.0,
               "extra": {"tool": "nsys", "kernel_table": str(table_path),
                         "profile": {"tool": "nsys", "step_ms": step_ms, "window": {"kind": "decode", "decode_steps": 2}}}}
    return new_record("profile", cell, outcome, context=context)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A fake backend's base and a 1.5x slower head (deterministic clock), two runs each, and base/head profiles of
    the batch-1 cell only (the head's with its MLP twice)."""
    root = tmp_path_factory.mktemp("attr")
    out = {}
    for name, slowdown in (("base", 1.0), ("head", 1.5)):
        m = fake_matrix(name, slowdown)
        with isolated(root):  # a test's environment: its workers fork from the suite's zygote (tests/support/folders.py)
            run_matrix(m, root / "results" / f"{name}.jsonl", engines_dir=root / "engines", workload_cache=root / "wl",
                       show_progress=False)
        cell = next(c for c in m.cells if c.max_batch_size == 1)
        path = root / "profiles" / name / f"{cell.cell_id}-nsys" / "kernel_table.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(table(window(2 if name == "head" else 1, name == "head"))))
        with ResultStore(root / "profiles" / f"{name}.jsonl").writer() as s:
            s.append(profile_record(cell, path, new_context("profile", matrix=name), 0.95 if name == "head" else 0.6))
        out[name] = root / "results" / f"{name}.jsonl"
    out["root"] = root
    return out


def test_the_latest_invocations_windows_of_the_cell_are_the_ones_read(tmp_path):
    """A cell's profiles: an older invocation's window, then `bench profile --processes 3` whose third process failed,
    and another cell's window: the latest invocation's two ok windows are read, by process, each once."""
    m = fake_matrix("m", 1.0)
    cell, other = m.cells[0], m.cells[1]

    def rec(c, context, run, status="ok", ended=2.0):
        r = profile_record(c, tmp_path / f"{run}.json", context)
        return type(r)(**{**r.__dict__, "run": run, "status": status, "ended_at": ended})

    old, new = new_context("profile", matrix="m"), new_context("profile", matrix="m", runs=3)
    old = type(old)(**{**old.__dict__, "started_at": 1.0})
    new = type(new)(**{**new.__dict__, "started_at": 5.0})
    records = [rec(cell, old, 0), rec(cell, new, 1, ended=7.0), rec(cell, new, 0, ended=6.0),
               rec(cell, new, 2, status="error", ended=8.0), rec(other, new, 0, ended=9.0), rec(cell, new, 1, ended=7.0)]
    runs = type("CellRuns", (), {"cell_id": cell.cell_id})()
    got = PW.sessions_of(records, runs, ())
    assert list(got) == ["nsys"] and [(r.context.run_id, r.run) for r in got["nsys"]] == [(new.run_id, 0), (new.run_id, 1)]


def test_bench_compare_attributes_the_profiled_cell_and_names_the_one_without(stores, capsys, monkeypatch):
    monkeypatch.chdir(stores["root"])
    # every measured pass carries the host's speed in its process (bench.machine.host_load.host_probe_times)
    passes = [json.loads(line) for line in stores["base"].read_text().splitlines()]
    assert passes and all(p["extra"]["host_load"]["host_probe_ms"] > 0 for p in passes if p["status"] == "ok")
    md = stores["root"] / "out.md"
    assert main(["compare", str(stores["base"]), str(stores["head"]), "--ignore-option", "slowdown",
                 "--markdown", str(md)]) == 1
    text = md.read_text()
    section = text.split("### Where the time went", 1)[1]
    bs1 = section.split("#### ", 2)[1]
    assert bs1.startswith("fake/bf16/bs1/syn: regressed") and "**First row: MLP, +320.0 µs per step" in bs1
    assert "| MLP | 300.0 | 620.0 | +320.0 |" in bs1 and f"| {A.GAPS} | 30.0 | 60.0 | +30.0 |" in bs1  # a category
    assert "Step time (measured TPOT of the runs, as compared above)" in bs1
    # the batch-2 cell regressed too but has no profile on either side: named, with the command that profiles it
    assert "No profile, so no attribution, for: fake/bf16/bs2/syn (base side" in section
    assert "`bench compare --profile` (same arguments) profiles them." in section


def test_explicit_profile_stores_a_missing_one_and_a_table_outside_its_store(stores, tmp_path, monkeypatch):
    root = stores["root"]
    monkeypatch.chdir(tmp_path)  # no profiles/ here: the stores named, or those beside results/, are read
    assert main(["compare", str(stores["base"]), str(stores["head"]), "--ignore-option", "slowdown", "--profiles",
                 str(root / "profiles" / "base.jsonl"), str(tmp_path / "none.jsonl")]) == 2
    from bench.results.compare import compare_report

    c, text, _ = compare_report(str(stores["base"]), str(stores["head"]), ignore_options=["slowdown"])
    assert [a.label for a in c.attribution.attributions] == ["fake/bf16/bs1/syn"]  # found beside results/
    # a record naming a table outside its store's folder is not read
    rec = json.loads((root / "profiles" / "head.jsonl").read_text().splitlines()[0])
    rec["extra"]["kernel_table"] = str(tmp_path / "kernel_table.json")
    (tmp_path / "kernel_table.json").write_text(json.dumps(table(window(2, True))))
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "head.jsonl").write_text(json.dumps(rec) + "\n")
    c, text, _ = compare_report(str(stores["base"]), str(stores["head"]), ignore_options=["slowdown"],
                                profiles=(root / "profiles" / "base.jsonl", tmp_path / "store" / "head.jsonl"))
    assert c.attribution.attributions == [] and "is not under its profile store's folder" in text


def test_the_dashboard_page_draws_the_attribution(stores, tmp_path, monkeypatch):
    from tests.support.dashboard import dashboard_figures

    monkeypatch.chdir(stores["root"])
    page, data = tmp_path / "cmp.html", tmp_path / "cmp.json"
    assert main(["compare", str(stores["base"]), str(stores["head"]), "--ignore-option", "slowdown",
                 "--dashboard", str(page), "--json", str(data)]) == 1
    got = json.loads(data.read_text())
    assert got["exit_status"] == 1 and got["regressions"] == len([r for r in got["rows"] if r["verdict"] == "regressed"])
    (cell,) = got["attribution"]["attributions"]
    assert cell["first"] == {"name": "MLP", "delta_us": 320.0, "share": cell["first"]["share"], "table": "module range"}
    assert cell["first_category"] == "gemm" and cell["modules"][0]["base_us"] == 300.0
    assert [m["label"] for m in got["attribution"]["missing"]] == ["fake/bf16/bs2/syn"] * 2
    html = page.read_text()
    figs = dashboard_figures(html)
    assert len(figs) == 1 and "Where the time went: fake/bf16/bs1/syn" in figs[0]["layout"]["title"]["text"]
    modules = figs[0]["data"][0]
    assert modules["y"][0] == "MLP" and modules["x"][0] == 320.0 and A.GAPS not in modules["y"]
    assert figs[0]["data"][1]["y"][:2] == ["gemm", A.GAPS]  # the category panel
    assert modules["y"][-2:] == ["unexplained", "measured change"]
    assert "First row: MLP" in html and "no profile for fake/bf16/bs2/syn" in html


def test_profile_refuses_sides_this_checkout_cannot_stand_for(stores, tmp_path, monkeypatch, capsys):
    """--profile on the fake backend's cells: measured at this checkout's commit, but not profilable (no torch
    model): refused before any session; the sides of cells already profiled are not profiled again."""
    from bench.study.compare import _not_here, compare

    monkeypatch.chdir(stores["root"])
    before = {p: p.read_text() for p in stores["root"].glob("profiles/*.jsonl")}
    c, _, warns = compare(str(stores["base"]), str(stores["head"]), ignore_options=["slowdown"], profile=True)
    assert c.exit_status == 1 and len(c.attribution.attributions) == 1  # the comparison stands
    not_profiled = [w for w in warns if "not profiled" in w]
    assert len(not_profiled) == 2 and all("fake/bf16/bs2/syn" in w and "puts ranges on a torch model" in w
                                          for w in not_profiled)
    assert {p: p.read_text() for p in stores["root"].glob("profiles/*.jsonl")} == before  # no session ran

    assert "measured at 111111111111" in _not_here(("111111111111+dirty",), {"commit": "2" * 40})
    assert _not_here(("222222222222",), {"commit": "2" * 40}) == ""
    assert "unknown" in _not_here(("222222222222",), {"commit": None})


def test_compare_profile_reads_the_windows_of_the_timed_processes_and_starts_no_session(monkeypatch):
    """Stores as `bench run --profile-window` leaves them: an hf cell without and with a planted MLP, two runs a side,
    each run's window a Profile record of its own process (the runs' run_id and run index, made by the run driver's
    constructor, bench.runner.windows.window_record), the head's with the MLP twice. `bench compare --profile`
    attributes from those windows (MLP first) and starts no profiling session; the JSON and the text say where the
    windows came from. The head windows' mean (975 µs) lies above its runs' range (950-960 µs) but 2 % from the same
    processes' own runs: like with like, no note; 18 % from them, a note that says so."""
    import tomllib

    from bench.execution import launcher
    from bench.execution.profile_window import timed_window_dir
    from bench.profiling import driver
    from bench.runner.windows import window_record

    def no_session(*args, **kwargs):
        raise AssertionError("a profiling session was started")

    monkeypatch.setattr(driver, "profile_matrix", no_session)
    monkeypatch.setattr(launcher, "run_session", no_session)
    monkeypatch.setenv("BENCH_ALLOW_CORRUPTION", "1")
    sides = {"base": ("none", [0.600, 0.610], [0.600, 0.610]), "head": ("Qwen2MLP:2", [0.950, 0.960], [0.950, 1.000])}
    for side, (plant, tpots, steps) in sides.items():
        name = f"planted-{side}"
        cell = parse_matrix(tomllib.loads(planted(side, plant))).cells[0]
        context = new_context("run", matrix=name, runs=2)
        with ResultStore(f"results/{name}.jsonl").writer() as results, \
                ResultStore(f"profiles/{name}.jsonl").writer() as profiles:
            for run, (tpot, step_ms) in enumerate(zip(tpots, steps, strict=True)):
                results.append(new_record("measurement", cell, {"status": "ok", "metrics": {"tpot_median_ms": tpot},
                                                                "ended_at": 10.0 + run}, context=context, run=run))
                path = timed_window_dir(Path("profiles").resolve(), name, cell.cell_id, context.run_id, run) / "kernel_table.json"
                path.parent.mkdir(parents=True)
                path.write_text(json.dumps(table(window(2 if side == "head" else 1, side == "head"), tool="torch")))
                event = {"window": {"tool": "torch", "kernel_table": str(path), "trace": None, "step_ms": step_ms,
                                    "window": {"kind": "decode", "decode_steps": 2}}, "started_at": 11.0 + run,
                         "ended_at": 12.0 + run + (0.5 * run if side == "head" else 0.0)}  # what each window cost
                profiles.append(window_record(event, cell, context, run, {}, {}, {}))
    assert main(["compare", "results/planted-base.jsonl", "results/planted-head.jsonl", "--ignore-option", "plant",
                 "--profile", "--metrics", "tpot_median_ms", "--json", "why.json", "--markdown", "why.md"]) == 1
    got = json.loads(Path("why.json").read_text())
    assert got["profiled"] == [] and got["attribution"]["missing"] == []
    (cell,) = got["attribution"]["attributions"]
    assert cell["first"]["name"] == "MLP" and cell["tool"] == "torch"
    windows = cell["windows"]
    assert windows["base"]["from"] == windows["head"]["from"] == PW.TIMED_PROCESSES
    assert windows["base"]["runs"] == windows["base"]["runs_with_window"] == windows["base"]["processes"] == 2
    assert windows["head"]["runs_step_us"] == pytest.approx(955.0) and windows["head"]["step_us"] == [950.0, 1000.0]
    assert not any("not typical" in n for n in cell["notes"])
    text = Path("why.md").read_text()
    assert windows["base"]["window_cost_s"] == [1.0, 1.0] and windows["head"]["window_cost_s"] == [1.0, 1.5]
    assert "from the timed processes where a side has them" in text and \
        "base: 2 of its 2 runs, 1.0 s a window; head: 2 of its 2 runs, 1.0-1.5 s a window" in text
    # 18 % from the same processes' runs: named, like with like
    head = figures(2, True, 1.125)
    a = A.attribute("k", "x", ["regressed"], figures(1, False, 0.600), head, (600.0, 955.0), ((600.0, 610.0), None),
                    (None, PW.WindowsFrom(PW.TIMED_PROCESSES, 2, 2, 955.0)))
    (note,) = [n for n in a.notes if "not typical" in n]
    assert "the head window's 1125 µs lies 18 % above the same 2 process(es)' runs' 955.0 µs" in note
    assert "what the windows did not reproduce of their own processes' step" in note and "session" not in note
    assert not any(n.startswith("the windows are") for n in a.notes)  # every run has its window


def test_windows_of_fewer_processes_than_the_runs_give_the_share_of_those_runs_change():
    """The 5-round H100 call of 2026-12-08: the fifth process's window was cut, so each side's windows are 4 of its 5
    runs. The headline share divides the four windows' change by all five runs' change (+8835 µs, 78 %); the note gives
    the change of the four runs whose windows were read (+7964 µs) and the windows' share of it (86 %)."""
    base, head = figures(1, False, 30.041), figures(2, True, 36.927)
    origins = (PW.WindowsFrom(PW.TIMED_PROCESSES, 5, 4, 30940.0), PW.WindowsFrom(PW.TIMED_PROCESSES, 5, 4, 38904.0))
    a = A.attribute("k", "x", ["regressed: tpot_median_ms"], base, head, (29428.0, 38263.0), (None, None), origins)
    (note,) = [n for n in a.notes if n.startswith("the windows are")]
    assert note == ("the windows are 4 of the base's 5 runs and 4 of the head's 5: over those runs the change is "
                    "+7964 µs, of which the windows' change is 86 % (the shares above divide by all the runs' change)")
    assert a.explained_share == pytest.approx(6886 / 8835, abs=0.01)  # the headline is unchanged
    # sessions' windows, or timed ones of every run, say nothing of it
    every = (PW.WindowsFrom(PW.TIMED_PROCESSES, 5, 5, 30940.0), PW.WindowsFrom(PW.TIMED_PROCESSES, 5, 5, 38904.0))
    sessions = (PW.WindowsFrom(PW.SESSIONS, 5, 0), PW.WindowsFrom(PW.SESSIONS, 5, 0))
    for other in (every, sessions, (None, None)):
        notes = A.attribute("k", "x", ["regressed"], base, head, (29428.0, 38263.0), (None, None), other).notes
        assert not any(n.startswith("the windows are") for n in notes), other


def planted(side: str, plant: str) -> str:
    """The one-cell matrix of a side of the planted comparison (2 processes)."""
    return planted_matrix(f"planted-{side}", [plant], runs=2)


@pytest.mark.slow
def test_a_planted_mlp_regression_is_caught_and_explained_by_one_command(tmp_path, monkeypatch):
    """qwen-tiny on the CPU, the same cell with and without its MLPs run many times (option plant): `bench compare
    --ignore-option plant --profile` exits 1, profiles both sides itself and names the MLP range first.

    Qwen2MLP:300, not :3: qwen-tiny's MLPs are about 1 % of its CPU step (its 151,936-row lm_head is most of it), so
    three runs of them move the step by ~1 %, under the 5 % factor and far under a shared machine's spread between
    processes; 300 make the MLP most of the step. At 95 % confidence: with 2 runs a side (df = 2) a 99 % interval
    needs t > 9.9, which the 35 % spread between processes of this shared 2-core machine (load 6) kept a 9x change
    under."""
    monkeypatch.setenv("BENCH_ALLOW_CORRUPTION", "1")
    for side, plant in (("base", "none"), ("head", "Qwen2MLP:300")):
        (tmp_path / f"{side}.toml").write_text(planted(side, plant))
        assert main(["run", "--matrix", str(tmp_path / f"{side}.toml"), "--no-progress"]) == 0
    md = tmp_path / "why.md"
    assert main(["compare", "results/planted-base.jsonl", "results/planted-head.jsonl", "--ignore-option", "plant",
                 "--profile", "--profile-processes", "2", "--decode-steps", "2", "--confidence", "0.95", "--markdown",
                 str(md), "--json", str(tmp_path / "why.json")]) == 1
    text = md.read_text()
    # --json says what profiling each side cost, for the record of what an attribution costs
    spent = json.loads((tmp_path / "why.json").read_text())["profiled"]
    assert [(p["matrix"], p["cells"], p["failed"]) for p in spent] == [("planted-base", 1, 0), ("planted-head", 1, 0)]
    assert all(0 < p["seconds"] < 600 for p in spent)
    cell = text.split("### Where the time went", 1)[1].split("#### ", 1)[1]
    assert cell.startswith("hf/fp32/bs1/syn: regressed"), text
    # the MLP's operators, or (where the step's time outside any operator moved more) the MLP range's host time
    assert re.search(r"\*\*First row: MLP( \(host time in the range\))?, \+", cell), cell
    modules = cell.split("| module range |", 1)[1].split("\n\n", 1)[0].splitlines()
    assert modules[2].startswith("| MLP |") and "| 10 | 3000 | +2990 |" in modules[2]  # 5 aten ops a call, 2 layers, x300
    # two session processes a side, one window each, of one invocation: their mean is attributed
    for side in ("base", "head"):
        records = [json.loads(line) for line in Path(f"profiles/planted-{side}.jsonl").read_text().splitlines()]
        assert [r["run"] for r in records] == [0, 1] and len({r["context"]["run_id"] for r in records}) == 1
        assert len({r["extra"]["kernel_table"] for r in records}) == 2
    assert "from 2 and 2 session processes (their mean)" in cell and "2 processes' windows: " in cell
    # the real profiler's windows carry the host time per module range too: the planted MLPs hold far more of it
    host = {}
    for side in ("base", "head"):
        record = json.loads(Path(f"profiles/planted-{side}.jsonl").read_text().splitlines()[-1])
        kernel_table = json.loads(Path(record["extra"]["kernel_table"]).read_text())
        host[side] = kernel_table["meta"]["decode_steps"]["host_us"]
    # (x300 in the plant; x10 here: one preemption of this shared machine inside a base step can cost a few hundred µs)
    assert host["head"]["Qwen2MLP"] > 10 * host["base"]["Qwen2MLP"] > 0, host
    assert "module range (host time)" in cell
    # a second call finds the stored profiles and profiles nothing again
    n = len(Path("profiles/planted-head.jsonl").read_text().splitlines())
    assert main(["compare", "results/planted-base.jsonl", "results/planted-head.jsonl", "--ignore-option", "plant",
                 "--profile", "--confidence", "0.95"]) == 1
    assert len(Path("profiles/planted-head.jsonl").read_text().splitlines()) == n


def test_a_verdict_withheld_for_differing_tuned_kernels_is_still_explained():
    from types import SimpleNamespace

    from bench.results.compare import KERNELS_DIFFER

    def row(verdict, note=""):
        return SimpleNamespace(verdict=verdict, note=note)

    assert A.judged_verdict(row("regressed")) == "regressed" and A.judged_verdict(row("not significant")) is None
    withheld = row(KERNELS_DIFFER, "kernels differ: tuned c38cec28… vs 0035a36c… (was: regressed) ")
    assert A.judged_verdict(withheld, KERNELS_DIFFER) == "kernels differ (was: regressed)"
    assert A.judged_verdict(withheld) is None  # only where the comparison says which verdict it withholds
    assert A.judged_verdict(row(KERNELS_DIFFER, "(was: unchanged)"), KERNELS_DIFFER) is None


def test_the_planted_regressions_script_names_rows_the_attribution_makes_and_cells_that_validate(monkeypatch):
    """scripts/planted_regressions.py: every change is a valid pair of cells on each device it runs on, differing in
    options only (bench compare matches them with --ignore-option), and expects rows the attribution can name."""
    import warnings

    import tomllib

    from scripts import planted_regressions as P

    monkeypatch.setenv("BENCH_ALLOW_CORRUPTION", "1")
    names = {row for row, _ in D.MODULE_ROWS} | set(D.CATEGORY_ROWS.values()) | {D.OUTSIDE, A.GAPS}
    for change, (_, _, expected, devices, _) in P.CHANGES.items():
        assert expected <= names, (change, expected - names)
        for device in devices:
            base, base_opts, head_opts = P.options_of(change, device)
            assert base_opts != head_opts
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # no GPU here to check a cuda cell's precision against
                cells = [parse_matrix(tomllib.loads(P.matrix_text(f"m-{i}", opts, device, 2))).cells[0]
                         for i, opts in enumerate((base_opts, head_opts))]
            assert cells[0].cell_id != cells[1].cell_id and cells[0].precision == cells[1].precision


def planted_env(monkeypatch, tmp_path, changes: str, **more) -> None:
    """The planted script's environment on the GPU (DEVICE cuda), its work and output under tmp_path; RUNS, PART,
    CORES and ORDER from the caller's shell left out."""
    for name in ("RUNS", "PART", "CORES", "ORDER"):
        monkeypatch.delenv(name, raising=False)
    for k, v in {"DEVICE": "cuda", "CHANGES": changes, "WORK": str(tmp_path), "OUT": str(tmp_path / "out"),
                 **more}.items():
        monkeypatch.setenv(k, v)


def test_the_planted_script_runs_each_side_with_its_own_process_count(tmp_path, monkeypatch):
    """compile-off compares the compiled baseline (2 processes) with the eager one (5: a host-bound step's spread
    between processes needs them); on a fresh work folder its eager side ran 2 (H100, 2026-12-06). Each side's matrix
    now asks for its own baseline's count. `bench` is stood in for: the matrices written are what is checked."""
    import tomllib

    from scripts import planted_regressions as P

    calls, runs = [], []

    def bench(args, work, log):  # each `bench run` with the process count its matrix asks for at that moment
        calls.append(args)
        if args[0] == "run":
            runs.append((Path(args[2]).stem, tomllib.loads((work / args[2]).read_text())["runs"]))
        return 1

    monkeypatch.setattr(P, "bench", bench)
    monkeypatch.setattr(P, "host_precheck", lambda: ("", [1.0] * 8))  # an even host (tested below)
    planted_env(monkeypatch, tmp_path, "compile-off,mlp-twice")
    assert P.main() == 0
    assert runs == [("planted-compiled", 2), ("planted-eager", 5), ("planted-eager", 5), ("planted-mlp-twice", 5)]
    assert [a[0] for a in calls].count("compare") == 2


def test_the_planted_script_spends_no_device_time_where_the_host_cannot_judge(tmp_path, monkeypatch):
    """On 2026-12-06 an idle H100 host ran the eager baseline 23.3-42.0 ms across five processes (28 %), and none of
    the eager changes could be judged. Given such a baseline, the script runs no changed cell against it and says
    why, quoting the runs' host probes; a steady baseline (the previous start's 19.9-20.95 ms) goes ahead."""
    from scripts import planted_regressions as P

    calls = []
    monkeypatch.setattr(P, "bench", lambda args, work, log: calls.append(args) or 1)
    monkeypatch.setattr(P, "host_precheck", lambda: ("", [1.0] * 8))  # an even host (tested below)
    planted_env(monkeypatch, tmp_path, "mlp-twice")
    cell = fake_matrix("planted-eager", 1.0).cells[0]

    def baseline(tpots, probes):
        context = new_context("run", matrix="planted-eager", runs=len(tpots))
        path = tmp_path / "results" / "planted-eager.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.unlink(missing_ok=True)
        with ResultStore(path).writer() as s:
            for run, (tpot, probe) in enumerate(zip(tpots, probes, strict=True)):
                s.append(new_record("measurement", cell, {"status": "ok", "metrics": {"tpot_median_ms": tpot},
                                                          "extra": {"host_load": {"host_probe_ms": probe}}},
                                    context=context, run=run))

    baseline([29.14, 23.32, 40.18, 41.98, 24.31], [1.0, 0.8, 1.4, 1.45, 0.85])
    assert P.main() == 0
    assert [a[2] for a in calls] == ["planted-eager.toml"]  # the baseline's (stored) run; no changed cell, no compare
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| mlp-twice | - | - | - | MLP | not run (the baseline's 5 processes ran TPOT 23.32-41.98 ms, a spread of " \
           in summary and "host speed: the same Python loop took 0.80-1.45 ms" in summary
    calls.clear()
    baseline([20.23, 19.98, 19.91, 20.95, 20.73], [1.0, 1.0, 1.01, 1.0, 1.02])
    assert P.main() == 0
    assert [a[0] for a in calls] == ["run", "run", "compare"]


@pytest.mark.filterwarnings("ignore:.*NVML sees no NVIDIA GPU:UserWarning")
def test_the_planted_script_turns_matrix_names_its_baseline_and_is_not_judged_on_a_drifting_host(tmp_path, monkeypatch):
    """TURNS=1 puts a host-bound baseline and its changes in one matrix: its cells share backend, precision and batch
    size, so the matrix must name its baseline (on 2026-12-07 an H100 call's `bench run` refused it as ambiguous, and
    every comparison then failed). The baseline named is the one cell without the change. Where a change is built
    (static-cache: a cell of its own build key, so its own process a round) and the baseline's processes spread their
    TPOT past the product's limit (26-42 ms, an H100 of 2026-12-07), it is not judged and the summary says why; its
    store is kept. A plant is not built: the eager baseline and its plants share each round's process, so the same
    drift between processes does not hold them back (the paired test judges them)."""
    import tomllib

    from bench.spec.baseline import check_baseline
    from scripts import planted_regressions as P

    monkeypatch.setenv("BENCH_ALLOW_CORRUPTION", "1")
    drifting, steady = [29.1, 23.3, 40.2, 42.0, 24.3], [20.2, 20.0, 19.9, 20.9, 20.7]
    tpots = {"none": drifting, "Qwen2MLP:2": [30.0, 31.0, 29.0, 30.5, 29.5], "dynamic": drifting,
             "static": [31.0, 30.0, 29.0, 30.5, 29.5]}
    calls = []

    def bench(args, work, log):  # `bench run` stands in: the matrix it was given, measured as `tpots` says
        calls.append(args)
        if args[0] == "run":
            matrix = parse_matrix(tomllib.loads((work / args[2]).read_text()))
            check_baseline(matrix.baseline, matrix.cells, must_match=True)  # one cell: no ambiguity
            path = work / "results" / f"{matrix.name}.jsonl"
            path.parent.mkdir(exist_ok=True)
            context = new_context("run", matrix=matrix.name, runs=5)
            with ResultStore(path).writer() as s:
                for cell in matrix.cells:
                    o = cell.options_dict
                    for run, tpot in enumerate(tpots[o["cache"] if matrix.name.endswith("cache") else o["plant"]]):
                        s.append(new_record("measurement", cell, {"status": "ok", "metrics": {"tpot_median_ms": tpot}},
                                            context=context, run=run))
        return 0

    monkeypatch.setattr(P, "bench", bench)
    monkeypatch.setattr(P, "host_precheck", lambda: ("", [1.0] * 8))  # an even host (tested below)
    monkeypatch.setattr(P, "host_steadiness", lambda: ("", [1.0] * 80))  # a steady one (tested below)
    planted_env(monkeypatch, tmp_path, "mlp-twice,static-cache", TURNS="1")
    assert P.main() == 0
    matrix = tomllib.loads((tmp_path / "planted-eager-turns-plant.toml").read_text())
    assert matrix["baseline"]["plant"] == "none" and matrix["options"]["plant"] == ["none", "Qwen2MLP:2"]
    cache = tomllib.loads((tmp_path / "planted-generate-dynamic-turns-cache.toml").read_text())
    assert cache["baseline"]["cache"] == "dynamic" and cache["options"]["cache"] == ["dynamic", "static"]
    # both measured; only the plant compared: it shares its baseline's processes
    assert [a[0] for a in calls] == ["run", "compare", "run"] and calls[1][3:7] == ["--base-only", "plant=none",
                                                                                   "--head-only", "plant=Qwen2MLP:2"]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| static-cache | - | - | - | attention, copy | not judged (the baseline's 5 processes ran TPOT " \
           "23.30-42.00 ms" in summary
    calls.clear()
    tpots["dynamic"] = steady  # a steady host: the built change is compared too
    (tmp_path / "results" / "planted-generate-dynamic-turns-cache.jsonl").unlink()
    monkeypatch.setenv("CHANGES", "static-cache")
    assert P.main() == 0
    assert [a[0] for a in calls] == ["run", "compare"] and calls[1][3:7] == ["--base-only", "cache=dynamic",
                                                                            "--head-only", "cache=static"]
    assert P.shares_process("plant") and not P.shares_process("cache") and not P.shares_process("no-such-option")


def test_the_planted_script_probes_the_host_in_fresh_processes_before_any_host_bound_change(tmp_path, monkeypatch):
    """On 2026-12-07 an H100 start ran the eager cells' processes at a probe loop of 1.25-2.49 ms and their TPOT at
    26-42 ms; measuring the five plants in turns took 379 s and judged none. A few fresh processes' probes (seconds)
    now decide first: where the slowest exceeds 1.5x the fastest, no host-bound change runs, and the summary says
    why; the compiled ones still run; HOST_PRECHECK=0 runs them anyway. The probe itself reads each process's own
    median, and an unreadable one holds nothing back."""
    import subprocess as sp
    from types import SimpleNamespace

    from scripts import planted_regressions as P

    outs = iter(["1.02\n", "1.00\n", "1.55\n", "1.60\n", "1.10\n"])
    monkeypatch.setattr(P.subprocess, "run", lambda *a, **k: SimpleNamespace(stdout=next(outs)))
    why, probes = P.host_precheck(processes=5)
    assert probes == [1.02, 1.0, 1.55, 1.6, 1.1] and "took 1.02-1.55 ms across 5 fresh processes" in why
    assert "the fastest and slowest left out (+52%, over +50%)" in why
    outs = iter(["1.76", "1.19", "1.25", "1.17", "1.29", "1.18", "1.33", "1.27"])  # one slow start: this VM, idle
    assert P.host_precheck(processes=8)[0] == ""
    outs = iter(["1.0", "1.4", "1.2"])
    assert P.host_precheck(processes=3)[0] == ""
    outs = iter(["1.0", "Traceback ..."])
    assert P.host_precheck(processes=2) == ("", [1.0])

    def timed_out(*a, **k):
        raise sp.TimeoutExpired("python", 60)

    monkeypatch.setattr(P.subprocess, "run", timed_out)
    assert P.host_precheck(processes=2) == ("", [])

    calls = []
    monkeypatch.setattr(P, "bench", lambda args, work, log: calls.append(args) or 1)
    monkeypatch.setattr(P, "host_precheck", lambda: ("the host's probe loop took 1.25-2.49 ms", [1.25, 2.49]))
    monkeypatch.setattr(P, "host_steadiness", lambda: ("", [1.0] * 80))
    planted_env(monkeypatch, tmp_path, "mlp-twice,static-cache,freeze-off", TURNS="1")
    assert P.main() == 0
    ran = {a[2] for a in calls if a[0] == "run"}
    # freeze-off's compiled cells and the plant (its baseline's own processes); not the built host-bound change
    assert "planted-eager-turns-plant.toml" in ran and not any("generate" in m for m in ran), ran
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| static-cache | - | - | - | attention, copy | not run (the host's probe loop took 1.25-2.49 ms) |" in summary
    calls.clear()
    monkeypatch.setenv("HOST_PRECHECK", "0")
    monkeypatch.setattr(P, "host_precheck", lambda: pytest.fail("probed with HOST_PRECHECK=0"))
    monkeypatch.setattr(P, "host_steadiness", lambda: pytest.fail("probed with HOST_PRECHECK=0"))
    assert P.main() == 0
    assert "planted-generate-dynamic-turns-cache.toml" in {a[2] for a in calls if a[0] == "run"}
    calls.clear()
    monkeypatch.delenv("HOST_PRECHECK")
    monkeypatch.setattr(P, "host_steadiness", lambda: ("", [1.0] * 80))  # the plants' own check (tested below)
    monkeypatch.setenv("CHANGES", "mlp-twice,freeze-off")  # plants in turns and compiled cells: no fresh processes
    assert P.main() == 0 and calls


def test_with_cores_fastest_the_planted_matrices_pin_their_trials_and_skip_the_precheck(tmp_path, monkeypatch):
    """Fresh unpinned processes' probes say nothing of processes the product pins (bench.machine.cores), so with
    CORES=fastest every matrix asks for it and no precheck runs; a CPU cell cannot take it."""
    import tomllib

    from scripts import planted_regressions as P

    calls = []
    monkeypatch.setattr(P, "bench", lambda args, work, log: calls.append(args) or 1)
    monkeypatch.setattr(P, "host_precheck", lambda: pytest.fail("prechecked processes the product pins"))
    monkeypatch.setattr(P, "host_steadiness", lambda: pytest.fail("probed a process the product pins"))
    planted_env(monkeypatch, tmp_path, "mlp-twice,freeze-off", TURNS="1", CORES="fastest")
    assert P.main() == 0
    written = [tomllib.loads((tmp_path / a[2]).read_text()) for a in calls if a[0] == "run"]
    assert len(written) >= 2 and all(m["cores"] == "fastest" for m in written)
    planted_env(monkeypatch, tmp_path, "mlp-twice", DEVICE="cpu", CORES="fastest")  # a CPU cell cannot take it
    assert P.main() == 2



def test_a_planted_row_whose_runs_could_not_see_the_change_is_not_judged_rather_than_no_regression(tmp_path):
    """An H100 of 2026-12-07: MLP twice +12 % TPOT, not significant over 5 paired rounds that detect only changes above
    37 %; the summary said "no (no regression)". It now says the change was not judged, and why."""
    import json

    from scripts import planted_regressions as P

    def summary_row(rows, regressions=0):
        data = tmp_path / "c.json"
        data.write_text(json.dumps({"exit_status": 0, "regressions": regressions, "rows": rows, "profiled": [],
                                    "attribution": {"attributions": [], "missing": [], "notes": ["no profile"]}}))
        return P.row("mlp-twice", 0, data, {"MLP"}, "planted-eager")[5]

    weak = {"verdict": "not significant", "detects_only": 0.37}
    assert summary_row([weak, {**weak, "detects_only": 0.53}, {"verdict": "unchanged", "detects_only": None}]) == \
        "not judged (not significant: these runs detect only changes above 37%)"
    assert summary_row([{"verdict": "unchanged", "detects_only": None}]) == "no (no regression)"
    assert summary_row([{"verdict": "not significant", "detects_only": None}]) == "no (no regression)"  # enough runs
    assert summary_row([weak], regressions=1) == "no (not attributed: no profile)"


def test_plants_sharing_their_baselines_processes_run_only_on_a_host_that_keeps_its_speed_inside_one(tmp_path,
                                                                                                   monkeypatch):
    """On an H100 start of 2026-12-07 the probe loop ran 1.30-2.43 ms inside each process of the eager plants' rounds,
    each cell's TPOT went with it, and 475 s of device time judged none. One fresh process now probes the host for
    STEADY_S seconds first: where its probes spread past PRECHECK_MAX (the fastest and slowest tenth left out), the
    plants measured one cell after the other (ORDER=cells) are not run and the summary says why; by default their
    trials are interleaved (order = "interleaved": one trial of each cell a round inside each process), which is what
    answers such a host, so they run and the check is only said; built changes (their own processes) are the
    fresh-process precheck's; a steady host and an unreadable probe hold nothing back."""
    from types import SimpleNamespace

    import tomllib

    from scripts import planted_regressions as P

    def probes(values):
        monkeypatch.setattr(P.subprocess, "run", lambda *a, **k: SimpleNamespace(stdout="\n".join(map(str, values))))
        return P.host_steadiness(seconds=1)

    why, got = probes([1.2] * 10 + [2.3] * 10)  # two speeds, half the time each
    assert got == [1.2] * 10 + [2.3] * 10 and "took 1.20-2.30 ms inside one process over 1 s" in why and "+92%" in why
    assert probes([1.2] * 18 + [9.0, 0.1])[0] == ""  # one outlier at each end is not a host that moved
    assert probes([1.2, 1.3, 1.25, 1.22, 1.28, 1.31])[0] == ""
    assert probes([1.0, 3.0])[0] == ""  # too few probes to say
    assert probes(["Traceback"]) == ("", [])
    calls = []
    monkeypatch.setattr(P, "bench", lambda args, work, log: calls.append(args) or 1)
    monkeypatch.setattr(P, "host_precheck", lambda: pytest.fail("no built host-bound change was chosen"))
    monkeypatch.setattr(P, "host_steadiness", lambda: ("the host's probe loop took 1.30-2.43 ms inside one process",
                                                       [1.3, 2.43]))
    planted_env(monkeypatch, tmp_path, "mlp-twice,freeze-off", TURNS="1", ORDER="cells")
    assert P.main() == 0
    ran = {a[2] for a in calls if a[0] == "run"}
    assert ran and not any("eager" in m for m in ran), ran  # freeze-off's compiled cells only
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| mlp-twice | - | - | - | MLP | not run (the host's probe loop took 1.30-2.43 ms inside one process) |" \
        in summary
    calls.clear()
    monkeypatch.delenv("ORDER")
    assert P.main() == 0
    ran = [a[2] for a in calls if a[0] == "run"]
    assert "planted-eager-turns-plant.toml" in ran, ran
    turns = tomllib.loads((tmp_path / "planted-eager-turns-plant.toml").read_text())
    assert turns["order"] == "interleaved" and turns["trials"] == P.INTERLEAVED_TRIALS
    assert parse_matrix(turns).settings.order == "interleaved"  # a matrix the product takes


def test_a_run_carried_by_one_trial_is_named_with_the_change_without_it():
    """The interleaved H100 call of 2026-12-07 (docs/measurements/2026-12-07-h100-interleaved-trials.md): rotary-outside
    regressed +26.6 % over 3 processes of 4 trials a cell, and the windows explained 81 %. Two plant trials carried
    their runs (38.92 ms beside 27.79-31.07, and 46.28 beside 27.46-33.12): a run's figure is the mean of its trials, and
    a window, a few decode steps after them, meets no such excursion. The note names them and gives the runs' change
    without them (+4468 µs, of which the windows' +5221 are 117 %): the truth of the share lies between."""
    base_runs = [[23.18, 22.29, 21.87, 21.60], [22.77, 26.56, 23.78, 26.63], [25.63, 23.17, 29.04, 26.61]]
    head_runs = [[27.85, 26.87, 26.53, 26.74], [27.79, 38.92, 31.07, 29.31], [27.46, 30.12, 46.28, 33.12]]

    comparison = type("Comparison", (), {"base": Side(base_runs), "head": Side(head_runs)})()
    said, base_us = A._excursions(comparison, "k", "base")
    assert said == [] and base_us == pytest.approx(24372.4, abs=0.1)  # the comparison's geometric mean, as it is
    said, head_us = A._excursions(comparison, "k", "head")
    assert said == ["the head's run 2 of 3 read 38.92 ms in one of its 4 trials, its others 27.79-31.07 ms",
                    "the head's run 3 of 3 read 46.28 ms in one of its 4 trials, its others 27.46-33.12 ms"]
    assert head_us == pytest.approx(28840.5, abs=0.1)
    base, head = figures(1, False, 24.0380), figures(2, True, 29.2585)
    a = A.attribute("k", "x", ["regressed: tpot_median_ms"], base, head, (24372.4, 30854.9), excursions=(
        said, head_us - base_us))
    note = next(n for n in a.notes if n.startswith("runs carried by a trial or two"))
    assert "run 3 of 3 read 46.28 ms" in note and a.explained_share == pytest.approx(0.805, abs=0.01)
    assert "Without those trials the runs' change is +4468 µs, of which the windows' change is 117 %." in note
    assert f"- {note}" in A.attribution_markdown(a)
    # none where no trial stands out, a process has fewer than 3 trials, or a stored value is not a finite step
    assert A._excursions(type("C", (), {"base": Side(base_runs)})(), "k", "base")[0] == []
    assert A._excursions(type("C", (), {"base": Side([[20.0, 40.0], [21.0]])})(), "k", "base") == ([], None)
    for hostile in (float("nan"), float("inf"), -1.0, 0.0):
        runs = [[20.0, 20.5, 21.0], [20.0, 60.0, hostile]]
        assert A._excursions(type("C", (), {"base": Side(runs)})(), "k", "base") == ([], None), hostile
    assert not any(n.startswith("runs carried") for n in A.attribute("k", "x", [], base, head, (24372.4, 30854.9)).notes)
    # The 5-round H100 call of 2026-12-08 (its record: 2026-12-08-h100-planted-rotary-five-rounds.md; TPOT p50 of the
    # plant's trials): a run carried by two of its trials is one phrase naming both, its others the trials that did not.
    head_runs = [[32.67, 34.09, 31.05, 34.24], [46.26, 53.18, 41.91, 49.0], [33.2, 53.96, 38.56, 38.93],
                 [44.82, 27.38, 27.61, 35.59], [31.41, 42.48, 46.16, 29.82]]
    said, head_us = A._excursions(type("C", (), {"head": Side(head_runs)})(), "k", "head")
    assert said == ["the head's run 3 of 5 read 53.96 ms in one of its 4 trials, its others 33.20-38.93 ms",
                    "the head's run 4 of 5 read 44.82 ms in one of its 4 trials, its others 27.38-35.59 ms",
                    "the head's run 5 of 5 read 42.48 and 46.16 ms in two of its 4 trials, its others 29.82-31.41 ms"]
    kept = [sum(head_runs[0]) / 4, sum(head_runs[1]) / 4, (33.2 + 38.56 + 38.93) / 3, (27.38 + 27.61 + 35.59) / 3,
            (31.41 + 29.82) / 2]
    assert head_us == pytest.approx(1e3 * math.prod(kept) ** (1 / 5))
