"""Progress display for a matrix run: cell (or cell-run) k of n, the current cell, elapsed time (rich)."""

from __future__ import annotations


class MatrixProgress:
    def __init__(self, total: int, already_done: int, enabled: bool = True, console=None, unit: str = "cell"):
        self.enabled = enabled
        self.unit = unit
        self.total = total
        self.done = already_done
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

    def current(self, label: str, trial: int | None, run: tuple[int, int] | None = None) -> None:
        """Show the cell being measured; run = (k, runs) when cells run in several processes."""
        if self.enabled:
            suffix = f" (trial {trial + 1})" if trial is not None else ""
            if run is not None:
                suffix = f" (run {run[0] + 1}/{run[1]}" + (f", trial {trial + 1})" if trial is not None else ")")
            self.progress.update(self.task, description=f"{label}{suffix}")

    def advance(self, label: str, status: str) -> None:
        self.done += 1
        if self.enabled:
            if status not in ("ok", "skipped"):
                self.progress.console.print(f"[yellow]{label}: {status}")
            self.progress.update(self.task, advance=1)
