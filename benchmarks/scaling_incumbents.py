"""The command line shared by the scripts that bound a model's layers against a ``mapper_scaling.py`` run's results
(``unrolling_bounds.py``, ``padded_classes.py``): the preset, the model, the results file and the layers, and each
layer's EDP found there as its incumbent. Run as scripts, they import it from their own folder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def parse_with_incumbents(ap: argparse.ArgumentParser) -> tuple[argparse.Namespace, dict[str, float]]:
    """Add ``--arch``, ``--model``, ``--results`` and ``--layers`` to ``ap``, parse, and return the arguments with
    {layer: EDP} of the results file's run of that model on that preset."""
    ap.add_argument("--arch", required=True)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--results", type=Path, required=True, help="a mapper_scaling.py JSON with a run on --arch")
    ap.add_argument("--layers", nargs="+", help="only these layers")
    a = ap.parse_args()
    runs = [r for r in json.loads(a.results.read_text())["runs"] if r["arch"] == a.arch and r["model"] == a.model]
    if not runs:
        raise SystemExit(f"--results {a.results}: no run of {a.model} on {a.arch} in it")
    return a, {layer["layer"]: layer["edp"] for layer in runs[0]["layers"]}
