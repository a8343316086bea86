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
                 "DeepBench inference-server convolutions (107 layers; seed 000, ch. 4-5)"),
)}


def bundled_model_names() -> list[str]:
    return list(BUNDLED)


def bundled_model_path(name: str) -> Path:
    return Path(str(resources.files("accelmap") / "data" / "models" / BUNDLED[name].file))


def load_model(name_or_path: str | Path, *, batch: int | None = None, seq_len: int | None = None,
               bits: dict | str | None = None, strict: bool = True) -> ModelImport:
    """A bundled model name, an ``.onnx`` file or a ``.csv`` conv layer table."""
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
        if isinstance(bits, str):
            raise SpecError(f"precision {bits!r} needs an ONNX model; a layer table has no element types",
                            where=str(path))
        prefix = "db" if name == "deepbench_conv" else "conv"
        return load_conv_table(path, batch=batch, bits=bits, name=name, prefix=prefix)
    # Deferred: onnx_import itself imports this package's result types.
    from accelmap.workload.onnx_import import import_onnx

    return import_onnx(path, batch=batch, seq_len=seq_len, bits=bits, strict=strict, name=name)
