"""Per layer, the exact search's run of ``mapper_scaling.py`` against other strategies' runs of it (same models and
presets): a layer where another strategy's EDP is below the exact search's lower bound means a wrong certificate,
and one below a proven-optimal EDP a wrong proof (unless that mapping is padded and the proof's note says the padded
unrollings were not excluded). Also lists the layers where the other strategy beat the exact search's best.

    python benchmarks/scaling_certificate_check.py OPTIMAL.json OTHER.json [OTHER.json ...]

Exits 1 when a certificate or a proof is contradicted.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    exact = json.load(open(sys.argv[1]))
    others = [json.load(open(p)) for p in sys.argv[2:]]
    compared = contradicted = beaten = 0
    for run in exact["runs"]:
        for other in others:
            for run2 in other["runs"]:
                if (run2["model"], run2["arch"]) != (run["model"], run["arch"]):
                    continue
                theirs = {x["layer"]: x for x in run2["layers"]}
                for mine in run["layers"]:
                    x = theirs.get(mine["layer"])
                    if x is None or x["edp"] is None or mine["edp"] is None:
                        continue
                    compared += 1
                    flags = []
                    if mine["lower_bound"] is not None and x["edp"] < mine["lower_bound"] * (1 - 1e-9):
                        flags.append("BELOW THE BOUND")
                    if mine["proven_optimal"] and x["edp"] < mine["edp"] * (1 - 1e-9):
                        flags.append("BEATS A PROOF")
                    contradicted += bool(flags)
                    if x["edp"] < mine["edp"] * (1 - 1e-9):
                        beaten += 1
                        flags.append(f"{other['strategy']} better by {mine['edp'] / x['edp'] - 1:.1%}")
                    if flags:
                        print(f"{run['model']} {run['arch']} {mine['layer']}: optimal {mine['edp']:.4e} "
                              f"(bound {mine['lower_bound']:.4e}, proven {mine['proven_optimal']}), "
                              f"{other['strategy']} {x['edp']:.4e}: {'; '.join(flags)}")
    print(f"{compared} layers compared: {contradicted} certificates or proofs contradicted, "
          f"{beaten} where the other strategy found a better mapping")
    sys.exit(1 if contradicted else 0)


if __name__ == "__main__":
    main()
