"""Where designs are mapped: a local process pool, or a Dask or Ray cluster.

Every engine runs one function over a list of tasks and hands each result to ``done`` in the
calling process as soon as it arrives (that process owns the store). ``local`` forks worker
processes on this machine; ``dask`` connects to a scheduler at ``address`` (``tcp://host:8786``)
or starts a local cluster on the loopback interface; ``ray`` does the same with Ray
(``ray://host:10001`` or ``auto``). Dask is the one the ``dse`` extra installs (docs/dse.md
gives the measurements that chose it); Ray works when it is installed.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from accelmap.errors import SpecError
from accelmap.worker_pool import run_in_processes

ENGINES = ("local", "dask", "ray")


Prepare = Callable[[Any], Any] | None


def _local(fn: Callable[[Any], Any], tasks: list, workers: int, done: Callable[[Any], None],
           prepare: Prepare) -> None:
    if workers <= 1 or len(tasks) <= 1:
        for t in tasks:
            done(fn(prepare(t) if prepare else t))
        return
    run_in_processes(fn, tasks, workers, done, prepare)


def _feed(tasks: list, workers: int, prepare: Prepare, submit: Callable[[Any], Any]) -> tuple[list, Callable[[], Any]]:
    """The first submissions, and a function submitting the next task (None when none is left): everything at once
    without ``prepare``, else ``workers`` in flight, each task prepared as it is submitted."""
    queue = list(reversed(tasks))
    first = len(queue) if prepare is None else min(workers, len(queue))

    def next_one():
        return submit(prepare(queue.pop()) if prepare else queue.pop()) if queue else None

    return [next_one() for _ in range(first)], next_one


def _dask(fn: Callable[[Any], Any], tasks: list, workers: int, address: str | None,
          done: Callable[[Any], None], prepare: Prepare) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise SpecError("the dask engine needs Dask's distributed scheduler: pip install 'accelmap[dse]'",
                        where="--engine") from None
    cluster = None
    try:
        if address:
            client = Client(address, timeout="20s")
        else:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                   dashboard_address=None)
            client = Client(cluster)
    except OSError as e:
        raise SpecError(f"cannot reach a Dask scheduler at {address!r}: {e}", where="--address") from None
    try:
        futures, next_one = _feed(tasks, workers, prepare, lambda t: client.submit(fn, t, pure=False))
        running = as_completed(futures)
        try:
            for fut in running:
                done(fut.result())
                more = next_one()
                if more is not None:
                    futures.append(more)
                    running.add(more)
        except BaseException:
            client.cancel(futures)
            raise
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _ray(fn: Callable[[Any], Any], tasks: list, workers: int, address: str | None,
         done: Callable[[Any], None], prepare: Prepare) -> None:
    try:
        # Imported by name: Ray is not a dependency, and the type checker runs without it.
        ray = importlib.import_module("ray")
    except ImportError:
        raise SpecError("the ray engine needs Ray: pip install ray", where="--engine") from None
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        remote = ray.remote(num_cpus=1)(fn)
        refs, next_one = _feed(tasks, workers, prepare, remote.remote)
        try:
            while refs:
                ready, refs = ray.wait(refs, num_returns=1)
                done(ray.get(ready[0]))
                more = next_one()
                if more is not None:
                    refs.append(more)
        except BaseException:
            for r in refs:
                ray.cancel(r, force=True)
            raise
    finally:
        ray.shutdown()


def run_tasks(engine: str, fn: Callable[[Any], Any], tasks: list, done: Callable[[Any], None], *,
              workers: int = 1, address: str | None = None, prepare: Prepare = None) -> None:
    """Run ``fn`` over ``tasks`` on ``engine``; ``done`` gets each result in this process. ``prepare``: each task
    goes through it here just before it is submitted, with ``workers`` tasks in flight (on a cluster at an
    ``address``, ``workers`` is how many run at once), so it can use every result that came back before it."""
    if engine not in ENGINES:
        raise SpecError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}", where="--engine")
    if workers < 1:
        raise SpecError(f"must be a positive integer, got {workers}", where="--workers")
    if engine == "local":
        if address:
            raise SpecError("applies to the dask and ray engines; the local engine runs on this machine",
                            where="--address")
        _local(fn, tasks, workers, done, prepare)
    elif engine == "dask":
        _dask(fn, tasks, workers, address, done, prepare)
    else:
        _ray(fn, tasks, workers, address, done, prepare)
