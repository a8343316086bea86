"""Import the forms onnxruntime writes and compare MACs with a count from onnxruntime's actual tensor shapes.

Two small float models built with onnx.helper (a CNN with conv+BN, depthwise and
residual; a transformer block whose head size comes from Shape arithmetic, with
a dynamic batch and sequence) are turned by onnxruntime into the forms users
meet: graph-optimized (FusedConv, FusedMatMul), static int8 QOperator
(QLinearConv, QLinearMatMul, QGemm, QLinearAdd, ...) and QDQ, dynamic int8
(ConvInteger, MatMulInteger), 4-bit MatMulNBits. Each is run in onnxruntime with
every intermediate tensor as an output; MACs are counted from those actual
shapes and compared with accelmap's import (``--precision onnx``).

Needs onnxruntime (and onnx_ir for MatMulNBits), installed separately:
    pip install onnxruntime onnx_ir
    python benchmarks/onnx_ort_forms.py [--json out.json]
"""
import argparse, json, math, sys, tempfile

import numpy as np
import onnx

try:
    import onnxruntime as ort
except ImportError:
    sys.exit("onnxruntime is not installed: pip install onnxruntime onnx_ir (an optional benchmark)")
from onnx import helper, numpy_helper as nh, TensorProto as T
from pathlib import Path
from accelmap.workload.onnx_import import import_onnx
rng = np.random.default_rng(0)
F = T.FLOAT
def W(name, *shape): return nh.from_array((rng.standard_normal(shape)*0.1).astype(np.float32), name)
def I(name, v): return nh.from_array(np.array(v, dtype=np.int64), name)

def cnn():
    n = helper.make_node
    nodes = [n("Conv", ["x","w1","b1"], ["c1"], pads=[1]*4, strides=[2,2]),
             n("BatchNormalization", ["c1","g","bb","mu","var"], ["bn"]),
             n("Relu", ["bn"], ["r1"]),
             n("Conv", ["r1","wd","bd"], ["c2"], pads=[1]*4, group=16),
             n("Relu", ["c2"], ["r2"]),
             n("Conv", ["r2","w3","b3"], ["c3"]),
             n("Add", ["c3","r1"], ["s"]),
             n("GlobalAveragePool", ["s"], ["p"]),
             n("Flatten", ["p"], ["f"]),
             n("Gemm", ["f","wf","bf"], ["y"], transB=1)]
    inits = [W("w1",16,3,3,3), W("b1",16), W("g",16), W("bb",16), W("mu",16),
             nh.from_array(np.ones(16, np.float32), "var"), W("wd",16,1,3,3), W("bd",16), W("w3",16,16,1,1), W("b3",16),
             W("wf",10,16), W("bf",10)]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", F, ["N",3,32,32])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    return helper.make_model(g, ir_version=9, opset_imports=[helper.make_opsetid("",17)]), {"x": (2,3,32,32)}

def block(d=64, heads=4, ff=128):
    n = helper.make_node
    nodes = [n("MatMul",["x","wq"],["q0"]), n("Add",["q0","bq"],["q"]),
             n("MatMul",["x","wk"],["k0"]), n("Add",["k0","bk"],["k"]),
             n("MatMul",["x","wv"],["v0"]), n("Add",["v0","bv"],["v"]),
             n("Shape",["x"],["s"]), n("Gather",["s","i0"],["b"],axis=0), n("Gather",["s","i1"],["sq"],axis=0),
             n("Gather",["s","i2"],["dd"],axis=0), n("Div",["dd","h"],["hd"]),
             n("Unsqueeze",["b","a0"],["bu"]), n("Unsqueeze",["sq","a0"],["su"]), n("Unsqueeze",["hd","a0"],["hu"]),
             n("Concat",["bu","su","hh","hu"],["shp"],axis=0)]
    for t in "qkv":
        nodes += [n("Reshape",[t,"shp"],[t+"4"]), n("Transpose",[t+"4"],[t+"h"],perm=[0,2,1,3] if t!="k" else [0,2,3,1])]
    nodes += [n("MatMul",["qh","kh"],["sc"]), n("Mul",["sc","scale"],["sc2"]), n("Softmax",["sc2"],["pr"],axis=-1),
              n("MatMul",["pr","vh"],["ctx"]), n("Transpose",["ctx"],["ct"],perm=[0,2,1,3]),
              n("Mul",["hd","h"],["dm"]), n("Unsqueeze",["dm","a0"],["du"]), n("Concat",["bu","su","du"],["shp3"],axis=0),
              n("Reshape",["ct","shp3"],["cm"]), n("MatMul",["cm","wo"],["o0"]), n("Add",["o0","bo"],["o"]),
              n("Add",["o","x"],["res"]), n("LayerNormalization",["res","lg","lb"],["ln"],axis=-1),
              n("MatMul",["ln","w1"],["f0"]), n("Add",["f0","b1"],["f1"]),
              n("Div",["f1","sqrt2"],["f2"]), n("Erf",["f2"],["f3"]), n("Add",["f3","one"],["f4"]), n("Mul",["f1","f4"],["f5"]), n("Mul",["f5","half"],["f6"]),
              n("MatMul",["f6","w2"],["g0"]), n("Add",["g0","b2"],["g1"]), n("Add",["g1","ln"],["y"])]
    inits = [W("wq",d,d),W("bq",d),W("wk",d,d),W("bk",d),W("wv",d,d),W("bv",d),W("wo",d,d),W("bo",d),
             I("i0",0),I("i1",1),I("i2",2),I("h",heads),I("a0",[0]),I("hh",[heads]),
             nh.from_array(np.array(1/math.sqrt(d//heads),np.float32),"scale"), W("lg",d),W("lb",d),
             W("w1",d,ff),W("b1",ff),W("w2",ff,d),W("b2",d),
             nh.from_array(np.array(math.sqrt(2),np.float32),"sqrt2"),nh.from_array(np.array(1,np.float32),"one"),nh.from_array(np.array(0.5,np.float32),"half")]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", F, ["batch","seq",d])],
                          [helper.make_tensor_value_info("y", F, None)], initializer=inits)
    return helper.make_model(g, ir_version=9, opset_imports=[helper.make_opsetid("",17)]), {"x": (2,10,d)}

def actual_shapes(path, feeds):
    """The model with every node output as a graph output, and the shapes onnxruntime computes."""
    m = onnx.load(path)
    names = [o for nd in m.graph.node for o in nd.output if o]
    existing = {o.name for o in m.graph.output}
    for nm in names:
        if nm not in existing:
            m.graph.output.append(onnx.ValueInfoProto(name=nm))
    so = ort.SessionOptions(); so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = s.run(None, feeds)
    shp = {o.name: np.asarray(v).shape for o, v in zip(s.get_outputs(), outs)}
    for t in m.graph.initializer: shp[t.name] = tuple(t.dims)
    for k, v in feeds.items(): shp[k] = v.shape
    return m, shp

def ort_macs(m, shp):
    """MACs and op census from actual shapes: output elements times the reduction size."""
    total = 0; census = {}
    for nd in m.graph.node:
        key = nd.op_type if nd.domain in ("", "ai.onnx") else nd.domain + "." + nd.op_type
        a = {x.name: helper.get_attribute_value(x) for x in nd.attribute}
        out = shp.get(nd.output[0])
        if nd.op_type in ("Conv","FusedConv","ConvInteger","QLinearConv"):
            wpos = 3 if nd.op_type=="QLinearConv" else 1
            w = shp[nd.input[wpos]]
            macs = math.prod(out) * math.prod(w[1:])
        elif nd.op_type in ("MatMul","MatMulInteger","FusedMatMul","MatMulIntegerToFloat","DynamicQuantizeMatMul","QLinearMatMul"):
            apos = 0
            a_s = shp[nd.input[apos]]
            k = a_s[-2] if a.get("transA",0) else a_s[-1]
            macs = math.prod(out) * k
        elif nd.op_type in ("Gemm","QGemm","FusedGemm"):
            a_s = shp[nd.input[0]]; k = a_s[0] if a.get("transA",0) else a_s[1]
            macs = math.prod(out) * k
        elif nd.op_type == "MatMulNBits":
            macs = math.prod(out) * a["K"]
        else:
            continue
        total += macs; census[key] = census.get(key,0)+1
    return total, census

def compare(label, path, feeds, **kw) -> dict:
    m, shp = actual_shapes(path, feeds)
    want, want_census = ort_macs(m, shp)
    row = {"form": label, "ort_macs": want, "ort_census": want_census}
    try:
        got = import_onnx(path, bits="onnx", **kw)
    except Exception as e:   # the importer's own one-line error
        row.update(accelmap_macs=None, error=str(e).splitlines()[0])
        return row
    census = {}
    for l in got.layers:
        key = l.source_op if not l.name.endswith((".scores", ".context")) else l.source_op + " (attention)"
        census[key] = census.get(key, 0) + l.count
    row.update(accelmap_macs=got.total_macs, census=census, unknown=[u.op_type for u in got.unknown_ops],
               bits=sorted({"/".join(str(o.bits) for o in l.operator.operands) for l in got.layers}))
    return row


def forms(tmp: Path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self, feeds):
            self.it = iter([feeds] * 4)

        def get_next(self):
            return next(self.it, None)

    for name, (model, shapes) in {"cnn": cnn(), "block": block()}.items():
        feeds = {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}
        kw = {"batch": 2} if name == "cnn" else {"batch": 2, "seq_len": 10}
        base = tmp / f"{name}.onnx"
        onnx.save(model, base)
        yield f"{name} float", base, feeds, kw
        for lvl, tag in ((ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, "ort-extended"),
                         (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "ort-all")):
            so = ort.SessionOptions()
            so.graph_optimization_level = lvl
            so.optimized_model_filepath = str(tmp / f"{name}.{tag}.onnx")
            ort.InferenceSession(str(base), so, providers=["CPUExecutionProvider"])
            yield f"{name} {tag}", tmp / f"{name}.{tag}.onnx", feeds, kw
        for fmt, tag in ((QuantFormat.QOperator, "int8 QOperator"), (QuantFormat.QDQ, "int8 QDQ")):
            out = tmp / f"{name}.{tag.split()[1]}.onnx"
            quantize_static(str(base), str(out), Reader(feeds), quant_format=fmt,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
            yield f"{name} {tag}", out, feeds, kw
        out = tmp / f"{name}.dynamic.onnx"
        quantize_dynamic(str(base), str(out), weight_type=QuantType.QInt8)
        yield f"{name} int8 dynamic", out, feeds, kw
        if name == "block":
            try:
                from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
            except ImportError:
                print("(skipping MatMulNBits: pip install onnx_ir)")
                continue
            q = MatMulNBitsQuantizer(onnx.load(base), block_size=32, is_symmetric=True)
            q.process()
            out = tmp / "block.nbits.onnx"
            q.model.save_model_to_file(str(out))
            yield "block int4 MatMulNBits", out, feeds, kw


def main() -> None:
    ap = argparse.ArgumentParser(description="accelmap import vs onnxruntime's actual shapes")
    ap.add_argument("--json", default=None, help="Also write the rows to this file.")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, path, feeds, kw in forms(Path(tmp)):
            rows.append(compare(label, path, feeds, **kw))
    print(f"{'form':<26} {'onnxruntime':>12} {'accelmap':>12}  result")
    for r in rows:
        if r["accelmap_macs"] is None:
            print(f"{r['form']:<26} {r['ort_macs']:>12,} {'-':>12}  refused: {r['error']}")
            continue
        same = "equal" if r["accelmap_macs"] == r["ort_macs"] else "DIFFERENT"
        print(f"{r['form']:<26} {r['ort_macs']:>12,} {r['accelmap_macs']:>12,}  {same}; bits O/I/W {r['bits']}; "
              f"{r['census']}" + (f"; unknown {r['unknown']}" if r["unknown"] else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
