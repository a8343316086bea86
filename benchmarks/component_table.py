"""Regenerate the component table the design-space sweeps derive area and energy from.

The table (src/accelmap/data/components/components_45nm.csv) holds CACTI 7 SRAM figures and
Aladdin's multiplier, adder, register and wire figures at 45 nm, as computed by the component
library AccelForge uses (hwcomponents, hwcomponents-cacti, hwcomponents-library). That library
needs Python >= 3.12 and ships a CACTI binary built against a newer C library than some machines
have, so it is not a dependency of accelmap: this script makes its own virtual environment with a
Python 3.12 it is given (or finds), installs the library there, rebuilds CACTI from the source
the wheel ships when the bundled binary does not run, and writes the CSV.

    python benchmarks/component_table.py [--python /path/to/python3.12] [--venv DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "accelmap" / "data" / "components" / "components_45nm.csv"
TECH = 45e-9
# SRAM grid: word widths (bits) x capacities (bits); CACTI's cost per access depends on both.
WIDTHS = (8, 16, 32, 64, 128)
SIZES = tuple(2 ** k for k in range(7, 27))        # 128 bit .. 8 MiB
MAC_WIDTHS = (4, 8, 16, 32)

_WORKER = r'''
import csv, sys
from hwcomponents_cacti import SRAM, LPDDR4
from hwcomponents_library import AladdinMultiplier, AladdinAdder, AladdinRegister, Wire
tech = float(sys.argv[1]); out = sys.argv[2]
widths = [int(x) for x in sys.argv[3].split(",")]; sizes = [int(x) for x in sys.argv[4].split(",")]
macw = [int(x) for x in sys.argv[5].split(",")]
rows = []
for w in widths:
    for s in sizes:
        if s < 2 * w:
            continue
        m = SRAM(tech_node=tech, width=w, size=s)
        rows.append(("sram", w, s, m.read().energy * 1e12, m.write().energy * 1e12, m.area * 1e12))
        print("sram", w, s, rows[-1][3:], flush=True)
for w in macw:
    m = AladdinMultiplier(tech_node=tech, width=w)
    rows.append(("multiplier", w, 0, m.read().energy * 1e12, 0.0, m.area * 1e12))
    a = AladdinAdder(tech_node=tech, width=2 * w)
    rows.append(("adder", 2 * w, 0, a.read().energy * 1e12, 0.0, a.area * 1e12))
r = AladdinRegister(tech_node=tech, width=1)
rows.append(("register", 1, 1, r.read().energy * 1e12, r.write().energy * 1e12, r.area * 1e12))
wire = Wire(length=1e-3, tech_node=tech)
rows.append(("wire_mm", 1, 0, wire.read().energy * 1e12, 0.0, 0.0))
d = LPDDR4(width=64)
rows.append(("dram_lpddr4", 64, 0, d.read().energy * 1e12, d.write().energy * 1e12, 0.0))
with open(out, "w", newline="") as f:
    wr = csv.writer(f)
    wr.writerow(["kind", "width_bits", "size_bits", "read_pj", "write_pj", "area_um2"])
    for row in rows:
        wr.writerow([row[0], row[1], row[2]] + [f"{v:.6g}" for v in row[3:]])
'''


def _python312(given: str | None) -> str:
    for cand in ([given] if given else []) + ["python3.12", "python3.13"]:
        exe = shutil.which(cand) if cand else None
        if exe and subprocess.run([exe, "-c", "import sys; assert sys.version_info >= (3, 12)"]).returncode == 0:
            return exe
    sys.exit("no Python >= 3.12 found (hwcomponents requires it); pass --python")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=None, help="a Python >= 3.12 to build the venv from")
    ap.add_argument("--venv", default="/tmp/accelmap-hwcomponents", help="virtual environment folder")
    args = ap.parse_args()
    venv = Path(args.venv)
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([_python312(args.python), "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "hwcomponents", "hwcomponents-cacti",
                    "hwcomponents-library", "hwcomponents-neurosim"], check=True)
    cacti_dir = Path(subprocess.run([str(py), "-c", "import hwcomponents_cacti, os; "
                                     "print(os.path.join(os.path.dirname(hwcomponents_cacti.__file__), 'cacti'))"],
                                    check=True, capture_output=True, text=True).stdout.strip())
    if subprocess.run([str(cacti_dir / "cacti")], capture_output=True, cwd=cacti_dir).returncode not in (0, 1) or \
            b"GLIBC" in subprocess.run([str(cacti_dir / "cacti")], capture_output=True, cwd=cacti_dir).stderr:
        # The wheel's binary was linked against a newer glibc; its source is in the wheel too.
        for d in ("obj_dbg", "obj_opt"):
            shutil.rmtree(cacti_dir / d, ignore_errors=True)
        subprocess.run(["make", "-j2"], cwd=cacti_dir, check=True, capture_output=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(py), "-c", _WORKER, str(TECH), str(OUT), ",".join(map(str, WIDTHS)),
                    ",".join(map(str, SIZES)), ",".join(map(str, MAC_WIDTHS))], check=True)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
