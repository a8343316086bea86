"""End to end: whole networks compiled to one C program per accelerator, run, verified, timed.

Per model x accelerator: compile time (import, mapping, intrinsic embedding, emission, build), run time of the emitted
program on the host, simulated network latency, modeled (analytical) latency, and the verification
result against onnxruntime, the host model's cycles (host steps plus the host work inside accelerator
steps; of it, the intrinsic programs' operand packing) and the energy of the accelerator (cost model)
and of the host (host model). Models (the bundled weight-free graphs get random weights, seed 0):

* ``bert_base_layer``: float, sequence length 128 (``--seq-len``), compared within tolerance;
* ``resnet18`` and ``mobilenetv2``: int8 QDQ made with onnxruntime's quantization tools (static,
  symmetric int8, per-channel weights, calibrated on 4 random inputs), compared bit for bit on
  their integer form, and against the file as written (default session options, and with onnxruntime's
  int8 QDQ kernels: session.qdqisint8allowed=1).

With ``--fuse`` every pair is compiled twice, one after the other: layer by layer, then with the fusion
search's groups run fused (``accelmap compile --fuse``); the rows add the CPU seconds of the mapping
and the fusion search (this process; jobs=1), the accelerator's off-chip
traffic by the cost model (simulated for the fused groups) and the groups run. ``--fuse-span-residuals`` lets
the groups span consecutive residual blocks (``accelmap compile --fuse --fuse-span-residuals``); the rows then
also count the groups with an add inside (``spanning``).

It then loads one report in headless Chromium (Debian's ``chromium``, installed with apt-get when
missing), checks that the page logs no console error, and writes a screenshot.

    python benchmarks/compile_e2e.py [--models M ...] [--archs A ...] [--seq-len N] [--time-limit S]
                                     [--fuse [--fuse-tile-time S] [--fuse-time-limit S] [--fused-only]
                                             [--fuse-span-residuals]]
                                     [--objective O]

Prints a table, writes benchmarks/results/compile_e2e.json (and the screenshot
benchmarks/results/compile_e2e_report.png). Needs onnxruntime (``pip install -e '.[compile]'``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

from accelmap.arch.presets import get_accelerator
from accelmap.compile import compile_model
from accelmap.compile.graph import load_graph
from accelmap.compile.quantize import quantize_qdq
from accelmap.fusion.search import DEFAULT_FUSION, FusionConfig
from accelmap.report.compile_report import write_compile_report
from accelmap.workload.models.bundled import bundled_model_path

RESULTS = Path(__file__).parent / "results"
QUANTIZED = {"resnet18", "mobilenetv2"}


def model_for(name: str, seq_len: int, work: Path) -> tuple[Path, str]:
    """The ONNX file to compile and its form."""
    g = load_graph(bundled_model_path(name), seq_len=seq_len if name == "bert_base_layer" else None, seed=0)
    path = work / f"{name}.onnx"
    if name in QUANTIZED:
        onnx.save(quantize_qdq(g, seed=0), path)
        return path, "int8 QDQ"
    onnx.save(g.model, path)
    return path, "float"


def chromium_check(report: Path, screenshot: Path) -> dict:
    """Load the page in headless Chromium: console errors (from its log) and a screenshot."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        proc = subprocess.run(["apt-get", "install", "-y", "chromium"], capture_output=True, text=True)
        exe = shutil.which("chromium")
        if exe is None:
            return {"ok": None, "note": f"chromium is not installed and apt-get failed: {proc.stderr.strip()[-300:]}"}

    def load(page: Path, shot: Path) -> tuple[list[str], bool]:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
               "--hide-scrollbars", "--window-size=1400,2400", f"--screenshot={shot}", page.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        errors = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln and ("ERROR" in ln or "Uncaught" in ln
                                                                               or "error" in ln.lower())]
        return errors, shot.exists() and shot.stat().st_size > 0

    # The check itself must be able to fail: a page with a deliberate console error is caught.
    with tempfile.TemporaryDirectory() as td:
        bad = Path(td) / "bad.html"
        bad.write_text("<html><body><script>console.error('deliberate'); undefined_fn();</script></body></html>")
        caught, _ = load(bad, Path(td) / "bad.png")
    errors, shot = load(report, screenshot)
    return {"ok": not errors and shot and bool(caught), "console_errors": errors, "screenshot": str(screenshot),
            "self_check_caught_errors": len(caught), "chromium": exe}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["bert_base_layer", "resnet18", "mobilenetv2"])
    ap.add_argument("--archs", nargs="+", default=["vta_like", "tpu_like", "eyeriss_like"])
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--time-limit", type=float, default=2.0, help="mapper seconds per layer")
    ap.add_argument("--out", default=None, help="keep the compiled programs here (default: a temp folder)")
    ap.add_argument("--json", default=str(RESULTS / "compile_e2e.json"))
    ap.add_argument("--intrinsics", choices=["always", "faster", "never"], default="always",
                    help="which layers run intrinsic programs (accelmap compile --intrinsics)")
    ap.add_argument("--objective", choices=["edp", "energy", "latency"], default="edp",
                    help="the mapper's and the fusion search's objective")
    ap.add_argument("--fuse", action="store_true", help="compile every pair layer by layer and then fused")
    ap.add_argument("--fuse-tile-time", type=float, default=2.0, help="seconds per tile mapping of the fusion search")
    ap.add_argument("--fuse-time-limit", type=float, default=None, help="seconds of the whole fusion search")
    ap.add_argument("--fused-only", action="store_true", help="with --fuse: compile each pair fused only (not "
                    "layer by layer first)")
    ap.add_argument("--fuse-span-residuals", action="store_true", help="with --fuse: groups may span consecutive "
                    "residual blocks (accelmap compile --fuse-span-residuals)")
    args = ap.parse_args()
    if args.fuse_span_residuals and not args.fuse:
        ap.error("--fuse-span-residuals needs --fuse")
    fuse_config = FusionConfig(span_residuals=True) if args.fuse_span_residuals else DEFAULT_FUSION
    rows = []
    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="accelmap-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"{'model':<16} {'form':<9} {'arch':<13} {'compile s':>9} {'run s':>7} {'simulated cyc':>14} "
          f"{'modeled cyc':>14} {'model err':>9} {'host cyc':>11} {'packing':>9} {'acc. pJ':>9} {'host pJ':>9} "
          f"{'intr.':>6}" + (f" {'fused':>5} {'map+fuse CPU s':>14} {'off-chip MB':>11} {'groups':>6} {'spanning':>8}"
                             if args.fuse else "")
          + "  verification")
    first_report = None
    for name in args.models:
        path, form = model_for(name, args.seq_len, work)
        for arch_name, fuse in [(a, f) for a in args.archs for f in (((True,) if args.fused_only else (False, True)) if args.fuse else (False,))]:
            arch = get_accelerator(arch_name)
            t0 = time.perf_counter()
            try:
                res = compile_model(path, arch, work / f"{name}-{arch_name}{'-fused' if fuse else ''}",
                                    time_limit_per_layer=args.time_limit, jobs=1, intrinsics=args.intrinsics,
                                    objective=args.objective,
                                    fuse=fuse, fuse_tile_time_limit=args.fuse_tile_time,
                                    fuse_time_limit=args.fuse_time_limit,
                                    fuse_config=fuse_config if fuse else DEFAULT_FUSION)
            except Exception as e:  # noqa: BLE001 - one failing pair is a row of the table, not the end of the run
                rows.append({"model": name, "form": form, "arch": arch_name, "error": f"{type(e).__name__}: {e}"})
                print(f"{name:<16} {form:<9} {arch_name:<13} error: {type(e).__name__}: {str(e)[:200]}")
                continue
            total = time.perf_counter() - t0
            report = write_compile_report(res, res.program.folder)
            first_report = first_report or report
            d = res.to_dict()
            s = res.seconds
            compile_s = s["import"] + s["map"] + s.get("embed", 0.0) + s.get("fuse", 0.0) + s["emit"] + s["build"]
            compile_cpu = sum(res.cpu_seconds.values())      # mapping + fusion search, this process (jobs=1)
            t = res.timing
            assert t is not None and res.verification is not None and res.run is not None
            acc_sim, acc_mod = t.accelerator_simulated, t.accelerator_modeled
            v = res.verification
            verdict = ("PASS" if v.ok else "FAIL") + (f" ({sum(c.ok for c in v.quantized)}/{len(v.quantized)} "
                                                      f"quantized values bit-exact)" if v.quantized else
                                                      f" (max |diff| {max(c.max_abs_diff for c in v.outputs):.2g})")
            if v.file_outputs:
                first = v.file_first_bad.split(":")[0] if v.file_first_bad else "?"
                verdict += "; file as written: " + ("match" if all(c.ok for c in v.file_outputs) else
                                                    f"differs from {first}")
            if v.file_int8_outputs:     # the file run with onnxruntime's int8 QDQ kernels
                verdict += (f"; file, int8 kernels: {sum(c.ok for c in v.file_int8_quantized)}/"
                            f"{len(v.file_int8_quantized)} bit-exact, outputs "
                            + ("match" if all(c.ok for c in v.file_int8_outputs) else "differ"))
            spanning = sum(1 for grp in res.groups if grp.cost.inner_joins)   # a residual add inside, charged
            d.update({"form": form, "fused": fuse, "compile_s": compile_s, "process_cpu_s": compile_cpu,
                      "span_residuals": fuse and args.fuse_span_residuals, "spanning_groups": spanning,
                      "total_s": total,
                      "accelerator_simulated_cycles": acc_sim, "accelerator_modeled_cycles": acc_mod,
                      "verification_detail": v.summary()})
            intr = [x for x in t.steps if x.runs == "intrinsic program"]
            d["intrinsic_steps"] = f"{len(intr)}/{sum(x.placement == 'accelerator' for x in t.steps)}"
            rows.append(d)
            print(f"{name:<16} {form:<9} {arch_name:<13} {compile_s:>9.1f} {res.run.wall_s:>7.2f} "
                  f"{t.simulated_cycles:>14,.0f} {t.modeled_cycles:>14,.0f} "
                  f"{(acc_mod - acc_sim) / acc_sim if acc_sim else 0:>+9.2%} {t.host_cycles:>11,.0f} "
                  f"{t.packing_cycles:>9,.0f} {t.accelerator_energy_pj:>9.3g} {t.host_energy_pj:>9.3g} "
                  f"{d['intrinsic_steps']:>6}"
                  + (f" {'yes' if fuse else 'no':>5} {compile_cpu:>14.1f} {t.offchip_bits / 8e6:>11.3f} "
                     f"{len(res.groups):>6} {spanning:>8}" if args.fuse else "")
                  + f"  {verdict}", flush=True)
    browser = chromium_check(first_report, RESULTS / "compile_e2e_report.png") if first_report else {}
    print(f"\nreport in headless Chromium ({first_report}): "
          + ("no console errors, screenshot written" if browser.get("ok") else json.dumps(browser)))
    RESULTS.mkdir(exist_ok=True)
    Path(args.json).write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows, "browser": browser,
                                           "note": "2-core machine shared with other jobs; times are loaded"},
                                          indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
