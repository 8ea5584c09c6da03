"""SIGTERM handled as Ctrl-C: one rule for the commands that must clean up when a job's end, `timeout` or systemd
stops them (a server in its own process group, a study's step in progress, `bench accuracy`'s running sessions)."""

from __future__ import annotations

import contextlib
import signal
import threading


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_ctrl_c():
    """While the block runs, SIGTERM raises KeyboardInterrupt in the main thread, so the block's Ctrl-C cleanup runs.

    Not installed outside the main thread (signals reach no other) or where SIGTERM is set to be ignored (the
    caller asked for that); the previous handler is back when the block ends."""
    install = (threading.current_thread() is threading.main_thread()
               and signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN)
    previous = signal.signal(signal.SIGTERM, _interrupt) if install else None
    try:
        yield
    finally:
        if install:
            signal.signal(signal.SIGTERM, previous)
