"""The sweep's result store: one SQLite row per mapped design, committed the moment it arrives.

A row's key is what decides the result: the design's accelerator content (its derived energies
included), the workload's layers, the mapper's settings, and the fingerprint of the mapping, cost
and search code (``search.cache.code_fingerprint``). A sweep looks every design up before it
runs anything, so an interrupted sweep resumes where it stopped and no design is mapped twice,
also across sweeps of overlapping spaces.

Only the process that drives the sweep writes: workers (local processes, or a cluster's
machines) send their results back and never open the file, so a cluster needs no shared file
system. WAL mode lets a second sweep read the store while one writes.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelmap.errors import SpecError
from accelmap.search.cache import code_fingerprint, operator_key
from accelmap.workload.models.result import ModelImport

SCHEMA = 1
_TABLE = ("CREATE TABLE IF NOT EXISTS designs (key TEXT PRIMARY KEY, accelerator TEXT, model TEXT, "
          "energy_pj REAL, latency_cycles REAL, complete INTEGER, error TEXT, seconds REAL, worker TEXT, "
          "result TEXT, created REAL)")


def model_key(model: ModelImport) -> str:
    parts = [f"{operator_key(l.operator)}x{l.count}" for l in model.layers]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def run_key(design_key: str, model: ModelImport, strategy: str, objective: str, time_limit: float | None,
            seed: int, warm_start: bool = False, cpu_clock: bool = False, design_budget: float | None = None,
            warm_neighbours: int = 2, prune: bool = False, budget_weight: str = "even") -> str:
    parts = [f"dse {SCHEMA}", design_key, model_key(model), strategy, objective, repr(time_limit), str(seed),
             code_fingerprint()]
    if warm_start:
        # A warm-started search may end elsewhere within its time limit: its rows are its own.
        parts.append("warm start")
        if warm_neighbours != 2:
            parts.append(f"from {warm_neighbours} neighbours")
    if cpu_clock:
        # The time limit counts CPU seconds: another budget than the same number of wall seconds.
        parts.append("cpu clock")
    if design_budget is not None:
        # CPU seconds per design, split over its layers (``dse.layer_budget``): not a limit per layer.
        parts.append(f"design budget {design_budget!r}")
        if budget_weight != "even":
            # This design's share of a budget weighted over the space (``dse.layer_budget``), not the average.
            parts.append(f"budget weight {budget_weight}")
    if prune:
        # A pruned row holds rule D's proof instead of a mapping: a sweep without rule D maps that design.
        parts.append("rule D")
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


@dataclass(frozen=True)
class StoredRun:
    energy_pj: float | None
    latency_cycles: float | None
    complete: bool
    error: str | None
    seconds: float
    worker: str
    result: dict[str, Any]      # per-layer summaries and mappings (YAML form)


class DesignStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.is_file() and self.path.stat().st_size:
                with open(self.path, "rb") as f:
                    if f.read(16) != b"SQLite format 3\x00":
                        raise SpecError("not an SQLite database, and it is not overwritten; pass another --store",
                                        where=str(self.path))
            self._db = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_TABLE)
        except (OSError, sqlite3.Error) as e:
            raise SpecError(f"cannot open the design store: {e}; pass another --store", where=str(self.path)) from None

    def get(self, key: str) -> StoredRun | None:
        row = self._db.execute("SELECT energy_pj, latency_cycles, complete, error, seconds, worker, result "
                               "FROM designs WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        e, l, c, err, s, w, res = row
        return StoredRun(e, l, bool(c), err, s, w, json.loads(res) if res else {})

    def put(self, key: str, accelerator: str, model: str, run: StoredRun) -> None:
        self._db.execute("INSERT OR REPLACE INTO designs VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                         (key, accelerator, model, run.energy_pj, run.latency_cycles, int(run.complete), run.error,
                          run.seconds, run.worker, json.dumps(run.result), time.time()))

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM designs").fetchone()[0]

    def close(self) -> None:
        self._db.close()
