"""Progress display for a matrix run: cell k of n, the current cell, elapsed time (rich)."""

from __future__ import annotations


class MatrixProgress:
    def __init__(self, total: int, already_done: int, enabled: bool = True, console=None):
        self.enabled = enabled
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
            TextColumn("[bold]cell"),
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
                self.progress.console.print(f"{self.done} of {self.total} cells already in the store: skipped")
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.progress.__exit__(*exc)

    def current(self, label: str, trial: int | None) -> None:
        if self.enabled:
            suffix = f" (trial {trial + 1})" if trial is not None else ""
            self.progress.update(self.task, description=f"{label}{suffix}")

    def advance(self, label: str, status: str) -> None:
        self.done += 1
        if self.enabled:
            if status != "ok":
                self.progress.console.print(f"[yellow]{label}: {status}")
            self.progress.update(self.task, advance=1)
