import pytest

from bench.errors import BenchInputError
from bench.spec.cells import Cell
from bench.spec.matrix import load_matrix, parse_matrix
from bench.spec.narrow import narrow

BASE = {
    "backends": ["fake"], "model": "qwen-tiny", "precisions": ["fp16", "bf16"], "max_batch_sizes": [1, 2, 4],
    "workloads": ["w"], "device": "cpu", "workload": {"w": {"num_requests": 4}},
}


def test_expands_product_in_order():
    m = parse_matrix(dict(BASE))
    assert len(m.cells) == 6
    assert [(c.precision, c.max_batch_size) for c in m.cells][:3] == [("fp16", 1), ("fp16", 2), ("fp16", 4)]
    assert all(isinstance(c, Cell) for c in m.cells)


def test_cell_id_is_stable_and_distinct():
    a = parse_matrix(dict(BASE)).cells
    b = parse_matrix(dict(BASE)).cells
    assert [c.cell_id for c in a] == [c.cell_id for c in b]
    assert len({c.cell_id for c in a}) == len(a)
    # round trip through the stored dict keeps the identity
    assert Cell.from_dict(a[0].to_dict()).cell_id == a[0].cell_id


def test_option_lists_are_axes_and_defaults_filled():
    m = parse_matrix({**BASE, "options": {"step_ms": [5.0, 10.0]}})
    assert len(m.cells) == 12
    assert dict(m.cells[0].options)["noise"] == 0.0


def test_exclude_and_include_rules():
    m = parse_matrix({**BASE, "exclude": [{"precision": "fp16", "max_batch_size": [2, 4]}],
                      "include": [{"precision": "int8", "max_batch_size": 8}]})
    labels = {(c.precision, c.max_batch_size) for c in m.cells}
    assert ("fp16", 2) not in labels and ("fp16", 1) in labels
    assert ("int8", 8) in labels
    assert len(m.cells) == 5


@pytest.mark.parametrize("change, needle", [
    ({"backends": ["nope"]}, "unknown backend 'nope': valid backends are 'fake', 'hf'"),
    ({"precisions": ["fp7"]}, "precision 'fp7' is not supported by backend 'fake'"),
    ({"model": "no-such-model"}, "unknown model 'no-such-model'"),
    ({"max_batch_sizes": [0]}, "max_batch_sizes must be positive integers, got 0"),
    ({"max_batch_sizes": [-2]}, "positive integers"),
    ({"options": {"warp_speed": 9}}, "unknown option 'warp_speed' for backend 'fake'"),
    ({"workloads": ["other"]}, "workload 'other' is not defined"),
    ({"device": "tpu"}, "unknown device 'tpu'"),
    ({"colour": "blue"}, "unknown matrix key 'colour'"),
    ({"workload": {"w": {"num_requests": 4, "path": "/no/such/file.json"}}}, "does not exist"),
    ({"workload": {"w": {"num_requests": 0}}}, "num_requests must be a positive integer"),
    ({"workload": {"w": {"sauce": 1}}}, "unknown key 'sauce'"),
    ({"exclude": [{"precision": ["fp16", "bf16"]}]}, "zero cells"),
])
def test_bad_input_names_the_problem(change, needle):
    with pytest.raises(BenchInputError) as err:
        parse_matrix({**BASE, **change})
    assert needle in str(err.value)


def test_model_directory_without_config(tmp_path):
    (tmp_path / "mymodel").mkdir()
    with pytest.raises(BenchInputError, match="has no config.json"):
        parse_matrix({**BASE, "model": str(tmp_path / "mymodel")})


def test_hf_rejects_fp16_on_cpu():
    with pytest.raises(BenchInputError, match="fp16"):
        parse_matrix({**BASE, "backends": ["hf"], "precisions": ["fp16"]})


def test_presets_load_and_are_valid():
    d = load_matrix("default", preset=True)
    assert {c.precision for c in d.cells} == {"fp32", "bf16"}
    assert sorted({c.max_batch_size for c in d.cells}) == [1, 2, 4, 8]
    assert d.cells[0].workload.num_requests >= 32
    g = load_matrix("h200-qwen7b", preset=True)
    assert {c.device for c in g.cells} == {"cuda"} and g.cells[0].model == "qwen-7b-shape"


def test_narrow_filters_and_overrides():
    m = narrow(parse_matrix(dict(BASE)), only={"max_batch_size": "1"}, requests=2, trials=1)
    assert len(m.cells) == 2 and m.settings.trials == 1
    assert all(c.workload.num_requests == 2 for c in m.cells)
    assert len(narrow(parse_matrix(dict(BASE)), only={"max_batch_size": "1|4", "precision": "bf16"}).cells) == 2
    with pytest.raises(BenchInputError, match="matches none"):
        narrow(parse_matrix(dict(BASE)), only={"max_batch_size": "3"})


def test_build_key_groups_batch_sizes_for_hf():
    m = parse_matrix({**BASE, "backends": ["hf"], "precisions": ["bf16"]})
    assert len({c.build_key() for c in m.cells}) == 1
