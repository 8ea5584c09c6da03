"""Reports: pure functions from selected records to frames, tables and figures; writers at the edge.

Owns the results frames (`data`), the cells they aggregate to (`cells`), the speedup and history
tables (`tables`: SpeedupTable) and their text (`render`), the plotly figures (`plotting`'s shared
rules; `figures`, `ratio_figures`, `kernel_figures`), the kernel panel (`kernel_panel`), the
self-contained dashboard (`dashboard`), the one function that writes them (`build`) and the driver
of `bench report` (`driver`: default stores and folder).
May import: every earlier stage (spec, workloads, execution, results, oom, profiling); never study or commands.
"""
