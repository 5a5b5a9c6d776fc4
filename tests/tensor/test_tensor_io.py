"""Tensor persistence in NNC's SQLite schema (nnc/tensor/io.py) and NNC's tensor helpers.

NNC: ccv_nnc_tensor_io.c at liuliu/ccv c6ce5b123795dcec80d42fb0106167345cabf3d3; the port of
test/unit/nnc/tensor.tests.c's "tensor persistence" case is the first test, its helper cases
(zero, zero of a view, hint tensor, mapped from file, resize) the next ones. Databases are also
built by hand from NNC's schema and codes (struct-packed ``int dim[12]``), and rows nnc writes
are decoded by hand, so the format is checked against NNC's, not only against itself.
"""

import sqlite3
import struct
import threading

import numpy as np
import pytest

import nnc

# NNC's codes (ccv.h, ccv_nnc_tfb.h), spelled out here rather than taken from nnc.
CCV_TENSOR_CPU_MEMORY = 0x1
CCV_TENSOR_FORMAT_NCHW, CCV_TENSOR_FORMAT_NHWC, CCV_TENSOR_FORMAT_CHWN = 0x01, 0x02, 0x04
CODES = {"uint8": 0x01000, "int32": 0x02000, "float32": 0x04000, "int64": 0x08000,
         "float64": 0x10000, "float16": 0x20000}
CCV_16BF = 0x80000
CCV_NNC_MAX_DIM_ALLOC = 12
SCHEMA = ("CREATE TABLE IF NOT EXISTS tensors (name TEXT, type INTEGER, format INTEGER, "
          "datatype INTEGER, dim BLOB, data BLOB, PRIMARY KEY (name))")


def dim_blob(shape, ints=CCV_NNC_MAX_DIM_ALLOC):
    return struct.pack(f"<{ints}i", *shape, *([0] * (ints - len(shape))))


def insert(path, name, array, datatype=None, kind=CCV_TENSOR_CPU_MEMORY,
           fmt=CCV_TENSOR_FORMAT_NHWC, dim=None, data=None):
    con = sqlite3.connect(path)
    con.execute(SCHEMA)
    con.execute("REPLACE INTO tensors (name, type, format, datatype, dim, data) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (name, kind, fmt, CODES[array.dtype.name] if datatype is None else datatype,
                 dim_blob(array.shape) if dim is None else dim,
                 array.astype(array.dtype.newbyteorder("<")).tobytes() if data is None else data))
    con.commit()
    con.close()


def rows(path):
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT name, type, format, datatype, dim, data FROM tensors "
                           "ORDER BY name").fetchall()
    finally:
        con.close()


def sample(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return np.asarray((rng.standard_normal(shape) * 10).astype(dtype))
    info = np.iinfo(dtype)
    return np.asarray(rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True))


def test_nnc_tensor_persistence(tmp_path):
    """tensor.tests.c "tensor persistence": a 10x20x30 32F tensor written, the database closed
    and reopened, read into a new tensor equals it. NNC then reads it into a 10-element tensor
    and gets the first 10 elements; nnc refuses that truncation and leaves the tensor alone."""
    db = tmp_path / "tensors.sqlite3"
    tensor = nnc.Tensor((np.random.default_rng(1).random((10, 20, 30)) * 2 - 1).astype("f4"))
    nnc.tensor_write(tensor, db, "x")
    tensor1 = nnc.tensor_read(db, "x")
    assert nnc.tensor_eq(tensor1, tensor)
    assert tensor1.shape == (10, 20, 30)
    tensor2 = nnc.Tensor(np.full(10, 7, "f4"))
    with pytest.raises(nnc.TensorError, match=r"\(10, 20, 30\) float32.*\(10,\) float32"):
        nnc.tensor_read(db, "x", tensor2)
    assert (tensor2.numpy() == 7).all()


# -- tensor.tests.c's helper cases, ported as upstream builds them ----------------------------

_SIX_D = (10, 20, 30, 4, 5, 6)


def test_nnc_zero_out_a_tensor():
    tensor = nnc.Tensor.empty(_SIX_D, "float32")
    tensor.numpy()[...] = 1
    nnc.tensor_zero(tensor)
    assert (tensor.numpy() == 0).all(), "should be zero'ed"


def test_nnc_zero_out_a_tensor_view():
    """A view of 8x12x15x2x3x4 at (1, 2, 5, 1, 1, 1) zeroed by tensor_zero, against the same
    elements zeroed one by one through the view's strides."""
    strides = tuple(int(np.prod(_SIX_D[i + 1:])) for i in range(6))
    ofs = (1, 2, 5, 1, 1, 1)
    offset = sum(o * st for o, st in zip(ofs, strides))
    a_tensor = nnc.Tensor.empty(_SIX_D, "float32")
    a_tensor.numpy()[...] = 1
    nnc.tensor_zero(a_tensor.view((8, 12, 15, 2, 3, 4), offset=offset, strides=strides))
    b_tensor = nnc.Tensor.empty(_SIX_D, "float32")
    b_tensor.numpy()[...] = 1
    flat = b_tensor.numpy().reshape(-1)
    for index in np.ndindex(8, 12, 15, 2, 3):
        start = offset + sum(i * st for i, st in zip(index, strides))
        flat[start:start + 4] = 0
    assert nnc.tensor_eq(a_tensor, b_tensor), "zero'ed tensor view should be equal"
    assert not (a_tensor.numpy() == 0).all()


def test_nnc_hint_tensor():
    """CMD_CONVOLUTION_FORWARD(1, 128, 4, 5, 3) with border begin (1, 1), end (1, 2) and stride
    (8, 7) on a 234x128x3 image: ccv_nnc_hint_tensor_auto gives 30x19x128."""
    cmd = nnc.Cmd("CONVOLUTION", stride=(8, 7), padding=(1, 1, 1, 2))
    (b,) = nnc.hint_tensor_auto(cmd, [(234, 128, 3), (128, 4, 5, 3), (128,)])
    assert b[0] == 30, "height should be 30"
    assert b[1] == 19, "width should be 19"
    assert b[2] == 128, "channel should be the convolution filter count"


def test_nnc_tensor_mapped_from_file(tmp_path):
    path = tmp_path / "tensor.bin"
    path.write_bytes(np.arange(1, 4096 * 5 + 1, dtype="<f4").tobytes())
    tensor_a = nnc.tensor_new_from_file(path, 5, "float32", 0)
    np.testing.assert_allclose(tensor_a.numpy(), [1, 2, 3, 4, 5], rtol=0, atol=1e-5,
                               err_msg="the first 5 element should be equal")
    tensor_b = nnc.tensor_new_from_file(path, 4, "float32", 4096 * 4 * 4)
    np.testing.assert_allclose(tensor_b.numpy(), 4096 * 4 + np.arange(1, 5), rtol=0, atol=1e-5,
                               err_msg="the first 4 element should be equal")


def test_nnc_resize_tensor():
    tensor = nnc.Tensor.empty((12, 12, 3), "float32")
    tensor.numpy().reshape(-1)[:] = np.arange(12 * 12 * 3)
    tensor = nnc.tensor_resize(tensor, (23, 23, 3))
    tensor.numpy().reshape(-1)[12 * 12 * 3:] = np.arange(12 * 12 * 3, 23 * 23 * 3)
    b = nnc.Tensor.empty((23, 23, 3), "float32")
    b.numpy().reshape(-1)[:] = np.arange(23 * 23 * 3)
    assert nnc.tensor_eq(tensor, b), "should retain the content when resize a tensor"


@pytest.mark.parametrize("dtype", list(CODES))
def test_round_trip_every_dtype_and_rank(tmp_path, dtype):
    db = tmp_path / "t.sqlite3"
    arrays = {}
    for rank in range(nnc.MAX_DIM + 1):
        shape = tuple((2, 3, 1)[i % 3] for i in range(rank)) if rank > 8 else \
            tuple(range(2, 2 + rank))
        arrays[f"r{rank}"] = sample(shape, dtype, seed=rank)
        nnc.tensor_write(nnc.Tensor(arrays[f"r{rank}"]), db, f"r{rank}")
    for name, a in arrays.items():
        got = nnc.tensor_read(db, name)
        assert got.shape == a.shape and got.dtype == a.dtype, name
        assert np.array_equal(got.numpy(), a, equal_nan=True), name
        into = nnc.Tensor(np.zeros_like(a))
        assert nnc.tensor_read(db, name, into) is into
        assert np.array_equal(into.numpy(), a, equal_nan=True), name


@pytest.mark.parametrize("dtype", list(CODES))
def test_rows_nnc_writes_decode_by_hand(tmp_path, dtype):
    db = tmp_path / "t.sqlite3"
    a = sample((3, 4, 5), dtype)
    nnc.tensor_write(nnc.Tensor(a), db, "w")
    nnc.tensor_write(nnc.Tensor(np.asarray(a.flat[0])), db, "zero_d")
    con = sqlite3.connect(db)
    schema = con.execute("SELECT sql FROM sqlite_master WHERE name='tensors'").fetchone()[0]
    con.close()
    assert schema == SCHEMA.replace(" IF NOT EXISTS", "")
    (name, kind, fmt, datatype, dim, data), (_, _, _, _, dim0, data0) = rows(db)
    assert (name, kind, fmt, datatype) == ("w", CCV_TENSOR_CPU_MEMORY, CCV_TENSOR_FORMAT_NHWC,
                                           CODES[dtype])
    assert len(dim) == 4 * CCV_NNC_MAX_DIM_ALLOC
    assert struct.unpack("<12i", dim) == (3, 4, 5) + (0,) * 9
    assert np.array_equal(np.frombuffer(data, a.dtype.newbyteorder("<")).reshape(3, 4, 5), a,
                          equal_nan=True)
    # A 0-d tensor: all-zero dims (NNC's nd 0) and one element.
    assert struct.unpack("<12i", dim0) == (0,) * 12 and len(data0) == a.itemsize


@pytest.mark.parametrize("dtype", list(CODES))
def test_databases_built_by_hand_read(tmp_path, dtype):
    db = tmp_path / "hand.sqlite3"
    a = sample((2, 3, 4, 5), dtype, seed=3)
    insert(db, "a", a)
    insert(db, "nchw", a, fmt=CCV_TENSOR_FORMAT_NCHW)
    insert(db, "chwn", a, fmt=CCV_TENSOR_FORMAT_CHWN)
    # An older NNC wrote int dim[8] (CCV_NNC_MAX_DIM_ALLOC was 8): NNC copies what is there.
    insert(db, "dim8", a, dim=dim_blob(a.shape, ints=8))
    for name in ("a", "nchw", "chwn", "dim8"):
        got = nnc.tensor_read(db, name)
        assert got.shape == (2, 3, 4, 5) and got.dtype == a.dtype
        assert np.array_equal(got.numpy(), a, equal_nan=True), name


def test_rows_nnc_cannot_read_are_refused(tmp_path):
    """Each would be a silently wrong tensor if read raw."""
    db = tmp_path / "bad.sqlite3"
    a = np.arange(6, dtype="f4").reshape(2, 3)
    insert(db, "encoded", a, kind=(0x511 << 32) | CCV_TENSOR_CPU_MEMORY)
    insert(db, "bf16", a.astype("f2"), datatype=CCV_16BF)
    insert(db, "short", a, data=a.tobytes()[:-4])
    insert(db, "long", a, data=a.tobytes() + b"\0\0\0\0")
    insert(db, "negative", a, dim=dim_blob((2, -3)))
    insert(db, "format", a, fmt=0x08)
    insert(db, "rank13", a, dim=struct.pack("<13i", *([1] * 13)))
    for name, match in (("encoded", "codec 0x511"), ("bf16", "CCV_16BF"),
                        ("short", "needs 24 bytes.*has 20"), ("long", "needs 24 bytes.*has 28"),
                        ("negative", "negative"), ("format", "format"),
                        ("rank13", "more than 12")):
        with pytest.raises(nnc.TensorError, match=match):
            nnc.tensor_read(db, name)


def test_mismatched_shape_or_dtype_is_refused_and_changes_nothing(tmp_path):
    db = tmp_path / "t.sqlite3"
    nnc.tensor_write(nnc.Tensor(np.ones((2, 3), "f4")), db, "x")
    for target in (np.zeros((3, 2), "f4"), np.zeros((6,), "f4"), np.zeros((2, 3, 1), "f4"),
                   np.zeros((2, 3), "f8"), np.zeros((2, 3), "f2"), np.zeros((2, 3), "i4")):
        t = nnc.Tensor(target)
        with pytest.raises(nnc.TensorError, match=r"\(2, 3\) float32 in the database"):
            nnc.tensor_read(db, "x", t)
        assert (t.numpy() == 0).all()
    with pytest.raises(nnc.TensorError, match="read-only"):
        nnc.tensor_read(db, "x", nnc.Tensor(np.zeros((2, 3), "f4")).freeze())


def test_replace_overwrites(tmp_path):
    db = tmp_path / "t.sqlite3"
    nnc.tensor_write(nnc.Tensor(np.ones((2, 3), "f4")), db, "x")
    nnc.tensor_write(nnc.Tensor(np.arange(4, dtype="i8")), db, "x")
    assert len(rows(db)) == 1
    got = nnc.tensor_read(db, "x")
    assert got.dtype == np.int64 and np.array_equal(got.numpy(), np.arange(4))


def test_views_are_written_contiguous(tmp_path):
    db = tmp_path / "t.sqlite3"
    base = nnc.Tensor(np.arange(24, dtype="f4").reshape(4, 6))
    v = base.view((2, 3), offset=1, strides=(12, 2))
    assert not v.is_contiguous
    nnc.tensor_write(v, db, "v")
    want = base.numpy()[::2, 1::2]
    (_, _, _, _, dim, data), = rows(db)
    assert struct.unpack("<12i", dim)[:3] == (2, 3, 0)
    assert np.array_equal(np.frombuffer(data, "<f4").reshape(2, 3), want)
    # And read back into a view: only its elements change.
    nnc.tensor_write(nnc.Tensor(np.full((2, 3), -1, "f4")), db, "m")
    nnc.tensor_read(db, "m", v)
    assert (base.numpy()[::2, 1::2] == -1).all() and (base.numpy()[1::2] >= 0).all()


def test_a_zero_in_the_shape_is_refused(tmp_path):
    with pytest.raises(nnc.TensorError, match="first 0"):
        nnc.tensor_write(nnc.Tensor(np.zeros((2, 0, 3), "f4")), tmp_path / "t.sqlite3", "z")


def test_missing_names_and_bad_databases(tmp_path):
    db = tmp_path / "t.sqlite3"
    with pytest.raises(nnc.TensorIOError, match="cannot open"):
        nnc.tensor_read(db, "x")
    assert not db.exists()                       # reading never creates a database
    with pytest.raises(nnc.TensorIOError, match="cannot open"):
        nnc.tensor_write(nnc.Tensor(np.ones(2, "f4")), tmp_path / "no" / "dir.db", "x")
    sqlite3.connect(db).close()                  # a database with no tensors table
    with pytest.raises(nnc.TensorNotFoundError, match="no tensors table"):
        nnc.tensor_read(db, "x")
    nnc.tensor_write(nnc.Tensor(np.ones(2, "f4")), db, "x")
    with pytest.raises(nnc.TensorNotFoundError, match="'y'") as info:
        nnc.tensor_read(db, "y")
    assert isinstance(info.value, nnc.NNCError) and isinstance(info.value, LookupError)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(nnc.TensorIOError):
        nnc.tensor_read(junk, "x")
    with pytest.raises(TypeError, match="path or an sqlite3.Connection"):
        nnc.tensor_read(42, "x")


def test_an_open_connection_and_its_transaction(tmp_path):
    """With the caller's connection, a write inside the caller's transaction is theirs to
    commit (as with NNC's handle); outside one it is committed at once."""
    db = tmp_path / "t.sqlite3"
    con = sqlite3.connect(db)
    nnc.tensor_write(nnc.Tensor(np.ones(3, "f4")), con, "a")
    assert [r[0] for r in rows(db)] == ["a"]
    con.execute("BEGIN")
    nnc.tensor_write(nnc.Tensor(np.ones(3, "f4")), con, "b")
    assert np.array_equal(nnc.tensor_read(con, "b").numpy(), np.ones(3))
    con.rollback()
    with pytest.raises(nnc.TensorNotFoundError):
        nnc.tensor_read(con, "b")
    con.close()


def test_two_threads_write_one_file(tmp_path):
    db = tmp_path / "t.sqlite3"
    errors = []

    def writer(k):
        try:
            for i in range(20):
                nnc.tensor_write(nnc.Tensor(np.full((8, 8), k * 100 + i, "f4")), db, f"{k}/{i}")
        except BaseException as e:              # reported by the assert below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not any(th.is_alive() for th in threads), "a writer hung"
    assert not errors, errors
    for k in range(2):
        for i in range(20):
            assert (nnc.tensor_read(db, f"{k}/{i}").numpy() == k * 100 + i).all()


def test_graph_named_tensors(tmp_path):
    db = tmp_path / "g.sqlite3"
    x = nnc.Tensor(np.arange(4, dtype="f4"))
    y = nnc.Tensor(np.zeros(4, "f4"))
    z = nnc.Tensor(np.zeros(4, "f4"))
    g = nnc.Graph()
    g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [y], name="scale")
    g.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [y], [z])          # unnamed: not kept
    g.run()
    assert g.named_tensors() == {"scale.inputs[0]": x, "scale.outputs[0]": y}
    g.write_tensors(db)
    assert [r[0] for r in rows(db)] == ["scale.inputs[0]", "scale.outputs[0]"]
    x.numpy()[...] = -1
    y.numpy()[...] = -1
    g.read_tensors(db)
    assert np.array_equal(x.numpy(), np.arange(4)) and np.array_equal(y.numpy(), 2 * np.arange(4))
    # A dict names tensors explicitly; a missing name changes none of them.
    g.write_tensors(db, {"z": z})
    assert np.array_equal(nnc.tensor_read(db, "z").numpy(), 6 * np.arange(4))
    x.numpy()[...] = 5
    with pytest.raises(nnc.TensorNotFoundError, match="'nope'"):
        g.read_tensors(db, {"scale.inputs[0]": x, "nope": y})
    assert (x.numpy() == 5).all()


def test_tensor_zero():
    base = nnc.Tensor(np.arange(1, 13, dtype="f4").reshape(3, 4))
    v = base.view((3, 2), offset=0, strides=(4, 2))
    assert nnc.tensor_zero(v) is v
    assert (base.numpy()[:, ::2] == 0).all() and (base.numpy()[:, 1::2] != 0).all()
    nnc.tensor_zero(base)
    assert (base.numpy() == 0).all()
    with pytest.raises(nnc.TensorError, match="read-only"):
        nnc.tensor_zero(nnc.Tensor(np.ones(3, "f4")).freeze())


def test_tensor_eq_is_nncs_ulp_rule():
    one = np.float32([1.0])
    assert nnc.tensor_eq(one, np.float32([1.000015]))        # NNC's own comment: the same
    assert not nnc.tensor_eq(one, np.float32([1.0001]))
    assert nnc.tensor_eq(np.float32([1e-9]), np.float32([-1e-9]))   # within FLT_EPSILON
    assert nnc.tensor_eq(np.float32([-0.0]), np.float32([0.0]))
    big = np.float32([1e30])
    assert nnc.tensor_eq(big, np.nextafter(big, np.float32(np.inf)))
    assert not nnc.tensor_eq(big, big * np.float32(1.001))
    assert not nnc.tensor_eq(np.float32([np.nan]), one)        # NNC would say equal
    assert nnc.tensor_eq(np.float32([np.nan]), np.float32([np.nan]))
    assert nnc.tensor_eq(np.float64([1.0]), np.float64([1.0 + 100 * np.finfo("f8").eps]))
    assert not nnc.tensor_eq(np.float64([1.0]), np.float64([1.0 + 1e-12]))
    assert nnc.tensor_eq(np.float32([1.0]), np.float32([1.000015]), ulps=128)
    assert not nnc.tensor_eq(np.float32([1.0]), np.float32([1.000015]), ulps=64)
    assert not nnc.tensor_eq(np.int32([1, 2]), np.int32([1, 3]))
    assert not nnc.tensor_eq(np.ones(2, "f4"), np.ones(3, "f4"))
    assert not nnc.tensor_eq(np.ones(2, "f4"), np.ones(2, "f8"))
    assert nnc.tensor_eq(nnc.Tensor(np.ones((2, 2), "f4")), np.ones((2, 2), "f4"))


def test_tensor_new_from_file(tmp_path):
    path = tmp_path / "raw.bin"
    a = np.arange(30, dtype="<f4")
    path.write_bytes(b"HEAD" + a.tobytes())
    t = nnc.tensor_new_from_file(path, (5, 6), "float32", offset=4)
    assert t.shape == (5, 6) and t.readonly
    assert np.array_equal(t.numpy(), a.reshape(5, 6))
    with pytest.raises(nnc.TensorError, match="needs 128"):
        nnc.tensor_new_from_file(path, (31,), "float32", offset=4)
    with pytest.raises(nnc.TensorIOError, match="cannot map"):
        nnc.tensor_new_from_file(tmp_path / "missing.bin", (2,), "float32")
    with pytest.raises(nnc.TensorError, match="unsupported dtype"):
        nnc.tensor_new_from_file(path, (2,), "complex64")
