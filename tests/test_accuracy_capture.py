"""A cell's accuracy inputs captured in its timed process (bench.execution.accuracy_capture) and scored from the file:
the teacher-forced token's layout, a capture read as untrusted input, and the match against the baseline's Reference.
The whole path (bench run --accuracy-capture, then bench accuracy, against a session in a fresh process) is
tests/test_accuracy.py::test_bench_accuracy_aligned_broken_and_the_broken_layer_named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.errors import BenchInputError

SETTINGS = {"prompts": 2, "answer_tokens": 3, "generate_tokens": 2, "reference": "auto"}


def test_a_fed_token_is_laid_out_as_a_generated_token_at_every_batch_size():
    """The compiled step guards its input's strides and grad mode: a fed column that kept the feed's row stride or was
    made outside inference mode compiled the 7B step twice more at batch 1 on the H200 (`.contiguous()` keeps a
    (1, 1) view as it is). Both batch sizes must hand the step what argmax hands it."""
    import torch

    from bench.backends.hf.loop import fed_token

    for batch in (1, 3):
        feed = torch.arange(batch * 28).reshape(batch, 28)  # made outside inference mode, as teacher_forced makes it
        with torch.inference_mode():
            token = fed_token(feed, 5)
            generated = torch.randn(batch, 50).argmax(-1, keepdim=True)
        assert token.stride() == generated.stride() == (1, 1)
        assert token.is_inference() and generated.is_inference()
        assert token.data_ptr() != feed.data_ptr() and token[:, 0].tolist() == feed[:, 5].tolist()
    assert torch.arange(28).reshape(1, 28)[:, 5:6].contiguous().stride() == (28, 1)  # why contiguous() was not enough


def _capture(folder: Path, cell_id: str = "c1", settings: dict | None = None) -> Path:
    """Write a small capture as bench.execution.accuracy_capture.capture does: two sequences, their logits."""
    import torch

    from bench.execution.accuracy_capture import FORMAT, META, TENSORS, LogitsWriter

    sequences = [[[1, 2], [3, 4, 5]], [[6], [7, 8]]]
    writer = LogitsWriter([3, 2])
    gen = torch.Generator().manual_seed(0)
    for i, (_p, answer) in enumerate(sequences):
        for k in range(len(answer)):
            writer([i], k, torch.randn(1, 16, generator=gen))
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "cell_id": cell_id, "settings": settings or SETTINGS, "sequences": sequences,
            "fed": writer.fed(), "request_ids": ["a", "b"], "greedy_ids": {"a": [1, 2], "b": [3, 4]},
            "greedy_ids_second": {"a": [1, 2], "b": [3, 9]}, "measure_s": 1.5, "compile": {},
            "tensors_sha256": writer.save(folder / TENSORS)}
    (folder / META).write_text(json.dumps(meta))
    return folder


def test_a_capture_is_untrusted_input_refused_with_the_reason(tmp_path):
    from bench.execution.accuracy_capture import META, TENSORS, Capture

    folder = _capture(tmp_path / "cap")
    cap = Capture.open(folder, "c1", SETTINGS)
    assert cap.logits(0).shape == (3, 16) and cap.meta["fed"] == [3, 2]
    with pytest.raises(BenchInputError, match="of cell 'c1', not 'c2'"):
        Capture.open(folder, "c2", SETTINGS)
    with pytest.raises(BenchInputError, match="was made for"):
        Capture.open(folder, "c1", {**SETTINGS, "prompts": 3})
    with pytest.raises(BenchInputError, match="no capture in"):
        Capture.open(tmp_path / "nothing", "c1", SETTINGS)
    meta = json.loads((folder / META).read_text())
    for bad in ({"fed": [4, 2]}, {"fed": [True, 2]}, {"greedy_ids": {"a": [1]}}, {"greedy_ids_second": {"a": [1], "b": ["x"]}},
                {"sequences": [[[1, 2], [3, 4, 5]]]}, {"measure_s": "soon"}, {"measure_s": float("nan")}, {"format": 99},
                {"compile": {"fx_hit": "many"}}, {"run": {"run_id": "r", "folder": "/etc"}}, {"run": {"dirty": "yes"}},
                {"static_cache_len": -5}, {"run": {"made_by": "someone else"}}, {"run": {"made_by": 3}},
                {"run": {"made_by": "accuracy session", "load_s": float("nan")}}, {"run": {"load_s": -1}},
                {"run": {"load_s": True}}):
        (folder / META).write_text(json.dumps({**meta, **bad}))
        with pytest.raises(BenchInputError, match="capture"):
            Capture.open(folder, "c1", SETTINGS)
    # an early accuracy session's capture names its maker and its load seconds (bench.accuracy.early)
    (folder / META).write_text(json.dumps({**meta, "run": {"run_id": "r", "made_by": "accuracy session", "load_s": 1.5}}))
    assert Capture.open(folder, "c1", SETTINGS).meta["run"]["load_s"] == 1.5
    # made by another commit than this checkout's: the code that timed it is not the code that would be judged
    (folder / META).write_text(json.dumps({**meta, "run": {"run_id": "r1", "commit": "a" * 40, "dirty": False}}))
    assert Capture.open(folder, "c1", SETTINGS, code={"commit": "a" * 40, "dirty": False}).meta["run"]["run_id"] == "r1"
    with pytest.raises(BenchInputError, match="made by commit aaaaaaaaaaaa, not this checkout's bbbbbbbbbbbb"):
        Capture.open(folder, "c1", SETTINGS, code={"commit": "b" * 40, "dirty": False})
    (folder / META).write_text("{not json")
    with pytest.raises(BenchInputError, match="cannot be read"):
        Capture.open(folder, "c1", SETTINGS)
    (folder / META).write_text(json.dumps(meta))
    data = bytearray((folder / TENSORS).read_bytes())
    data[-4:] = bytes(4)
    (folder / TENSORS).write_bytes(bytes(data))
    Capture.open(folder, "c1", SETTINGS, check_digest=False)  # the parent's quick look; the session checks the digest
    with pytest.raises(BenchInputError, match="SHA-256"):
        Capture.open(folder, "c1", SETTINGS)


class _Reference:
    """The parts of bench.accuracy.reference.Reference that scoring reads."""

    def __init__(self, sequences, logits, greedy):
        self.sequences, self._logits, self.meta = sequences, logits, {"greedy_ids": greedy}

    def logits(self, i):
        return self._logits[i]


def test_captured_figures_match_the_references_sequences_by_prompt_or_refuse(tmp_path):
    """Scored as a session scores: each reference sequence against the capture's of the same prompt, up to the
    positions both fed; a capture of other text is refused (the cell is then measured in a session)."""
    import torch

    from bench.accuracy.figures import position_stats, token_parity
    from bench.accuracy.runtime import captured_figures
    from bench.execution.accuracy_capture import Capture
    from bench.workloads.request import Request

    cap = Capture.open(_capture(tmp_path / "cap"), "c1", SETTINGS)
    requests = [Request("a", (1, 2), 2), Request("b", (6,), 2)]
    # the baseline fed the second sequence first, and fewer positions of the first
    ref_logits = [torch.randn(2, 16), torch.randn(1, 16)]
    ref = _Reference([([6], [7, 8]), ([1, 2], [3])], ref_logits, {"a": [1, 2], "b": [3, 4]})
    settings = {**SETTINGS, "prefix_k": 2}
    figures = captured_figures(cap, ref, requests, settings, [[3, 4, 5], [7, 8]])
    want = token_parity([position_stats(ref_logits[0], cap.logits(1), torch.tensor([7, 8])),
                         position_stats(ref_logits[1], cap.logits(0)[:1], torch.tensor([3]))]).to_dict()
    assert figures["parity"] == pytest.approx(want) and figures["answer_positions"] == 3
    assert figures["determinism"]["differing_tokens"] == 1 and figures["measure_s"] == 1.5
    assert figures["greedy"] == [[1, 2], [3, 4]]
    other = _Reference([([6], [7, 9])], ref_logits[:1], {"a": [1, 2], "b": [3, 4]})
    with pytest.raises(BenchInputError, match="did not score the reference's sequence 0"):
        captured_figures(cap, other, requests, settings, [[3, 4, 5], [7, 8]])
    with pytest.raises(BenchInputError, match="no greedy tokens of 1"):
        captured_figures(cap, ref, [*requests, Request("c", (5,), 2)], settings, [[3], [7], [5]])
