"""The session pool (bench.execution.session_pool): N at a time, a group's gate first, an out-of-memory beside others
run again alone; on a virtual clock, with fake sessions instead of processes."""

import pytest

from bench.execution.session_pool import Pool, makespan, run_pool


class Clock:
    def __init__(self):
        self.t = 0

    def sleep(self, seconds):
        self.t += seconds


class FakeSession:
    """A session that ends `seconds` after its start on the clock, with `outcome`."""

    def __init__(self, clock, seconds, outcome):
        self.clock, self.end, self.outcome, self.killed = clock, clock.t + seconds, outcome, False

    def poll(self):
        return self.outcome if self.clock.t >= self.end else None

    def kill(self):
        self.killed = True


def _run(groups, parallel, outcomes=None, again=None):
    """Run the pool on a virtual clock: each payload is (name, seconds). Return [(name, start, end, beside names)]."""
    clock, log, running = Clock(), [], {}
    outcomes = outcomes or {}

    def start(task):
        name, seconds = task.payload
        running[task] = [name, clock.t, None]
        return FakeSession(clock, seconds, outcomes.get((name, task.alone), "ok"))

    def finish(task, outcome):
        entry = running.pop(task)
        entry[2] = clock.t
        log.append((*entry, sorted(t.payload[0] for t in task.beside), task.alone))
        return (again or {}).get(task.payload[0]) if outcome == "oom" and task.may_run_again else None

    run_pool(Pool(groups, parallel), start, finish, poll_s=1, sleep=clock.sleep)
    return log


def _at_once(log) -> int:
    return max(sum(1 for _, s, e, *_ in log if s <= t < e) for t in range(max(e for *_, e, _, _ in log)))


GROUPS = [(("b0", 10), [("a0", 5), ("c0", 7)]),  # a baseline of 10 s, then two sessions against it
          (("b1", 3), [("a1", 4)]),
          (None, [("x2", 2)])]  # a group whose baseline is stored: no gate


def test_never_more_than_n_at_once_and_each_groups_baseline_first():
    log = _run(GROUPS, 2)
    when = {name: (start, end) for name, start, end, _, _ in log}
    # Hand-computed: b0 and b1 at 0; b1 ends at 3, a1 runs 3-7; x2 7-9; b0 ends at 10; a0 10-15, c0 10-17.
    assert when == {"b0": (0, 10), "b1": (0, 3), "a1": (3, 7), "x2": (7, 9), "a0": (10, 15), "c0": (10, 17)}
    assert _at_once(log) == 2
    for gate, others in (("b0", ("a0", "c0")), ("b1", ("a1",))):
        assert all(when[o][0] >= when[gate][1] for o in others)
    beside = {name: b for name, _, _, b, _ in log}
    assert beside["b0"] == ["a1", "b1", "x2"] and beside["c0"] == ["a0"]  # who ran at some time beside it
    # one at a time: the plan's order, each session alone
    serial = _run(GROUPS, 1)
    assert [name for name, *_ in serial] == ["b0", "a0", "c0", "b1", "a1", "x2"] and _at_once(serial) == 1
    assert all(b == [] for *_, b, _ in serial)
    assert _at_once(_run(GROUPS, 3)) == 3


def test_the_makespan_is_the_same_schedule_on_a_virtual_clock():
    seconds = [(10, [5, 7]), (3, [4]), (None, [2])]
    assert makespan(seconds, 2) == 17  # as the run above: c0 ends at 17
    assert makespan(seconds, 1) == 10 + 5 + 7 + 3 + 4 + 2
    assert makespan(seconds, 6) == 17  # the gate b0 (10 s) and then c0 (7 s): the longest chain
    assert makespan([], 3) == 0


def test_an_out_of_memory_beside_others_runs_again_alone_and_alone_it_is_final():
    # b1 runs out of memory at 3 s beside b0: nothing starts until b0 has ended (x2 was ready), then b1 runs alone,
    # then the schedule goes on; the re-run is still its group's gate (a1 waits for it).
    log = _run(GROUPS, 2, outcomes={("b1", False): "oom"}, again={"b1": ("b1", 3)})
    when = {(name, alone): (start, end) for name, start, end, _, alone in log}
    assert when == {("b0", False): (0, 10), ("b1", False): (0, 3), ("b1", True): (10, 13), ("a0", False): (13, 18),
                    ("c0", False): (13, 20), ("a1", False): (18, 22), ("x2", False): (20, 22)}
    beside = {(name, alone): b for name, _, _, b, alone in log}
    assert beside[("b1", False)] == ["b0"] and beside[("b1", True)] == []  # beside another the first time, alone then
    # a session that ran alone (parallel 1, or a re-run) is not run again: its failure is final
    serial = _run(GROUPS, 1, outcomes={("b1", False): "oom"}, again={"b1": ("b1", 3)})
    assert [n for n, *_ in serial].count("b1") == 1
    pool = Pool([(("b", 1), [])], 2)
    task = pool.next()
    pool.start(task)
    assert not task.may_run_again
    with pytest.raises(ValueError, match="its failure is final"):
        pool.end(task, ("b", 1))


def test_ctrl_c_kills_every_running_session_and_goes_on():
    clock, started = Clock(), []

    def start(task):
        started.append(FakeSession(clock, task.payload, "ok"))
        return started[-1]

    def finish(task, outcome):
        raise KeyboardInterrupt  # arrives while the others run

    with pytest.raises(KeyboardInterrupt):
        run_pool(Pool([(1, [5]), (9, [])], 2), start, finish, poll_s=1, sleep=clock.sleep)
    assert [s.killed for s in started] == [False, True]  # the one that ended is not killed; the running one is


def test_parallel_must_be_a_positive_integer():
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="positive integer"):
            Pool([], bad)


def test_a_session_whose_stored_peak_would_not_fit_beside_those_running_waits_and_the_next_that_fits_starts():
    """Memory (an 80 GB card): two baseline sessions of 46 GB each cannot share it, so the second waits, and its
    group's sessions after it; a 25 GB session of the first group starts beside the second baseline once its own
    baseline has ended. Without sizes (or capacity) everything starts as before (the re-run alone is then the net)."""
    from bench.execution.session_pool import CONTEXT_BYTES, session_size

    gb = 1e9
    groups = [((72, 46 * gb), [(50, 25 * gb)]), ((75, 46 * gb), [(70, 35 * gb), (50, 30 * gb)])]
    # Hand-computed, 3 at a time on 80 GB: B1 0-72 alone (B2 would make 92); at 72 B2 and C1 (46 + 25 = 71) start;
    # C1 ends at 122, B2 at 147; then C2 and I2 (35 + 30) 147-217 and 147-197.
    assert makespan(groups, 3, capacity=80 * gb) == 217
    assert makespan(groups, 3) == 145  # sizes not used without a capacity: B1 and B2 side by side
    assert makespan(groups, 3, capacity=200 * gb) == 145  # all fit
    unknown = [((72, None), [(50, 25 * gb)]), ((75, 46 * gb), [(70, None), (50, 30 * gb)])]
    assert makespan(unknown, 3, capacity=80 * gb) == 145  # a size not known holds nothing back
    pool = Pool([(46, [25]), (46, [35, 30])], 3, capacity=80, size_of=float)
    first = pool.next()
    pool.start(first)
    assert pool.next() is None and [t.payload for t in pool.held] == [46]  # the second baseline waits for memory
    assert pool.fits(pool.held[0]) is False
    # the rule for a session's size: the largest stored peak of its cells, plus a process's CUDA context
    assert session_size([10.0, 30.0]) == 30.0 + CONTEXT_BYTES
    assert session_size([10.0, None]) is None and session_size([]) is None and session_size([0]) is None


def test_an_early_session_starts_beside_its_gate_and_its_pair_waits_for_both():
    """A group's early session (a cell's capture) starts without waiting for the gate; the session paired with it starts
    once both the gate and it have ended; another group's gate still starts before any early session."""
    groups = [(("b0", 10), [("s0", 1), ("c0", 3)], [(("e0", 20), 0)]),
              (("b1", 5), [("s1", 1)], [(("e1", 2), 0)])]
    log = {name: (start, end) for name, start, end, *_ in _run(groups, 3)}
    assert log["b0"][0] == log["b1"][0] == 0 and log["e0"][0] == 0  # both gates, then the first early session
    assert log["e1"][0] == 5  # the next slot, when b1 ended: early sessions come after the gates
    assert log["c0"][0] == 10  # not paired: waits for the gate alone
    assert log["s0"][0] == 20 and log["s1"][0] == 7  # each pair after its gate and its early session
    # on the virtual clock the dry run uses, the same schedule
    seconds = [((10), [1, 3], [(20, 0)]), (5, [1], [(2, 0)])]
    assert makespan(seconds, 3) == 21


def test_an_early_session_that_ran_out_of_memory_beside_others_is_ended_by_its_rerun():
    groups = [(("b0", 10), [("s0", 1)], [(("e0", 4), 0)])]
    log = _run(groups, 2, outcomes={("e0", False): "oom"}, again={"e0": ("e0", 4)})
    runs = [(name, start, end, alone) for name, start, end, _, alone in log]
    assert ("e0", 0, 4, False) in runs and ("e0", 10, 14, True) in runs  # run again alone once b0 ended
    assert [r for r in runs if r[0] == "s0"][0][1] == 14  # its pair waited for the re-run


def test_an_early_session_of_no_known_size_waits_while_two_such_sessions_run_on_a_gpu():
    """A fresh store on a GPU: both baselines' sessions (no size known) run, so the early one waits for one of them to
    end; beside one it starts at once; where the memory is not known (a CPU) nothing waits for memory."""
    def schedule(groups, capacity):
        pool, starts, now, ends = Pool(groups, 3, capacity, lambda p: None), {}, 0, {}
        while not pool.done:
            while (task := pool.next()) is not None:
                pool.start(task)
                starts[task.payload[0]], ends[task] = now, now + task.payload[1]
            now = min(ends.values())
            for task in [t for t in pool.running if ends[t] <= now]:
                del ends[task]
                pool.end(task)
        return starts

    two = [(("b0", 10), [("s0", 1)], [(("e0", 20), 0)]), (("b1", 5), [])]
    assert schedule(two, 141e9)["e0"] == 5 and schedule(two, None)["e0"] == 0
    one = [(("b0", 10), [("s0", 1)], [(("e0", 20), 0)])]
    assert schedule(one, 141e9)["e0"] == 0
