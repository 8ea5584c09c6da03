"""Runs of one invocation that ran on nodes that differ are never averaged into one figure."""

import pytest

from bench.errors import BenchInputError
from bench.results.query import select
from tests.support.records import make_record

H200 = {"gpu_name": "NVIDIA H200", "driver": "580", "torch": "2.11", "cpu": "x"}
A100 = {**H200, "gpu_name": "NVIDIA A100-SXM4-80GB"}


def test_one_invocation_on_two_kinds_of_node_makes_two_groups():
    recs = [make_record(run=0, env=H200, output_throughput=100.0), make_record(run=1, env=A100, output_throughput=60.0),
            make_record(run=2, env=H200, output_throughput=102.0), make_record(run=3, status="error", env={"placement": {"executor": "ray"}})]
    sel = select(recs)
    (row,) = sel.rows
    # the row: the environment with most of the runs (and the placement-only error record of run 3)
    assert [(r.run, r.environment.get("gpu_name")) for r in row.records] == [(0, "NVIDIA H200"), (2, "NVIDIA H200"), (3, None)]
    assert len(sel.history) == 1 and "different environments" in " ".join(sel.warnings)
    with pytest.raises(BenchInputError, match="gpu_name: NVIDIA A100-SXM4-80GB, NVIDIA H200"):
        select(recs, pool=True)


def test_one_node_kind_is_one_row_as_before():
    recs = [make_record(run=k, env=H200, output_throughput=100.0 + k) for k in range(3)]
    sel = select(recs)
    assert len(sel.rows) == 1 and len(sel.rows[0].records) == 3 and sel.history == [] and sel.warnings == []
