"""Several first runs creating and writing the same new result cache at once: no "database is locked"."""

import multiprocessing as mp

from accelmap.search.cache import CachedResult, ResultCache

PROCS = 8
ROWS = 10


def _worker(path, i, barrier, q):
    try:
        barrier.wait()
        c = ResultCache(path)
        for k in range(ROWS):
            c.put(f"k{i}-{k}", "op", "arch", "edp",
                  CachedResult({"mapping": []}, float(k), "optimal", True, 0.1, 1, ("note",), None))
            assert c.get(f"k{i}-{k}").value == k
        c.close()
        q.put(None)
    except BaseException as e:   # report every failure to the parent
        q.put(repr(e))


def test_processes_create_and_write_one_new_cache_at_once(tmp_path):
    ctx = mp.get_context("fork")
    for trial in range(4):
        path = tmp_path / f"t{trial}" / "sub" / "mappings.sqlite"   # neither the file nor its folder exist
        barrier, q = ctx.Barrier(PROCS), ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(str(path), i, barrier, q)) for i in range(PROCS)]
        for p in procs:
            p.start()
        errors = [e for e in (q.get(timeout=120) for _ in procs) if e]
        for p in procs:
            p.join()
        assert not errors, errors
        c = ResultCache(path)
        assert len(c) == PROCS * ROWS
        c.close()
        # Only the cache and SQLite's own files; no temporary file left behind.
        assert {f.name for f in path.parent.iterdir()} <= {"mappings.sqlite", "mappings.sqlite-wal",
                                                            "mappings.sqlite-shm"}
