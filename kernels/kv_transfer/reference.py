"""numpy reference of the kv_transfer kernels: exact bytes.

    gather(pool, page_ids)        -> bytes of pool[page_ids[0]], pool[page_ids[1]], ... ([n * B] uint8)
    scatter(buf, page_ids, pool)  -> a copy of pool with pool[page_ids[i]] = page i of buf, in order
    checksum(buf)                 -> sum_i uint64(byte_i) * (i + 1) mod 2**64, as a Python int
"""
import numpy as np

__all__ = ["gather", "scatter", "checksum"]

_CHUNK = 1 << 22   # bytes per step of checksum (bounds its uint64 temporaries to 32 MiB)


def gather(pool, page_ids):
    pool = np.asarray(pool, dtype=np.uint8)
    ids = np.asarray(page_ids, dtype=np.int64)
    return np.ascontiguousarray(pool[ids]).reshape(-1)


def scatter(buf, page_ids, pool):
    pool = np.array(pool, dtype=np.uint8, copy=True)
    ids = np.asarray(page_ids, dtype=np.int64)
    if ids.size == 0:
        return pool
    B = pool.shape[1]
    pages = np.asarray(buf, dtype=np.uint8).reshape(-1)[: ids.size * B].reshape(ids.size, B)
    # sequential semantics: of repeated ids the last write wins (explicitly, not numpy's
    # unspecified order of repeated fancy-index assignment)
    _, first_in_reversed = np.unique(ids[::-1], return_index=True)
    last = ids.size - 1 - first_in_reversed
    pool[ids[last]] = pages[last]
    return pool


def checksum(buf):
    b = np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
    total = np.uint64(0)
    with np.errstate(over="ignore"):
        for start in range(0, b.size, _CHUNK):
            part = b[start:start + _CHUNK].astype(np.uint64)
            weights = np.arange(start + 1, start + 1 + part.size, dtype=np.uint64)
            total = np.uint64(total + np.sum(part * weights, dtype=np.uint64))   # wraps mod 2**64
    return int(total)
