"""nnc.onnx.load: reading an ONNX model's tensors -- their declared sizes checked before any
byte is read, external data files confined to the model's directory and opened without
following links, and the machine's memory as the default budget. Apart from the loader's passes
(``_load``) because it is the one place a model touches the file system."""

from __future__ import annotations

import math
import os
import stat


def _err(msg):
    from nnc.onnx import OnnxError  # the package imports this module

    return OnnxError(msg)


# Bytes per element of the constant dtypes nnc reads (whole-byte numbers, by TensorProto code:
# FLOAT, UINT8, INT8, UINT16, INT16, INT32, INT64, BOOL, FLOAT16, DOUBLE, UINT32, UINT64,
# BFLOAT16 and the four FLOAT8 kinds).
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2,
             17: 1, 18: 1, 19: 1, 20: 1}


def _memory_bytes():
    """The machine's physical memory in bytes, or 0 where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0


def _tensors(onnx, model):
    """Every TensorProto of the model, with where it sits: initializers, sparse initializers,
    tensor attributes, in the main graph, its sub-graphs and the model's functions."""
    def graph(g, where):
        for t in g.initializer:
            yield f"{where}initializer {t.name!r}", t
        for s in g.sparse_initializer:
            yield f"{where}sparse initializer {s.values.name!r}", s.values
            yield f"{where}sparse initializer {s.values.name!r} indices", s.indices
        for n in g.node:
            yield from nodes(n, where)

    def nodes(n, where):
        at = f"{where}node {n.name or (n.output[0] if n.output else '')!r} ({n.op_type})"
        for a in n.attribute:
            aw = f"{at} attribute {a.name!r}"
            if a.HasField("t"):
                yield aw, a.t
            for t in a.tensors:
                yield aw, t
            if a.HasField("sparse_tensor"):
                yield aw, a.sparse_tensor.values
                yield aw, a.sparse_tensor.indices
            for s in a.sparse_tensors:
                yield aw, s.values
                yield aw, s.indices
            if a.HasField("g"):
                yield from graph(a.g, f"{aw}: ")
            for sub in a.graphs:
                yield from graph(sub, f"{aw}: ")

    yield from graph(model.graph, "")
    for f in model.functions:
        for n in f.node:
            yield from nodes(n, f"function {f.name!r}: ")


def tensor_nbytes(onnx, t, where):
    """(element count, bytes) a TensorProto's dims and dtype declare, for the dtypes nnc reads
    (whole-byte numbers); refuses negative dims and other dtypes."""
    if any(d < 0 for d in t.dims):
        raise _err(f"{where} has a negative dimension in dims {list(t.dims)}")
    count = math.prod(t.dims)
    if t.data_type not in _ITEMSIZE:
        name = onnx.TensorProto.DataType.Name(t.data_type) if t.data_type in \
            onnx.TensorProto.DataType.values() else str(t.data_type)
        raise _err(f"{where} has data type {name}, which nnc does not read (numbers of whole "
                   f"bytes only)")
    return count, count * _ITEMSIZE[t.data_type]


def tensor_array(onnx, t, where):
    """A TensorProto's value as an array, its declared size checked against the bytes present
    before anything is allocated for it (a few bytes must not declare a terabyte)."""
    count, nbytes = tensor_nbytes(onnx, t, where)
    if t.HasField("raw_data") or t.raw_data:
        if len(t.raw_data) != nbytes:
            raise _err(f"{where} declares dims {list(t.dims)} ({count} elements, {nbytes} "
                       f"bytes) but holds {len(t.raw_data)} bytes")
    else:
        # Typed fields hold one value per element (two per complex, none of which nnc reads).
        present = (len(t.float_data) + len(t.int32_data) + len(t.int64_data)
                   + len(t.double_data) + len(t.uint64_data))
        if present != count:
            raise _err(f"{where} declares dims {list(t.dims)} ({count} elements) but holds "
                       f"{present} values")
    return onnx.numpy_helper.to_array(t)


def _external_read(onnx, model, base_dir):
    """The model with every external-data tensor's bytes read in (a copy: the caller's
    ModelProto is left as it is), read only from regular files inside ``base_dir`` once every
    symlink is resolved; None as ``base_dir`` refuses external data."""
    if not any(t.data_location == onnx.TensorProto.EXTERNAL for _, t in _tensors(onnx, model)):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    base = os.path.realpath(base_dir) if base_dir is not None else None
    for where, t in _tensors(onnx, copy):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        if base is None:
            raise _err(f"{where} has external data ({location!r}): a model given as bytes or a "
                       f"ModelProto reads none; load it from its file, or pass base_dir= the "
                       f"folder you trust its external data to be in")
        data = _external_bytes(onnx, t, where, info, location, base)
        t.ClearField("external_data")
        t.data_location = onnx.TensorProto.DEFAULT
        t.raw_data = data
    return copy


def _external_bytes(onnx, t, where, info, location, base):
    def refuse(why):
        return _err(f"{where}: external data {location!r} {why}")

    if not location:
        raise refuse("has no location")
    parts = location.replace("\\", "/").split("/")
    if "\0" in location or os.path.isabs(location) or location.startswith(("/", "\\")) or \
            ":" in parts[0]:
        raise refuse("is an absolute path; only paths relative to the model's folder are read")
    if ".." in parts:
        raise refuse("has a '..' component; only paths inside the model's folder are read")
    path = os.path.realpath(os.path.join(base, location))
    if os.path.commonpath([path, base]) != base:
        raise refuse(f"resolves (through a symlink) to {path!r}, outside the model's folder "
                     f"{base!r}")
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError as e:
        raise refuse(f"has an offset or length that is no integer: {e}") from e
    if offset < 0 or (length is not None and length < 0):
        raise refuse(f"has a negative offset {offset} or length {length}")
    count, nbytes = tensor_nbytes(onnx, t, where)
    if length is not None and length != nbytes:
        raise refuse(f"has length {length}, but dims {list(t.dims)} declare {count} elements "
                     f"({nbytes} bytes)")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_BINARY", 0))
    except OSError as e:
        raise refuse(f"cannot be opened: {e}") from e
    try:
        st = os.fstat(fd)
    except OSError as e:
        os.close(fd)
        raise refuse(f"cannot be read: {e}") from e
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise refuse("is not a regular file")
    with os.fdopen(fd, "rb") as f:
        if offset > st.st_size:
            raise refuse(f"has offset {offset}, past the end of the file ({st.st_size} bytes)")
        if offset + nbytes > st.st_size:
            raise refuse(f"needs bytes {offset}..{offset + nbytes}, past the end of the file "
                         f"({st.st_size} bytes)")
        f.seek(offset)
        data = f.read(nbytes)
    if len(data) != nbytes:
        raise refuse(f"gave {len(data)} bytes of {nbytes} (the file shrank while read)")
    return data
