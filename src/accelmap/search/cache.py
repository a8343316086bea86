"""SQLite cache of per-layer mapping results, so whole-model runs are instant the second time.

A row is keyed by what decides the search's answer: the operator's computation
(its signature plus operand names, not its layer name), the accelerator's
content (not its name or file), the objective, the requested strategy, the
constraints as applied to the layer, the time limit and seed, the heuristic's
knobs (``HeuristicConfig``), and a fingerprint of the source of the packages
that define the answer (``mapping``, ``cost``, ``search``). Editing the cost
model or the search therefore misses the cache instead of serving a mapping
that may no longer be the best.

Only the mapping (its YAML form) and a summary are stored. The caller rebuilds
the full cost by evaluating the stored mapping again (one evaluation, cheap),
so reported numbers always come from the current model; a row whose stored
objective no longer matches that evaluation is treated as a miss.

Each result is committed as soon as it is put, so an interrupted sweep keeps
everything finished before the interruption. WAL mode lets two runs share one
file; a new file is created complete and linked into place, so several first
runs can start at once, and a statement that meets another run's lock waits
(busy timeout) and retries.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import SpecError
from accelmap.search.heuristic_config import DEFAULT_HEURISTIC, HeuristicConfig
from accelmap.search.space import Constraints
from accelmap.workload.operator import Operator

SCHEMA_VERSION = 1
_FINGERPRINT_PACKAGES = ("mapping", "cost", "search")


def default_cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "accelmap" / "mappings.sqlite"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of the source files whose behaviour decides a cached answer."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(f"schema {SCHEMA_VERSION}".encode())
    for pkg in _FINGERPRINT_PACKAGES:
        for f in sorted((root / pkg).glob("*.py")):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def operator_key(op: Operator) -> str:
    names = tuple(o.name for o in op.operands)
    return hashlib.sha256(repr((op.signature(), names)).encode()).hexdigest()


def accelerator_key(arch: Accelerator) -> str:
    # Levels and compute are frozen dataclasses of plain values: their repr is the content.
    return hashlib.sha256(repr((arch.levels, arch.compute, arch.padding_generated)).encode()).hexdigest()


def constraints_key(cons: Constraints) -> str:
    canon = {
        "spatial": {ax: sorted(d.items()) for ax, d in sorted(cons.spatial.items())},
        "orders": {lv: list(o) for lv, o in sorted(cons.orders.items())},
        "forbid_orders": {lv: [list(s) for s in seqs] for lv, seqs in sorted(cons.forbid_orders.items())},
        "keep": {lv: sorted(k) for lv, k in sorted(cons.keep.items())},
        "min_utilization": cons.min_utilization,
    }
    return json.dumps(canon, sort_keys=True)


def result_key(op: Operator, arch: Accelerator, objective: str, strategy: str, cons: Constraints,
               time_limit: float | None, seed: int, heuristic_config: HeuristicConfig = DEFAULT_HEURISTIC,
               imperfect: bool | str = False) -> str:
    parts = [operator_key(op), accelerator_key(arch), objective, strategy, constraints_key(cons),
             repr(time_limit), str(seed), heuristic_config.key(), code_fingerprint()]
    if imperfect:        # searched over imperfect tiles too (absent otherwise: earlier keys stay valid)
        parts.append(f"imperfect={imperfect}")
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


@dataclass(frozen=True)
class CachedResult:
    mapping: dict | None          # mapping_to_yaml form; None when the layer cannot be mapped
    value: float | None           # objective value when stored
    strategy: str                 # strategy that ran ('optimal', 'heuristic', ...)
    proven_optimal: bool
    search_seconds: float
    evaluated: int
    notes: tuple[str, ...]
    error: str | None             # why the layer cannot be mapped
    lower_bound: float | None = None  # of the objective over every mapping the constraints allow
    timed_out: bool = False
    front: tuple = ()                 # Pareto objective: the front's mappings (mapping_to_yaml form)


_TABLE = ("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, operator TEXT, accelerator TEXT, "
          "objective TEXT, strategy TEXT, mapping TEXT, value REAL, proven INTEGER, seconds REAL, "
          "evaluated INTEGER, notes TEXT, error TEXT, summary TEXT, created REAL)")
_LOCK_WAIT = 60.0   # seconds a run waits for another run's write before giving up


def _retry(fn):
    """Run ``fn``, retrying while another process holds the database (SQLite's busy handler is not
    called in every case: switching to WAL, and lock upgrades it refuses to avoid deadlock)."""
    deadline = time.monotonic() + _LOCK_WAIT
    delay = 0.005
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as e:
            msg = str(e).lower()
            if ("locked" not in msg and "busy" not in msg) or time.monotonic() > deadline:
                raise
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.25)


def _create(path: Path) -> None:
    """Create a new cache file complete (WAL mode, table) under a temporary name and link it into
    place: the first of several runs starting at once wins, the others open a finished database
    instead of racing to initialise the same empty file ("database is locked")."""
    if path.exists():
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        db = sqlite3.connect(tmp)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_TABLE)
            db.commit()
        finally:
            db.close()
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:   # no hard links on this file system: open the path directly, with retries
            pass
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(tmp + suffix).unlink(missing_ok=True)


class _Retrying:
    """A connection whose statements retry while another run holds the database (the busy
    timeout covers most waits; this covers the rest)."""

    def __init__(self, db: sqlite3.Connection):
        self._conn = db

    def execute(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        return _retry(lambda: self._conn.execute(sql, params))

    def commit(self) -> None:
        _retry(self._conn.commit)

    def close(self) -> None:
        self._conn.close()


class ResultCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _create(self.path)
            if self.path.is_file() and self.path.stat().st_size:
                with open(self.path, "rb") as f:
                    if f.read(16) != b"SQLite format 3\x00":
                        # SQLite would take a file shorter than its header as empty and overwrite it.
                        raise SpecError("not an SQLite database, and it is not overwritten; pass --no-cache or "
                                        "another --cache file", where=str(self.path))
            # Autocommit: every statement is its own transaction, so a run never holds a read
            # transaction that it would later have to upgrade while another run writes.
            self._db = _Retrying(sqlite3.connect(str(self.path), timeout=_LOCK_WAIT, isolation_level=None))
            self._db.execute(f"PRAGMA busy_timeout={int(_LOCK_WAIT * 1000)}")
            if self._db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_TABLE)
        except (OSError, sqlite3.Error) as e:
            raise SpecError(f"cannot open the result cache: {e}; pass --no-cache or another --cache file",
                            where=str(self.path)) from None

    def get(self, key: str) -> CachedResult | None:
        row = self._db.execute("SELECT mapping, value, strategy, proven, seconds, evaluated, notes, error, summary "
                               "FROM results WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        mapping, value, strategy, proven, seconds, evaluated, notes, error, summary = row
        extra = json.loads(summary) if summary else {}
        return CachedResult(json.loads(mapping) if mapping else None, value, strategy, bool(proven), seconds,
                            evaluated, tuple(json.loads(notes)), error, extra.get("lower_bound"),
                            bool(extra.get("timed_out", False)), tuple(extra.get("front", ())))

    def put(self, key: str, operator: str, accelerator: str, objective: str, res: CachedResult,
            summary: dict[str, Any] | None = None) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (key, operator, accelerator, objective, res.strategy,
             json.dumps(res.mapping) if res.mapping is not None else None, res.value, int(res.proven_optimal),
             res.search_seconds, res.evaluated, json.dumps(list(res.notes)), res.error,
             json.dumps({**(summary or {}), "lower_bound": res.lower_bound, "timed_out": res.timed_out}),
             time.time()))
        self._db.commit()

    def delete(self, key: str) -> None:
        self._db.execute("DELETE FROM results WHERE key = ?", (key,))
        self._db.commit()

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def close(self) -> None:
        self._db.close()
