"""CSV text of a block of table columns, compiled (numba): a 16k-GPU job's flows.csv has 3 M rows of
27 fields, which Python's `%` formatting writes at ~4 µs a row (12 s); here each column becomes
ASCII bytes with per-row offsets (integers, labels, ';'-joined lists) and one pass joins the rows.
The bytes are those of flows.write_csv's Python path (tests/test_flows_csv_text.py checks it)."""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _int_text(v):
    """Decimal text of each value (a leading '-' for negatives): (bytes, offsets)."""
    n = len(v)
    ptr = np.zeros(n + 1, np.int64)
    for i in range(n):
        x = v[i]
        d = 1
        if x < 0:
            d += 1
            x = -x
        while x >= 10:
            x //= 10
            d += 1
        ptr[i + 1] = ptr[i] + d
    buf = np.empty(ptr[n], np.uint8)
    for i in range(n):
        x = v[i]
        neg = x < 0
        if neg:
            x = -x
        j = ptr[i + 1] - 1
        while True:
            buf[j] = 48 + x % 10
            x //= 10
            j -= 1
            if x == 0:
                break
        if neg:
            buf[j] = 45
    return buf, ptr


@numba.njit(cache=True, nogil=True)
def _label_text(idx, lab_buf, lab_ptr):
    """Label idx[i]'s text (labels as one buffer with offsets)."""
    n = len(idx)
    ptr = np.zeros(n + 1, np.int64)
    for i in range(n):
        ptr[i + 1] = ptr[i] + lab_ptr[idx[i] + 1] - lab_ptr[idx[i]]
    buf = np.empty(ptr[n], np.uint8)
    for i in range(n):
        j = ptr[i]
        for a in range(lab_ptr[idx[i]], lab_ptr[idx[i] + 1]):
            buf[j] = lab_buf[a]
            j += 1
    return buf, ptr


@numba.njit(cache=True, nogil=True)
def _list_text(row_ptr, vals_buf, vals_ptr):
    """Per row, its values' texts joined by ';' (row_ptr: the rows' ranges of values)."""
    n = len(row_ptr) - 1
    ptr = np.zeros(n + 1, np.int64)
    for i in range(n):
        a, b = row_ptr[i], row_ptr[i + 1]
        ptr[i + 1] = ptr[i] + (vals_ptr[b] - vals_ptr[a]) + max(b - a - 1, 0)
    buf = np.empty(ptr[n], np.uint8)
    for i in range(n):
        j = ptr[i]
        for k in range(row_ptr[i], row_ptr[i + 1]):
            if k > row_ptr[i]:
                buf[j] = 59
                j += 1
            for a in range(vals_ptr[k], vals_ptr[k + 1]):
                buf[j] = vals_buf[a]
                j += 1
    return buf, ptr


@numba.njit(cache=True, nogil=True)
def _join_rows(buf, starts, ends):
    """Rows of fields: field c of row i is buf[starts[i, c]:ends[i, c]]; ',' between, '\\n' after."""
    n, k = starts.shape
    size = 0
    for i in range(n):
        for c in range(k):
            size += ends[i, c] - starts[i, c]
    out = np.empty(size + n * k, np.uint8)
    j = 0
    for i in range(n):
        for c in range(k):
            for a in range(starts[i, c], ends[i, c]):      # fields are short: a loop beats a slice copy
                out[j] = buf[a]
                j += 1
            out[j] = 44 if c < k - 1 else 10
            j += 1
    return out


def _text(col, v) -> tuple[np.ndarray, np.ndarray]:
    if col.kind == "int":
        return _int_text(np.asarray(v, np.int64))
    if col.kind == "label":
        enc = [s.encode() for s in col.labels]
        lab_ptr = np.zeros(len(enc) + 1, np.int64)
        np.cumsum([len(s) for s in enc], out=lab_ptr[1:])
        return _label_text(np.asarray(v, np.int64), np.frombuffer(b"".join(enc) or b"\0", np.uint8), lab_ptr)
    vals_buf, vals_ptr = _int_text(np.asarray(v.values, np.int64))
    return _list_text(np.asarray(v.ptr, np.int64), vals_buf, vals_ptr)


def csv_rows(columns, lo: int, hi: int) -> bytes:
    """Rows [lo, hi) of the columns (flows.Column) as CSV lines, the header not included."""
    parts = [_text(c, c.get(lo, hi)) for c in columns]
    base = np.cumsum([0] + [len(b) for b, _ in parts[:-1]])
    buf = np.concatenate([b for b, _ in parts]) if parts else np.zeros(0, np.uint8)
    starts = np.stack([p[:-1] + o for (_, p), o in zip(parts, base)], axis=1)    # [row, field]
    ends = np.stack([p[1:] + o for (_, p), o in zip(parts, base)], axis=1)
    return _join_rows(buf, starts, ends).tobytes()
