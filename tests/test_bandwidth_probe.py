"""The speed-of-light bandwidth probe runs before the memory cap, and the backend reads its cached figure."""

from types import SimpleNamespace

import pytest

from bench.backends import speed_of_light as sol
from bench.backends.fake.backend import FakeBackend
from bench.execution import worker
from bench.spec.cells import BuildKey


def build_only(tmp_path, device):
    """Run the worker on a fake build group without cells; return its events."""
    key = BuildKey("fake", "qwen-tiny", "bf16", device, ())
    events = []
    worker.measure_group({"build_key": key.to_dict(), "engines_dir": str(tmp_path / "engines"),
                      "settings": {"warmup": 0}, "cells": []}, events.append)
    return events


@pytest.fixture
def calls(monkeypatch):
    seen = []
    monkeypatch.setattr(worker, "apply_cap", lambda device: seen.append(("cap", device)) or {})
    monkeypatch.setattr(sol, "copy_bandwidth", lambda device, cache_dir: seen.append(("probe", device, cache_dir)))
    return seen


def test_the_probe_runs_before_the_cap(tmp_path, monkeypatch, calls):
    monkeypatch.setattr(FakeBackend, "measures_copy_bandwidth", True)
    events = build_only(tmp_path, "cuda:0")
    assert [e["event"] for e in events] == ["env", "built"]
    assert calls == [("probe", "cuda:0", tmp_path / "engines" / "_machine"), ("cap", "cuda:0")]


def test_no_probe_on_cpu_or_for_backends_without_speed_of_light(tmp_path, monkeypatch, calls):
    build_only(tmp_path, "cuda")  # fake does not measure the bandwidth
    monkeypatch.setattr(FakeBackend, "measures_copy_bandwidth", True)
    build_only(tmp_path, "cpu")
    assert calls == [("cap", "cuda"), ("cap", "cpu")]


def test_the_second_call_reads_the_machines_cache(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(uuid="GPU-1", name="H200"))
    measured = []
    monkeypatch.setattr(sol, "measure_copy_bandwidth", lambda device: measured.append(device) or 4.2e12)
    first = sol.copy_bandwidth("cuda", sol.bandwidth_cache_dir(tmp_path))  # the worker, uncapped
    again = sol.copy_bandwidth("cuda", sol.bandwidth_cache_dir(tmp_path))  # the backend, capped
    assert measured == ["cuda"]
    assert first["cached"] is False and again["cached"] is True
    assert again["bandwidth_bytes_s"] == 4.2e12
