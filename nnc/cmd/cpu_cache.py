"""The CPU's caches: their size, and flushing them before a timing, so that the timing sees
memory as a whole run of a large network leaves it between one use of a layer's weights and the
next (cmd_autotune's ``cold=True``; Graph.autotune decides when)."""

import os

import numpy as np

# The eviction buffer (twice the last-level cache), made on first use and kept until
# cache_flush_release(); None when not made. Users read it into a local first: another thread
# may release it meanwhile (two graphs autotuned at once).
_buffer = None


def last_level_cache_bytes():
    """The largest CPU cache's size in bytes, from Linux's sysfs (32 MiB where it cannot be
    read)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    most = 0
    try:
        for entry in os.listdir(base):
            if entry.startswith("index"):
                with open(f"{base}/{entry}/size") as f:
                    text = f.read().strip()
                unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
                most = max(most, int(text[:-1] if unit > 1 else text) * unit)
    except (OSError, ValueError):
        most = 0
    return most or (32 << 20)


def cache_flush(inputs=()):
    """Flush the caches (write every line of a buffer twice the last-level cache), then read
    ``inputs`` back in, the host tensors that are not frozen (the node before a layer in a run
    has just written them); None entries are skipped."""
    global _buffer
    buf = _buffer
    if buf is None:
        buf = _buffer = np.zeros(2 * last_level_cache_bytes() // 8, np.float64)
    buf += 1.0
    for x in inputs:
        if x is not None and x.device == "cpu" and not x.frozen:
            np.add.reduce(x.numpy(), axis=None)


def cache_flush_release():
    """Free the eviction buffer (Graph.autotune calls this when it is done)."""
    global _buffer
    _buffer = None
