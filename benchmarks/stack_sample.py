"""Where a benchmark's CPU goes, by sampling its Python stack on the CPU clock (SIGPROF) instead of tracing every call.

cProfile charges each Python call its own overhead, which inflates the bound's many small functions several-fold;
sampling does not. Prints the share of samples in which each accelmap function is on the stack (inclusive) and, for
the functions named with ``--lines``, the share per line of theirs on the stack (what each line costs with its
callees). The kernel's timer granularity (often 4 ms) sets the real interval.

    python benchmarks/stack_sample.py --lines lower_bound,children -- benchmarks/node_rate.py tpu_like conv1 --budget 20000
"""

from __future__ import annotations

import argparse
import collections
import runpy
import signal
import sys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=0.001, help="seconds of CPU between samples")
    ap.add_argument("--lines", default="", help="comma-separated function names whose lines to report")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT ARGS...")
    a = ap.parse_args()
    script = a.script[1:] if a.script[:1] == ["--"] else a.script
    if not script:
        raise SystemExit("script: give the script to run after --")
    wanted = {f for f in a.lines.split(",") if f}
    functions: collections.Counter = collections.Counter()
    lines: collections.Counter = collections.Counter()
    samples = [0]

    def sample(_sig, frame) -> None:
        samples[0] += 1
        seen_f, seen_l = set(), set()
        while frame is not None:
            code = frame.f_code
            if "accelmap" in code.co_filename:
                where = code.co_filename.split("accelmap/")[-1]
                key = (where, code.co_name)
                if key not in seen_f:
                    functions[key] += 1
                    seen_f.add(key)
                if code.co_name in wanted and (key, frame.f_lineno) not in seen_l:
                    lines[(key, frame.f_lineno)] += 1
                    seen_l.add((key, frame.f_lineno))
            frame = frame.f_back

    signal.signal(signal.SIGPROF, sample)
    signal.setitimer(signal.ITIMER_PROF, a.interval, a.interval)
    sys.argv = script
    try:
        runpy.run_path(script[0], run_name="__main__")
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        n = max(samples[0], 1)
        print(f"samples {samples[0]}; share of samples with the function on the stack:")
        for (where, name), v in functions.most_common(a.top):
            print(f"{100 * v / n:5.1f}% {where}:{name}")
        if wanted:
            print("per line of " + ", ".join(sorted(wanted)) + " (with its callees):")
            for ((where, name), line), v in lines.most_common(a.top):
                print(f"{100 * v / n:5.1f}% {where}:{line} {name}")


if __name__ == "__main__":
    main()
