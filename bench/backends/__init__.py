"""Backends: one subpackage per backend, each a light declaration (`config.py`) and its runtime (`backend.py`).

A runtime imports its heavy library inside methods; `registry` finds either part by name,
`declaration` holds what every config shares (options, flags, validation), `base` the runtime
protocol (build / load / run / close), `speed_of_light` the decode-step bound and the
copy-bandwidth probe. The declarations (`registry`, `declaration`, `<name>/config.py`) sit in
the spec stage: the matrix reads them to validate cells and compute their ids. May import:
base, machine (environment, memory cap), spec, workloads and serving; never execution, the
store or reports.
"""
