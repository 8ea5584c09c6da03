"""`bench presets`: list the built-in matrices and what each needs to run."""

from __future__ import annotations


def register(sub) -> None:
    sub.add_parser("presets", help="list built-in matrices and what each needs",
                   description="List the built-in matrices (use one with --preset NAME): cells, description, and "
                               "what each needs to run here (a CUDA GPU, optional packages such as torchao), with a "
                               "mark where that is missing. Listing imports no backend library."
                   ).set_defaults(func=cmd_presets)


def preset_needs(matrix) -> list[str]:
    """Return what a matrix needs to run, e.g. ["a CUDA GPU", "torchao (precision 'int4wo'; not installed)"]."""
    from importlib import util

    from bench.spec.matrix import requirements

    needs = []
    if any(str(c.device).startswith("cuda") for c in matrix.cells):
        needs.append("a CUDA GPU")
    if any(c.backend == "trtllm" for c in matrix.cells):  # run inside TensorRT-LLM's own environment (docs/guide/trtllm.md)
        needs.append("tensorrt_llm (backend 'trtllm'" + ("" if util.find_spec("tensorrt_llm") else "; NOT installed") + ")")
    for req in requirements(matrix.cells):
        whys = sorted({r.why for c in matrix.cells for r in _backend(c).requirements(c) if r.package == req.package})
        needs.append(f"{req.package} ({', '.join(whys)}" + ("" if req.installed() else "; NOT installed") + ")")
    return needs


def _backend(cell):
    from bench.backends.registry import backend_class

    return backend_class(cell.backend)


def cmd_presets(args) -> int:
    import warnings

    from bench.errors import BenchInputError
    from bench.spec.matrix import list_presets, load_matrix

    for name in list_presets():
        try:
            with warnings.catch_warnings():  # "no GPU here to check against": listing runs nothing
                warnings.simplefilter("ignore")
                m = load_matrix(name, preset=True, check_installed=False)
        except BenchInputError as exc:
            print(f"{name:28s} cannot be loaded here: {exc}")
            continue
        needs = preset_needs(m)
        print(f"{name:28s} {len(m.cells):4d} cells  {m.description}")
        print(f"{'':28s} needs: {', '.join(needs) if needs else 'nothing beyond the install (CPU)'}")
    return 0
