"""Study: the verbs that chain the pipeline's drivers, each step's records then the report over them.

Owns `bench study` (`plan`: the [study] table read and checked, each step's command line, the
dry run's plan and estimate; `driver`: the steps in order, run, oom, profile, accuracy, report,
and study.json) and `bench run` (`run`: the run driver, then its report: the study's first and
last steps). It sits after report because a study ends in the report: the steps' drivers are in
runner, oom, profiling and accuracy, and the report's in report. May import: every stage before
commands; nothing imports it but commands.
"""
