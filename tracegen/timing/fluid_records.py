"""What the fluid engine records on request: links' loads and items' rates over time, and the
queries on them (binning for utilisation, an item's sent-bytes curve for the pcap writer)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

INF = np.iinfo(np.int64).max // 4     # 'never' in integer ns

def progress_times(rates: "ItemRates", items, frac, finish) -> tuple[np.ndarray, np.ndarray]:
    """When (float ns) each queried item had sent fraction `frac` of what it sent by `finish`
    (per query: its item, the fraction, the item's finish), on its cumulative sent-bytes curve
    (piecewise linear from its rate records). ok: the item's rate changed while it sent and its
    records are complete - elsewhere the time is nan (one rate: a straight line, the caller's)."""
    items, frac = np.asarray(items, np.int64), np.asarray(frac, np.float64)
    finish = np.asarray(finish, np.int64)
    out, ok = np.full(len(items), np.nan), np.zeros(len(items), bool)
    if rates is None or not len(rates.t) or not len(items):
        return out, ok
    o = np.argsort(rates.item, kind="stable")              # per item, in time order
    k_it, k_t, k_v = rates.item[o], rates.t[o].astype(np.int64), rates.bytes_per_ns[o]
    n = max(int(k_it.max()), int(items.max())) + 1
    count = np.bincount(k_it, minlength=n)
    fin = np.full(n, -1, np.int64)
    fin[items] = finish
    want = (count >= 2) & (fin >= 0) & (fin <= rates.complete_until)
    keep = want[k_it]
    k_it, k_t, k_v = k_it[keep], k_t[keep], k_v[keep]
    if not len(k_it):
        return out, ok
    last = np.r_[k_it[1:] != k_it[:-1], True]
    seg = k_v * np.maximum(np.where(last, fin[k_it], np.r_[k_t[1:], 0]) - k_t, 0)
    g0 = np.cumsum(seg) - seg                              # cumulative bytes, items concatenated
    lo = np.flatnonzero(np.r_[True, k_it[1:] != k_it[:-1]])
    hi = np.r_[lo[1:], len(k_it)] - 1
    it_lo, it_hi, it_off, it_bytes = (np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n), np.zeros(n))
    it_lo[k_it[lo]], it_hi[k_it[lo]], it_off[k_it[lo]] = lo, hi, g0[lo]
    np.add.at(it_bytes, k_it, seg)
    ok = want[items]
    q, f = items[ok], np.clip(frac[ok], 0.0, 1.0)
    g = it_off[q] + f * it_bytes[q]
    k = np.clip(np.searchsorted(g0, g, "right") - 1, it_lo[q], it_hi[q])
    v = k_v[k]
    out[ok] = k_t[k] + np.where(v > 0, (g - g0[k]) / np.where(v > 0, v, 1), 0.0)
    return out, ok


class ItemRates(NamedTuple):
    """Piecewise-constant rates of items: from t[k] on, item[k] sends bytes_per_ns[k] (until its
    next record or its finish). Records are in time order. complete_until: the records of an item
    that finishes at or before it are complete (INF: none was dropped); the memory bound dropped
    every rate change from then on."""
    t: np.ndarray
    item: np.ndarray
    bytes_per_ns: np.ndarray
    complete_until: int

    @property
    def truncated(self) -> bool:
        return self.complete_until < INF

    def within(self, items, t0, t1) -> "ItemRates":
        """Per query q: the records of item items[q] over [t0[q], t1[q]) - the rate in effect at
        t0 (stamped t0) and its changes before t1 - as item q (time order per query)."""
        items, t0, t1 = (np.asarray(a, np.int64) for a in (items, t0, t1))
        if not len(self.t) or not len(items):
            return ItemRates(self.t[:0], self.item[:0], self.bytes_per_ns[:0], self.complete_until)
        o = np.lexsort((self.t, self.item))
        it, t, v = self.item[o], self.t[o].astype(np.int64), self.bytes_per_ns[o]
        span = int(max(t.max(), t1.max(), 0)) + 1
        key = it * span + t
        first = np.searchsorted(it, items)                  # the item's first record
        a = np.maximum(np.searchsorted(key, items * span + np.maximum(t0, 0), "right") - 1, first)
        b = np.searchsorted(key, items * span + np.maximum(t1, 0), "left")
        has = (first < len(it)) & (it[np.minimum(first, len(it) - 1)] == items)
        n = np.where(has, np.maximum(b - a, 0), 0)
        q = np.repeat(np.arange(len(items)), n)
        k = np.repeat(a, n) + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        return ItemRates(np.maximum(t[k], t0[q]), q, v[k], self.complete_until)

    def take(self, items: np.ndarray) -> "ItemRates":
        """The records of `items` (ids), renumbered 0..len(items)-1 in that order."""
        items = np.asarray(items, np.int64)
        if not len(self.item) or not len(items):
            return ItemRates(self.t[:0], self.item[:0], self.bytes_per_ns[:0], self.complete_until)
        new = np.full(max(int(self.item.max()), int(items.max())) + 1, -1, np.int64)
        new[items] = np.arange(len(items))
        k = new[self.item]
        keep = k >= 0
        return ItemRates(self.t[keep], k[keep], self.bytes_per_ns[keep], self.complete_until)


class LinkLoad(NamedTuple):
    """Piecewise-constant load of links: from t[k] on, link[k] carries bytes_per_ns[k]."""
    t: np.ndarray
    link: np.ndarray
    bytes_per_ns: np.ndarray
    truncated: bool

    def binned_used(self, bin_ns: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
        """(links, bytes per bin) of only the links with records: a fabric of 65,536 spines has
        262,000 link directions, a small job loads a few dozen (binned() would hold them all)."""
        used, compact = np.unique(self.link, return_inverse=True)
        return used, self._replace(link=compact.reshape(-1)).binned(len(used), bin_ns, bins)

    def binned(self, n_links: int, bin_ns: int, bins: int) -> np.ndarray:
        """Bytes each link carried in each bin [k bin_ns, (k+1) bin_ns)."""
        out = np.zeros((n_links, bins + 2))
        if not len(self.t):
            return out[:, :bins]
        o = np.lexsort((self.t, self.link))
        t, ln, v = self.t[o], self.link[o], self.bytes_per_ns[o]
        last = np.r_[ln[1:] != ln[:-1], True]
        b = np.where(last, t, np.r_[t[1:], 0])       # each record holds until the link's next one
        keep = (b > t) & (v > 0) & (t < bins * bin_ns)
        a, b, v, ln = t[keep], np.minimum(b[keep], bins * bin_ns), v[keep], ln[keep]
        b0, b1 = a // bin_ns, (b - 1) // bin_ns
        one = b0 == b1
        np.add.at(out, (ln[one], b0[one]), v[one] * (b[one] - a[one]))
        m = ~one
        np.add.at(out, (ln[m], b0[m]), v[m] * ((b0[m] + 1) * bin_ns - a[m]))
        np.add.at(out, (ln[m], b1[m]), v[m] * (b[m] - b1[m] * bin_ns))
        inner = m & (b1 > b0 + 1)
        diff = np.zeros_like(out)
        np.add.at(diff, (ln[inner], b0[inner] + 1), v[inner] * bin_ns)
        np.add.at(diff, (ln[inner], b1[inner]), -v[inner] * bin_ns)
        np.cumsum(diff, axis=1, out=diff)            # in place: no third and fourth [links, bins] array
        out += diff
        return out[:, :bins]
