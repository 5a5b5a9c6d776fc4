"""Frozen memory (nnc/tensor/constant.pyx) and Tensor.freeze: weights that can never change, and
the packed copies kernels keep of them (made once, freed with the memory)."""

import copy
import ctypes
import gc
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nnc
from nnc.tensor import constant


def run_isolated(code):
    """Run ``code`` in a fresh interpreter with a deadline: a hang or crash fails the test."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def settle():
    gc.collect()
    return constant.frozen_count()


# -- frozen memory -----------------------------------------------------------------------------

def test_frozen_copy_is_a_read_only_aligned_copy_no_view_can_make_writable():
    src = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    a = constant.frozen_copy(src[:, ::-1])              # strided source: NumPy does the copy
    np.testing.assert_array_equal(a, src[:, ::-1])
    assert a.flags.c_contiguous and not a.flags.writeable
    assert a.__array_interface__["data"][0] % 64 == 0
    with pytest.raises(ValueError):
        a[0, 0, 0] = 1
    for v in (a, a[1:], a.reshape(-1), a.T, a.view(np.int32)):
        with pytest.raises(ValueError, match="WRITEABLE"):
            v.flags.writeable = True
    with pytest.raises(TypeError):
        memoryview(a).cast("B")[0] = 1
    with pytest.raises(ValueError, match="WRITEABLE"):
        np.frombuffer(constant.frozen_copy(np.ones(2)), np.uint8).flags.writeable = True
    owner = a.base.base.obj                             # reshape's base: frombuffer's array
    assert isinstance(owner, constant.FrozenMemory) and owner.nbytes == a.nbytes
    assert memoryview(owner).readonly
    with pytest.raises((BufferError, TypeError)):
        (ctypes.c_char * owner.nbytes).from_buffer(owner)   # asks for a writable buffer
    assert constant.frozen_copy(src, "float64").dtype == np.float64


def test_frozen_copy_refuses_objects():
    with pytest.raises(nnc.TensorError, match="object"):
        constant.frozen_copy(np.array([1, "a"], dtype=object))


def test_frozen_memory_is_freed_with_its_last_array_or_tensor():
    before = settle()
    a = constant.frozen_copy(np.ones(100, np.float32))
    v = a[10:20]
    t = nnc.Tensor(a)
    assert settle() == before + 1
    del a
    assert settle() == before + 1 and v.sum() == 10
    del v
    assert settle() == before + 1
    del t
    assert settle() == before


def test_frozen_accounting_and_recognition_of_views():
    a = constant.frozen_copy(np.zeros(64, np.float32))
    assert constant.is_frozen(a) and constant.is_frozen(a[5:])
    assert constant.frozen_nbytes(a[5:]) == 256 and constant.packed_nbytes(a) == 0
    t = nnc.Tensor(a)
    assert t.frozen and t.view((4,), offset=60).frozen
    plain = np.zeros(64, np.float32)
    assert not constant.is_frozen(plain) and constant.frozen_nbytes(plain) == 0
    assert not nnc.Tensor(plain).frozen
    with pytest.raises(nnc.TensorError):
        constant.frozen_nbytes("not an array")
    with pytest.raises(TypeError):
        constant.FrozenMemory()


# -- packed copies -----------------------------------------------------------------------------

def test_pack_is_made_once_kept_and_freed_with_the_memory():
    src = np.arange(16, dtype=np.uint8)
    a = constant.frozen_copy(src)
    got, calls, packed = constant._pack_test(a, 1, 16)
    assert calls == 1 and got[0] != 0 and got[0] % 64 == 0
    assert packed == bytes(~src & 0xFF)
    assert constant.packed_nbytes(a) == 16
    again, calls, _ = constant._pack_test(a, 1, 16)
    assert again == got and calls == 0                  # kept: not packed again
    other, calls, _ = constant._pack_test(a, 2, 16)     # another format: another copy
    assert calls == 1 and other != got
    assert constant.packed_nbytes(a) == 32
    # A view's data pointer lies in the block: its packed copy is kept with the block.
    view, calls, packed = constant._pack_test(a[4:], 1, 8)
    assert calls == 1 and packed == bytes(~src[4:12] & 0xFF)
    assert constant.packed_nbytes(a) == 40
    before = settle()
    del a
    assert settle() == before - 1


def test_a_pack_of_two_mib_or_more_starts_on_a_huge_page_boundary():
    """Large packed copies are placed for transparent huge pages (whole 2 MiB spans); their
    bytes and their accounting are those asked for, and small ones stay 64-byte aligned."""
    src = np.random.default_rng(0).integers(0, 256, 5 << 20, dtype=np.uint8)
    a = constant.frozen_copy(src)
    got, calls, packed = constant._pack_test(a, 1, 3 << 20)
    assert calls == 1 and got[0] % (2 << 20) == 0
    assert packed == bytes(~src[:3 << 20] & 0xFF)
    small, calls, _ = constant._pack_test(a, 2, (2 << 20) - 64)
    assert calls == 1 and small[0] % 64 == 0
    old = constant._huge_pages(False)
    try:
        plain, calls, packed = constant._pack_test(a, 3, 3 << 20)
        assert calls == 1 and plain[0] % 64 == 0 and packed == bytes(~src[:3 << 20] & 0xFF)
    finally:
        assert constant._huge_pages(old) is False
    assert constant.packed_nbytes(a) == (3 << 20) + (2 << 20) - 64 + (3 << 20)


def test_packs_of_64_kib_to_2_mib_share_huge_page_chunks_freed_with_their_last_copy():
    """Copies of 64 KiB up to 2 MiB are carved from shared chunks on a 2 MiB boundary, 4 KiB
    apart, each with its own bytes; a chunk goes with its last copy (the newest is reused from
    its start), and a copy that does not fit starts a new one. Smaller copies, and copies made
    with huge pages off, are not in chunks. In a fresh interpreter: the chunks are global."""
    out = run_isolated("""
        import gc
        import numpy as np
        from nnc.tensor import constant
        rng = np.random.default_rng(1)
        assert constant._chunk_stats() == (0, 0, 0)
        src = rng.integers(0, 256, 4 << 20, dtype=np.uint8)
        a = constant.frozen_copy(src)
        sizes = [64 << 10, (1 << 20) + 5, (2 << 20) - 64, 100 << 10]
        got = []
        for key, n in enumerate(sizes):
            at, calls, packed = constant._pack_test(a, key, n)
            assert calls == 1 and packed == bytes(~src[:n] & 0xFF), (key, n)
            got.append(at[0])
        assert all(g % 4096 == 0 for g in got), got
        assert got[1] == got[0] + (64 << 10)             # one after another in the chunk
        assert got[0] % (2 << 20) == 0                   # the chunk starts on a huge page
        chunks, live, used = constant._chunk_stats()
        assert (chunks, live) == (1, 4), (chunks, live)
        small, _, _ = constant._pack_test(a, 10, (64 << 10) - 64)    # below the chunks
        old = constant._huge_pages(False)
        try:
            plain, _, packed = constant._pack_test(a, 11, 1 << 20)   # huge pages off
            assert packed == bytes(~src[:1 << 20] & 0xFF)
        finally:
            constant._huge_pages(old)
        assert constant._chunk_stats()[:2] == (1, 4)
        # Each copy still holds its own bytes after the others were made.
        for key, n in enumerate(sizes):
            at, calls, packed = constant._pack_test(a, key, n)
            assert calls == 0 and at[0] == got[key] and packed == bytes(~src[:n] & 0xFF)
        # Enough copies from another block to fill the first chunk and start a second.
        b = constant.frozen_copy(src[::-1])
        for key in range(20):
            at, calls, packed = constant._pack_test(b, key, (2 << 20) - 4096)
            assert calls == 1 and packed == bytes(~src[::-1][:(2 << 20) - 4096] & 0xFF)
        chunks, live, used = constant._chunk_stats()
        assert chunks == 2 and live == 24, (chunks, live)
        del a                   # the older chunk keeps b's copies: it stays
        gc.collect()
        assert constant._chunk_stats()[:2] == (2, 20)
        del b                   # the older goes, the newest stays, emptied for reuse
        gc.collect()
        assert constant._chunk_stats() == (1, 0, 0), constant._chunk_stats()
        c = constant.frozen_copy(src)
        at, calls, packed = constant._pack_test(c, 0, 64 << 10)
        assert constant._chunk_stats() == (1, 1, 64 << 10)
        print(constant.frozen_count())
    """)
    assert out.split() == ["1"]


def test_chunked_packs_made_by_threads_at_once_keep_their_own_bytes():
    """Sixteen Python threads each pack copies of their own frozen block, of sizes that land in
    the shared chunks, at once (constant_pack runs without the GIL): every copy holds its own
    bytes, none overlaps another, and freeing every block frees every chunk but the newest."""
    out = run_isolated("""
        import gc
        import threading
        import numpy as np
        from nnc.tensor import constant
        rng = np.random.default_rng(2)
        blocks = [constant.frozen_copy(rng.integers(0, 256, 1 << 20, dtype=np.uint8))
                  for _ in range(16)]
        results, errors = {}, []

        def work(i):
            try:
                for key in range(6):
                    n = (64 << 10) + 4096 * ((i * 7 + key * 13) % 200)
                    at, calls, packed = constant._pack_test(blocks[i], key, n)
                    want = bytes(~np.asarray(blocks[i])[:n] & 0xFF)
                    assert calls == 1 and packed == want, (i, key)
                    results[(i, key)] = (at[0], n)
            except BaseException as e:
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors and len(results) == 96, errors
        spans = sorted(results.values())
        for (a0, n0), (a1, _) in zip(spans, spans[1:]):
            assert a0 + n0 <= a1, (a0, n0, a1)
        for (i, key), (at, n) in results.items():        # nobody wrote over anybody
            again, calls, packed = constant._pack_test(blocks[i], key, n)
            assert calls == 0 and again[0] == at
            assert packed == bytes(~np.asarray(blocks[i])[:n] & 0xFF)
        assert constant._chunk_stats()[1] == 96
        del blocks
        gc.collect()
        chunks, live, used = constant._chunk_stats()
        print(chunks, live, used)
    """)
    assert out.split() == ["1", "0", "0"]


def test_a_child_forked_while_threads_pack_can_pack_and_free():
    """Forks while other threads make and free packed copies (chunked and not): each child
    makes and frees copies of its own, so the locks a packing thread held at the fork do not
    stay held in the child; every child exits within its deadline."""
    out = run_isolated("""
        import gc
        import os
        import threading
        import time
        import numpy as np
        from nnc.tensor import constant
        stop = threading.Event()

        def churn(seed):
            rng = np.random.default_rng(seed)
            key = 0
            while not stop.is_set():
                a = constant.frozen_copy(rng.integers(0, 256, 1 << 18, dtype=np.uint8))
                for n in (1 << 10, 80 << 10, 200 << 10):
                    key += 1
                    constant._pack_test(a, key, n)
                del a

        threads = [threading.Thread(target=churn, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        ok = 0
        for _ in range(20):
            time.sleep(0.005)
            pid = os.fork()
            if pid == 0:
                b = constant.frozen_copy(np.arange(1 << 18, dtype=np.uint8))
                got, calls, packed = constant._pack_test(b, 1, 100 << 10)
                good = calls == 1 and packed == bytes(~np.arange(100 << 10, dtype=np.uint8))
                del b
                gc.collect()
                os._exit(0 if good else 3)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                time.sleep(0.01)
            else:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise SystemExit("a forked child hung")
            ok += os.waitstatus_to_exitcode(status) == 0
        stop.set()
        for t in threads:
            t.join(30)
        print(ok)
    """)
    assert out.split() == ["20"]


def test_pack_of_memory_that_is_not_frozen_is_null():
    got, calls, packed = constant._pack_test(np.ones(8, np.float32), 1, 32)
    assert got == [0] and calls == 0 and packed is None
    t = nnc.Tensor(np.ones(8, np.float32))
    assert constant._pack_test(t, 1, 32)[0] == [0]


def test_pack_under_concurrent_first_use_is_made_once():
    """Eight C threads ask for the same packed copy at once, without the GIL: one packs (slowly),
    the others wait for it and get the same copy; then the registry empties."""
    out = run_isolated("""
        import gc
        import numpy as np
        from nnc.tensor import constant
        a = constant.frozen_copy(np.arange(4096, dtype=np.uint8))
        got, calls, packed = constant._pack_test(a, 7, 4096, threads=8, sleep_s=0.05)
        assert calls == 1, calls
        assert len(set(got)) == 1 and got[0] != 0, got
        assert packed == bytes(~np.arange(4096, dtype=np.uint8) & 0xFF)
        for key in range(20):       # distinct keys at once: one copy each
            got, calls, _ = constant._pack_test(a[key:], 100 + key, 64, threads=4)
            assert calls == 1 and len(set(got)) == 1, (key, got, calls)
        assert constant.packed_nbytes(a) == 4096 + 20 * 64
        del a
        gc.collect()
        print(constant.frozen_count())
    """)
    assert out.split() == ["0"]


# -- Tensor.freeze -----------------------------------------------------------------------------

def test_freeze_snapshots_and_makes_the_tensor_read_only():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = nnc.Tensor(a)
    before = t.numpy()
    assert not t.frozen and not t.readonly
    assert t.freeze() is t
    assert t.frozen and t.readonly and t.data_ptr % 64 == 0
    np.testing.assert_array_equal(t.numpy(), a)
    with pytest.raises(ValueError):
        t.numpy()[0, 0] = 5
    with pytest.raises(ValueError):
        np.asarray(t).flags.writeable = True
    # Arrays taken before are detached: writing them no longer reaches the tensor.
    a[...] = -1
    before[0, 0] = 7
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))
    ptr = t.data_ptr
    assert t.freeze() is t and t.data_ptr == ptr         # idempotent
    assert t.view((3,), offset=3).frozen


def test_freeze_refuses_views_movable_tensors_and_reports_why():
    base = nnc.Tensor(np.zeros((4, 4), np.float32))
    with pytest.raises(nnc.TensorError, match="freeze that tensor .the base."):
        base.view((2, 4), offset=4).freeze()
    with pytest.raises(nnc.TensorError, match="Graph.freeze"):
        base.view((4,), strides=(4,)).freeze()
    mv = nnc.MultiView([nnc.Tensor.zeros(3), nnc.Tensor.zeros(3)], anchor=nnc.Graph())
    with pytest.raises(nnc.TensorError, match="loop may re-point"):
        mv.freeze()
    base.freeze()
    assert base.view((2, 4), offset=4).freeze().frozen  # a view of frozen memory: nothing to do


def test_command_writing_a_frozen_tensor_is_refused():
    w = nnc.Tensor(np.ones(4, np.float32)).freeze()
    x = nnc.Tensor(np.ones(4, np.float32))
    with pytest.raises(nnc.CommandError, match="read-only"):
        nnc.cmd_exec(nnc.Cmd("RELU"), [x], [w])
    with pytest.raises(nnc.CommandError, match="read-only"):
        nnc.cmd_exec(nnc.Cmd("RELU"), [w], [w])
    g = nnc.Graph()
    with pytest.raises(nnc.CommandError, match="read-only"):
        g.exec(nnc.Cmd("RELU"), [x], [w])
    np.testing.assert_array_equal(w.numpy(), 1)


def test_freezing_a_tensor_a_built_graph_writes_stops_its_next_run():
    x = nnc.Tensor(np.ones(4, np.float32))
    y = nnc.Tensor(np.zeros(4, np.float32))
    g = nnc.Graph()
    g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [y])
    g.run()
    y.freeze()
    with pytest.raises(nnc.CommandError, match="read-only"):
        g.run()
    np.testing.assert_array_equal(y.numpy(), 2)
    with pytest.raises(nnc.CommandError, match="read-only"):
        g.run(stream=nnc.Stream())


def test_freezing_an_input_rebinds_python_backends_of_a_built_graph():
    """A Python backend was bound to the ndarray of the memory the tensor left: after freezing,
    writing that array must not change the graph's result."""
    x = np.ones((1, 4, 4, 2), np.float32)
    w0 = np.full((3, 1, 1, 2), 0.5, np.float32)
    w = nnc.Tensor(w0)
    y = nnc.Tensor.zeros((1, 4, 4, 3))
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION", backend="CPU_REF"), [x, w, None], [y])
    g.run()
    want = y.numpy().copy()
    w.freeze()
    w0[...] = 100                                       # the detached array
    y.numpy()[...] = np.nan
    g.run()
    np.testing.assert_array_equal(y.numpy(), want)


def test_pickle_and_copy_of_frozen_tensors():
    t = nnc.Tensor(np.arange(5, dtype=np.float32)).freeze()
    back = pickle.loads(pickle.dumps(t))
    assert back.frozen and back.readonly and back.data_ptr != t.data_ptr
    np.testing.assert_array_equal(back.numpy(), t.numpy())
    plain = pickle.loads(pickle.dumps(nnc.Tensor(np.ones(2, np.float32))))
    assert not plain.frozen and not plain.readonly
    c = copy.copy(t)                                    # a copy is for changing: writable
    assert not c.frozen and not c.readonly
    c.numpy()[0] = 9
    assert t.numpy()[0] == 0


def test_frozen_tensors_pass_the_invariant_checks():
    from nnc.check.invariants import live_graph_and_tensor_problems

    t = nnc.Tensor(np.ones(3, np.float32)).freeze()
    v = t.view((2,), offset=1)
    t.numpy()
    v.numpy()
    names = (f"{id(t):#x}", f"{id(v):#x}")
    assert [p for p in live_graph_and_tensor_problems() if any(n in p for n in names)] == []


def test_freeze_keeps_the_memory_it_left_while_the_block_lives():
    """A run already in flight on a stream may still read a tensor's old memory when it is
    frozen: that memory lives as long as the frozen block, then goes with it."""
    import gc
    import weakref

    a = np.ones(4096, np.float32)
    left = weakref.ref(a)
    t = nnc.Tensor(a)
    del a
    t.freeze()
    gc.collect()
    assert left() is not None
    del t
    gc.collect()
    assert left() is None
