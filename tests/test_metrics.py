import pytest

from bench.backends.base import RequestTiming
from bench.results.metrics import pass_metrics


def test_hand_computed_metrics():
    # Two requests over a 2 s window. r1: start 0, tokens at 0.5, 0.7, 0.9 -> TTFT 500 ms,
    # TPOT (0.9 - 0.5) / 2 = 200 ms, ITLs 200, 200 ms. r2: start 0.5, tokens 1.0, 2.0 ->
    # TTFT 500 ms, TPOT 1000 ms, ITL 1000 ms.
    t = [
        RequestTiming("r1", 10, 3, 3, 0.0, [0.5, 0.7, 0.9], 0.9),
        RequestTiming("r2", 20, 2, 2, 0.5, [1.0, 2.0], 2.0),
    ]
    m = pass_metrics(t, 0.0, 2.0)
    assert m["request_throughput"] == pytest.approx(1.0)
    assert m["output_throughput"] == pytest.approx(2.5)
    assert m["total_token_throughput"] == pytest.approx(17.5)
    assert m["ttft_mean_ms"] == pytest.approx(500)
    assert m["tpot_mean_ms"] == pytest.approx(600)
    assert m["itl_median_ms"] == pytest.approx(200)
    assert m["itl_mean_ms"] == pytest.approx(1400 / 3)
    assert m["e2el_mean_ms"] == pytest.approx((900 + 1500) / 2)
    assert m["e2el_p99_ms"] == pytest.approx(900 + 0.99 * 600)
    assert m["output_len_mismatches"] == 0


def test_mismatch_and_failure_counted():
    t = [RequestTiming("a", 5, 4, 3, 0.0, [0.1, 0.2, 0.3], 0.3), RequestTiming("b", 5, 4, 0, 0.0, [], 0.0, error="boom")]
    m = pass_metrics(t, 0.0, 1.0)
    assert m["output_len_mismatches"] == 1 and m["failed"] == 1 and m["completed"] == 1
    assert m["expected_output_tokens"] == 8


def test_zero_window_rejected():
    with pytest.raises(ValueError):
        pass_metrics([], 1.0, 1.0)


def test_tpot_has_one_definition_for_a_request_and_for_a_frame_column():
    import numpy as np

    from bench.results.metrics import time_per_output_token

    assert time_per_output_token(110.0, 10.0, 11) == pytest.approx(10.0)  # (110 - 10) / (11 - 1)
    column = time_per_output_token(np.array([110.0, 50.0]), np.array([10.0, 10.0]), np.array([11, 5]))
    assert column.tolist() == pytest.approx([10.0, 10.0])
