"""A table of bad inputs across every command and file kind.

Each must exit with status 2, print exactly one line (``error: ...``), show no traceback and write
no file. The commands run in an empty working folder, so a stray output (``out/``, ``x.png``) shows.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from accelmap.cli import main
from accelmap.examples import example_path

CONV = example_path("conv_small.yaml")
EYE_MAP = example_path("conv_small.eyeriss_like.mapping.yaml")
TPU_MAP = example_path("conv_small.tpu_like.mapping.yaml")
PROBLEM = ["-w", CONV, "-a", "eyeriss_like", "-m", EYE_MAP]

TINY_ARCH = {
    "name": "tiny",
    "compute": {"mac_energy": "1 pJ", "macs_per_cycle": 1, "precision": {"I": 8, "W": 8, "O": 32}},
    "levels": [
        {"name": "DRAM", "holds": ["I", "W", "O"], "capacity": "unbounded", "width": "64 bit",
         "read_energy": "100 pJ", "write_energy": "100 pJ"},
        {"name": "Buf", "holds": ["I", "W", "O"], "capacity": "256 B", "width": "32 bit",
         "read_energy": "6 pJ", "write_energy": "6 pJ"},
    ],
}


def _arch(**change) -> str:
    d = yaml.safe_load(yaml.safe_dump(TINY_ARCH))
    for k, v in change.items():
        if k.startswith("L"):                      # L1_capacity="..." changes levels[1].capacity
            i, key = k[1:].split("_", 1)
            if v is None:
                d["levels"][int(i)].pop(key)
            else:
                d["levels"][int(i)][key] = v
        elif v is None:
            d.pop(k)
        else:
            d[k] = v
    return yaml.safe_dump(d, sort_keys=False)


def _zz_mem(size, operands, served):
    ports = [{"name": "r_port_1", "type": "read", "bandwidth_min": 64, "bandwidth_max": 64,
              "allocation": [f"{o}, tl" for o in operands]},
             {"name": "w_port_1", "type": "write", "bandwidth_min": 64, "bandwidth_max": 64,
              "allocation": [f"{o}, fh" for o in operands]}]
    return {"size": size, "r_cost": 1, "w_cost": 1, "area": 0, "latency": 1, "operands": operands,
            "ports": ports, "served_dimensions": served}


# A small ZigZag hardware file in ZigZag's format (modelled on its tpu_like.yaml).
ZZ_GOOD = {"name": "zz", "memories": {
    "rf_w": _zz_mem(1024, ["I2"], []), "rf_o": _zz_mem(64, ["O"], []),
    "sram": _zz_mem(16777216, ["I1", "O"], ["D1", "D2"]), "dram": _zz_mem(10**10, ["I1", "I2", "O"], ["D1", "D2"])},
    "operational_array": {"unit_energy": 0.04, "unit_area": 1, "dimensions": ["D1", "D2"], "sizes": [4, 4]}}


def _bomb() -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for c in "bcdefgh":
        text += f"{c}: &{c} [" + ",".join([f"*{prev}"] * 9) + "]\n"
        prev = c
    return text


def _onnx_files() -> dict[str, bytes]:
    """Small ONNX graphs, each wrong in one way."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    F = TensorProto.FLOAT

    def model(nodes, inputs, outputs, inits=()):
        g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, F, s) for n, s in outputs], initializer=list(inits))
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

    good = model([helper.make_node("Conv", ["x", "w"], ["y"], name="c")],
                 [("x", [1, 3, 8, 8]), ("w", [4, 3, 3, 3])], [("y", None)])
    return {
        "unsupported.onnx": model([helper.make_node("DeformConv", ["x", "w", "off"], ["y"], name="dc")],
                                  [("x", [1, 3, 8, 8]), ("w", [4, 3, 3, 3]), ("off", [1, 18, 6, 6])],
                                  [("y", None)]),
        "truncated.onnx": good[: len(good) // 2],
        "garbage.onnx": b"\x08\x07\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01garbage" * 10,
        "empty.onnx": b"",
        "text.onnx": b"this is not a protobuf\n",
        "no_nodes.onnx": model([], [("x", [1, 3, 8, 8])], [("x", None)]),
        "zero_dim.onnx": model([helper.make_node("Conv", ["x", "w"], ["y"], name="c")],
                               [("x", [1, 0, 8, 8]), ("w", [4, 0, 3, 3])], [("y", None)]),
        "kernel_too_big.onnx": model([helper.make_node("Conv", ["x", "w"], ["y"], name="c")],
                                     [("x", [1, 3, 2, 2]), ("w", [4, 3, 5, 5])], [("y", None)]),
        "matmul_mismatch.onnx": model([helper.make_node("MatMul", ["a", "b"], ["y"], name="m")],
                                      [("a", [4, 5]), ("b", [6, 7])], [("y", None)]),
        "good.onnx": good,
    }


FILES: dict[str, str | bytes] = {
    # accelerator YAML
    "arch_unknown_key.yaml": _arch(L0_colour="red"),
    "arch_wrong_unit.yaml": _arch(L1_capacity="108 KBB"),
    "arch_no_unit.yaml": _arch(L0_read_energy=5),
    "arch_negative.yaml": _arch(L1_capacity="-4 KB"),
    "arch_bad_class.yaml": _arch(L0_holds=["I", "W", "X"]),
    "arch_outer_missing_class.yaml": _arch(L0_holds=["I", "W"]),
    "arch_no_levels.yaml": _arch(levels=[]),
    "arch_levels_not_list.yaml": _arch(levels={"DRAM": 1}),
    "arch_no_compute.yaml": _arch(compute=None),
    "arch_bad_precision.yaml": _arch(compute={"mac_energy": "1 pJ", "macs_per_cycle": 1,
                                              "precision": {"I": "eight", "W": 8, "O": 32}}),
    "arch_zero_macs.yaml": _arch(compute={"mac_energy": "1 pJ", "macs_per_cycle": 0,
                                          "precision": {"I": 8, "W": 8, "O": 32}}),
    "arch_duplicate_level.yaml": _arch(L1_name="DRAM"),
    "arch_fanout_zero.yaml": _arch(L1_fanout={"axes": [{"name": "X", "size": 0}]}),
    "arch_fanout_bad_key.yaml": _arch(L1_fanout={"axes": [{"name": "X", "size": 2, "multicast": "maybe"}]}),
    "arch_dup_key.yaml": "name: a\nname: b\nlevels: []\n",
    "arch_top_list.yaml": "- 1\n- 2\n",
    "arch_broken.yaml": "levels: [\n",
    "arch_tab.yaml": "levels:\n\t- name: DRAM\n",
    "arch_empty.yaml": "",
    "arch_bomb.yaml": _bomb(),
    "arch_deep.yaml": "[" * 5000 + "]" * 5000,
    "arch_not_utf8.yaml": b"name: \xff\xfe\n",
    "arch_python_tag.yaml": "name: !!python/object/apply:os.system ['true']\n",
    "arch_huge_value.yaml": _arch(L1_capacity="x" * 5000 + " KB"),
    # ZigZag hardware YAML
    "zz_good.yaml": yaml.safe_dump(ZZ_GOOD),
    "zz_no_memories.yaml": yaml.safe_dump({"name": "z", "operational_array": {"dimensions": ["D1"], "sizes": [4]}}),
    "zz_bad_memory.yaml": yaml.safe_dump({"name": "z", "memories": {"m": {"size": "big"}},
                                          "operational_array": {"dimensions": ["D1"], "sizes": [4],
                                                                "unit_energy": 1}}),
    "zz_map_bad.yaml": "- not a mapping\n",
    "zz_dims_not_names.yaml": yaml.safe_dump({**ZZ_GOOD, "operational_array": {
        **ZZ_GOOD["operational_array"], "dimensions": [None, "D2"]}}),
    # mapping YAML and text
    "map_no_top.yaml": "levels: []\n",
    "map_unknown_top.yaml": "mapping: []\ncolour: red\n",
    "map_not_list.yaml": "mapping: {DRAM: 1}\n",
    "map_entry_not_dict.yaml": "mapping: [DRAM, GLB, RF]\n",
    "map_unknown_entry_key.yaml": "mapping:\n  - {level: DRAM, loops: []}\n",
    "map_no_level.yaml": "mapping:\n  - {keep: [I]}\n",
    "map_unknown_level.yaml": "mapping:\n  - {level: L9}\n",
    "map_out_of_order.yaml": "mapping:\n  - {level: GLB}\n  - {level: DRAM}\n  - {level: RF}\n",
    "map_missing_level.yaml": "mapping:\n  - {level: DRAM}\n  - {level: GLB}\n",
    "map_keep_not_list.yaml": "mapping:\n  - {level: DRAM, keep: I}\n  - {level: GLB}\n  - {level: RF}\n",
    "map_loop_not_pair.yaml": "mapping:\n  - {level: DRAM, temporal: [[K]]}\n  - {level: GLB}\n  - {level: RF}\n",
    "map_bound_zero.yaml": "mapping:\n  - {level: DRAM, temporal: [[K, 0]]}\n  - {level: GLB}\n  - {level: RF}\n",
    "map_bound_string.yaml": "mapping:\n  - {level: DRAM, temporal: [[K, two]]}\n  - {level: GLB}\n  - {level: RF}\n",
    "map_spatial_no_axis.yaml": "mapping:\n  - {level: DRAM}\n  - {level: GLB, spatial: [[K, 2]]}\n  - {level: RF}\n",
    "map_not_covering.yaml": "mapping:\n  - {level: DRAM, temporal: [[K, 2]]}\n  - {level: GLB}\n  - {level: RF}\n",
    "map_unknown_dim.yaml": "mapping:\n  - {level: DRAM, temporal: [[Z, 2]]}\n  - {level: GLB}\n  - {level: RF}\n",
    "map_keep_unknown.yaml": ("mapping:\n  - {level: DRAM, keep: [I, W, O, X]}\n  - {level: GLB}\n"
                              "  - {level: RF}\n"),
    "map_dup_key.yaml": "mapping: []\nmapping: []\n",
    "map_temporal_bool.yaml": "mapping:\n  - {level: DRAM, temporal: true}\n  - {level: GLB}\n  - {level: RF}\n",
    "map_int_key.yaml": "mapping:\n  - {level: DRAM, 1: 2}\n",
    "map_bomb.yaml": _bomb(),
    "map_broken.yaml": "mapping:\n  - {level: DRAM\n",
    "map_text_bad_line.txt": "DRAM [ O I W ]\n| while K\n",
    "map_text_loop_first.txt": "| for K in [0:2)\nDRAM [ O I W ]\n",
    "map_text_missing_level.txt": "DRAM [ O I W ]\n| for K in [0:32)\n",
    "map_text_unknown_level.txt": "L9 [ O I W ]\n",
    "map_text_spatial_no_axis.txt": "DRAM [ O I W ]\n| spatial-for K in [0:2)\n",
    "map_text_binary.txt": b"\x00\xff\xfe\x01" * 16,
    # workload YAML
    "wl_list.yaml": "- conv2d\n",
    "wl_no_kind.yaml": "name: x\n",
    "wl_two_kinds.yaml": "gemm: {m: 2, n: 2, k: 2}\ndense: {n: 1, k: 2, c: 2}\n",
    "wl_unknown_key.yaml": "gemm: {m: 2, n: 2, k: 2}\ncolour: red\n",
    "wl_args_not_dict.yaml": "gemm: [2, 2, 2]\n",
    "wl_unknown_param.yaml": "gemm: {m: 2, n: 2, k: 2, q: 3}\n",
    "wl_missing_param.yaml": "gemm: {m: 2, n: 2}\n",
    "wl_zero.yaml": "gemm: {m: 0, n: 2, k: 2}\n",
    "wl_negative.yaml": "gemm: {m: -3, n: 2, k: 2}\n",
    "wl_string.yaml": "gemm: {m: two, n: 2, k: 2}\n",
    "wl_float.yaml": "gemm: {m: 2.5, n: 2, k: 2}\n",
    "wl_bool.yaml": "gemm: {m: true, n: 2, k: 2}\n",
    "wl_init.yaml": "gemm: {m: 2, n: 2, k: 2}\ninit_output: maybe\n",
    "wl_precision_str.yaml": "gemm: {m: 2, n: 2, k: 2}\nprecision: eight\n",
    "wl_precision_zero.yaml": "gemm: {m: 2, n: 2, k: 2}\nprecision: {I: 0, W: 8, O: 32}\n",
    "wl_precision_text.yaml": "gemm: {m: 2, n: 2, k: 2}\nprecision: {I: eight, W: 8, O: 32}\n",
    "wl_precision_float.yaml": "gemm: {m: 2, n: 2, k: 2}\nprecision: {I: 8.5, W: 8, O: 32}\n",
    "wl_precision_huge.yaml": "gemm: {m: 2, n: 2, k: 2}\nprecision: {I: 100000000000000000000, W: 8, O: 32}\n",
    "wl_stride_text.yaml": "conv2d: {n: 1, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3, stride: two}\n",
    "wl_stride_float.yaml": "conv2d: {n: 1, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3, stride: 1.5}\n",
    "wl_stride_three.yaml": "conv2d: {n: 1, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3, stride: [1, 2, 3]}\n",
    "wl_padding_text.yaml": "conv2d: {n: 1, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3, padding: [1, x]}\n",
    "wl_padding_negative.yaml": "conv2d: {n: 1, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3, padding: -1}\n",
    "wl_groups.yaml": "conv2d: {n: 1, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3, groups: 2}\n",
    "wl_expr_precision_text.yaml": "expression: 'O[m] += A[m,k] * B[k]'\ndims: {m: 4, k: 2}\nprecision: eight\n",
    "wl_expr_class.yaml": "expression: 'O[m] += A[m,k] * B[k]'\ndims: {m: 4, k: 2}\nclasses: {A: Z}\n",
    "wl_expr_pad.yaml": "expression: 'O[m] += A[m,k] * B[k]'\ndims: {m: 4, k: 2}\npadding: {A: [1]}\n",
    "wl_expr_number.yaml": "expression: 42\ndims: {m: 4}\n",
    "wl_expr_syntax.yaml": "expression: 'O[m += A[m]'\ndims: {m: 4}\n",
    "wl_expr_no_dims.yaml": "expression: 'O[m] += A[m,k] * B[k]'\n",
    "wl_expr_unknown_dim.yaml": "expression: 'O[m] += A[m,k] * B[k]'\ndims: {m: 4}\n",
    "wl_conv_kernel_big.yaml": "conv2d: {n: 1, c: 3, h: 2, w: 2, k: 4, r: 5, s: 5}\n",
    "wl_conv_stride_zero.yaml": "conv2d: {n: 1, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3, stride: 0}\n",
    "wl_huge_gemm.yaml": "gemm: {m: 1000000000000, n: 1000000000000, k: 1000000000000}\n",
    "big_gemm_1e7.yaml": "gemm: {m: 10000000, n: 16, k: 16}\n",
    "big_map_tpu_1e7.yaml": ("mapping:\n  - {level: DRAM, temporal: [[M, 10000000]]}\n"
                         "  - {level: UB, spatial: [[K, 16, X], [N, 16, Y]]}\n  - {level: PEReg, keep: [B]}\n"),
    "wl_int_key.yaml": "conv2d: {a: 1, 1: null}\n",
    "wl_dup_key.yaml": "gemm: {m: 2, n: 2, k: 2}\ngemm: {m: 4, n: 4, k: 4}\n",
    "wl_shapes_text.yaml": "expression: O[m,n] += A[m,k] * B[k,n]\ndims: {m: 2, n: 2, k: 2}\nshapes: {A: [2, two]}\n",
    "wl_shapes_rank.yaml": "expression: O[m,n] += A[m,k] * B[k,n]\ndims: {m: 2, n: 2, k: 2}\nshapes: {A: [4]}\n",
    "wl_bomb.yaml": _bomb(),
    "wl_empty.yaml": "",
    "wl_broken.yaml": "gemm: {m: 2, n: 2\n",
    "wl_not_utf8.yaml": b"gemm: \xff\n",
    # constraints YAML
    "cons_unknown_axis.yaml": "constraints:\n  spatial: {Q9: {K: 2}}\n",
    "cons_unknown_key.yaml": "constraints:\n  colour: red\n",
    "cons_bad_util.yaml": "constraints:\n  min_utilization: 7\n",
    "cons_unknown_top.yaml": "constraints: {}\ncolour: red\n",
    # layer tables (CSV)
    "t_empty.csv": "",
    "t_missing_col.csv": "w,h,c,n,k\n3,3,1,1,1\n",
    "t_not_number.csv": "w,h,c,n,k,filter_w,filter_h,pad_w,pad_h,stride_w,stride_h\n3,x,1,1,2,2,1,0,0,1,1\n",
    "t_negative.csv": "w,h,c,n,k,filter_w,filter_h,pad_w,pad_h,stride_w,stride_h\n3,-1,1,1,2,2,1,0,0,1,1\n",
    "t_zero.csv": "w,h,c,n,k,filter_w,filter_h,pad_w,pad_h,stride_w,stride_h\n3,1,0,1,2,2,1,0,0,1,1\n",
    "t_short_row.csv": "w,h,c,n,k,filter_w,filter_h,pad_w,pad_h,stride_w,stride_h\n3,1,1,1\n",
    "t_header_only.csv": "w,h,c,n,k,filter_w,filter_h,pad_w,pad_h,stride_w,stride_h\n",
    "t_kernel_big.csv": "w,h,c,n,k,filter_w,filter_h,pad_w,pad_h,stride_w,stride_h\n3,1,1,1,2,5,5,0,0,1,1\n",
    "t_binary.csv": b"\xff\xfe\x00\x01" * 8,
    "t_good.csv": "w,h,c,n,k,filter_w,filter_h,pad_w,pad_h,stride_w,stride_h\n3,1,1,1,2,2,1,0,0,1,1\n",
    # other
    "plain.txt": "x\n",
}

# (id, command line); "{d}" is the folder holding FILES, "{f}" a regular file there (plain.txt).
CASES: list[tuple[str, list[str]]] = [
    # --- evaluate: accelerator files
    *[(f"evaluate-{n}", ["evaluate", "-w", CONV, "-a", "{d}/" + n, "-m", EYE_MAP]) for n in FILES
      if n.startswith("arch_")],
    ("evaluate-arch-missing", ["evaluate", "-a", "{d}/nope.yaml"]),
    ("evaluate-arch-unknown-preset", ["evaluate", "-a", "eyeriss_lik"]),
    ("evaluate-arch-dir", ["evaluate", "-a", "{d}"]),
    # --- evaluate: mapping files
    *[(f"evaluate-{n}", ["evaluate", *PROBLEM[:4], "-m", "{d}/" + n]) for n in FILES if n.startswith("map_")],
    ("evaluate-map-missing", ["evaluate", *PROBLEM[:4], "-m", "{d}/nope.yaml"]),
    ("evaluate-map-missing-text", ["evaluate", *PROBLEM[:4], "-m", "{d}/nope.txt"]),
    ("evaluate-map-wrong-arch", ["evaluate", "-w", CONV, "-a", "eyeriss_like", "-m", TPU_MAP]),
    ("evaluate-map-dir", ["evaluate", *PROBLEM[:4], "-m", "{d}"]),
    ("evaluate-no-example-mapping", ["evaluate", "-a", "ascend_like"]),
    # --- evaluate: workload files
    *[(f"evaluate-{n}", ["evaluate", "-w", "{d}/" + n, "-a", "eyeriss_like", "-m", EYE_MAP]) for n in FILES
      if n.startswith("wl_")],
    ("evaluate-wl-missing", ["evaluate", "-w", "{d}/nope.yaml"]),
    ("evaluate-wl-dir", ["evaluate", "-w", "{d}"]),
    ("evaluate-bad-option", ["evaluate", "--colour"]),
    # --- map
    ("map-unknown-model", ["map", "resnet1", "-a", "tpu_like", "--no-cache"]),
    ("map-missing-onnx", ["map", "{d}/nope.onnx", "-a", "tpu_like", "--no-cache"]),
    ("map-no-arch", ["map", "resnet18"]),
    ("map-unknown-arch", ["map", "resnet18", "-a", "tpu_lik", "--no-cache"]),
    ("map-bad-arch-file", ["map", "resnet18", "-a", "{d}/arch_wrong_unit.yaml", "--no-cache"]),
    ("map-jobs-zero", ["map", "resnet18", "-a", "tpu_like", "-j", "0", "--no-cache"]),
    ("map-jobs-text", ["map", "resnet18", "-a", "tpu_like", "-j", "many", "--no-cache"]),
    ("map-batch-zero", ["map", "resnet18", "-a", "tpu_like", "--batch", "0", "--no-cache"]),
    ("map-seq-len-negative", ["map", "resnet18", "-a", "tpu_like", "--seq-len", "-1", "--no-cache"]),
    ("map-objective", ["map", "resnet18", "-a", "tpu_like", "--objective", "speed", "--no-cache"]),
    ("map-strategy", ["map", "resnet18", "-a", "tpu_like", "--strategy", "magic", "--no-cache"]),
    ("map-time-limit-negative", ["map", "{d}/t_good.csv", "-a", "tpu_like", "--time-limit", "-1", "--no-cache"]),
    ("map-precision", ["map", "resnet18", "-a", "tpu_like", "--precision", "I=8,W=eight", "--no-cache"]),
    ("map-precision-on-yaml", ["map", CONV, "-a", "tpu_like", "--precision", "I=8,W=8,O=32", "--no-cache"]),
    ("map-batch-on-yaml", ["map", CONV, "-a", "tpu_like", "--batch", "2", "--no-cache"]),
    ("map-seq-len-on-csv", ["map", "{d}/t_good.csv", "-a", "tpu_like", "--seq-len", "4", "--no-cache"]),
    ("map-onnx-precision-on-csv", ["map", "{d}/t_good.csv", "-a", "tpu_like", "--precision", "onnx",
                                   "--no-cache"]),
    *[(f"map-{n}", ["map", "{d}/" + n, "-a", "tpu_like", "--no-cache"]) for n in FILES
      if n.startswith("wl_") and n not in ("wl_huge_gemm.yaml", "wl_precision_huge.yaml")],
    *[(f"map-{n}", ["map", "{d}/" + n, "-a", "tpu_like", "--no-cache"]) for n in FILES
      if n.startswith("t_") and n != "t_good.csv"],
    *[(f"map-{n}", ["map", CONV, "-a", "tpu_like", "--constraints", "{d}/" + n, "--no-cache"]) for n in FILES
      if n.startswith("cons_")],
    ("map-cache-not-a-database", ["map", "{d}/t_good.csv", "-a", "tpu_like", "--cache", "{f}"]),
    ("map-cache-directory", ["map", "{d}/t_good.csv", "-a", "tpu_like", "--cache", "{d}"]),
    ("map-cache-under-file", ["map", "{d}/t_good.csv", "-a", "tpu_like", "--cache", "{f}/c.sqlite"]),
    ("map-constraints-missing", ["map", CONV, "-a", "tpu_like", "--constraints", "{d}/nope.yaml", "--no-cache"]),
    ("map-constraints-bomb", ["map", CONV, "-a", "tpu_like", "--constraints", "{d}/map_bomb.yaml", "--no-cache"]),
    # --- import
    ("import-no-model", ["import"]),
    ("import-unknown-model", ["import", "resnet1"]),
    ("import-batch-zero", ["import", "resnet18", "--batch", "0"]),
    ("import-precision", ["import", "resnet18", "--precision", "I=8,X=8"]),
    ("import-precision-zero", ["import", "resnet18", "--precision", "I=0"]),
    ("import-unknown-arch", ["import", "resnet18", "--arch", "nope"]),
    ("import-precision-vs-arch", ["import", "resnet18", "--arch", "eyeriss_like", "--precision", "I=8,W=8,O=32"]),
    ("import-out-dir", ["import", "resnet18", "-o", "{d}"]),
    ("import-out-under-file", ["import", "resnet18", "-o", "{f}/r.json"]),
    ("import-out-under-file-deeper", ["import", "resnet18", "-o", "{f}/a/b/r.json"]),
    ("import-out-on-failure", ["import", "{d}/t_zero.csv", "-o", "r.json"]),
    *[(f"import-{n}", ["import", "{d}/" + n]) for n in FILES if n.startswith("t_") and n != "t_good.csv"],
    *[(f"import-{n}", ["import", "{d}/" + n]) for n in
      ("unsupported.onnx", "truncated.onnx", "garbage.onnx", "empty.onnx", "text.onnx", "no_nodes.onnx",
       "zero_dim.onnx", "kernel_too_big.onnx", "matmul_mismatch.onnx")],
    ("import-onnx-seq-len-on-csv", ["import", "{d}/t_good.csv", "--seq-len", "3"]),
    ("import-directory", ["import", "{d}"]),
    # --- arch
    ("arch-list-extra-argument", ["arch", "list", "more"]),
    ("arch-show-missing", ["arch", "show", "{d}/nope.yaml"]),
    ("arch-show-unknown-preset", ["arch", "show", "tpu_lik"]),
    ("arch-show-bad", ["arch", "show", "{d}/arch_no_unit.yaml"]),
    ("arch-show-bomb", ["arch", "show", "{d}/arch_bomb.yaml"]),
    ("arch-show-dup", ["arch", "show", "{d}/arch_dup_key.yaml"]),
    ("arch-show-zigzag-bad", ["arch", "show", "{d}/zz_bad_memory.yaml"]),
    ("arch-show-zigzag-dims", ["arch", "show", "{d}/zz_dims_not_names.yaml"]),
    ("arch-show-png-dir", ["arch", "show", "tpu_like", "--png", "{d}"]),
    ("arch-show-png-suffix", ["arch", "show", "tpu_like", "--png", "x.jpg"]),
    ("arch-show-png-no-suffix", ["arch", "show", "tpu_like", "--png", "x"]),
    ("arch-show-png-under-file", ["arch", "show", "tpu_like", "--png", "{f}/x.png"]),
    ("arch-show-png-bad-arch", ["arch", "show", "{d}/nope.yaml", "--png", "x.png"]),
    ("arch-convert-not-zigzag", ["arch", "convert", "{d}/arch_unknown_key.yaml", "-o", "x.yaml"]),
    ("arch-convert-ours", ["arch", "convert", "{d}/map_no_top.yaml", "-o", "x.yaml"]),
    ("arch-convert-no-memories", ["arch", "convert", "{d}/zz_no_memories.yaml", "-o", "x.yaml"]),
    ("arch-convert-bad-memory", ["arch", "convert", "{d}/zz_bad_memory.yaml", "-o", "x.yaml"]),
    ("arch-convert-missing", ["arch", "convert", "{d}/nope.yaml", "-o", "x.yaml"]),
    ("arch-convert-no-output", ["arch", "convert", "{d}/zz_bad_memory.yaml"]),
    ("arch-convert-out-dir", ["arch", "convert", "{d}/zz_bad_memory.yaml", "-o", "{d}"]),
    ("arch-convert-out-under-file", ["arch", "convert", "{d}/zz_bad_memory.yaml", "-o", "{f}/x.yaml"]),
    ("arch-convert-bomb", ["arch", "convert", "{d}/arch_bomb.yaml", "-o", "x.yaml"]),
    ("arch-show-zigzag-mapping-bad", ["arch", "show", "{d}/zz_good.yaml", "--zigzag-mapping", "{d}/zz_map_bad.yaml"]),
    ("arch-show-zigzag-mapping-missing", ["arch", "show", "{d}/zz_good.yaml", "--zigzag-mapping", "{d}/nope.yaml"]),
    ("arch-convert-zigzag-mapping-bomb", ["arch", "convert", "{d}/zz_good.yaml", "--zigzag-mapping",
                                         "{d}/map_bomb.yaml", "-o", "x.yaml"]),
    ("arch-convert-good-out-under-file", ["arch", "convert", "{d}/zz_good.yaml", "-o", "{f}/x.yaml"]),
    ("arch-show-zigzag-png-suffix", ["arch", "show", "{d}/zz_good.yaml", "--png", "zz.svg"]),
    # --- codegen
    ("codegen-bad-mapping", ["codegen", *PROBLEM[:4], "-m", "{d}/map_not_covering.yaml"]),
    ("codegen-wrong-arch-mapping", ["codegen", "-w", CONV, "-a", "eyeriss_like", "-m", TPU_MAP]),
    ("codegen-bad-workload", ["codegen", "-w", "{d}/wl_zero.yaml", "-a", "eyeriss_like", "-m", EYE_MAP]),
    ("codegen-bad-arch", ["codegen", "-w", CONV, "-a", "{d}/arch_negative.yaml", "-m", EYE_MAP]),
    ("codegen-dtype", ["codegen", *PROBLEM, "--dtype", "int4"]),
    ("codegen-out-dir", ["codegen", *PROBLEM, "-o", "{d}"]),
    ("codegen-out-under-file", ["codegen", *PROBLEM, "-o", "{f}/x.c"]),
    ("codegen-out-bad-mapping", ["codegen", *PROBLEM[:4], "-m", "{d}/map_bound_zero.yaml", "-o", "x.c"]),
    ("codegen-missing-mapping-option", ["codegen", *PROBLEM[:4]]),
    ("codegen-run-too-large", ["codegen", "-w", "{d}/big_gemm_1e7.yaml", "-a", "tpu_like", "-m",
                               "{d}/big_map_tpu_1e7.yaml", "--run"]),
    ("codegen-run-huge", ["codegen", "-w", "{d}/wl_huge_gemm.yaml", "-a", "eyeriss_like", "-m", EYE_MAP, "--run"]),
    ("codegen-seed-text", ["codegen", *PROBLEM, "--seed", "x"]),
    # --- simulate
    ("simulate-bad-mapping", ["simulate", *PROBLEM[:4], "-m", "{d}/map_unknown_level.yaml"]),
    ("simulate-bad-workload", ["simulate", "-w", "{d}/wl_dup_key.yaml", "-a", "eyeriss_like", "-m", EYE_MAP]),
    ("simulate-too-many-steps", ["simulate", "-w", "{d}/big_gemm_1e7.yaml", "-a", "tpu_like", "-m",
                                 "{d}/big_map_tpu_1e7.yaml"]),
    ("simulate-too-many-steps-timeline", ["simulate", "-w", "{d}/big_gemm_1e7.yaml", "-a", "tpu_like", "-m",
                                          "{d}/big_map_tpu_1e7.yaml", "--timeline", "t.png"]),
    ("simulate-timeline-dir", ["simulate", *PROBLEM, "--timeline", "{d}"]),
    ("simulate-timeline-no-suffix", ["simulate", *PROBLEM, "--timeline", "t"]),
    ("simulate-timeline-svg", ["simulate", *PROBLEM, "--timeline", "t.svg"]),
    ("simulate-timeline-under-file", ["simulate", *PROBLEM, "--timeline", "{f}/t.png"]),
    ("simulate-timeline-bad-mapping", ["simulate", *PROBLEM[:4], "-m", "{d}/map_bomb.yaml", "--timeline", "t.png"]),
    # --- export-timeloop
    ("timeloop-bad-mapping", ["export-timeloop", *PROBLEM[:4], "-m", "{d}/map_not_covering.yaml"]),
    ("timeloop-bad-workload", ["export-timeloop", "-w", "{d}/wl_dup_key.yaml", "-a", "eyeriss_like", "-m", EYE_MAP]),
    ("timeloop-wrong-arch-mapping", ["export-timeloop", "-w", CONV, "-a", "eyeriss_like", "-m", TPU_MAP]),
    ("timeloop-rename-unknown", ["export-timeloop", *PROBLEM, "--rename", "Z=M"]),
    ("timeloop-rename-clash", ["export-timeloop", *PROBLEM, "--rename", "K=C"]),
    ("timeloop-rename-malformed", ["export-timeloop", *PROBLEM, "--rename", "K=M-1"]),
    ("timeloop-out-dir", ["export-timeloop", *PROBLEM, "-o", "{d}"]),
    ("timeloop-out-under-file", ["export-timeloop", *PROBLEM, "-o", "{f}/m.yaml"]),
    ("timeloop-problem-under-file", ["export-timeloop", *PROBLEM, "-o", "m.yaml", "--problem", "{f}/p.yaml"]),
    ("timeloop-same-file", ["export-timeloop", *PROBLEM, "-o", "m.yaml", "--problem", "m.yaml"]),
    ("timeloop-missing-mapping-option", ["export-timeloop", *PROBLEM[:4]]),
    # --- workload files: the expression form's stored shapes
    ("workload-shapes-not-numbers", ["evaluate", "-w", "{d}/wl_shapes_text.yaml", "-a", "eyeriss_like", "-m", EYE_MAP]),
    ("workload-shapes-wrong-rank", ["evaluate", "-w", "{d}/wl_shapes_rank.yaml", "-a", "eyeriss_like", "-m",
                                    EYE_MAP]),
    # --- embed
    ("embed-top-zero", ["embed", "--top", "0"]),
    ("embed-top-text", ["embed", "--top", "x"]),
    ("embed-unknown-intrinsic", ["embed", "-i", "vta_gem"]),
    ("embed-unknown-arch", ["embed", "-a", "vta_lik"]),
    ("embed-mode", ["embed", "--mode", "loose"]),
    ("embed-time-limit-text", ["embed", "--time-limit", "soon"]),
    ("embed-time-limit-negative", ["embed", "--time-limit", "-1"]),
    ("embed-time-limit-nan", ["embed", "--time-limit", "nan"]),
    ("embed-time-limit-inf", ["embed", "--time-limit", "inf"]),
    ("embed-bad-workload", ["embed", "-w", "{d}/wl_expr_unknown_dim.yaml"]),
    ("embed-bomb-workload", ["embed", "-w", "{d}/wl_bomb.yaml"]),
    ("embed-missing-workload", ["embed", "-w", "{d}/nope.yaml"]),
    ("embed-intrinsic-file-bad", ["embed", "-i", "{d}/arch_unknown_key.yaml"]),
    ("embed-run-too-large", ["embed", "-w", "{d}/wl_huge_gemm.yaml", "--run"]),
    # --- the command line itself
    ("no-such-command", ["mapp"]),
    ("no-such-option", ["map", "resnet18", "-a", "tpu_like", "--fast"]),
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad_inputs")
    files = dict(FILES)
    files.update(_onnx_files())
    for name, content in files.items():
        p = d / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
    return d


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_table_is_large_and_covers_every_command():
    assert len(CASES) >= 100 and len({c[0] for c in CASES}) == len(CASES)
    commands = {" ".join(a[:2]) if a[0] == "arch" else a[0] for _, a in CASES}
    assert {"map", "evaluate", "import", "arch list", "arch show", "arch convert", "codegen", "simulate",
            "embed", "export-timeloop"} <= commands


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, data_dir, tmp_path, monkeypatch):
    _, args = case
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    before = _tree(data_dir)
    argv = [a.format(d=data_dir, f=data_dir / "plain.txt") for a in args]
    r = CliRunner().invoke(main, argv)
    out = r.output
    assert "Traceback" not in out and not (r.exception and not isinstance(r.exception, SystemExit)), \
        f"{argv}: {r.exception!r}\n{out}"
    assert r.exit_code == 2, f"{argv}: exit {r.exit_code}\n{out}"
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), f"{argv}:\n{out}"
    assert len(lines[0]) <= 500
    assert _tree(work) == [], f"{argv} wrote {_tree(work)}"
    assert _tree(data_dir) == before, f"{argv} wrote into the input folder"
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.sqlite"))
    assert (data_dir / "plain.txt").read_text() == "x\n"
    assert os.path.exists(data_dir / "plain.txt")
