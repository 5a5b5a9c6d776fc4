"""Tensor formats (NNC's info.format) on tensors, views, copies, pickles, persistence, loops and
the C API's struct; tensor_resize and what happens to what held the resized tensor."""

import copy
import gc
import pickle
import sqlite3
import weakref

import numpy as np
import pytest

import nnc
from nnc.tensor.io import TENSOR_FORMATS, tensors_read


def test_format_defaults_to_nhwc_and_is_kept_where_tensors_are_made():
    assert nnc.Tensor(np.zeros((2, 3), np.float32)).format == "NHWC"
    assert nnc.Tensor.empty((2, 3, 4)).format == "NHWC"
    for fmt in ("NCHW", "NHWC", "CHWN"):
        for t in (nnc.Tensor(np.zeros((1, 2, 3, 4), np.float32), format=fmt),
                  nnc.Tensor.empty((1, 2, 3, 4), format=fmt),
                  nnc.Tensor.zeros((1, 2, 3, 4), "float64", format=fmt.lower())):
            assert t.format == fmt
            assert f"format={fmt!r}" in repr(t)
            assert t.view((2, 3), offset=4).format == fmt
            assert copy.copy(t).format == fmt and copy.deepcopy(t).format == fmt
            assert pickle.loads(pickle.dumps(t)).format == fmt
    frozen = nnc.Tensor(np.ones((2, 2, 2), np.float32), format="NCHW").freeze()
    again = pickle.loads(pickle.dumps(frozen))
    assert again.frozen and again.format == "NCHW"


def test_bad_formats_are_refused():
    for bad in ("NWHC", 2, None):
        with pytest.raises(nnc.TensorError, match="unknown tensor format"):
            nnc.Tensor.empty((2, 2), format=bad)
    with pytest.raises(nnc.TensorError, match="unknown tensor format"):
        nnc.Tensor(np.zeros(3, np.float32), format="nc")


def test_persistence_writes_and_reads_the_real_format(tmp_path):
    db = tmp_path / "formats.sqlite3"
    a = nnc.Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4), format="NCHW")
    nnc.tensor_write(a, db, "a")
    nnc.tensor_write(nnc.Tensor(np.ones(3, np.float32)), db, "b")
    with sqlite3.connect(db) as con:
        rows = dict(con.execute("SELECT name, format FROM tensors"))
    assert rows == {"a": TENSOR_FORMATS["NCHW"], "b": TENSOR_FORMATS["NHWC"]} == {"a": 1, "b": 2}
    got = nnc.tensor_read(db, "a")
    assert got.format == "NCHW" and np.array_equal(got.numpy(), a.numpy())
    into = nnc.Tensor.zeros((2, 3, 4), format="NCHW")
    assert nnc.tensor_read(db, "a", into) is into and np.array_equal(into.numpy(), a.numpy())
    # The same shape in another format holds other pixels in each place.
    other = nnc.Tensor.zeros((2, 3, 4))
    with pytest.raises(nnc.TensorError, match="NCHW in the database, the tensor to read into "
                                              "is NHWC"):
        nnc.tensor_read(db, "a", other)
    assert not other.numpy().any()
    b = nnc.Tensor.zeros(3)
    with pytest.raises(nnc.TensorError, match="NCHW in the database"):
        tensors_read({"b": b, "a": other}, db)
    assert not b.numpy().any()              # checked before any tensor changes


def test_loops_refuse_versions_of_another_format():
    body = nnc.Graph()
    x = nnc.Tensor.zeros((1, 2, 3, 4))
    y = nnc.Tensor.zeros((1, 2, 3, 4), format="NCHW")
    with pytest.raises(nnc.TensorError, match="one shape, dtype, format and layout"):
        nnc.MultiView([x, y], anchor=body)
    mv = nnc.MultiView([x, nnc.Tensor.zeros((1, 2, 3, 4))], anchor=body)
    with pytest.raises(nnc.TensorError, match="NCHW tensor to a multiview of"):
        mv.synchronize(y)
    with pytest.raises(nnc.GraphError, match="one shape, dtype, format and layout"):
        body.add_carry_over(x, y)


def test_c_struct_keeps_its_layout_with_the_format_in_the_padding():
    """The format sits where the struct had padding: the C API's layout check passes and
    every other field keeps its offset (a C backend built before reads the same struct)."""
    from nnc.capi import capi  # noqa: F401  (its import checks nnc_types.h against tensor.pxd)

    with open(nnc.get_include() + "/nnc_types.h") as f:
        header = f.read()
    assert "int format;" in header and "#define NNC_TENSOR_FORMAT_NCHW 0x01" in header


# -- tensor_resize ----------------------------------------------------------------------------

def test_resize_smaller_reuses_the_memory_and_keeps_the_leading_elements():
    t = nnc.Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4), format="NCHW")
    r = nnc.tensor_resize(t, (2, 5))
    assert r.shape == (2, 5) and r.dtype == t.dtype and r.format == "NCHW"
    assert r.data_ptr == t.data_ptr
    np.testing.assert_array_equal(r.numpy().reshape(-1), np.arange(10))
    r.numpy()[0, 0] = -1                    # the same memory, as NNC keeps it
    assert t.numpy()[0, 0, 0] == -1
    assert t.shape == (2, 3, 4)             # the tensor given is never changed


def test_resize_larger_copies_into_new_memory():
    t = nnc.Tensor(np.arange(6, dtype=np.float64).reshape(2, 3))
    r = nnc.tensor_resize(t, (4, 4))
    assert r.shape == (4, 4) and r.dtype == np.float64 and r.format == "NHWC"
    assert r.data_ptr != t.data_ptr and r.data_ptr % 64 == 0
    np.testing.assert_array_equal(r.numpy().reshape(-1)[:6], np.arange(6))
    r.numpy()[...] = 7
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))


def test_resize_leaves_graphs_and_views_of_the_old_tensor_working():
    """A graph node and a view hold the old tensor: it keeps its shape and memory, which lives
    on after every Python reference to it but theirs is gone (no dangling pointer)."""
    x = nnc.Tensor(np.arange(8, dtype=np.float32))
    out = nnc.Tensor.zeros(8)
    g = nnc.Graph()
    g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [out])
    view = x.view((4,), offset=4)
    owner = weakref.ref(x._owner_object)
    bigger = nnc.tensor_resize(x, (100,))
    smaller = nnc.tensor_resize(x, (2, 2))
    del x
    gc.collect()
    bigger.numpy()[...] = -5                # new memory: the graph does not see it
    smaller.numpy()[...] = 1                # the old memory: the graph sees it
    g.run()
    np.testing.assert_array_equal(out.numpy(), [2, 2, 2, 2, 8, 10, 12, 14])
    np.testing.assert_array_equal(view.numpy(), [4, 5, 6, 7])
    assert owner() is not None
    del g, view, smaller
    gc.collect()
    assert owner() is None and bigger.shape == (100,)   # freed with its last holder


def test_resize_refuses_what_nnc_asserts_on():
    t = nnc.Tensor.zeros((4, 4))
    with pytest.raises(nnc.TensorError, match="a view is not resized"):
        nnc.tensor_resize(t.view((2, 2)), (4,))
    with pytest.raises(nnc.TensorError, match="a view is not resized"):
        nnc.tensor_resize(t.view((4,), offset=4), (4,))
    with pytest.raises(nnc.TensorError, match="frozen"):
        nnc.tensor_resize(nnc.Tensor.zeros(4).freeze(), (2,))
    body = nnc.Graph()
    mv = nnc.MultiView([nnc.Tensor.zeros(4), nnc.Tensor.zeros(4)], anchor=body)
    with pytest.raises(nnc.TensorError, match="re-point"):
        nnc.tensor_resize(mv, (2,))
    with pytest.raises(nnc.TensorError, match="negative dimension"):
        nnc.tensor_resize(t, (-1, 2))
    with pytest.raises(TypeError):
        nnc.tensor_resize(np.zeros(3), (2,))


def test_resize_of_a_read_only_file_keeps_it_read_only_where_it_aliases(tmp_path):
    path = tmp_path / "w.bin"
    np.arange(6, dtype=np.float32).tofile(path)
    t = nnc.tensor_new_from_file(path, (6,))
    small = nnc.tensor_resize(t, (3,))
    assert small.readonly
    big = nnc.tensor_resize(t, (8,))
    assert not big.readonly
    np.testing.assert_array_equal(big.numpy()[:6], np.arange(6))
