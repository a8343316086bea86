"""Compile a generated C file with the system compiler and load it with ctypes."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from accelmap.errors import AccelmapError


class BuildError(AccelmapError):
    """The C compiler rejected a generated file; the file is kept for inspection."""


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise BuildError("no C compiler found: set CC or install gcc/clang")
    return cc


def build_dir() -> Path:
    d = Path(os.environ.get("ACCELMAP_BUILD_DIR", Path(tempfile.gettempdir()) / "accelmap-build"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def compile_shared(source: str, c_path: str | Path | None = None, opt: str = "-O2") -> Path:
    """Write ``source`` (to ``c_path`` or a content-addressed file) and build a shared library next to it.

    A build of identical source is reused: the library name carries the source hash.
    """
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    c_file = Path(c_path) if c_path else build_dir() / f"accelmap_{digest}.c"
    c_file.parent.mkdir(parents=True, exist_ok=True)
    c_file.write_text(source)
    lib = c_file.with_name(f"{c_file.stem}.{digest}.so")
    if lib.exists():
        return lib
    cmd = [compiler(), opt, "-std=c99", "-shared", "-fPIC", "-o", str(lib), str(c_file)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip()
        raise BuildError(f"{' '.join(cmd[:1])} failed on {c_file} (file kept):\n{msg}")
    return lib


def load_run(lib: Path):
    """The ``accelmap_run`` entry point of a built library."""
    dll = ctypes.CDLL(str(lib))
    fn = dll.accelmap_run
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong)]
    fn.restype = ctypes.c_int
    # No extra reference needed: ctypes keeps the CDLL in fn._objects, so the library stays loaded while fn lives.
    return fn
