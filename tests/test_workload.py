import pytest

from accelmap.errors import SpecError
from accelmap.workload import batched_matmul, conv2d, dense, depthwise_conv2d, gemm, parse_expression
from accelmap.workload.files import operator_from_dict


def test_conv2d_shapes_and_macs():
    op = conv2d("c1", n=1, c=3, h=224, w=224, k=64, r=7, s=7, stride=2, padding=3)
    assert op.sizes == {"N": 1, "K": 64, "C": 3, "P": 112, "Q": 112, "R": 7, "S": 7}
    assert op.macs == 118_013_952
    assert op.index_extent("I") == (1, 3, 229, 229)   # 2*111 + 6 + 1: the padded rows the nest touches
    assert str(op.operand("I")) == "I[N,C,2*P+R,2*Q+S]"


def test_dilated_strided_footprint_is_exact():
    # stride 3 > dilated kernel span 2: rows 0,1, 3,4, 6,7 ... holes in the window
    op = parse_expression("O[p] += I[3*p+r] * W[r]", dict(p=4, r=2))
    assert op.footprint("I") == 8
    op2 = parse_expression("O[p] += I[p+2*r] * W[r]", dict(p=2, r=3))
    assert op2.footprint("I") == 6   # {0,2,4} + {0,1} = {0..5}


def test_depthwise_grouped_dense_matmul():
    dw = depthwise_conv2d("dw", c=32, h=56, w=56, r=3, s=3, padding=1)
    assert dw.kind == "depthwise_conv2d" and dw.macs == 32 * 56 * 56 * 9
    g = conv2d("g", c=8, h=5, w=5, k=4, r=1, s=1, groups=2)
    assert g.sizes == {"N": 1, "G": 2, "K": 2, "C": 4, "P": 5, "Q": 5} and g.macs == 2 * 2 * 4 * 25
    assert dense("fc", c=512, k=1000).macs == 512_000
    assert gemm(m=3, n=4, k=5).macs == 60
    assert batched_matmul(batch=12, m=128, n=128, k=64).macs == 12 * 128 * 128 * 64


def test_text_form_multi_input():
    op = parse_expression("out[l,m,n] += A[i,j,k] * B[i,l] * C[j,m] * D[k,n]",
                          dict(i=2, j=3, k=4, l=5, m=6, n=7), name="tcl")
    assert [o.name for o in op.inputs] == ["A", "B", "C", "D"]
    assert [o.cls for o in op.operands] == ["O", "I", "W", "W", "W"]
    assert op.macs == 2 * 3 * 4 * 5 * 6 * 7


@pytest.mark.parametrize("text,sizes,msg", [
    ("O[m] += A[m,k] * B[k", dict(m=2, k=2), "ends early"),
    ("O[m] = A[m,k] B[k]", dict(m=2, k=2), "unexpected"),
    ("O[m] += A[m,k]", dict(m=2), "no size given for dimensions ['k']"),
    ("O[m+k] += A[m,k]", dict(m=2, k=2), "must be a single loop dimension"),
    ("O[m] += A[m,k]", dict(m=2, k=0), "positive integer"),
    ("O[m] += A[m]", dict(m=2, z=3), "does not use"),
])
def test_text_form_errors(text, sizes, msg):
    with pytest.raises(SpecError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        parse_expression(text, sizes)


def test_workload_file_errors_name_the_field():
    with pytest.raises(SpecError, match=r"w.yaml: conv2d does not take \['kernel'\]"):
        operator_from_dict({"conv2d": {"c": 3, "h": 8, "w": 8, "k": 4, "kernel": 3}}, "w.yaml")
    with pytest.raises(SpecError, match="groups=3 must divide"):
        operator_from_dict({"conv2d": {"c": 4, "h": 8, "w": 8, "k": 4, "r": 3, "s": 3, "groups": 3}}, "w.yaml")
    with pytest.raises(SpecError, match="exactly one of"):
        operator_from_dict({"name": "x"}, "w.yaml")


def test_a_written_workload_reads_back_as_the_same_operator():
    import yaml

    from accelmap.workload.files import operator_from_dict, operator_to_dict

    ops = [conv2d("c", c=3, h=11, w=11, k=4, r=3, s=3, stride=2, padding=(1, 0, 2, 1), dilation=(1, 2)),
           conv2d("g", c=4, h=6, w=6, k=6, r=3, s=1, groups=2, padding=1),
           conv2d("dw", c=8, h=9, w=9, k=8, r=3, s=3, groups=8, padding=1, init_output="read"),
           gemm("mm", m=3, n=4, k=5, bits={"I": 4, "W": 4, "O": 16}),
           parse_expression("Y[i,j] += A[i,k,l] * B[k,j] * C[l,j]", {"j": 3, "i": 2, "l": 4, "k": 5},
                            classes={"C": "I"})]
    for op in ops:
        back = operator_from_dict(yaml.safe_load(yaml.safe_dump(operator_to_dict(op), sort_keys=False)), "x.yaml")
        # Equal in everything but the constructor's label: dims in order, operands, padding, shapes.
        assert back.dims == op.dims and back.operands == op.operands and back.init_output == op.init_output
        assert back.signature() == op.signature()


def test_expression_dims_keep_the_order_given_and_shapes_are_checked():
    from accelmap.workload.files import operator_from_dict

    base = {"expression": "O[m,n] += A[m,k] * B[k,n]", "dims": {"k": 2, "n": 3, "m": 4}}
    assert operator_from_dict(base).dim_names == ("k", "n", "m")
    with pytest.raises(SpecError, match="shapes.A must be a list of positive whole numbers"):
        operator_from_dict({**base, "shapes": {"A": [4, "2"]}})
    with pytest.raises(SpecError, match="shapes names operands"):
        operator_from_dict({**base, "shapes": {"Z": [1]}})
    with pytest.raises(SpecError, match="operand A shape has 1 entries for 2 axes"):
        operator_from_dict({**base, "shapes": {"A": [4]}})
