"""The Ray executor: each build group's run round is a Ray actor asking for the GPUs the group needs.

The actor runs the same parent side as the local executor (bench.execution.supervisor:
worker subprocesses, timeouts, failure classes) on whichever node Ray places it, and the
driver polls it for the events (a long poll: Ray Client, `ray://`, has no streaming
generators). The driver alone writes the store. The actor's node keeps its own caches: the
driver's engines/ and log paths where the node can create them, else $BENCH_RAY_DIR (default
~/.cache/bench/ray); the workload files travel through Ray's object store. When this process
starts its Ray connection, the driver's copy of the `bench` package is shipped to the actors
(runtime_env py_modules), so every node measures with the same code; its other dependencies
(torch, transformers, ...) must be installed on the nodes.

Faults: actors are never restarted and their calls never retried by Ray (max_restarts=0,
max_task_retries=0), so nothing is measured twice into the store. An actor that dies (its node
lost, its process killed) ends the cell it was measuring, recorded as `error` naming the node;
the group's other cells go on in a fresh actor. A stop (Ctrl-C) asks every actor to kill its
worker, then kills the actor; an actor outlives no driver (Ray ends a dead driver's actors,
and a worker dies with its actor's process: bench.execution.worker).

Ray is imported only here, when `executor = "ray"` is chosen: `pip install 'bench[ray]'`.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
from dataclasses import replace
from pathlib import Path

from bench.errors import BenchInputError
from bench.execution.supervisor import (
    GroupItem,
    GroupStopped,
    end_cell,
    supervise_group,
)
from bench.files import user_path

POLL_S = 0.5  # the longest an actor's poll waits for an event
STOP_WAIT_S = 15.0  # how long a stopped actor gets to kill its worker before it is killed


def import_ray():
    """Return the ray module, or raise BenchInputError naming the install."""
    try:
        import ray
    except ImportError as exc:
        raise BenchInputError(
            f"executor 'ray' needs Ray: `pip install 'bench[ray]'` (or `pip install ray`) on this machine and on every "
            f"node of the cluster ({exc})"
        ) from exc
    return ray


def node_dir(wanted: Path, name: str) -> Path:
    """Return `wanted` if this node can create it, else $BENCH_RAY_DIR/<name> (default ~/.cache/bench/ray/<name>)."""
    try:
        wanted.mkdir(parents=True, exist_ok=True)
        if os.access(wanted, os.W_OK):
            return wanted
    except OSError:
        pass
    fallback = user_path(os.environ.get("BENCH_RAY_DIR") or "~/.cache/bench/ray", "BENCH_RAY_DIR") / name
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


class GroupActor:
    """Runs one group round's supervisor on a Ray node and keeps its events until the driver polls."""

    def __init__(self, job, workloads: dict):
        import ray

        wl_dir = node_dir(user_path(os.environ.get("BENCH_RAY_DIR") or "~/.cache/bench/ray", "BENCH_RAY_DIR") / "workloads",
                          "workloads")
        files = {}
        for name, ref in workloads.items():  # the driver's frozen workload files, by content-hashed name
            path = wl_dir / name
            if not path.is_file():
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(ray.get(ref))
                tmp.replace(path)
            files[name] = str(path)
        items = [GroupItem(it.cell, it.trials, files[Path(it.workload_file).name]) for it in job.items]
        self.job = replace(job, items=items, engines_dir=node_dir(Path(job.engines_dir), "engines"),
                           log_dir=node_dir(Path(job.log_dir), "logs"), logs=[],
                           zygote=False)  # an actor's workers are fresh processes (the launcher's fallback)
        self.events: queue.Queue = queue.Queue()
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> dict:
        """Start the supervisor in a thread; return where this actor runs."""
        import ray

        ctx = ray.get_runtime_context()
        where = {"executor": "ray", "host": socket.gethostname(), "node_id": ctx.get_node_id(),
                 "node_ip": ray.util.get_node_ip_address(), "actor_pid": os.getpid(),
                 "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                 "ray_gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                 "engines_dir": str(self.job.engines_dir), "log_dir": str(self.job.log_dir)}
        self.thread = threading.Thread(target=self._supervise, daemon=True)
        self.thread.start()
        return where

    def _supervise(self) -> None:
        try:
            supervise_group(self.job, self.events.put, self.stop_event)
            self.events.put({"event": "_done"})
        except GroupStopped:
            self.events.put({"event": "_done", "stopped": True})
        except BaseException as exc:  # noqa: BLE001 - reported to the driver, which raises it
            self.events.put({"event": "_failed", "error": f"{type(exc).__name__}: {exc}"})

    def poll(self, timeout: float) -> list[dict]:
        """Return the events since the last poll, waiting up to `timeout` for the first one."""
        try:
            out = [self.events.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                return out

    def stop(self) -> None:
        """Kill the worker (the supervisor's stop), waiting for it."""
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=STOP_WAIT_S)


class RayExecutor:
    name = "ray"

    def __init__(self, address: str | None, needs: list[int]):
        ray = import_ray()
        self.ray = ray
        import bench

        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            # Ship the driver's own `bench` to the actors (a job-level runtime env: Ray uploads local
            # folders only there), so every node measures with the same code. log_to_driver=False:
            # actors' and workers' output stays in their log files on the node.
            ray.init(address=address, log_to_driver=False,
                     runtime_env={"py_modules": [str(Path(bench.__file__).parent)], "env_vars": _commit_env()})
            self.actor_env = None
        else:
            # Ray started by the caller (a script, a test): its job's runtime env is fixed; the actors
            # import `bench` from where this process does (one machine, or nodes laid out alike).
            path = [str(Path(bench.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")]
            self.actor_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in path if p)}}
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        self.total = {"GPU": sum(n["Resources"].get("GPU", 0) for n in nodes),
                      "CPU": sum(n["Resources"].get("CPU", 0) for n in nodes)}
        per_node = max((n["Resources"].get("GPU", 0) for n in nodes), default=0)
        most = max(needs, default=0)
        if most > per_node:
            raise BenchInputError(
                f"a build group asks for {most} GPUs (tensor_parallel_size), but no node of the Ray cluster has that "
                f"many (the most on one node: {per_node:g}); tensor parallelism stays inside one node"
                + ("; start the nodes with their GPUs (`ray start ... --num-gpus N`)" if not per_node else ""))
        self.used = {"GPU": 0, "CPU": 0}
        self.actor_class = ray.remote(GroupActor)
        self.workload_refs: dict[str, object] = {}

    # -- placement: the driver keeps no more groups in flight than the cluster can hold; Ray places them
    def _need(self, run) -> dict:
        return {"GPU": run.gpus, "CPU": 1}

    def acquire(self, run):
        need = self._need(run)
        busy = any(self.used[k] for k in self.used)
        if busy and any(self.used[k] + need[k] > self.total[k] for k in need):
            return None
        for k in need:
            self.used[k] += need[k]
        return need

    def release(self, placement) -> None:
        for k in placement:
            self.used[k] -= placement[k]

    def describe(self, placement) -> str:
        return f"ray:{placement['GPU']:g} GPU" if placement["GPU"] else "ray:cpu"

    def _workloads(self, items) -> dict:
        out = {}
        for it in items:
            name = Path(it.workload_file).name
            if name not in self.workload_refs:
                self.workload_refs[name] = self.ray.put(Path(it.workload_file).read_text())
            out[name] = self.workload_refs[name]
        return out

    def run(self, run, placement, emit, stop) -> None:
        """Run one group round in Ray actors (a fresh one after an actor dies); emit its events."""
        ray = self.ray
        # Absolute paths: a node that can create them (the driver's own, or one laid out alike) uses them.
        job = replace(run.job, engines_dir=Path(run.job.engines_dir).resolve(), log_dir=Path(run.job.log_dir).resolve())
        items = list(job.items)
        pending = {(it.cell.cell_id, t) for it in items for t in it.trials}
        while items:
            actor = self.actor_class.options(
                num_gpus=placement["GPU"], num_cpus=placement["CPU"], max_restarts=0, max_task_retries=0,
                **({"runtime_env": self.actor_env} if self.actor_env else {}),
            ).remote(replace(job, items=items, logs=[]), self._workloads(items))
            where: dict = {}
            current = None
            try:
                start = actor.start.remote()
                while not where:  # Ray may hold the actor until GPUs free up: keep Ctrl-C prompt meanwhile
                    ready, _ = ray.wait([start], timeout=POLL_S)
                    if stop.is_set():
                        raise GroupStopped()
                    if ready:
                        where = ray.get(start)
                emit({"event": "placement", "placement": where})
                finished = False
                while not finished:
                    if stop.is_set():
                        raise GroupStopped()
                    for event in ray.get(actor.poll.remote(POLL_S)):
                        kind = event.get("event")
                        if kind == "_done":
                            finished = True
                        elif kind == "_failed":
                            raise RuntimeError(f"the group's supervisor failed on node {_node(where)}: {event['error']}")
                        elif kind == "result" and (event["cell_id"], event["trial"]) not in pending:
                            continue  # already recorded: never store a trial twice
                        else:
                            current = _track(event, pending, current)
                            emit(event)
                items = []
            except GroupStopped:
                _stop_actor(ray, actor)
                raise
            except ray.exceptions.RayActorError as exc:
                # The actor died (node lost, process killed): it takes only the cell it was measuring.
                message = (f"error: the Ray actor running this group on node {_node(where)} died, and its worker with it: "
                           f"{_first_line(exc)}")
                end_cell(emit, pending, items, current, "error", message)
                items = [replace(it, trials=[t for t in it.trials if (it.cell.cell_id, t) in pending]) for it in items]
                items = [it for it in items if it.trials]
            except BaseException:
                _stop_actor(ray, actor)
                raise
            else:
                ray.kill(actor)

    def close(self) -> None:
        if self.owns_ray:
            self.ray.shutdown()


def _track(event: dict, pending: set, current):
    """Return the (cell_id, trial) being measured after this event, updating the pending set."""
    kind = event.get("event")
    if kind in ("start", "warmup"):  # a cell's warm-up, then each trial
        return event["cell_id"], event["trial"]
    if kind == "result":
        pending.discard((event["cell_id"], event["trial"]))
        return None
    if kind == "skipped":
        pending.difference_update((event["cell_id"], t) for t in event["trials"])
    return current


def _stop_actor(ray, actor) -> None:
    try:
        ray.get(actor.stop.remote(), timeout=STOP_WAIT_S)
    except Exception:  # noqa: BLE001 - dead or stuck: killed below either way
        pass
    ray.kill(actor)


def _node(where: dict) -> str:
    if not where:
        return "(not yet placed)"
    return f"{where.get('host')} ({where.get('node_ip')}, node id {str(where.get('node_id'))[:12]})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " ".join(text.splitlines()[:3])[:600]


def _commit_env() -> dict:
    """Return BENCH_COMMIT/BENCH_DIRTY for the actors: shipped code has no .git, the driver's checkout tells."""
    from bench.machine.environment import project_commit

    commit = project_commit()
    if not commit.get("commit"):
        return {}
    return {"BENCH_COMMIT": commit["commit"], "BENCH_DIRTY": "1" if commit.get("dirty") else "0"}

