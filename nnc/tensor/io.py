"""Tensor persistence in SQLite, as NNC keeps it, and the small tensor helpers NNC's tests use.

NNC: ccv_nnc_tensor_write / ccv_nnc_tensor_read (ccv_nnc_tensor_io.c), ccv_nnc_tensor_zero,
ccv_nnc_tensor_eq, ccv_nnc_tensor_new_from_file (ccv_nnc_tensor.c). A database either side
writes, the other reads: one table,

    tensors (name TEXT, type INTEGER, format INTEGER, datatype INTEGER, dim BLOB, data BLOB,
             PRIMARY KEY (name))

written with ``REPLACE INTO`` (a name written again replaces its row). ``type`` is NNC's memory
code in its low 32 bits (CCV_TENSOR_CPU_MEMORY, or CCV_TENSOR_GPU_MEMORY with the device in bits
8..19) and the identifier of the codec that encoded ``data`` in its high 32 bits (0: raw);
``format`` is the tensor's format, CCV_TENSOR_FORMAT_NCHW / NHWC / CHWN (a tensor read back
has it; reading into a tensor of another format is refused); ``datatype`` is CCV_8U,
CCV_32S, ... (the codes of nnc.base.core.DATATYPES); ``dim`` is NNC's
``int dim[CCV_NNC_MAX_DIM_ALLOC]``, 12 little-endian int32, the shape followed by zeros;
``data`` the elements, C order, little-endian.

Where NNC is lenient this is strict, because leniency here is a silently wrong tensor: reading
into a tensor of another shape or dtype is refused (NNC copies what fits, and converts between
16F and 32F), as are rows whose ``data`` is not exactly the size ``dim`` and ``datatype`` say,
rows a codec encoded (NNC decodes them through the caller's ccv_nnc_tensor_io_option_t), and
datatypes nnc does not have (16BF, QX). NNC's layout ends a shape at its first 0, so a tensor
with a 0 in its shape cannot be written; a 0-d tensor is written as all-zero ``dim`` with one
element, and such a row reads back 0-d.
"""

import os
import pathlib
import sqlite3
import struct

import numpy as np

from nnc.base.core import DATATYPE_NAMES, DATATYPES, MAX_DIM, NNCError, TensorError
from nnc.base.device import gpu_memory, parse_device
from nnc.tensor.tensor import FORMAT_NAMES as _FORMAT_NAMES
from nnc.tensor.tensor import TENSOR_FORMATS, Tensor

TENSOR_CPU_MEMORY = 0x1
TENSOR_GPU_MEMORY = 0x2
# NNC's datatypes nnc has no dtype for: named in the error a row of one raises.
_FOREIGN_DATATYPES = {0x40000: "CCV_QX", 0x80000: "CCV_16BF"}
_DIM = struct.Struct(f"<{MAX_DIM}i")
# How long a connection nnc opens waits for another writer's lock before failing (seconds).
BUSY_TIMEOUT = 10.0

_CREATE = ("CREATE TABLE IF NOT EXISTS tensors "
           "(name TEXT, type INTEGER, format INTEGER, datatype INTEGER, "
           "dim BLOB, data BLOB, PRIMARY KEY (name))")
_REPLACE = ("REPLACE INTO tensors (name, type, format, datatype, dim, data) "
            "VALUES (?, ?, ?, ?, ?, ?)")
_SELECT = "SELECT data, type, format, datatype, dim FROM tensors WHERE name=?"


class TensorIOError(NNCError, OSError):
    """A tensor database cannot be opened, read or written (the sqlite3 error is the cause)."""


class TensorNotFoundError(TensorIOError, LookupError):
    """A tensor database has no tensor of that name."""


def _open(db, write):
    """(connection, whether this call opened it): db is a path or an open sqlite3.Connection.

    A path read from must exist (sqlite3 would create an empty database there)."""
    if isinstance(db, sqlite3.Connection):
        return db, False
    if not isinstance(db, (str, bytes, os.PathLike)):
        raise TypeError(f"a tensor database is a path or an sqlite3.Connection, "
                        f"not {type(db).__name__}")
    path = pathlib.Path(os.fsdecode(db))
    try:
        if write:
            return sqlite3.connect(path, timeout=BUSY_TIMEOUT), True
        uri = path.resolve().as_uri() + "?mode=ro"
        return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT), True
    except sqlite3.Error as e:
        raise TensorIOError(f"cannot open tensor database {str(path)!r}: {e}") from e


def _where(db):
    return "the database" if isinstance(db, sqlite3.Connection) else repr(os.fsdecode(db))


def _row_of(t, name):
    """The (name, type, format, datatype, dim, data) row NNC would write for tensor t."""
    if not isinstance(t, Tensor):
        raise TypeError(f"tensor_write needs an nnc.Tensor, not {type(t).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"a tensor's name is a str, not {type(name).__name__}")
    shape = t.shape
    if 0 in shape:
        raise TensorError(f"cannot write {name!r} of shape {shape}: NNC's dim ends a shape at "
                          "its first 0, so the shape would not read back")
    device = parse_device(t.device)
    kind = TENSOR_CPU_MEMORY if device < 0 else TENSOR_GPU_MEMORY | ((device & 0xfff) << 8)
    fmt = TENSOR_FORMATS[t.format]
    dtype = np.dtype(t.dtype)
    # Contiguous little-endian whatever t's strides: a view is written as the tensor it shows.
    data = np.ascontiguousarray(t.numpy(), dtype=dtype.newbyteorder("<")).tobytes()
    dim = _DIM.pack(*shape, *([0] * (MAX_DIM - len(shape))))
    return name, kind, fmt, DATATYPES[dtype.name], dim, data


def _commit(conn, began):
    """Commit what this call began; a transaction the caller opened stays theirs to commit
    (as with NNC's handle: a caller batches writes in one BEGIN / COMMIT)."""
    if not began and conn.in_transaction:
        conn.commit()


def _write_rows(db, rows, what):
    """REPLACE ``rows`` into ``db`` in one transaction (the caller's, when it has one open):
    all of them or none; ``what`` names them in the TensorIOError."""
    conn, opened = _open(db, write=True)
    try:
        began = conn.in_transaction
        try:
            conn.execute(_CREATE)
            conn.executemany(_REPLACE, rows)
            _commit(conn, began)
        except sqlite3.Error as e:
            if not began and conn.in_transaction:
                conn.rollback()
            raise TensorIOError(f"cannot write {what} into {_where(db)}: {e}") from e
    finally:
        if opened:
            conn.close()


def tensor_write(t, db, name):
    """Write tensor ``t`` as ``name`` into the tensor database ``db`` (a path, created if
    missing, or an open sqlite3.Connection), replacing a tensor of that name.

    NNC: ccv_nnc_tensor_write. Raises TensorIOError when the database cannot be written."""
    _write_rows(db, [_row_of(t, name)], repr(name))


def _fetch(conn, db, name):
    if not isinstance(name, str):
        raise TypeError(f"a tensor's name is a str, not {type(name).__name__}")
    try:
        row = conn.execute(_SELECT, (name,)).fetchone()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            raise TensorNotFoundError(
                f"no tensor {name!r} in {_where(db)}: it has no tensors table") from e
        raise TensorIOError(f"cannot read {name!r} from {_where(db)}: {e}") from e
    except sqlite3.Error as e:
        raise TensorIOError(f"cannot read {name!r} from {_where(db)}: {e}") from e
    if row is None:
        raise TensorNotFoundError(f"no tensor {name!r} in {_where(db)}")
    return row


def _decode(row, name):
    """(array, format name) from a row: a read-only ndarray over the row's data."""
    data, kind, fmt, datatype, dim = row
    identifier = (int(kind) >> 32) & 0xffffffff
    if identifier:
        raise TensorError(f"{name!r} was encoded by codec {identifier:#x}: nnc reads raw data "
                          "only (NNC decodes through ccv_nnc_tensor_io_option_t)")
    if datatype not in DATATYPE_NAMES:
        known = _FOREIGN_DATATYPES.get(datatype, f"{datatype:#x}")
        raise TensorError(f"{name!r} has datatype {known}, which nnc does not support "
                          f"(nnc has {', '.join(DATATYPES)})")
    if not isinstance(dim, bytes) or len(dim) % 4:
        raise TensorError(f"{name!r}'s dim is not an int32 array ({dim!r:.40})")
    # NNC copies at most CCV_NNC_MAX_DIM_ALLOC ints and ends the shape at the first 0 (an older
    # NNC wrote 8); more ints are accepted only when the extra are 0.
    ints = struct.unpack(f"<{len(dim) // 4}i", dim)
    if any(ints[MAX_DIM:]):
        raise TensorError(f"{name!r} has more than {MAX_DIM} dimensions ({ints})")
    shape = []
    for d in ints[:MAX_DIM]:
        if d == 0:
            break
        if d < 0:
            raise TensorError(f"{name!r} has a negative dimension ({ints})")
        shape.append(d)
    if fmt not in _FORMAT_NAMES:
        raise TensorError(f"{name!r} has format {fmt!r}; NNC's are {TENSOR_FORMATS}")
    dtype = np.dtype(DATATYPE_NAMES[datatype]).newbyteorder("<")
    want = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if not isinstance(data, bytes) or len(data) != want:
        got = len(data) if isinstance(data, bytes) else type(data).__name__
        raise TensorError(f"{name!r} of shape {tuple(shape)} {dtype.name} needs {want} bytes of "
                          f"data, the row has {got}")
    array = np.frombuffer(data, dtype=dtype).reshape(shape)
    return array.astype(dtype.newbyteorder("="), copy=False), _FORMAT_NAMES[fmt]


def _check_target(t, array, fmt, name):
    if not isinstance(t, Tensor):
        raise TypeError(f"tensor_read reads into an nnc.Tensor, not {type(t).__name__}")
    if tuple(t.shape) != array.shape or np.dtype(t.dtype) != array.dtype:
        raise TensorError(f"{name!r} is {array.shape} {array.dtype.name} in the database, the "
                          f"tensor to read into is {tuple(t.shape)} {np.dtype(t.dtype).name}")
    # The same shape in another format holds other pixels in each place: an image command
    # would read channels as rows. FORMAT_TRANSFORM converts after reading.
    if t.format != fmt:
        raise TensorError(f"{name!r} is {fmt} in the database, the tensor to read into is "
                          f"{t.format}; read it into a new tensor (t=None) and convert that "
                          "with FORMAT_TRANSFORM")
    if parse_device(t.device) >= 0:
        raise TensorError(f"cannot read {name!r} into a GPU tensor: read it into a new one "
                          "(t=None) and copy that with DATA_TRANSFER_FORWARD")
    if t.readonly:
        raise TensorError(f"cannot read {name!r} into a read-only tensor")


def tensor_read(db, name, t=None):
    """Read tensor ``name`` from ``db`` (a path or an open sqlite3.Connection): into ``t``,
    which must have the stored shape and dtype, or into a new CPU tensor when ``t`` is None.

    Returns the tensor. NNC: ccv_nnc_tensor_read. Raises TensorNotFoundError when there is no
    such tensor, TensorIOError when the database cannot be read, TensorError for a mismatch."""
    conn, opened = _open(db, write=False)
    try:
        row = _fetch(conn, db, name)
    finally:
        if opened:
            conn.close()
    array, fmt = _decode(row, name)
    if t is None:
        return Tensor(array.copy(), format=fmt)
    _check_target(t, array, fmt, name)
    t.numpy()[...] = array
    return t


def tensors_write(tensors, db):
    """Write every (name, tensor) of the mapping ``tensors`` into ``db`` in one transaction:
    all of them or, when one fails, none."""
    _write_rows(db, [_row_of(t, name) for name, t in tensors.items()], "tensors")


def tensors_read(tensors, db):
    """Read every (name, tensor) of the mapping ``tensors`` from ``db`` into its tensor, after
    checking them all: a missing name or a mismatch changes no tensor."""
    conn, opened = _open(db, write=False)
    try:
        arrays = {}
        for name, t in tensors.items():
            array, fmt = _decode(_fetch(conn, db, name), name)
            _check_target(t, array, fmt, name)
            arrays[name] = array
    finally:
        if opened:
            conn.close()
    for name, t in tensors.items():
        t.numpy()[...] = arrays[name]


def tensor_zero(t):
    """Set every element of ``t`` (a view's elements only) to zero. NNC: ccv_nnc_tensor_zero."""
    if not isinstance(t, Tensor):
        raise TypeError(f"tensor_zero needs an nnc.Tensor, not {type(t).__name__}")
    if t.readonly:
        raise TensorError("cannot zero a read-only tensor")
    if parse_device(t.device) >= 0:
        if not t.is_contiguous:
            raise TensorError("cannot zero a GPU tensor view")
        gpu_memory("fill_zero")(t)
    else:
        t.numpy()[...] = 0
    return t


# The integer type a float's bits compare as, and the mask of its magnitude bits.
_ORDERED_BITS = {np.dtype(np.float16): (np.int16, 0x7fff),
                 np.dtype(np.float32): (np.int32, 0x7fffffff),
                 np.dtype(np.float64): (np.int64, 0x7fffffffffffffff)}


def tensor_eq(a, b, ulps=128):
    """Whether tensors (or arrays) ``a`` and ``b`` have the same dtype, shape and elements, floats
    compared as NNC does: equal when their bit patterns, ordered as integers, are at most
    ``ulps`` apart or the values differ by at most the dtype's epsilon (absolute).

    NNC: ccv_nnc_tensor_eq (128 ulps, for 32F and 64F; 16F here compares the same way)."""
    x = np.asarray(a)
    y = np.asarray(b)
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if x.dtype not in _ORDERED_BITS:
        return bool(np.array_equal(x, y))
    if ulps < 0:
        raise ValueError(f"ulps must be >= 0, not {ulps}")
    itype, magnitude = _ORDERED_BITS[x.dtype]
    ix = np.ascontiguousarray(x).view(itype).astype(np.int64)
    iy = np.ascontiguousarray(y).view(itype).astype(np.int64)
    # NNC maps a negative float's bits i to 0x80000000 - i: -0.0 to 0, then down from there, so
    # the integers order as the floats do and adjacent floats are adjacent integers.
    ix = np.where(ix < 0, -(ix & magnitude), ix)
    iy = np.where(iy < 0, -(iy & magnitude), iy)
    # In uint64 the difference wraps instead of overflowing: |d| <= ulps either way round.
    d = ix.astype(np.uint64) - iy.astype(np.uint64)
    near_bits = (d <= ulps) | (d >= np.uint64(2 ** 64 - ulps) if ulps else d == 0)
    with np.errstate(over="ignore", invalid="ignore"):
        near_value = np.abs(x - y) <= np.finfo(x.dtype).eps
    # Unlike NNC, a NaN is near only a NaN of (nearly) the same bits: NNC's fabsf test is false
    # for a NaN, so it finds NaN equal to any number, which would pass a broken kernel.
    far = ~near_bits & ~near_value
    return not bool(far.any())


def tensor_new_from_file(path, shape, dtype="float32", offset=0):
    """A read-only tensor over ``shape`` elements of ``dtype`` in file ``path`` from byte
    ``offset``, memory-mapped (no copy). NNC: ccv_nnc_tensor_new_from_file."""
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    dt = np.dtype(dtype)
    if dt.name not in DATATYPES:
        raise TensorError(f"unsupported dtype {dt}; nnc supports {', '.join(DATATYPES)}")
    if offset < 0 or any(d < 0 for d in shape):
        raise TensorError(f"negative offset or dimension (offset {offset}, shape {shape})")
    path = os.fsdecode(path)
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise TensorIOError(f"cannot map {path!r}: {e}") from e
    need = offset + int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if need > size:
        raise TensorError(f"{path!r} has {size} bytes; shape {shape} {dt.name} from offset "
                          f"{offset} needs {need}")
    if need == offset:
        return Tensor(np.zeros(shape, dt))      # mmap cannot map nothing
    return Tensor(np.memmap(path, dtype=dt, mode="r", offset=offset, shape=shape))
