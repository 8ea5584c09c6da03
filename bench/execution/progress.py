"""Progress display for a matrix run: cell (or cell-run) k of n, the current cell, elapsed time (rich)."""

from __future__ import annotations


class MatrixProgress:
    def __init__(self, total: int, already_done: int, enabled: bool = True, console=None, unit: str = "cell"):
        self.enabled = enabled
        self.unit = unit
        self.total = total
        self.done = already_done
        self.slots: dict[str, str] = {}  # slot -> what it measures now
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

        self.console = console or Console(stderr=True)
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
            if self.done:
                self.progress.console.print(f"{self.done} of {self.total} {self.unit}s already in the store: skipped")
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

    def advance(self, label: str, status: str) -> None:
        self.done += 1
        if self.enabled:
            if status not in ("ok", "skipped"):
                self.progress.console.print(f"[yellow]{label}: {status}")
            self.progress.update(self.task, advance=1)
