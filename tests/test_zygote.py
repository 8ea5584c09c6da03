"""The fork server (bench.execution.zygote): a forked worker keeps the launcher's contract, and the fallback is today's."""

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from bench.execution import launcher, preload, zygote
from bench.execution.supervisor import GroupItem, GroupJob, supervise_group
from bench.spec.matrix import parse_matrix
from bench.workloads.workload import cached_workload

pytestmark = pytest.mark.skipif(zygote.not_forkable([sys.executable, "-c", "pass"]) not in (None, "BENCH_ZYGOTE=0"),
                                reason="no fork server on this platform")

# A session-style child: it writes what it was started with to argv[1].
SAYS_WHO_IT_IS = """
import json, os, sys
from bench.execution.zygote import forked
json.dump({"env": {k: os.environ.get(k) for k in ("BENCH_PARENT_PID", "BENCH_EXTRA", "CUDA_VISIBLE_DEVICES", "BENCH_LAUNCH")},
           "pid": os.getpid(), "pgid": os.getpgid(0), "ppid": os.getppid(), "cwd": os.getcwd(), "forked": forked(),
           "argv": sys.argv}, open(sys.argv[1], "w"))
print("said on stdout"); print("said on stderr", file=sys.stderr)
"""



@pytest.fixture(autouse=True)
def own_zygote(monkeypatch):
    """Each test starts a zygote of its own, from its own environment: an earlier test's zygote was started from
    another (the Ray tests leave PYTHONBREAKPOINT set), which its workers would rightly refuse to fork from."""
    monkeypatch.setattr(zygote, "_shared", None)
    yield
    if zygote._shared is not None:
        zygote._shared.close()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _session(tmp_path, code, *args, timeout=60, **kwargs):
    result, log = tmp_path / "r.json", tmp_path / "logs" / "s.log"
    out = launcher.run_session([sys.executable, "-c", code, str(result), *args], result, log, timeout=timeout,
                               preload=(), **kwargs)
    return out, log


def test_a_fork_gets_its_own_group_log_environment_and_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(zygote.SWITCH_ENV, raising=False)
    out, log = _session(tmp_path, SAYS_WHO_IT_IS, "x", extra_env={"BENCH_EXTRA": "e", "CUDA_VISIBLE_DEVICES": "3"})
    assert out.status == "ok" and out.returncode == 0, out.error
    me = out.result
    assert me["forked"] is not None, me["env"]["BENCH_LAUNCH"]  # a fork of the zygote, not a fresh interpreter
    assert me["pgid"] == me["pid"] != os.getpgid(0)  # setsid: the launcher's kill reaches its whole group
    assert me["env"]["BENCH_PARENT_PID"] == str(me["ppid"]) != str(os.getpid())  # it dies with the zygote
    assert me["env"]["BENCH_EXTRA"] == "e" and me["env"]["CUDA_VISIBLE_DEVICES"] == "3" and me["env"]["BENCH_LAUNCH"] is None
    assert me["cwd"] == str(tmp_path) and me["argv"] == ["-c", str(tmp_path / "r.json"), "x"]
    assert "said on stdout" in log.read_text() and "said on stderr" in log.read_text()
    # a variable read at import (here PYTHONPATH) makes a fresh process, with the reason on its log's first line
    out, log = _session(tmp_path, SAYS_WHO_IT_IS, extra_env={"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ["PYTHONPATH"]})
    assert out.status == "ok" and out.result["forked"] is None
    assert out.result["env"]["BENCH_LAUNCH"].startswith("exec (its PYTHONPATH differs")
    assert log.read_text().startswith("[bench launcher] a fresh process, not a fork of the zygote: its PYTHONPATH")


def test_a_zygote_of_an_environment_this_process_has_since_changed_is_replaced_once_idle(tmp_path, monkeypatch):
    """This process changes a variable read at import after its zygote started (a test's PYTHONPATH, ray.init's
    PYTHONBREAKPOINT): the next worker is a fork of a new zygote of the present environment, not a fresh process
    (in the test suite every later worker paid the imports again: 36 s for one attribution test instead of 13 s).
    While a worker of the old zygote runs, it stays and the request starts fresh, as before."""
    monkeypatch.delenv(zygote.SWITCH_ENV, raising=False)
    out, _ = _session(tmp_path, SAYS_WHO_IT_IS)
    first = zygote._shared
    assert out.result["forked"] is not None and first is not None
    slow = launcher.start([sys.executable, "-c", "import time; time.sleep(30)"], open(tmp_path / "slow.log", "wb"),
                          launcher.child_env({}), preload=())
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")  # read at the interpreter's start: not one of the late variables
    out, log = _session(tmp_path, SAYS_WHO_IT_IS)
    assert zygote._shared is first and not first.idle()  # a worker in flight: the old zygote stays, this one is fresh
    assert out.result["forked"] is None and log.read_text().startswith("[bench launcher] a fresh process")
    launcher.kill_group(slow)
    slow.wait()
    out, log = _session(tmp_path, SAYS_WHO_IT_IS)
    assert out.result["forked"] is not None, log.read_text()  # a fork, of a new zygote
    assert zygote._shared is not first and first.proc.poll() is not None  # the old one ended
    assert zygote._shared.env["PYTHONBREAKPOINT"] == "0"


def test_the_zygote_ends_without_the_interpreters_teardown_keeping_its_output(tmp_path, monkeypatch):
    """Closing the zygote is its end at once: not the teardown of the interpreter (atexit handlers, torch's among
    them; 0.6 s on the 2-core VM) that every invocation waited for, but what it printed is kept."""
    monkeypatch.delenv(zygote.SWITCH_ENV, raising=False)
    ran = tmp_path / "atexit-ran"
    (tmp_path / "teardown_probe.py").write_text(
        "import atexit, os, pathlib\nzygote = os.getpid()  # a forked worker runs the handlers it inherits, at its own end\n"
        f"atexit.register(lambda: os.getpid() == zygote and pathlib.Path({str(ran)!r}).write_text('ran'))\n"
        "print('probe imported')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ["PYTHONPATH"])
    code = "import json, sys; from bench.execution.zygote import forked; json.dump(forked(), open(sys.argv[1], 'w'))"
    result, log = tmp_path / "r.json", tmp_path / "s.log"
    out = launcher.run_session([sys.executable, "-c", code, str(result)], result, log, timeout=60,
                               preload=("teardown_probe",))
    assert out.status == "ok" and out.result is not None, out.error  # forked, after the zygote imported the probe
    z = zygote._shared
    assert z is not None and z.idle()
    z.close()
    assert z.proc.returncode == 0 and not ran.exists()
    assert "probe imported" in Path(z.log_path).read_text()


@pytest.mark.parametrize("switch", ["1", "0"])
def test_an_exit_status_and_a_signal_read_the_same_forked_or_not(tmp_path, monkeypatch, switch):
    monkeypatch.setenv(zygote.SWITCH_ENV, switch)
    out, log = _session(tmp_path, "import sys; print('torch.OutOfMemoryError: CUDA out of memory.'); sys.exit(1)")
    assert out.status == "oom" and out.returncode == 1 and "CUDA out of memory" in out.error
    out, _ = _session(tmp_path, "import os; os._exit(3)")
    assert out.status == "error" and out.returncode == 3 and "session exited with status 3" in out.error
    out, _ = _session(tmp_path, "import os; os.kill(os.getpid(), 9)")
    assert out.status == "error" and out.returncode == -signal.SIGKILL and "killed by SIGKILL" in out.error
    out, log = _session(tmp_path, "raise ValueError('boom')")
    assert out.returncode == 1 and "ValueError: boom" in log.read_text()
    forked = "BENCH_ZYGOTE=0" not in log.read_text()
    assert forked == (switch == "1")


def test_a_timeout_kills_the_forked_child_and_its_whole_group(tmp_path, monkeypatch):
    monkeypatch.delenv(zygote.SWITCH_ENV, raising=False)
    code = ("import os, subprocess, sys, time\n"
            "child = subprocess.Popen(['sleep', '300'])\n"
            "open(sys.argv[1] + '.pids', 'w').write(f'{os.getpid()} {child.pid}')\n"
            "time.sleep(300)\n")
    t0 = time.monotonic()
    out, _ = _session(tmp_path, code, timeout=1, what="probe")  # the timeout counts from the fork: a second is ample
    assert out.status == "timeout" and out.returncode is None and time.monotonic() - t0 < 30
    assert out.error.startswith("probe ran past 1 s; log ")
    pids = [int(p) for p in (tmp_path / "r.json.pids").read_text().split()]
    time.sleep(0.2)
    assert not any(_alive(p) for p in pids)


def _group(tmp_path, fail, cell_timeout_s=30.0, sizes=(1,)):
    m = parse_matrix({
        "backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"], "max_batch_sizes": list(sizes),
        "workloads": ["w"], "device": "cpu", "trials": 2, "warmup": 0, "options": {"fail": fail},
        "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}},
    })
    _, wl_file = cached_workload(m.cells[0].workload, tmp_path / "cache")
    job = GroupJob(m.cells[0].build_key(), [GroupItem(c, [0, 1], str(wl_file)) for c in m.cells], tmp_path / "engines",
                   warmup=0, build_timeout_s=30, cell_timeout_s=cell_timeout_s, log_dir=tmp_path / "logs",
                   log_prefix="store-key")
    events = []
    supervise_group(job, events.append)
    return job, events


@pytest.mark.parametrize("switch", ["1", "0"])
def test_a_hanging_crashing_or_killed_worker_ends_its_cell_as_without_the_zygote(tmp_path, monkeypatch, switch):
    monkeypatch.setenv(zygote.SWITCH_ENV, switch)
    launch = "fork" if switch == "1" else "exec (BENCH_ZYGOTE=0)"
    job, events = _group(tmp_path / "hang", "hang", cell_timeout_s=1.0)
    built = next(e for e in events if e["event"] == "built")
    assert built["startup"]["launch"] == launch
    result = next(e for e in events if e["event"] == "result")
    assert result["status"] == "timeout" and result["error"].startswith("timeout: no progress within 1 s; worker killed")
    assert [e["trials"] for e in events if e["event"] == "skipped"] == [[1]]
    for fail, needle in (("crash", "worker exited with status 3"), ("sigkill", "worker killed by SIGKILL")):
        job, events = _group(tmp_path / fail, fail)
        result = next(e for e in events if e["event"] == "result")
        assert result["status"] == "error" and result["error"].startswith(needle), result["error"]
        assert str(job.logs[0]) in result["error"]


def test_every_record_says_how_its_worker_started(tmp_path, monkeypatch):
    monkeypatch.delenv(zygote.SWITCH_ENV, raising=False)
    _, events = _group(tmp_path, "none", sizes=(1, 2))
    built = next(e for e in events if e["event"] == "built")
    startup = built["startup"]
    assert startup["launch"] == "fork" and startup["cuda_init_s"] is None  # on the CPU: no CUDA context
    assert all(startup[k] >= 0 for k in ("spawn_s", "imports_s", "build_s", "load_s"))
    results = [e for e in events if e["event"] == "result"]
    assert len(results) == 4 and all(r["status"] == "ok" for r in results)
    for r in results:
        assert r["extra"]["startup"] == {**startup, "warmup_s": r["extra"]["startup"]["warmup_s"]}
    assert built["weights_digest"] is None  # the fake backend holds no weights


def test_a_zygote_that_dies_leaves_fresh_processes(tmp_path, monkeypatch):
    monkeypatch.delenv(zygote.SWITCH_ENV, raising=False)
    monkeypatch.setattr(zygote, "_shared", None)  # a zygote of this test's own
    out, _ = _session(tmp_path, SAYS_WHO_IT_IS)
    assert out.result["forked"] is not None
    server = zygote._shared
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait()
    deadline = time.monotonic() + 10
    while server.dead is None and time.monotonic() < deadline:
        time.sleep(0.05)
    out, log = _session(tmp_path, SAYS_WHO_IT_IS)
    assert out.status == "ok" and out.result["forked"] is None
    assert "the zygote exited with status -9" in out.result["env"]["BENCH_LAUNCH"]
    assert "the zygote exited with status -9" in log.read_text().splitlines()[0]


def test_the_zygote_refuses_to_fork_once_a_thread_exists_and_lets_only_late_variables_differ():
    import threading

    before = threading.active_count()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert f"{before + 1} Python threads" in preload.cuda_state()
    finally:
        stop.set()
        thread.join()
    assert zygote.difference({"A": "1", "CUDA_VISIBLE_DEVICES": "0", "BENCH_X": "1"}, {"A": "1"}) is None
    assert zygote.difference({"A": "1", "PYTHONPATH": "/x"}, {"A": "1"}) == "PYTHONPATH"


def test_the_random_weights_are_the_same_in_every_process_and_every_order(tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig

    from bench.backends.hf.weights import random_model, tensor_seed, weights_digest
    from bench.models import NAMED_MODELS

    config = dict(NAMED_MODELS["qwen-tiny"])
    model = random_model(AutoConfig.for_model(**config), torch.device("cpu"), dtype=torch.float32)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied stays tied
    assert all(bool((m.weight == 1).all()) for name, m in model.named_modules() if type(m).__name__.endswith("RMSNorm"))
    assert all(bool((p == 0).all()) for name, p in model.named_parameters() if name.endswith("bias"))
    up = model.model.layers[1].mlp.up_proj.weight
    assert abs(float(up.detach().std()) - 0.02) < 0.002
    # one tensor's values depend on its name only: drawn alone, it is the same tensor (load order does not matter)
    alone = torch.empty_like(up).normal_(0.0, 0.02, generator=torch.Generator().manual_seed(
        tensor_seed("model.layers.1.mlp.up_proj.weight")))
    assert torch.equal(alone, up)
    # the rotary frequencies are computed, not left on the meta device: as transformers computes them
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.float32)
    assert torch.equal(model.model.rotary_emb.inv_freq, reference.model.rotary_emb.inv_freq)
    with torch.inference_mode():
        assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()
    # another process (a fresh one: no state shared with this one) computes the same digest
    code = ("import json, torch; from transformers import AutoConfig; from bench.backends.hf.weights import random_model, "
            "weights_digest; from bench.models import NAMED_MODELS\n"
            "m = random_model(AutoConfig.for_model(**NAMED_MODELS['qwen-tiny']), torch.device('cpu'), dtype=torch.float32)\n"
            "print(weights_digest(m))")
    import subprocess

    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                           env=launcher.child_env())
    assert other.returncode == 0, other.stderr[-2000:]
    digest = weights_digest(model)
    assert other.stdout.split()[-1] == digest
    with torch.no_grad():
        up.view(-1)[0] += 1.0  # the first element is always among the sampled ones
    assert weights_digest(model) != digest


def _shipped_key():
    """The build key of the default matrix's model: the shipped qwen-tiny-trained checkpoint, fp32 on the CPU."""
    m = parse_matrix({"backends": ["hf"], "model": "qwen-tiny-trained", "precisions": ["fp32"], "max_batch_sizes": [1],
                      "workloads": ["w"], "device": "cpu",
                      "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 1,
                                         "tokenizer": "qwen-tiny-trained"}}})
    return m.cells[0].build_key()


def test_a_trained_model_loads_its_own_weights(tmp_path):
    pytest.importorskip("torch")
    from safetensors.torch import load_file

    from bench.backends.hf.backend import HFBackend
    from bench.models import shipped_folder

    backend, key = HFBackend(), _shipped_key()
    loaded = backend.load(backend.build(key, tmp_path / "engines"))
    stored = load_file(str(shipped_folder("qwen-tiny-trained") / "model.safetensors"))
    params = dict(loaded.model.named_parameters())
    assert stored and all(name in params for name in stored)
    assert all(bool((params[name].detach().float() == t.float()).all()) for name, t in stored.items())
    again = backend.load(backend.build(key, tmp_path / "engines"))
    assert loaded.weights_digest == again.weights_digest and len(loaded.weights_digest) == 16


def test_a_checkpoint_loads_without_accelerate(tmp_path, monkeypatch):
    """The README's install has no accelerate, and transformers (5 too) refuses a device_map without it: the shipped
    checkpoint of the default matrix must still load (a fresh clone's `nox -s bench-matrix` failed every cell)."""
    pytest.importorskip("torch")
    import transformers.integrations.accelerate as hf_accelerate
    import transformers.utils

    from bench.backends.hf.backend import HFBackend

    monkeypatch.setattr(transformers.utils, "is_accelerate_available", lambda *a, **k: False)
    monkeypatch.setattr(hf_accelerate, "is_accelerate_available", lambda *a, **k: False)
    backend, key = HFBackend(), _shipped_key()
    loaded = backend.load(backend.build(key, tmp_path / "engines"))
    assert loaded.model.device.type == "cpu" and loaded.weights_digest


def test_oom_probes_are_forked_workers_each_in_a_process_of_its_own(tmp_path, monkeypatch):
    from bench.oom.probes import ProbeRunner
    from bench.results import query

    monkeypatch.delenv(zygote.SWITCH_ENV, raising=False)
    monkeypatch.setattr(zygote, "_shared", None)  # started with this test's environment (an hf build sets Inductor's)
    m = parse_matrix({"backends": ["fake"], "model": "qwen-tiny", "precisions": ["bf16"], "max_batch_sizes": [1],
                      "workloads": ["w"], "device": "cpu",
                      "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 1}}})
    runner = ProbeRunner(m.cells[0], 16, 16, tmp_path / "oom.jsonl", engines_dir=tmp_path / "engines",
                         workload_cache=tmp_path / "cache")
    assert [runner(b).status for b in (1, 2)] == ["ok", "ok"]
    recs = query.probes(query.load([tmp_path / "oom.jsonl"]))
    assert [r.build["startup"]["launch"] for r in recs] == ["fork", "fork"]
    assert len({r.environment["pid"] for r in recs}) == 2


@pytest.mark.gpu
def test_on_a_gpu_forked_workers_make_their_own_cuda_context_and_hold_the_same_weights(tmp_path, monkeypatch):
    """The zygote never touched CUDA: each fork makes its context, on the GPU CUDA_VISIBLE_DEVICES gives it."""
    monkeypatch.delenv(zygote.SWITCH_ENV, raising=False)  # the default: passed on an H100 (2026-12-06), then default
    monkeypatch.setattr(zygote, "_shared", None)
    m = parse_matrix({"backends": ["hf"], "model": "qwen-tiny", "precisions": ["bf16"], "max_batch_sizes": [1],
                      "workloads": ["w"], "device": "cuda", "trials": 1, "warmup": 0,
                      "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}}})
    _, wl_file = cached_workload(m.cells[0].workload, tmp_path / "cache")
    built, results = [], []
    for run in range(2):
        job = GroupJob(m.cells[0].build_key(), [GroupItem(m.cells[0], [0], str(wl_file))], tmp_path / "engines",
                       warmup=0, build_timeout_s=600, cell_timeout_s=600, log_dir=tmp_path / "logs",
                       log_prefix=f"run{run}", env={"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0")})
        events = []
        supervise_group(job, events.append)
        built += [e for e in events if e["event"] == "built"]
        results += [e for e in events if e["event"] == "result"]
    assert [r["status"] for r in results] == ["ok", "ok"], [r.get("error") for r in results]
    assert [b["startup"]["launch"] for b in built] == ["fork", "fork"]
    assert all(b["startup"]["cuda_init_s"] > 0 for b in built)
    assert built[0]["weights_digest"] == built[1]["weights_digest"] is not None


def test_workers_fork_on_every_device_unless_switched_off(tmp_path, monkeypatch):
    """CUDA workers fork as CPU workers do since the GPU test above passed on an H100 (2026-12-06,
    docs/measurements/2026-12-06-h100-study-forked-workers.md); BENCH_ZYGOTE=0 gives fresh processes everywhere, said by
    the launcher. Tensor-parallel ranks and trtllm never fork."""
    from bench.execution.supervisor import session_preload, worker_preload

    def cell(backend, device):
        return parse_matrix({"backends": [backend], "model": "qwen-tiny", "precisions": ["bf16"], "max_batch_sizes": [1],
                             "workloads": ["w"], "device": device,
                             "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4}}}).cells[0]

    def job(c):
        return GroupJob(c.build_key(), [], tmp_path, warmup=0, build_timeout_s=1, cell_timeout_s=1,
                        log_dir=tmp_path, log_prefix="x")

    monkeypatch.delenv(zygote.SWITCH_ENV, raising=False)
    for device in ("cpu", "cuda", "cuda:1"):
        hf = cell("hf", device)
        assert worker_preload(job(hf), 1) == ("bench.backends.hf.backend",)
        assert session_preload([hf], "bench.accuracy.session") == ("bench.backends.hf.backend", "bench.accuracy.session")
        assert worker_preload(job(hf), 2) is None  # tensor-parallel ranks: fresh processes
    # a session of served or stand-in cells forks with their runtimes imported; one with a trtllm cell never does
    assert session_preload([cell("hf", "cuda"), cell("openai", "cuda"), cell("fake", "cuda")], "bench.accuracy.session") \
        == ("bench.backends.hf.backend", "bench.backends.openai.backend", "bench.backends.fake.backend",
            "bench.accuracy.session")
    assert session_preload([cell("hf", "cuda"), cell("trtllm", "cuda")], "bench.accuracy.session") is None
    assert zygote.not_forkable([sys.executable, "-m", "bench.execution.worker"]) is None
    monkeypatch.setenv(zygote.SWITCH_ENV, "0")
    assert zygote.not_forkable([sys.executable, "-m", "bench.execution.worker"]) == "BENCH_ZYGOTE=0"


def test_imports_that_ask_the_gpu_its_capability_get_nvmls_answer_and_torchs_own_functions_after(tmp_path, monkeypatch):
    """torchao asks at import what the GPU can do (H100, 2026-12-06: the zygote then held a CUDA context and never
    forked). During the zygote's imports the answer comes from NVML; afterwards torch's own functions are back, also
    through a reference an import kept. Here on a CPU torch, whose own functions refuse: the import fails without the
    NVML answer."""
    import torch

    (tmp_path / "asks_capability.py").write_text(
        "import torch\nfrom torch.cuda import get_device_capability as kept\n"
        "CAP = torch.cuda.get_device_capability()\nMAJOR = torch.cuda.get_device_properties().major\n")
    (tmp_path / "a_backend.py").write_text("PRELOAD = ('torch', 'asks_capability')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("asks_capability", "a_backend"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(preload, "_imported", set())
    monkeypatch.setattr(preload, "_failed", {})
    before = (torch.cuda.get_device_capability, torch.cuda.get_device_properties, torch.cuda.current_device)

    monkeypatch.setattr(preload, "_nvml_capability", lambda: None)  # no NVML answer: torch's own function runs
    if not torch.cuda.is_available():
        with pytest.raises(ImportError, match="asks_capability|a_backend"):
            preload.preload(["a_backend"])
        monkeypatch.setattr(preload, "_failed", {})
        monkeypatch.delitem(sys.modules, "asks_capability", raising=False)

    monkeypatch.setattr(preload, "_nvml_capability", lambda: (9, 0))
    preload.preload(["a_backend"])
    module = sys.modules["asks_capability"]
    assert (module.CAP, module.MAJOR) == ((9, 0), 9)
    assert (torch.cuda.get_device_capability, torch.cuda.get_device_properties, torch.cuda.current_device) == before
    assert not torch.cuda.is_initialized()
    if not torch.cuda.is_available():
        with pytest.raises((AssertionError, RuntimeError)):
            module.kept()  # the kept reference is torch's own function again: on a CPU torch it refuses


def test_the_nvml_answer_is_the_capability_every_gpu_shares_or_none(monkeypatch):
    import bench.machine.environment as environment

    for caps, want in ((["9.0", "9.0"], (9, 0)), (["9.0", "8.0"], None), ([], None), ([None], None)):
        monkeypatch.setattr(environment, "gpu_info", lambda i, caps=caps: {"gpu_count": len(caps),
                                                                           "compute_capability": caps[i] if caps else None})
        preload._nvml_capability.cache_clear()
        assert preload._nvml_capability() == want, caps
    preload._nvml_capability.cache_clear()
