"""Progress display for a matrix run: cell (or process, when cells run in several) k of n, the current cell, elapsed time.

Without a terminal (output piped to a file or a CI log) a live bar draws nothing until the end,
so each finished cell prints one line instead; warnings print once each, and each failed cell its
status and the first line of its error, whatever the output.
"""

from __future__ import annotations

import time


class MatrixProgress:
    def __init__(self, total: int, already_done: int, enabled: bool = True, console=None, unit: str = "cell"):
        self.enabled = enabled
        self.unit = unit
        self.total = total
        self.done = already_done
        self.slots: dict[str, str] = {}  # slot -> what it measures now
        self.warned: set[str] = set()
        self.started = time.monotonic()
        self.console = console
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = console or Console(stderr=True, soft_wrap=True)
        self.lines = not self.console.is_terminal  # no live display: a line per finished cell
        self.progress = Progress(
            TextColumn(f"[bold]{unit}"),
            MofNCompleteColumn(),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=self.console,
            transient=False,
        )
        self.task = self.progress.add_task("starting", total=total, completed=already_done)

    def __enter__(self):
        if self.enabled:
            self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.progress.__exit__(*exc)

    def current(self, label: str, trial: int | None, run: tuple[int, int] | None = None, slot: str = "") -> None:
        """Show the cell being measured; run = (k, runs) when cells run in several processes.

        slot: where it runs (e.g. "cuda:3") when an executor runs several groups at once; each
        slot shows its own current cell."""
        if self.enabled:
            suffix = f" (trial {trial + 1})" if trial is not None else ""
            if run is not None:
                suffix = f" (run {run[0] + 1}/{run[1]}" + (f", trial {trial + 1})" if trial is not None else ")")
            self.slots[slot] = f"{label}{suffix}"
            self._show()

    def idle(self, slot: str = "") -> None:
        """Forget what a slot was running (its group round ended)."""
        if self.enabled and self.slots.pop(slot, None) is not None:
            self._show()

    def _show(self) -> None:
        if set(self.slots) <= {""}:  # one group at a time: the display as it always was
            text = self.slots.get("", "")
        else:
            text = " | ".join(f"[{slot}] {desc}" if slot else desc for slot, desc in sorted(self.slots.items()))
        self.progress.update(self.task, description=text)

    def advance(self, label: str, status: str, error: str | None = None) -> None:
        """Count one finished cell (or process); a failed one prints its status and the first line of its error,
        with or without the display. The caller advances each once: the count never passes the total."""
        from bench.machine.failures import first_line

        self.done += 1
        why = f": {first_line(error)}" if status not in ("ok", "skipped") and first_line(error) else ""
        if self.enabled:
            if self.lines:
                elapsed = time.monotonic() - self.started
                self.console.print(f"{self.unit} {self.done}/{self.total} {status}: {label} ({_clock(elapsed)} elapsed)"
                                   + why, soft_wrap=True, highlight=False, markup=False)
            elif status not in ("ok", "skipped"):
                self.progress.console.print(f"{label}: {status}{why}", style="yellow", soft_wrap=True, highlight=False,
                                            markup=False)
            self.progress.update(self.task, advance=1)
        elif status not in ("ok", "skipped"):  # no display (--no-progress): a failure is still said
            self._console().print(f"{label}: {status}{why}", style="yellow", soft_wrap=True, highlight=False,
                                  markup=False)

    def _console(self):
        if self.console is None:
            from rich.console import Console

            self.console = Console(stderr=True, soft_wrap=True)
        return self.console

    def warn(self, text: str, key: str | None = None) -> None:
        """Print a warning once per key (default: its text), with or without the display."""
        if (key or text) in self.warned:
            return
        self.warned.add(key or text)
        self._console().print(f"⚠ {text}", style="yellow", soft_wrap=True, highlight=False, markup=False)


def _clock(seconds: float) -> str:
    """Return 'm:ss' (or 'h:mm:ss') of a duration."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
