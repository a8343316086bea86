"""Writing output files so that a reader, or an interrupted run, never sees half a file.

Commands check an output path with ``check_output_file`` before they do any work, so a bad path is
one line at once, not a traceback after a long search; then they write with ``write_atomic`` (text)
or ``atomic_path`` (a writer that wants a file name, such as matplotlib): a temporary file next to
the target, renamed into place. Files get the usual mode (0666 less the umask), not mkstemp's 0600.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from accelmap.errors import SpecError


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def check_output_file(path: str | Path, option: str, suffix: str | None = None) -> Path:
    """The file ``path`` an option names, refused with one line when it cannot be written: a
    directory, a wrong suffix (``suffix`` such as ".png"; nothing is silently appended), a folder that
    is a file, or a folder that does not take new files. Leaves nothing behind (it probes by
    creating and removing a temporary file or folder)."""
    where = f"{option} {path}"
    try:
        return _check(Path(path), str(path), where, suffix)
    except OSError as e:   # a name too long, a loop of links, ...
        raise SpecError(f"cannot use it: {e.strerror or e.__class__.__name__}", where=where) from None


def _check(p: Path, path: str, where: str, suffix: str | None) -> Path:
    if str(path) == "" or str(path).endswith(os.sep) or p.is_dir():
        raise SpecError("is a directory; give a file name", where=where)
    if suffix is not None and p.suffix.lower() != suffix:
        raise SpecError(f"the file name must end in {suffix}", where=where)
    if p.exists() and not p.is_file():
        raise SpecError("exists and is not a regular file", where=where)
    parent = p.absolute().parent
    ancestor = parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise SpecError(f"cannot create it: {ancestor} is a file, not a folder", where=where)
    if ancestor == parent:
        try:   # the only reliable test (permissions, read-only mounts, /proc): create a file and remove it
            with tempfile.TemporaryFile(dir=parent):
                pass
        except OSError as e:
            raise SpecError(f"cannot write into {parent}: {e.strerror or e.__class__.__name__}", where=where) \
                from None
    else:
        try:   # the folders do not exist yet: make and remove one where they would start
            os.rmdir(tempfile.mkdtemp(dir=ancestor))
        except OSError as e:
            raise SpecError(f"cannot create folders in {ancestor}: {e.strerror or e.__class__.__name__}",
                            where=where) from None
    if p.exists() and not os.access(p, os.W_OK):
        raise SpecError("cannot overwrite it: permission denied", where=where)
    return p


def check_output_dir(path: str | Path, option: str) -> Path:
    """The folder ``path`` an option names (it may not exist yet), refused with one line when it
    cannot hold new files: a file, under a file, or in a folder that does not take new files.
    Leaves nothing behind. (For ``map --out``: check before the search, not after it.)"""
    where = f"{option} {path}"
    try:
        p = Path(path)
        if p.exists() and not p.is_dir():
            raise SpecError("exists and is not a folder", where=where)
        if p.is_dir():
            try:
                with tempfile.TemporaryFile(dir=p):
                    pass
            except OSError as e:
                raise SpecError(f"cannot write into it: {e.strerror or e.__class__.__name__}", where=where) \
                    from None
            return p
        _check(p / "x", str(p / "x"), where, None)
        return p
    except OSError as e:
        raise SpecError(f"cannot use it: {e.strerror or e.__class__.__name__}", where=where) from None


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path next to ``path`` with the same suffix, to write; renamed to ``path`` when the
    block ends normally, removed when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file next to ``path`` and rename it into place."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_folder_atomic(out: Path, fill: Callable[[Path], list]) -> list[Path]:
    """Write a whole output folder: ``fill`` writes into a temporary folder beside ``out`` and returns
    what it wrote (paths in that folder, or names relative to it); the folder then takes the place of
    any earlier ``out``, so it never mixes two runs (no stale file) and is never half-written.
    Returns the written files' final paths."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        written = [Path(p) for p in fill(tmp)]
        names = [p.relative_to(tmp) if p.is_absolute() else p for p in written]
        os.chmod(tmp, 0o777 & ~_umask())
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            out.rename(old / "previous")
        tmp.rename(out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [out / n for n in names]
