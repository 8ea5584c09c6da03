"""Listing presets and planning a study need no quantization library (issue 34): without torchao,
`bench presets` lists every preset and marks what each needs, `bench study --dry-run` plans, and only
a real run refuses, naming the install."""

import sys

import pytest

from bench.cli import main
from bench.spec.matrix import list_presets

OPTIONAL = ("torchao", "gemlite", "flash_attn")


@pytest.fixture
def no_quantization_library(monkeypatch):
    for name in OPTIONAL:
        monkeypatch.setitem(sys.modules, name, None)  # `import torchao` raises; find_spec says "not installed"


def test_presets_list_every_preset_and_what_it_needs(no_quantization_library, capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for name in list_presets():
        assert f"\n{name} " in "\n" + out
    lines = out.splitlines()
    study = lines[[i for i, line in enumerate(lines) if line.startswith("h200-study ")][0] + 1]
    assert "needs: a CUDA GPU, torchao (precision 'int4wo', precision 'int8wo'; NOT installed)" in study
    default = lines[[i for i, line in enumerate(lines) if line.startswith("default ")][0] + 1]
    assert "needs: nothing beyond the install (CPU)" in default
    assert sys.modules["torchao"] is None  # nothing tried to import it


def test_study_plans_without_torchao_and_a_run_refuses(no_quantization_library, capsys):
    assert main(["study", "--preset", "h200-study", "--dry-run"]) == 0
    assert "hf/int4wo/bs16" in capsys.readouterr().out
    assert main(["run", "--preset", "h200-study", "--dry-run"]) == 0
    capsys.readouterr()
    assert main(["run", "--preset", "h200-study"]) == 2  # before any work
    assert "needs torchao: `pip install torchao`" in capsys.readouterr().err


def test_a_slice_without_the_quantized_rows_needs_no_torchao(no_quantization_library, capsys, monkeypatch):
    """--only decides which optional packages a command needs: the study's bf16 batch sweep runs without torchao
    (on the H200, 2026-12-01, it stopped with "include rule #2: ... needs torchao" though --only had left int4wo out);
    a slice that keeps an int4wo row still refuses before any work."""
    import argparse

    import bench.machine.environment as environment
    from bench.cli import load_selected_matrix
    from bench.errors import BenchInputError

    monkeypatch.setattr(environment, "cuda_missing", lambda: None)  # as on the H200: the preset's cells are CUDA's

    def args(only):
        return argparse.Namespace(matrix=None, preset="h200-study", only=only)

    cells = load_selected_matrix(args("workload=sharegpt-1024,precision=bf16")).cells
    assert cells and {c.precision for c in cells} == {"bf16"}
    with pytest.raises(BenchInputError, match="needs torchao: `pip install torchao`"):
        load_selected_matrix(args("workload=sharegpt-1024"))
    assert main(["run", "--preset", "h200-study", "--only", "precision=int4wo"]) == 2  # before any work
    assert "needs torchao" in capsys.readouterr().err
