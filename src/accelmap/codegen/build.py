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
    """Write C ``source`` (to ``c_path`` or a content-addressed file) and build a shared library next to it.

    A build of identical source is reused: the library name carries the source hash.
    """
    return build_library(source, c_path, [compiler(), opt, "-std=c99"], "accelmap", ".c")[0]


def compile_shared_units(sources: list[str], opt: str = "-O2") -> Path:
    """Build one shared library from several C translation units (each with its own file-scope names); a build
    of identical sources is reused."""
    digest = hashlib.sha1("\0".join(sources).encode()).hexdigest()[:16]
    folder = build_dir() / f"accelmap_units_{digest}"
    lib = folder / "units.so"
    if lib.exists():
        return lib
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i, src in enumerate(sources):
        f = folder / f"unit{i}.c"
        f.write_text(src)
        files.append(str(f))
    tmp = folder / f"units.{os.getpid()}.so"
    cmd = [compiler(), opt, "-std=c99", "-shared", "-fPIC", "-o", str(tmp), *files]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip()[:2000]
        raise BuildError(f"{cmd[0]} failed on {folder} (files kept):\n{msg}")
    tmp.replace(lib)
    return lib


def build_library(source: str, path: str | Path | None, compile_cmd: list[str], prefix: str,
                  suffix: str) -> tuple[Path, bool]:
    """Write ``source`` (to ``path`` or a content-addressed ``PREFIX_HASH.SUFFIX`` in the build folder) and
    build a shared library beside it with ``compile_cmd`` (compiler and flags); a build of identical
    source is reused. Returns the library and whether it was reused."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    src_file = Path(path) if path else build_dir() / f"{prefix}_{digest}{suffix}"
    src_file.parent.mkdir(parents=True, exist_ok=True)
    src_file.write_text(source)
    lib = src_file.with_name(f"{src_file.stem}.{digest}.so")
    if lib.exists():
        return lib, True
    cmd = [*compile_cmd, "-shared", "-fPIC", "-o", str(lib), str(src_file)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip()[:2000]
        raise BuildError(f"{cmd[0]} failed on {src_file} (file kept):\n{msg}")
    return lib, False


def load_run(lib: Path):
    """The ``accelmap_run`` entry point of a built library."""
    dll = ctypes.CDLL(str(lib))
    fn = dll.accelmap_run
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_longlong)]
    fn.restype = ctypes.c_int
    # No extra reference needed: ctypes keeps the CDLL in fn._objects, so the library stays loaded while fn lives.
    return fn
