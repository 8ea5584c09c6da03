import pytest

from bench.metrics import pass_metrics
from bench.workloads.request import RequestTiming


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

    from bench.metrics import time_per_output_token

    assert time_per_output_token(110.0, 10.0, 11) == pytest.approx(10.0)  # (110 - 10) / (11 - 1)
    column = time_per_output_token(np.array([110.0, 50.0]), np.array([10.0, 10.0]), np.array([11, 5]))
    assert column.tolist() == pytest.approx([10.0, 10.0])


def test_decode_throughput_is_the_rate_after_each_first_token():
    # r1: first token 0.5, end 0.9 (2 tokens after it); r2: first 1.0, end 2.0 (1 token after it).
    # Decode intervals [0.5, 0.9] and [1.0, 2.0] do not overlap: 3 tokens / 1.4 s.
    t = [
        RequestTiming("r1", 10, 3, 3, 0.0, [0.5, 0.7, 0.9], 0.9),
        RequestTiming("r2", 20, 2, 2, 0.5, [1.0, 2.0], 2.0),
    ]
    m = pass_metrics(t, 0.0, 2.0)
    assert m["decode_throughput"] == pytest.approx(3 / 1.4)
    assert m["output_throughput"] == pytest.approx(2.5)  # end to end: prefill time counts


def test_decode_throughput_counts_overlapping_requests_once():
    # One batch of two rows: both first tokens at 1.0 (a long prefill), ends 2.0 and 2.8.
    # Union of [1, 2] and [1, 2.8] is 1.8 s; 4 + 9 tokens after the first.
    t = [
        RequestTiming("a", 900, 5, 5, 0.0, [1.0, 1.25, 1.5, 1.75, 2.0], 2.0),
        RequestTiming("b", 900, 10, 10, 0.0, [1.0 + 0.2 * k for k in range(10)], 2.8),
    ]
    m = pass_metrics(t, 0.0, 3.0)
    assert m["decode_throughput"] == pytest.approx(13 / 1.8)
    # the prefill second makes end-to-end throughput lower than the generation speed
    assert m["output_throughput"] == pytest.approx(15 / 3.0)
    assert m["output_throughput"] < m["decode_throughput"]


def test_decode_throughput_none_without_a_second_token():
    t = [RequestTiming("a", 5, 1, 1, 0.0, [0.1], 0.1)]
    assert pass_metrics(t, 0.0, 1.0)["decode_throughput"] is None


def test_a_pass_is_one_typed_value_whose_unknown_or_doubled_figure_fails_where_it_is_made():
    import pytest as _pytest

    from bench.metrics import UNSET, PassMetrics, pass_metrics
    from bench.workloads.request import RequestTiming

    timed = pass_metrics([RequestTiming("r", 4, 3, 3, 0.0, [0.1, 0.2, 0.3], 0.3)], 0.0, 1.0)
    m = PassMetrics(**timed, gpus=1)
    assert m.to_dict() == {**timed, "gpus": 1}  # the stored form: what this pass measured, nothing UNSET
    assert m.energy_j is UNSET and "energy_j" not in m.to_dict()
    assert PassMetrics(**timed, energy_j=None).to_dict()["energy_j"] is None  # measured as absent: stored as null
    with _pytest.raises(TypeError, match="output_throughput_per_usr"):
        PassMetrics(**timed, output_throughput_per_usr=3.0)  # a misspelt figure fails here, not in a report
    with _pytest.raises(TypeError, match="output_throughput"):
        PassMetrics(**timed, **{"output_throughput": 1.0})  # two parts claiming one figure
    with _pytest.raises(AttributeError):
        m.gpus = 2  # frozen
