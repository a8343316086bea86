import atexit
import os
import shutil
import tempfile

# Parallel workers (pytest-xdist, ``-n 2`` in pyproject.toml) on a 2-core machine: one NumPy/BLAS and
# onnxruntime thread per worker, so two workers do not run four threads on two cores. Set before any
# test module imports NumPy (OpenBLAS reads it when it loads).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# Files the code writes outside a test's tmp_path go to a folder of this test process, never to the
# user's: the result cache under ~/.cache (``search.cache.default_cache_path``) and the C build folder
# (``codegen.build.build_dir``, content-addressed: two workers building the same source at once would
# write the same files). Each xdist worker is its own process, so each gets its own folders.
_scratch = tempfile.mkdtemp(prefix="accelmap-tests-")
os.environ["XDG_CACHE_HOME"] = os.path.join(_scratch, "cache")
os.environ["ACCELMAP_BUILD_DIR"] = os.path.join(_scratch, "build")
atexit.register(shutil.rmtree, _scratch, ignore_errors=True)

from hypothesis import settings  # noqa: E402

# Deterministic property tests: the same examples on every run and machine.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "ci"))
