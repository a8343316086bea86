"""Running one function over many tasks in worker processes, results handed back as they finish.

Used by the model mapper (one layer per task) and by the design-space sweep's local engine (one
design per task). The calling process owns the cache or store and receives every result the moment
it arrives, which is what makes an interrupted run resumable.
"""

from __future__ import annotations

import multiprocessing
import signal
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable


def reset_worker_signals() -> None:
    # The parent handles Ctrl-C and SIGTERM (it owns the cache); workers just stop when terminated,
    # so they must not inherit a handler the parent installed for SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_in_processes(fn: Callable[[Any], Any], tasks: list, workers: int, done: Callable[[Any], None],
                     prepare: Callable[[Any], Any] | None = None) -> None:
    """``done(fn(task))`` for every task, in completion order, with up to ``workers`` processes.

    ``prepare``: each task goes through it in this process just before it is submitted, and only ``workers``
    tasks are in flight, so a task can use the results of the tasks finished before it (a sweep's warm starts)."""
    # fork starts workers at once without re-importing the package; spawn elsewhere.
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    pool = ProcessPoolExecutor(max_workers=max(1, min(workers, len(tasks))), mp_context=ctx,
                               initializer=reset_worker_signals)
    try:
        queue = list(reversed(tasks)) if prepare is not None else []
        pending = ({pool.submit(fn, task) for task in tasks} if prepare is None else
                   {pool.submit(fn, prepare(queue.pop())) for _ in range(min(workers, len(queue)))})
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                done(future.result())
                if queue:
                    assert prepare is not None
                    pending.add(pool.submit(fn, prepare(queue.pop())))
    except BaseException:
        # Interrupted (or a bug): results so far are kept by the caller; stop the work still running.
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
