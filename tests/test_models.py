"""Bundled models: MAC counts against published numbers, dedup, parameters, the CLI."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from accelmap.cli import main
from accelmap.errors import SpecError
from accelmap.workload.models import bundled_model_names, bundled_model_path, load_model
from accelmap.workload.models.layer_table import load_conv_table
from accelmap.workload.models.zoo import BUILDERS


def conv_macs(cin, cout, k, out_hw, groups=1):
    return cout * (cin // groups) * k * k * out_hw * out_hw


# Published: torchvision's model cards and ptflops/fvcore tables list, at 224x224
# and counting conv + fc only, ResNet-18 1.81 GMACs, ResNet-50 (v1.5) 4.09 GMACs,
# VGG-16 15.47 GMACs, and Sandler et al. 2018 (Table 4) MobileNetV2 300 M multiply-adds.
@pytest.mark.parametrize("name,published,rel", [
    ("resnet18", 1.81e9, 0.01), ("resnet50", 4.09e9, 0.01), ("vgg16", 15.47e9, 0.01), ("mobilenetv2", 300e6, 0.01),
])
def test_cnn_macs_match_published(name, published, rel):
    assert load_model(name).total_macs == pytest.approx(published, rel=rel)


def test_resnet18_exact_macs_from_a_hand_layer_list():
    # Derived independently of the ONNX file: stem, four stages (the first block of
    # stages 2-4 halves the resolution and has a 1x1 stride-2 downsample), the fc.
    stem = conv_macs(3, 64, 7, 112)
    stage1 = 4 * conv_macs(64, 64, 3, 56)
    later = sum(conv_macs(c, 2 * c, 3, hw) + 3 * conv_macs(2 * c, 2 * c, 3, hw) + conv_macs(c, 2 * c, 1, hw)
                for c, hw in ((64, 28), (128, 14), (256, 7)))
    expected = stem + stage1 + later + 512 * 1000
    m = load_model("resnet18")
    assert m.total_macs == expected == 1_814_073_344
    # 20 convs + fc; identical 3x3 convs of a stage are one layer each.
    assert m.node_count == 21 and len(m.layers) == 12
    assert {l.name: l.count for l in m.layers}["layer1.0.conv1"] == 4


def test_mobilenetv2_depthwise_layers():
    m = load_model("mobilenetv2")
    kinds = [l.operator.kind for l in m.layers for _ in range(l.count)]
    assert kinds.count("depthwise_conv2d") == 17 and kinds.count("dense") == 1
    assert m.total_macs == 300_774_272


def test_bert_base_layer_exact_macs():
    # Per token-row: Q, K, V and output projections are 4 * (768 x 768); the FFN is
    # 768 x 3072 and 3072 x 768. Attention: scores Q K^T are heads * L * L * 64 and
    # the context P V the same again. With L = 128, batch 1:
    #   projections 4 * 128 * 768 * 768   = 301,989,888
    #   attention   2 * 12 * 128 * 128 * 64 = 25,165,824
    #   FFN         2 * 128 * 768 * 3072  = 603,979,776
    #   total                             = 931,135,488
    m = load_model("bert_base_layer")
    assert dict(m.params) == {"batch": 1, "seq": 128}
    assert m.total_macs == 931_135_488
    counts = {l.name: (l.operator.kind, l.count) for l in m.layers}
    assert counts == {"attention.query": ("matmul", 4), "attention.scores": ("batched_matmul", 1),
                      "attention.context": ("batched_matmul", 1), "ffn.intermediate": ("matmul", 1),
                      "ffn.output": ("matmul", 1)}
    host = {h.op_type for h in m.host_ops}
    assert {"Softmax", "LayerNormalization", "Gelu", "Reshape", "Transpose", "Add"} <= host


def test_bert_scales_with_batch_and_sequence():
    d, h, dh, ff = 768, 12, 64, 3072
    for batch, L in ((2, 64), (1, 384)):
        expected = batch * (4 * L * d * d + 2 * h * L * L * dh + 2 * L * d * ff)
        assert load_model("bert_base_layer", batch=batch, seq_len=L).total_macs == expected


def test_batch_parameter_scales_cnns():
    assert load_model("resnet50", batch=4).total_macs == 4 * 4_089_184_256


def test_deepbench_table():
    m = load_model("deepbench_conv")
    assert m.node_count == 107
    first = m.layers[0]
    # Row 0: w=700, h=161, c=1, n=1, k=32, 20x5 filter (w x h), stride 2, no pad:
    # P = (161-5)/2+1 = 79, Q = (700-20)/2+1 = 341, MACs = 32*79*341*5*20.
    assert first.name == "db0" and first.operator.sizes == {"N": 1, "K": 32, "C": 1, "P": 79, "Q": 341, "R": 5, "S": 20}
    assert first.operator.macs == 86_204_800
    # Rows 20 and 87 are the same 7x7x512 3x3 layer; it is mapped once.
    grouped = {l.name: l.nodes for l in m.layers if l.count > 1}
    assert grouped["db20"] == ("db20", "db87")
    # Rows 49 and 58: 1x1 filter with pad 3 and stride 2 on 7x7 -> 7x7 outputs.
    db49 = next(l.operator for l in m.layers if l.name == "db49")
    assert (db49.sizes["P"], db49.sizes["Q"]) == (7, 7)


def test_layer_table_errors(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("# comment\nw,h,c,n,k,filter_w,filter_h,pad_w,pad_h,stride_w,stride_h\n8,8,3,1,4,3,3,1,1,1,x\n")
    with pytest.raises(SpecError, match=r"t.csv:3: column stride_h is 'x'"):
        load_conv_table(p)
    p.write_text("w,h,c\n8,8,3\n")
    with pytest.raises(SpecError, match="columns .* missing"):
        load_conv_table(p)
    p.write_text("w,h,c,n,k,filter_w,filter_h,pad_w,pad_h,stride_w,stride_h\n4,4,3,1,4,7,7,0,0,1,1\n")
    with pytest.raises(SpecError, match=r"t.csv:2: .*does not fit"):
        load_conv_table(p)


@pytest.mark.parametrize("name", [n for n in BUILDERS])
def test_committed_onnx_files_are_what_the_generator_builds(name):
    p = bundled_model_path(name)
    assert p.stat().st_size < 200_000
    assert BUILDERS[name]().SerializeToString() == p.read_bytes()


@pytest.mark.parametrize("name", bundled_model_names())
def test_cli_imports_every_bundled_model(name):
    res = CliRunner().invoke(main, ["import", name])
    assert res.exit_code == 0, res.output
    total = load_model(name).total_macs
    assert f"{total:,} MACs" in res.output
    js = CliRunner().invoke(main, ["import", name, "--json"])
    assert json.loads(js.output)["total_macs"] == total


def test_cli_unknown_model_and_bad_parameters():
    res = CliRunner().invoke(main, ["import", "resnet1000"])
    assert res.exit_code == 2 and "no bundled model named 'resnet1000'" in res.output
    res = CliRunner().invoke(main, ["import", "resnet18", "--seq-len", "8"])
    assert res.exit_code == 2 and "sequence-length" in res.output
    res = CliRunner().invoke(main, ["import", "bert_base_layer", "--batch", "0"])
    assert res.exit_code == 2 and "--batch" in res.output
