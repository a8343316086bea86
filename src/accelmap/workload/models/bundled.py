"""The models shipped with the package, and resolving a name or a path to a model."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from accelmap.errors import SpecError
from accelmap.workload.models.layer_table import load_conv_table
from accelmap.workload.models.result import ModelImport


@dataclass(frozen=True)
class BundledModel:
    name: str
    file: str
    description: str


BUNDLED = {m.name: m for m in (
    BundledModel("resnet18", "resnet18.onnx", "torchvision ResNet-18, 224x224"),
    BundledModel("resnet50", "resnet50.onnx", "torchvision ResNet-50 (v1.5), 224x224"),
    BundledModel("vgg16", "vgg16.onnx", "torchvision VGG-16, 224x224"),
    BundledModel("mobilenetv2", "mobilenetv2.onnx", "torchvision MobileNetV2 1.0, 224x224"),
    BundledModel("bert_base_layer", "bert_base_layer.onnx",
                 "one BERT-base encoder layer (hidden 768, 12 heads, FFN 3072); --seq-len, default 128"),
    BundledModel("deepbench_conv", "deepbench_conv_inference_server.csv",
                 "DeepBench inference-server convolutions (107 layers; Rieber's 2022 dissertation, ch. 4-5)"),
)}


def bundled_model_names() -> list[str]:
    return list(BUNDLED)


def bundled_model_path(name: str) -> Path:
    return Path(str(resources.files("accelmap") / "data" / "models" / BUNDLED[name].file))


def load_model(name_or_path: str | Path, *, batch: int | None = None, seq_len: int | None = None,
               dims: dict[str, int] | None = None, bits: dict | str | None = None, strict: bool = True,
               allow_unknown: bool = False) -> ModelImport:
    """A bundled model name, an ``.onnx`` file or a ``.csv`` conv layer table.

    ``dims`` binds symbolic dimensions by name (see ``import_onnx``). With
    ``strict`` and without ``allow_unknown``, nodes of op types the importer does
    not know are an error, since they may carry multiply-accumulates that would
    go uncounted; otherwise they are returned in ``unknown_ops``.
    """
    s = str(name_or_path)
    if s in BUNDLED:
        path, name = bundled_model_path(s), s
    else:
        path, name = Path(s), None
        if not path.exists():
            raise SpecError(f"no bundled model named {s!r} and no such file; bundled: "
                            f"{', '.join(BUNDLED)}", where="model")
    if path.suffix == ".csv":
        if seq_len is not None:
            raise SpecError("--seq-len given, but a conv layer table has no sequence length", where=str(path))
        if dims:
            raise SpecError(f"--dim {next(iter(dims))} given, but a conv layer table has no symbolic dimensions",
                            where=str(path))
        if isinstance(bits, str):
            raise SpecError(f"precision {bits!r} needs an ONNX model; a layer table has no element types",
                            where=str(path))
        prefix = "db" if name == "deepbench_conv" else "conv"
        return load_conv_table(path, batch=batch, bits=bits, name=name, prefix=prefix)
    # Deferred: onnx_import itself imports this package's result types.
    from accelmap.workload.onnx_import import import_onnx

    m = import_onnx(path, batch=batch, seq_len=seq_len, dims=dims, bits=bits, strict=strict, name=name)
    if m.unknown_ops and strict and not allow_unknown:
        raise SpecError(unknown_ops_message(m) + "; `accelmap import --lenient` lists them and goes on",
                        where=str(path))
    return m


def unknown_ops_message(m: ModelImport) -> str:
    """One line naming the nodes of unknown op types."""
    u = m.unknown_ops
    names = ", ".join(f"{h.name!r} ({h.op_type})" for h in u[:3]) + (f" and {len(u) - 3} more" if len(u) > 3 else "")
    return (f"{len(u)} node{'s' if len(u) > 1 else ''} of op types the importer does not know, which may carry "
            f"multiply-accumulates that are not counted: {names}")
