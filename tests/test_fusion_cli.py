"""``accelmap map --fuse`` and the chains it finds in an ONNX graph."""

from __future__ import annotations

import json

import onnx
import yaml
from click.testing import CliRunner

from accelmap.arch.presets import get_accelerator, preset_path
from accelmap.cli import main
from accelmap.fusion.group_cost import InnerMappings
from accelmap.fusion.model_fusion import fuse_model
from accelmap.fusion.search import FusionConfig
from accelmap.report.fusion_report import format_fusion
from accelmap.search.mapper import map_operator
from accelmap.search.model_mapper import map_model
from accelmap.workload.models.bundled import bundled_model_path, load_model
from accelmap.workload.models.chains import Join as ChainJoin
from accelmap.workload.models.chains import model_chains
from onnx_graphs import F, graph_model, node, weight


def small_cnn(path):
    """conv a -> relu -> conv b -> maxpool -> conv c, then a residual add of c's output with d's (a join)."""
    nodes = [node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             node("Relu", ["a"], ["ra"]),
             node("Conv", ["ra", "wb"], ["b"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             node("MaxPool", ["b"], ["pb"], kernel_shape=[2, 2], strides=[2, 2]),
             node("Conv", ["pb", "wc"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             node("Conv", ["pb2", "wd"], ["d"], kernel_shape=[1, 1]),
             node("Add", ["c", "d"], ["y"])]
    inits = [weight("wa", [4, 2, 3, 3]), weight("wb", [4, 4, 3, 3]), weight("wc", [4, 4, 3, 3]),
             weight("wd", [4, 4, 1, 1])]
    m = graph_model(nodes, [("x", F, [1, 2, 8, 8]), ("pb2", F, [1, 4, 4, 4])], [("y", F, [1, 4, 4, 4])], inits)
    onnx.save(m, path)
    return path


def test_chains_follow_single_readers_through_activations_and_pooling(tmp_path):
    p = small_cnn(tmp_path / "cnn.onnx")
    m = load_model(str(p))
    nodes = {n for l in m.layers for n in l.nodes}
    (chain,) = model_chains(p, nodes)
    assert [l.node for l in chain] == ["a", "b", "c"]
    assert [w.name for w in chain[2].windows] == ["pb"] and chain[2].windows[0].stride == (2, 2)


def test_bundled_models_give_the_expected_chains():
    def chains(name):
        m = load_model(name)
        return [[l.node for l in c] for c in model_chains(bundled_model_path(name), {n for l in m.layers
                                                                                     for n in l.nodes})]
    vgg = chains("vgg16")
    assert vgg[0] == [f"features.{i}" for i in range(13)]
    # ResNet-18: each basic block's two convolutions; residual joins end the chains.
    assert ["layer1.0.conv1", "layer1.0.conv2"] in chains("resnet18")
    assert chains("bert_base_layer") == [["attention.query", "attention.scores", "attention.context", "attention.output"],
                                         ["ffn.intermediate", "ffn.output"]]


def test_chains_carry_the_residual_add_after_them():
    def joins(name):
        m = load_model(name)
        return {c[-1].node: c[-1].join for c in model_chains(bundled_model_path(name), {n for l in m.layers
                                                                                       for n in l.nodes})}
    r18 = joins("resnet18")
    # An identity block adds its input (what its first convolution reads); a downsampling block a projection.
    # Its result feeds the next block (its first convolution and its add) unless a projection reads it too.
    assert r18["layer1.0.conv2"] == ChainJoin("layer1.0.add", "layer1.0.conv1", "layer1.1.conv1")
    assert r18["layer1.1.conv2"] == ChainJoin("layer1.1.add", "layer1.1.conv1", None)
    assert r18["layer2.0.conv2"] == ChainJoin("layer2.0.add", None, "layer2.1.conv1")
    # The attention chain runs from the Q projection to the output projection (through the heads' reshapes).
    assert joins("bert_base_layer") == {"attention.output": None,
                                        "ffn.output": ChainJoin("ffn.residual", "ffn.intermediate")}
    mb = joins("mobilenetv2")
    assert mb["features.3.project"] == ChainJoin("features.3.add", "features.3.expand")
    assert mb["features.4.project"] is None and sum(j is not None for j in mb.values()) == 10


def test_map_fuse_prints_groups_and_writes_json_and_plot(tmp_path):
    p = small_cnn(tmp_path / "cnn.onnx")
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["map", str(p), "--arch", "eyeriss_like", "--strategy", "heuristic",
                                  "--time-limit", "1", "--no-cache", "--jobs", "1", "--out", str(out), "--fuse"])
    assert r.exit_code == 0, r.output
    assert "fused plan (edp): 1 chains" in r.output
    assert "model, layer by layer:" in r.output and "model, fused:" in r.output
    data = json.loads((out / "fusion.json").read_text())
    assert data["chains"] == [["a", "b", "c"]]
    assert data["fused"]["edp"] <= data["unfused"]["edp"]
    for g in data["groups"]:
        assert set(g["policies"]) <= {"input", "a", "b", "pb", "c"}
    # The residual add after c (its skip from d, outside the chain) is listed and charged in both plans.
    assert data["joins"] == ["y"]
    assert {l["node"] for l in data["layers"]} == {"a", "b", "c", "d", "y"}
    assert (out / "offchip_fused_vs_unfused.png").read_bytes()[:4] == b"\x89PNG"


def test_map_fuse_with_failed_layers_still_reports_and_exits_non_zero(tmp_path):
    p = small_cnn(tmp_path / "cnn.onnx")
    r = CliRunner().invoke(main, ["map", str(p), "--arch", "eyeriss_like", "--precision", "I=4,W=4,O=4",
                                  "--no-cache", "--out", str(tmp_path / "o"), "--fuse", "--no-plots"])
    assert r.exit_code == 1, r.output
    assert "not mapped: a" in r.output and "fused plan (edp): 0 chains" in r.output
    assert json.loads((tmp_path / "o" / "fusion.json").read_text())["groups"] == []


def test_map_fuse_refuses_an_accelerator_without_a_store_before_searching(tmp_path):
    p = small_cnn(tmp_path / "cnn.onnx")
    r = CliRunner().invoke(main, ["map", str(p), "--arch", "vta_like", "--no-cache", "--out", str(tmp_path / "o"),
                                  "--fuse"])
    assert r.exit_code == 2, r.output
    assert "partitioned per operand class" in r.output and not (tmp_path / "o").exists()


def test_map_fuse_time_limits_are_named_options_and_a_reached_limit_is_reported(tmp_path):
    p = small_cnn(tmp_path / "cnn.onnx")
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["map", str(p), "--arch", "eyeriss_like", "--strategy", "heuristic",
                                  "--time-limit", "1", "--no-cache", "--jobs", "1", "--out", str(out), "--fuse",
                                  "--fuse-tile-time", "0.2", "--fuse-time-limit", "1e-9", "--no-plots"])
    assert r.exit_code == 0, r.output
    assert "(limit 1e-09 s, reached: 3 groups not fully tried), 0.2 s per tile mapping" in r.output
    search = json.loads((out / "fusion.json").read_text())["search"]
    assert search["timed_out"] and search["groups_skipped"] == 3 and search["groups_tried"] == 0
    assert search["tile_time_limit_s"] == 0.2 and search["time_limit_s"] == 1e-9


def test_map_fuse_time_options_need_fuse_and_positive_seconds(tmp_path):
    p = small_cnn(tmp_path / "cnn.onnx")
    for args, msg in ((["--fuse-tile-time", "1"], "applies only with --fuse"),
                      (["--fuse", "--fuse-time-limit", "0"], "must be positive, finite seconds, got 0.0")):
        r = CliRunner().invoke(main, ["map", str(p), "--arch", "eyeriss_like", "--no-cache",
                                      "--out", str(tmp_path / "o"), *args])
        assert r.exit_code == 2, r.output
        assert msg in r.output and not (tmp_path / "o").exists()


def test_map_fuse_exact_out_of_time_reports_a_bound_not_optimality(tmp_path):
    p = small_cnn(tmp_path / "cnn.onnx")
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["map", str(p), "--arch", "eyeriss_like", "--strategy", "heuristic",
                                  "--time-limit", "1", "--no-cache", "--jobs", "1", "--out", str(out), "--fuse",
                                  "--fuse-exact", "--fuse-time-limit", "1e-9", "--no-plots"])
    assert r.exit_code == 0, r.output
    assert "exact tile search: best found, lower bound" in r.output
    search = json.loads((out / "fusion.json").read_text())["search"]
    assert search["exact_tiles"] and search["certificate"] == "best found"
    fused = json.loads((out / "fusion.json").read_text())["fused"]["edp"]
    assert 0 < search["lower_bound"] <= fused and search["gap"] == fused / search["lower_bound"] - 1
    r = CliRunner().invoke(main, ["map", str(p), "--arch", "eyeriss_like", "--no-cache", "--out", str(tmp_path / "o"),
                                  "--fuse-exact"])
    assert r.exit_code == 2 and "applies only with --fuse" in r.output


def two_residual_blocks(path):
    """A stem convolution (x), then two ResNet-like blocks: x -> conv a -> relu -> conv b -> add x -> relu r1 ->
    conv c -> relu -> conv d -> add r1."""
    nodes = [node("Conv", ["x0", "ws"], ["x"], kernel_shape=[1, 1]),
             node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             node("Relu", ["a"], ["ra"]),
             node("Conv", ["ra", "wb"], ["b"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             node("Add", ["b", "x"], ["s1"]),
             node("Relu", ["s1"], ["r1"]),
             node("Conv", ["r1", "wc"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             node("Relu", ["c"], ["rc"]),
             node("Conv", ["rc", "wd"], ["d"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             node("Add", ["d", "r1"], ["y"])]
    inits = [weight(w, [1, 1, 3, 3]) for w in ("wa", "wb", "wc", "wd")] + [weight("ws", [1, 1, 1, 1])]
    onnx.save(graph_model(nodes, [("x0", F, [1, 1, 3, 3])], [("y", F, [1, 1, 3, 3])], inits), path)
    return path


def test_map_fuse_span_residuals_joins_blocks_and_says_which_groups_span(tmp_path):
    p = two_residual_blocks(tmp_path / "res.onnx")
    m = load_model(str(p))
    links = model_chains(p, {n for l in m.layers for n in l.nodes})
    assert [[l.node for l in c] for c in links] == [["a", "b"], ["c", "d"]]      # without spanning: two chains
    # The flag reaches the search (no group tried here: the search's limit is already reached).
    r = CliRunner().invoke(main, ["map", str(p), "--arch", "eyeriss_like", "--strategy", "heuristic", "--time-limit",
                                  "0.1", "--no-cache", "--jobs", "1", "--fuse", "--fuse-span-residuals",
                                  "--fuse-time-limit", "1e-9", "--no-plots", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "o" / "fusion.json").read_text())
    assert data["chains"] == [["a", "b", "c", "d"]] and data["search"]["span_residuals"]
    assert data["joins"] == ["s1", "y"]
    r = CliRunner().invoke(main, ["map", str(p), "--arch", "eyeriss_like", "--no-cache", "--out", str(tmp_path / "o3"),
                                  "--fuse-span-residuals"])
    assert r.exit_code == 2 and "applies only with --fuse" in r.output
    # The plan's table and JSON say which groups span blocks (whole tiles only). Layers and tiles are mapped by the
    # random search run to its own stopping rule (500 draws without a gain), which draws the same on any machine: a
    # search stopped by a time limit makes whether the spanning group wins depend on the machine's speed.
    mm = map_model(m, get_accelerator("eyeriss_like"), "edp", strategy="random", time_limit_per_layer=600, jobs=1,
                   progress=False)
    inner = InnerMappings(lambda op, arch: map_operator(op, arch, "edp", strategy="random", time_limit=600).best.mapping)
    fm = fuse_model(mm, config=FusionConfig(row_tiles=1, col_tiles=1, per_mode=1, span_residuals=True), inner=inner)
    text = format_fusion(fm)
    assert "1 chains" in text and "spanning residual blocks" in text
    d = fm.to_dict()
    assert d["search"]["span_residuals"]
    for g, gd in zip(fm.groups, d["groups"], strict=True):
        assert gd["spans_residual_blocks"] == bool(g.inner_joins)
        if g.inner_joins:
            assert gd["inner_joins"][0]["add"] == "s1" and "b + s1 inside (skip" in text
    assert any(g.inner_joins for g in fm.groups)



def test_map_fuse_shared_offchip_port_times_each_layer_on_one_port(tmp_path):
    # A 64x32 by 32x64 product on tpu_like: transfer-bound, its reads and writes overlapping on a port each.
    p = tmp_path / "mm.onnx"
    onnx.save(graph_model([node("MatMul", ["x", "w"], ["y"])], [("x", F, [64, 32])], [("y", F, [64, 64])],
                          [weight("w", [32, 64])]), p)
    cache = tmp_path / "cache.json"
    runs = {}
    for shared in (False, True):
        out = tmp_path / f"o{int(shared)}"
        # No group is tried (the search's limit is already reached): the plan is layer by layer, timed on one port
        # or two; the layer's mapping comes from the cache on the second run, so the two runs differ only there.
        r = CliRunner().invoke(main, ["map", str(p), "--arch", "tpu_like", "--strategy", "heuristic",
                                      "--time-limit", "0.2", "--cache", str(cache), "--jobs", "1", "--fuse",
                                      "--fuse-time-limit", "1e-9", "--no-plots", "--out", str(out)]
                               + (["--fuse-shared-offchip-port"] if shared else []))
        assert r.exit_code == 0, r.output
        assert ("one off-chip port for reads and writes" in r.output) == shared
        runs[shared] = json.loads((out / "fusion.json").read_text())
        assert runs[shared]["search"]["shared_offchip_port"] == shared
    two, one = runs[False]["unfused"], runs[True]["unfused"]
    assert one["energy_pj"] == two["energy_pj"] and one["offchip_bits"] == two["offchip_bits"]
    # On one port the layer is its mapping's schedule on tpu_like with its DRAM on one port (above the double-buffered
    # unified buffer): at least its two-port time and its off-chip bits over the port's 128 bits per cycle.
    assert "a layer alone is its mapping's schedule" in r.output
    one_port = yaml.safe_load(preset_path("tpu_like").read_text())
    one_port["levels"][0]["shared_port"] = True
    (tmp_path / "one_port.yaml").write_text(yaml.safe_dump(one_port))
    layer = tmp_path / "o1" / "layers"
    (w,) = layer.glob("*.workload.yaml")
    (mp,) = layer.glob("*.mapping.yaml")
    r = CliRunner().invoke(main, ["evaluate", "--workload", str(w), "--mapping", str(mp), "--arch",
                                  str(tmp_path / "one_port.yaml"), "--json"])
    assert r.exit_code == 0, r.output
    assert one["latency_cycles"] == json.loads(r.output)["latency_cycles"]
    assert one["latency_cycles"] >= max(two["latency_cycles"], one["offchip_bits"] / 128)
    # A port of two bandwidths cannot be one shared port: refused before any search, naming the option.
    arch = yaml.safe_load(preset_path("tpu_like").read_text())
    arch["levels"][0]["write_bandwidth"] = "8 B/cycle"
    (tmp_path / "two_speeds.yaml").write_text(yaml.safe_dump(arch))
    r = CliRunner().invoke(main, ["map", str(p), "--arch", str(tmp_path / "two_speeds.yaml"), "--no-cache", "--fuse",
                                  "--fuse-shared-offchip-port", "--out", str(tmp_path / "o2")])
    assert r.exit_code == 2 and "--fuse-shared-offchip-port: one shared off-chip port needs DRAM's read and write " \
                                "bandwidths equal, got 128" in r.output
    r = CliRunner().invoke(main, ["map", str(p), "--arch", "tpu_like", "--no-cache", "--out", str(tmp_path / "o3"),
                                  "--fuse-shared-offchip-port"])
    assert r.exit_code == 2 and "applies only with --fuse" in r.output
