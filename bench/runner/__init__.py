"""Runner: the run driver of a matrix (plan from the store, resume, build groups, store writes).

`matrix.run_matrix` plans what the store lacks, hands each build group to an executor
(bench.execution) and appends each record (bench.results) the moment its event arrives;
`matrix.run_estimate` says how long that would take from stored records; `build` is the driver
of `bench build` (engine artifacts, measuring nothing); `engines` chooses each group's engine.
May import: every stage up to results (it needs the record types, the store and the query
API); nothing that probes, profiles or reports (bench.study chains those with a run).
"""
