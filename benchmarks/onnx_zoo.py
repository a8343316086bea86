"""Export torchvision models and transformer blocks to ONNX with both PyTorch exporters and compare MACs.

For every model and every export (the TorchScript-based exporter, ``dynamo=False``,
and the torch.export-based one, ``dynamo=True``; each with static shapes and with
a dynamic batch, and sequence for the transformer blocks) the file is imported with
accelmap and its MAC total compared with PyTorch's own count
(``torch.utils.flop_counter.FlopCounterMode``, FLOPs / 2, with the fused
multi-head-attention fast path switched off and attention on its math kernel,
so that the counter sees the attention matmuls too).
Prints a table and writes JSON.

torch, torchvision and onnxscript are optional and not test dependencies:
    pip install torch torchvision onnxscript
    python benchmarks/onnx_zoo.py [--json out.json] [MODEL ...]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

try:
    import torch
    import torchvision
    from torch.utils.flop_counter import FlopCounterMode
except ImportError:
    sys.exit("torch and torchvision are not installed: pip install torch torchvision onnxscript (optional)")

from accelmap.workload.onnx_import import import_onnx

BATCH = 2   # an example batch of 1 would be specialized to a constant by torch.export


class GPT2Block(torch.nn.Module):
    """A GPT-2 block written as the reference implementation does (split, view, transpose, @)."""

    def __init__(self, d: int = 256, heads: int = 4):
        super().__init__()
        self.h = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


def _tv(name, **kw):
    return lambda: getattr(torchvision.models, name)(weights=None, **kw).eval()


def _seg(name):
    return lambda: getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None).eval()


MODELS = {
    "resnet18": (_tv("resnet18"), (3, 224, 224)),
    "mobilenet_v3_small": (_tv("mobilenet_v3_small"), (3, 224, 224)),
    "efficientnet_b0": (_tv("efficientnet_b0"), (3, 224, 224)),
    "regnet_y_400mf": (_tv("regnet_y_400mf"), (3, 224, 224)),
    "convnext_tiny": (_tv("convnext_tiny"), (3, 224, 224)),
    "densenet121": (_tv("densenet121"), (3, 224, 224)),
    "shufflenet_v2_x1_0": (_tv("shufflenet_v2_x1_0"), (3, 224, 224)),
    "inception_v3": (_tv("inception_v3", aux_logits=False, init_weights=False), (3, 299, 299)),
    "swin_t": (_tv("swin_t"), (3, 224, 224)),
    "vit_b_16": (_tv("vit_b_16"), (3, 224, 224)),
    "deeplabv3_mobilenet_v3": (_seg("deeplabv3_mobilenet_v3_large"), (3, 224, 224)),
    "transformer_encoder_layer": (lambda: torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True).eval(),
                                  (64, 256)),
    "gpt2_block": (lambda: GPT2Block().eval(), (64, 256)),
    # Single layers of the forms the networks above lack.
    "conv_transpose_2d": (lambda: torch.nn.Sequential(
        torch.nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1, groups=2), torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(8, 3, 3, stride=2, padding=1, output_padding=1)).eval(), (16, 14, 14)),
    "conv3d": (lambda: torch.nn.Sequential(
        torch.nn.Conv3d(3, 16, 3, stride=(1, 2, 2), padding=1), torch.nn.ReLU(),
        torch.nn.Conv3d(16, 16, (1, 3, 3), padding=(0, 1, 1), groups=16)).eval(), (3, 8, 56, 56)),
    "gru_2layer_bidirectional": (lambda: torch.nn.GRU(64, 96, num_layers=2, bidirectional=True,
                                                     batch_first=True).eval(), (50, 64)),
}


def torch_macs(model, x) -> int:
    # The math kernel of scaled_dot_product_attention decomposes into matmuls the counter
    # sees; the fused CPU kernel it would pick otherwise is not counted.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with FlopCounterMode(display=False) as fc, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        model(x)
    return fc.get_total_flops() // 2


def export(model, x, path: Path, dynamo: bool, dynamic: bool) -> None:
    seq = x.dim() == 3
    if dynamo:
        shapes = None
        if dynamic:
            axes = {0: torch.export.Dim("batch")}
            if seq:
                axes[1] = torch.export.Dim("seq", min=2, max=4096)
            shapes = (axes,)
        torch.onnx.export(model, (x,), str(path), dynamo=True, dynamic_shapes=shapes, optimize=True, verbose=False)
    else:
        axes = ({"x": {0: "batch", 1: "seq"}} if seq else {"x": {0: "batch"}}) if dynamic else None
        torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"], dynamic_axes=axes, opset_version=17)


def _dims_to_bind(path: Path, shape: tuple) -> dict[str, int]:
    """The symbolic input dims the exporter kept (it may specialize some): axis 0 the batch, axis 1 the sequence."""
    import onnx

    dims = {}
    for inp in onnx.load(str(path), load_external_data=False).graph.input:
        for axis, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.dim_param:
                dims[d.dim_param] = BATCH if axis == 0 else shape[axis - 1]
    return dims


def run(names: list[str], tmp: Path) -> list[dict]:
    torch.backends.mha.set_fastpath_enabled(False)
    torch.manual_seed(0)
    rows = []
    for name in names:
        make, shape = MODELS[name]
        model, x = make(), torch.randn(BATCH, *shape)
        want = torch_macs(model, x)
        for dynamo in (False, True):
            for dynamic in (False, True):
                form = f"{'dynamo' if dynamo else 'torchscript'} {'dynamic' if dynamic else 'static'}"
                row = {"model": name, "export": form, "torch_macs": want}
                path = tmp / f"{name}.{form.replace(' ', '-')}.onnx"
                t = time.perf_counter()
                try:
                    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                            contextlib.redirect_stderr(io.StringIO()):
                        warnings.simplefilter("ignore")
                        export(model, x, path, dynamo, dynamic)
                except Exception as e:   # an exporter failure is PyTorch's, not the importer's
                    row["export_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    rows.append(row)
                    continue
                row["export_seconds"] = round(time.perf_counter() - t, 1)
                t = time.perf_counter()
                try:
                    m = import_onnx(path, dims=_dims_to_bind(path, shape))
                    row.update(accelmap_macs=m.total_macs, unknown_ops=[u.op_type for u in m.unknown_ops])
                except Exception as e:
                    row["import_error"] = str(e).splitlines()[0]
                row["import_seconds"] = round(time.perf_counter() - t, 2)
                rows.append(row)
                print(_line(row), flush=True)
    return rows


def _line(r: dict) -> str:
    head = f"{r['model']:<26} {r['export']:<20} {r['torch_macs']:>15,}"
    if "export_error" in r:
        return f"{head} {'-':>15}  export failed: {r['export_error']}"
    if "import_error" in r:
        return f"{head} {'-':>15}  IMPORT FAILED: {r['import_error']}"
    same = "equal" if r["accelmap_macs"] == r["torch_macs"] else f"DIFFERENT ({r['accelmap_macs'] - r['torch_macs']:+,})"
    return f"{head} {r['accelmap_macs']:>15,}  {same}" + (f"; unknown ops {r['unknown_ops']}" if r["unknown_ops"] else "")


def main() -> None:
    ap = argparse.ArgumentParser(description="accelmap's ONNX import vs PyTorch's MAC count")
    ap.add_argument("models", nargs="*", help=f"default: all of {', '.join(MODELS)}")
    ap.add_argument("--json", default=None, help="Also write the rows to this file.")
    args = ap.parse_args()
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        sys.exit(f"unknown model {unknown[0]!r}; choose from {', '.join(MODELS)}")
    print(f"{'model':<26} {'export':<20} {'PyTorch MACs':>15} {'accelmap MACs':>15}  result  (batch {BATCH})")
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(args.models or list(MODELS), Path(tmp))
    for r in rows:
        if "export_error" in r:
            print(_line(r))
    ok = sum(1 for r in rows if r.get("accelmap_macs") == r["torch_macs"])
    tried = sum(1 for r in rows if "export_error" not in r)
    print(f"equal: {ok} of {tried} exported files ({len(rows) - tried} exports failed in PyTorch)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
