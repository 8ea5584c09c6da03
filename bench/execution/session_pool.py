"""Session-style children N at a time: which session starts when (`Pool`), run for real (`run_pool`) or on a virtual
clock (`makespan`, the dry run's estimate of the very same schedule).

Used by `bench accuracy --parallel N` (bench.accuracy.driver). Its sessions come in groups, one per
baseline: the group's first session (its gate: the baseline's session, which writes the Reference
the others read) runs before the group's others; groups are independent, so different groups'
sessions run side by side. The rules, all here:

- never more than `parallel` sessions at once; each start takes the first session, in plan order,
  that may start (a gate, or a session whose group's gate has ended); `parallel = 1` is the serial
  order the driver always had;
- a session that ran out of memory while another ran beside it (or, as its caller judges, measured
  something the others' memory changed) is run again alone (`Task.may_run_again`): the caller names
  what to run again (`finish`'s return), no session starts until those running have ended, then the
  re-run runs with nothing beside it, then the schedule goes on. A gate's re-run is still its group's
  gate. A session that ran alone gets no second try: its failure is final;
- a group may also have *early* sessions, each paired with one of its other sessions: an early one starts without
  waiting for the gate, and its pair starts only after both the gate and it have ended (`bench accuracy`: a cell
  session's logits and greedy tokens captured beside its baseline's session, then scored against the Reference the
  baseline wrote). Early sessions come after every group's gate and other sessions in plan order, so a gate, or a
  session its gate has freed, starts first;
- each task counts the other sessions that ran at some time beside it (`Task.beside`): its
  recorded seconds are not a solo time when that is not empty;
- memory, where the caller knows it (`capacity`, and a task's `size`: the peak its session reached the last time it
  ran, from its stored records): a session starts beside others only if its size and theirs fit the capacity; the
  first that fits, in plan order, starts (a session with no size known is not held back: the re-run alone is its
  safety net; an early one waits while two sessions of no known size run). With nothing running, a session always
  starts.

`run_pool` starts the processes without blocking (bench.execution.launcher.start_session) and polls
them from the calling thread: no thread of its own, so Ctrl-C and SIGTERM (bench.interrupts) reach
the loop, which kills every running session's process group and lets the exception go on; what
`finish` stored stays stored. The store and the console are touched by the calling thread alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# How often run_pool looks at its running sessions (a session lasts seconds to minutes): a poll is a waitpid and a
# clock read, and an ended session's records and the next session's start wait for it (at 0.2 s, 0.1 s a session).
POLL_S = 0.05
# What a session process holds beyond its allocator's peak (torch.cuda.max_memory_reserved): its CUDA context and
# libraries' handles, about 0.5-1 GB on an H100 or H200; counted once per session when sizes are added up.
CONTEXT_BYTES = 1 << 30


def session_size(peaks: list) -> float | None:
    """Return the memory a session is expected to hold: the largest of its cells' stored session peaks (bytes) plus
    CONTEXT_BYTES, or None where any is not known (never measured, or measured on a CPU). The one place of the rule:
    the driver's schedule and the dry run's estimate both use it."""
    if not peaks or any(not isinstance(p, (int, float)) or isinstance(p, bool) or p <= 0 for p in peaks):
        return None
    return float(max(peaks)) + CONTEXT_BYTES


@dataclass(eq=False)
class Task:
    """One session of the schedule: its group, whether it is the group's gate, what the caller runs."""

    group: int  # index of its group in the plan
    gate: bool  # the group's first session: the group's other sessions start after it has ended
    payload: Any  # what the caller's start() runs
    order: int = 0  # its place in the plan (re-runs: the place of the task they repeat)
    alone: bool = False  # a re-run after an out-of-memory beside others: runs with no other session
    first: Task | None = None  # for a re-run: the task it repeats
    beside: set = field(default_factory=set)  # the other tasks that ran at some time while it ran
    size: float | None = None  # the memory its session is expected to hold (bytes), or None: not known
    early: bool = False  # starts without waiting for its group's gate
    after: list = field(default_factory=list)  # the early tasks that must have ended before it starts

    @property
    def may_run_again(self) -> bool:
        """Whether a failure of this task that other sessions' memory may have caused is run again alone: only if
        another session ran beside it (and it is not already that re-run). The one place of this rule."""
        return bool(self.beside) and not self.alone


class Pool:
    """The schedule's state: the tasks waiting, running, and the re-runs waiting to run alone."""

    def __init__(self, groups: list[tuple[Any, list]], parallel: int, capacity: float | None = None,
                 size_of: Callable[[Any], float | None] | None = None):
        """groups: [(the gate's payload or None (no gate: the group's sessions are independent), [other payloads])
        or (gate, others, [(an early payload, the index in others of the session that waits for it)])], in plan
        order. parallel: a positive integer (the caller checked the user's value). capacity: the memory the sessions
        share (bytes), or None: not known; size_of(payload): the memory that session is expected to hold, or None."""
        if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
            raise ValueError(f"parallel must be a positive integer, got {parallel!r}")
        self.parallel, self.capacity = parallel, capacity
        self.held: list[Task] = []  # tasks that were next but waited for memory (the caller may say so, once each)
        self.waiting: list[Task] = []
        early: list[Task] = []
        for i, (gate, others, *rest) in enumerate(groups):
            if gate is not None:
                self.waiting.append(Task(i, True, gate))
            tasks = [Task(i, False, p) for p in others]
            self.waiting += tasks
            for payload, j in (rest[0] if rest else []):
                first = Task(i, False, payload, early=True)
                tasks[j].after.append(first)
                early.append(first)
        self.waiting += early
        for n, task in enumerate(self.waiting):
            task.order = n
            task.size = size_of(task.payload) if size_of is not None else None
        self.open = {i for i, (gate, *_) in enumerate(groups) if gate is None}  # groups whose gate has ended
        self.ended: set[Task] = set()  # the tasks that have ended (a re-run's end ends the task it repeats)
        self.running: list[Task] = []
        self.again: list[Task] = []  # re-runs, each to run alone

    @property
    def done(self) -> bool:
        return not (self.waiting or self.running or self.again)

    def next(self) -> Task | None:
        """Return the task that may start now, or None (N running, a re-run waiting for the others to end or running
        alone, or nothing ready until a gate ends)."""
        if self.again:
            return self.again[0] if not self.running else None
        if any(t.alone for t in self.running) or len(self.running) >= self.parallel:
            return None
        for task in (t for t in self.waiting if self.ready(t)):
            if self.fits(task):
                return task
            if task not in self.held:
                self.held.append(task)
        return None

    def ready(self, task: Task) -> bool:
        """Whether what the task waits for has ended: its group's gate (unless it is a gate or early) and its early
        sessions."""
        return (task.gate or task.early or task.group in self.open) and all(t in self.ended for t in task.after)

    def fits(self, task: Task) -> bool:
        """Whether the task's session may start beside those running: the one place of the memory rule. An early
        session of no known size waits while two or more sessions of no known size run (a fresh store on a GPU: the
        two baseline sessions of the h200-study preset held 55.0 GB each on an H200, 2026-12-07, and a compiled cell's
        session beside both may not fit its 141 GB); beside one it starts, as any session of no known size does."""
        if not self.running or self.capacity is None:
            return True
        if task.early and task.size is None and sum(t.size is None for t in self.running) >= 2:
            return False
        if task.size is None:
            return True
        return sum(t.size or 0.0 for t in self.running) + task.size <= self.capacity

    def start(self, task: Task) -> None:
        """The task starts now: every task running beside it counts it, and it counts them."""
        (self.again if task.alone else self.waiting).remove(task)
        for other in self.running:
            other.beside.add(task)
            task.beside.add(other)
        self.running.append(task)

    def skip(self, task: Task) -> None:
        """The task needed no process (the caller resolved it at once): it ends without having run."""
        (self.again if task.alone else self.waiting).remove(task)
        self._ended(task)

    def end(self, task: Task, again: Any = None) -> Task | None:
        """The task ended. again: the payload to run again alone (its part that ran out of memory beside others),
        which only a task that `may_run_again` may ask for; return the re-run's task, or None."""
        self.running.remove(task)
        if again is None:
            self._ended(task)
            return None
        if not task.may_run_again:
            raise ValueError("a session that ran alone is not run again: its failure is final")
        rerun = Task(task.group, task.gate, again, order=task.order, alone=True, first=task, size=task.size,
                     early=task.early)
        self.again.append(rerun)
        return rerun

    def _ended(self, task: Task) -> None:
        while task is not None:
            self.ended.add(task)
            if task.gate:
                self.open.add(task.group)
            task = task.first


def run_pool(pool: Pool, start: Callable[[Task], Any], finish: Callable[[Task, Any], Any], *,
             poll_s: float = POLL_S, sleep=time.sleep) -> None:
    """Run the pool's tasks to the end, in the calling thread.

    start(task): start the task's session and return its handle (`poll()`: its outcome once it has ended, else None;
    `kill()`), or None where the task needs no process (resolved by start itself). finish(task, outcome): take the
    ended session's outcome (store its records) and return what of it to run again alone (only where
    task.may_run_again), or None. On any exception, Ctrl-C and SIGTERM's included, every running session is killed
    before the exception goes on.
    """
    running: dict[Task, Any] = {}
    try:
        while not pool.done:
            while (task := pool.next()) is not None:
                handle = start(task)
                if handle is None:
                    pool.skip(task)
                    continue
                pool.start(task)
                running[task] = handle
            if not running:
                if pool.done:  # the last tasks needed no process
                    break
                raise RuntimeError("the session pool is stuck: nothing runs and nothing may start")  # unreachable
            ended = False
            for task, handle in list(running.items()):
                outcome = handle.poll()
                if outcome is not None:
                    del running[task]
                    pool.end(task, finish(task, outcome))
                    ended = True
            if not ended:
                sleep(poll_s)
    except BaseException:
        for handle in running.values():
            handle.kill()
        raise


def makespan(groups: list[tuple[Any, list]], parallel: int, capacity: float | None = None) -> float:
    """Return the seconds the schedule takes when each session takes the seconds given (the Pool's rule on a virtual
    clock, no re-run): groups as Pool's (early sessions included), each payload a session's seconds, or (seconds, its
    memory or None) where `capacity` is known (the memory rule then holds back what would not fit)."""
    def seconds(payload) -> float:
        return float(payload[0] if isinstance(payload, tuple) else payload)

    def size(payload) -> float | None:
        return payload[1] if isinstance(payload, tuple) else None

    pool = Pool(groups, parallel, capacity, size)
    now, ends = 0.0, {}
    while not pool.done:
        while (task := pool.next()) is not None:
            pool.start(task)
            ends[task] = now + seconds(task.payload)
        now = min(ends.values())
        for task in [t for t in pool.running if ends[t] <= now]:
            del ends[task]
            pool.end(task)
    return now
