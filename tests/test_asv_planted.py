"""The planted-regression check: its patch still applies, and the existing-environment flow (the GPU
machine's script, here on the CPU) catches a 30% slowdown committed in a throwaway clone and
passes its revert. The asv build loop itself (`nox -s asv-planted`) is too slow for this suite:
its output is recorded in docs/measurements/2026-12-01-cpu-asv.md."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import asv_planted

ROOT = Path(__file__).resolve().parent.parent


def test_planted_patch_applies_once_and_compiles():
    source = (ROOT / asv_planted.TARGET).read_text()
    planted = asv_planted.plant(source)
    assert planted.count(asv_planted.SLOW) == 1 and planted.replace(asv_planted.SLOW, asv_planted.ANCHOR) == source
    ast.parse(planted)


def test_plant_refuses_a_source_without_its_anchor():
    with pytest.raises(RuntimeError, match="expected 1"):
        asv_planted.plant("k = 1.0\n")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_existing_flow_catches_planted_slowdown_and_passes_its_undo(tmp_path):
    pytest.importorskip("asv")
    out = subprocess.run([sys.executable, "-m", "scripts.asv_planted", "--mode", "existing", "--workdir", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HOME": str(tmp_path)})  # asv's machine file goes here
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert "exit 1 (expected 1), 4 values marked worse: PASS" in out.stdout
    assert "exit 0 (expected 0), 0 values marked worse: PASS" in out.stdout
    assert "asv_cells.FakeCell.track_ms_per_output_token('bf16/bs1')" in out.stdout


def test_existing_flow_fails_when_a_benchmark_failed_at_head():
    """A value asv could not measure at HEAD is not a pass, whatever the comparison table says."""
    from scripts.asv_existing import verdict

    assert verdict(worsened=False, improved=False, failed_at_head=True)[1] == 1
    assert verdict(worsened=False, improved=True, failed_at_head=True)[0].startswith("NOT JUDGED")
    assert verdict(worsened=True, improved=False, failed_at_head=False) == ("PERFORMANCE DECREASED", 1)
    assert verdict(worsened=False, improved=True, failed_at_head=False) == ("improved", 0)
    assert verdict(worsened=False, improved=False, failed_at_head=False) == ("no significant change", 0)
