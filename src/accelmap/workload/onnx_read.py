"""Reading an ONNX file for its graph and shapes only, without its tensor data.

The importer needs every tensor's type and dims but the values of only a few
small ones (reshape targets, pad amounts). Parsing the whole file would hold
the weights in memory twice (the file bytes and the parsed message), so this
reader walks the protobuf wire format from the file and copies every field
except the payload of large tensors (``raw_data``, ``float_data``, ...), which
it skips with a seek. Tensors keep their name, type and dims. Peak memory then
follows the size of the graph, not of the weights. External data is never read.
"""

from __future__ import annotations

import io
from pathlib import Path

import onnx

from accelmap.errors import SpecError
from accelmap.workload.onnx_fold import MAX_ELEMENTS

# Messages larger than this are walked field by field; smaller ones are copied whole.
# Tensor payloads larger than this are dropped (the constant folding reads at most
# MAX_ELEMENTS elements of 8 bytes).
LARGE = MAX_ELEMENTS * 8

# Which fields (number -> message kind) hold messages that may contain tensors.
_MODEL, _GRAPH, _NODE, _ATTR, _TENSOR, _SPARSE = range(6)
_CHILDREN = {
    _MODEL: {7: _GRAPH},
    _GRAPH: {1: _NODE, 5: _TENSOR, 15: _SPARSE},
    _NODE: {5: _ATTR},
    _ATTR: {5: _TENSOR, 6: _GRAPH, 10: _TENSOR, 11: _GRAPH, 22: _SPARSE, 23: _SPARSE},
    _SPARSE: {1: _TENSOR, 2: _TENSOR},
    _TENSOR: {},
}
# TensorProto fields holding element data: float, int32, string, int64, raw, double, uint64.
_TENSOR_DATA = {4, 5, 6, 7, 9, 10, 11}


class _Corrupt(Exception):
    pass


def _varint(f) -> int:
    shift = result = 0
    while True:
        b = f.read(1)
        if not b:
            raise _Corrupt("unexpected end of file")
        result |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return result
        shift += 7
        if shift > 63:
            raise _Corrupt("varint too long")


def _encode_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read(f, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _Corrupt("unexpected end of file")
    return data


def _copy(f, end: int, kind: int, out: bytearray) -> int:
    """Copy the fields of one message (file position up to ``end``) into ``out``; return bytes dropped."""
    dropped = 0
    children = _CHILDREN[kind]
    while f.tell() < end:
        tag = _varint(f)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise _Corrupt("field number 0")
        if wire == 0:
            out += _encode_varint(tag) + _encode_varint(_varint(f))
        elif wire == 1:
            out += _encode_varint(tag) + _read(f, 8)
        elif wire == 5:
            out += _encode_varint(tag) + _read(f, 4)
        elif wire == 2:
            n = _varint(f)
            if f.tell() + n > end:
                raise _Corrupt("a field runs past the end of its message")
            if kind == _TENSOR and field in _TENSOR_DATA and n > LARGE:
                f.seek(n, io.SEEK_CUR)
                dropped += n
            elif field in children and n > LARGE:
                sub = bytearray()
                dropped += _copy(f, f.tell() + n, children[field], sub)
                out += _encode_varint(tag) + _encode_varint(len(sub)) + sub
            else:
                out += _encode_varint(tag) + _encode_varint(n) + _read(f, n)
        else:
            raise _Corrupt(f"wire type {wire}")
    if f.tell() != end:
        raise _Corrupt("a field runs past the end of its message")
    return dropped


def strip_payloads(model: onnx.ModelProto) -> None:
    """Drop, in place, the element data of every tensor over the size limit (as the reader does)."""
    def tensor(t: onnx.TensorProto) -> None:
        if t.ByteSize() > LARGE:
            for f in ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data",
                      "uint64_data"):
                t.ClearField(f)

    def graph(g: onnx.GraphProto) -> None:
        for t in g.initializer:
            tensor(t)
        for n in g.node:
            for a in n.attribute:
                if a.HasField("t"):
                    tensor(a.t)
                for t in a.tensors:
                    tensor(t)
                if a.HasField("g"):
                    graph(a.g)
                for sub in a.graphs:
                    graph(sub)

    graph(model.graph)


def _bad(p: Path, why: str) -> SpecError:
    return SpecError(f"not a valid ONNX file ({why}); the file may be truncated or of another format", where=str(p))


def read_onnx(path: str | Path) -> onnx.ModelProto:
    """Parse an ONNX file without its large tensor payloads and without external data."""
    p = Path(path)
    try:
        f = open(p, "rb")
    except OSError as e:
        raise SpecError(f"cannot read the model: {e.strerror or e.__class__.__name__}", where=str(p)) from None
    with f:
        size = f.seek(0, io.SEEK_END)
        f.seek(0)
        slim = bytearray()
        try:
            _copy(f, size, _MODEL, slim)
        except _Corrupt as e:
            raise _bad(p, str(e)) from None
    try:
        model = onnx.load_from_string(bytes(slim))
    except Exception as e:  # protobuf raises DecodeError on malformed content
        raise _bad(p, f"{e.__class__.__name__}: {str(e)[:80] or 'parse failed'}") from None
    # Protobuf accepts many byte strings as an (almost empty) message; a model
    # needs at least an IR version and a graph with nodes.
    if model.ir_version <= 0 or not model.graph.node:
        raise SpecError("not an ONNX model: no IR version or no graph nodes "
                        "(the file may be truncated or of another format)", where=str(p))
    return model
