"""Compressed posting lists with block maxima, and the exact BM25 search over them (the on-disk index's format 2).

**Layout.** Each term's postings (ascending doc ids, with their term frequencies) are cut into blocks of
:data:`BLOCK` postings (the last block of a term may be shorter). Per block: the last doc id (``block_last``,
uint32), the largest BM25 impact in it (``block_max``, float32), the bit widths of its doc gaps and its term
frequencies (``block_bits``, two uint8 per block) and where its bits start (``block_off``, int64, in 32-bit words
of ``words``). A block stores its ``n`` doc gaps (the first relative to the previous block's last doc, or to 0 in a
term's first block) in ``n * gap_bits`` bits, then its ``n`` term frequencies in ``n * tf_bits`` bits, packed
little-endian from bit 0 of word ``block_off[b]``; ``words`` ends with one spare zero word so that every value can be
read with one 64-bit load. ``term_blocks[t]:term_blocks[t + 1]`` are term ``t``'s blocks.

Impacts are not stored: a posting's impact is recomputed from its tf, the term's idf and the document's length by the
same float64 operations as the in-memory index (:func:`impact`), so scores are bit-identical to it. That is what lets
the postings shrink to the bits of the gaps and frequencies (about 1.5-2.5 bytes a posting instead of 8).

**Search** (:func:`search_range`). Queries of at most :data:`DAAT_MAX_TERMS` distinct terms are searched
document-at-a-time with block-max MaxScore: terms sorted by their largest possible contribution; once the top ``k``
is full, the terms whose bounds together cannot lift a document above the k-th score become non-essential; candidates
come only from the essential terms, and a candidate is dropped, before the non-essential lists are even decoded, as
soon as its known contributions plus the block maxima of the non-essential blocks it could fall in cannot beat the
k-th score. Only the blocks a candidate falls in are decoded. A document's score is the float32 sum of its terms'
contributions in the order the in-memory kernel adds them (shortest posting list first), so the scores, the ranking
and the tie-breaking (lower doc id first) equal the in-memory index's. A query of common terms, where the essential
lists would still be most of its postings (bm25.py's ``_dense_pays``: catalogue queries of sizes and colours, or
wiki queries of the most frequent words), is scored window by window instead (:func:`_taat_windows`): every posting
into an accumulator of ``WINDOW`` documents, whose norms and scores stay in cache, in the same order of additions,
each window scanned for the top ``k`` (or skipped when its block maxima cannot beat the k-th score). Longer queries,
and indexes with a negative impact (where the bounds would not hold), are scored term-at-a-time over every posting
into a dense accumulator (cost: the query's postings, never more).
"""

from __future__ import annotations

import numpy as np

from .bm25 import (
    DAAT_POSTING_COST,
    THETA_SHARE,
    WINDOW,
    _dense_pays,
    _flush_window,
    _heap_push,
    _kernel,
    _kth_ascending,
    _select_and_reset,
    _sorted_heap_out,
    _term_order,
)

__all__ = ["BLOCK", "DAAT_MAX_TERMS", "impact", "pack_blocks", "search_range", "validate"]

BLOCK = 128
"""Postings per block."""
DAAT_MAX_TERMS = 64
"""Queries with more distinct indexed terms go term-at-a-time (document-at-a-time costs a pass over the query's
cursors per candidate)."""
SEED_POSTINGS = 4096
"""Posting lists up to this long seed the threshold before the document-at-a-time pass (see ``_search_one``)."""
_EXHAUSTED = np.int64(1) << np.int64(40)  # a cursor past its last posting


@_kernel
def impact(idf, tf, norm, k1p1):  # pragma: no cover - compiled
    """float32 BM25 impact of a posting, by the in-memory index's float64 operations: ``norm`` is the document's
    ``k1 * (1 - b + b * |d| / avgdl)``, ``k1p1`` is ``k1 + 1``."""
    t = np.float64(tf)
    return np.float32(idf * (t * k1p1 / (t + norm)))


@_kernel
def _bit_length(v):  # pragma: no cover - compiled
    n = 0
    while v > 0:
        v >>= 1
        n += 1
    return n


@_kernel
def _put(words, pos, v, bits):  # pragma: no cover - compiled
    """OR ``bits`` low bits of ``v`` into ``words`` at bit ``pos`` (the words are zero there)."""
    if bits == 0:
        return
    w = pos >> 5
    s = pos & 31
    x = np.uint64(v) << np.uint64(s)
    words[w] |= np.uint32(x & np.uint64(0xFFFFFFFF))
    if s + bits > 32:
        words[w + 1] |= np.uint32(x >> np.uint64(32))


@_kernel
def _unpack(words, pos, bits, n, out):  # pragma: no cover - compiled
    """``out[:n]`` = ``n`` values of ``bits`` bits from bit ``pos`` of ``words`` (a spare word follows the data)."""
    for i in range(n):
        out[i] = _get(words, pos, bits)
        pos += bits


@_kernel
def pack_blocks(docs, tf, imp, starts, out_last, out_max, out_bits, out_off, words):  # pragma: no cover - compiled
    """Pack the postings of consecutive terms (term ``i``: ``docs/tf/imp[starts[i]:starts[i + 1]]``) into blocks.

    Writes each block's last doc, largest impact, bit widths and word offset (relative to ``words[0]``, which must
    be zeros with room for the worst case: two words a posting and one a block); returns the words used."""
    nb = 0
    wpos = 0
    for i in range(starts.size - 1):
        a = starts[i]
        e = starts[i + 1]
        p = a
        while p < e:
            q = min(p + BLOCK, e)
            base = 0 if p == a else np.int64(docs[p - 1])
            max_gap = 0
            max_tf = 0
            best = imp[p]
            prev = base
            for r in range(p, q):
                d = np.int64(docs[r])
                max_gap = max(max_gap, d - prev)
                prev = d
                max_tf = max(max_tf, np.int64(tf[r]))
                best = max(best, imp[r])
            bd = _bit_length(max_gap)
            bt = _bit_length(max_tf)
            pos = wpos * 32
            prev = base
            for r in range(p, q):
                d = np.int64(docs[r])
                _put(words, pos, d - prev, bd)
                prev = d
                pos += bd
            for r in range(p, q):
                _put(words, pos, np.int64(tf[r]), bt)
                pos += bt
            out_last[nb] = docs[q - 1]
            out_max[nb] = best
            out_bits[2 * nb] = bd
            out_bits[2 * nb + 1] = bt
            out_off[nb] = wpos
            wpos += ((q - p) * (bd + bt) + 31) >> 5
            nb += 1
            p = q
    return wpos


@_kernel
def validate(indptr, term_blocks, block_last, block_bits, block_off, words, n_docs):  # pragma: no cover - compiled
    """Whether the packed postings are safe to search: every block where ``indptr`` and ``term_blocks`` say, its
    bits inside ``words`` (spare word included), every doc id < ``n_docs`` and strictly ascending within a term,
    every block's last doc as recorded, every tf >= 1. Decodes everything once (the kernels do not bounds-check)."""
    n_terms = indptr.size - 1
    n_blocks = block_last.size
    n_words = words.size
    if term_blocks.size != n_terms + 1 or term_blocks[0] != 0 or term_blocks[n_terms] != n_blocks:
        return False
    if block_bits.size != 2 * n_blocks or block_off.size != n_blocks + 1 or block_off[0] != 0:
        return False
    if block_off[n_blocks] + 1 > n_words:
        return False
    buf = np.empty(BLOCK, np.int64)
    for t in range(n_terms):
        df = indptr[t + 1] - indptr[t]
        b0 = term_blocks[t]
        b1 = term_blocks[t + 1]
        if df < 1 or b1 - b0 != (df + BLOCK - 1) // BLOCK:
            return False
        prev = -1
        for b in range(b0, b1):
            n = min(BLOCK, df - (b - b0) * BLOCK)
            bd = np.int64(block_bits[2 * b])
            bt = np.int64(block_bits[2 * b + 1])
            if bd > 32 or bt > 32 or block_off[b + 1] - block_off[b] != (n * (bd + bt) + 31) >> 5:
                return False
            pos = block_off[b] * 32
            _unpack(words, pos, bd, n, buf)
            d = 0 if b == b0 else prev
            for i in range(n):
                d += buf[i]
                if d <= prev or d >= n_docs:
                    return False
                prev = d
            if np.int64(block_last[b]) != d:
                return False
            _unpack(words, pos + n * bd, bt, n, buf)
            for i in range(n):
                if buf[i] < 1:
                    return False
    return True


# ----------------------------------------------------------------------------------------------- search


# a cursor's columns: its block, position in it, the block's length, how many of its docs are decoded, the bit of its
# next gap, the bit of its first tf, its gap and tf widths, the last decoded doc, the cursor's doc
_CB, _POS, _BLEN, _DEC, _GBIT, _TBIT, _BD, _BT, _LAST, _CUR, _NCOL = range(11)


@_kernel
def _get(words, pos, bits):  # pragma: no cover - compiled
    """The value of ``bits`` bits at bit ``pos`` of ``words``."""
    if bits == 0:
        return 0
    x = (np.uint64(words[pos >> 5]) | (np.uint64(words[(pos >> 5) + 1]) << np.uint64(32))) >> np.uint64(pos & 31)
    return np.int64(x & ((np.uint64(1) << np.uint64(bits)) - np.uint64(1)))


@_kernel
def _enter(ix, cs, j, first, b, df):  # pragma: no cover - compiled
    """Point cursor ``j`` at the start of block ``b`` (its term's blocks start at ``first``), nothing decoded yet."""
    block_last, block_bits, block_off = ix[2], ix[4], ix[5]
    n = min(BLOCK, df - (b - first) * BLOCK)
    bd = np.int64(block_bits[2 * b])
    cs[j, _CB] = b
    cs[j, _POS] = 0
    cs[j, _BLEN] = n
    cs[j, _DEC] = 0
    cs[j, _GBIT] = block_off[b] * 32
    cs[j, _TBIT] = block_off[b] * 32 + n * bd
    cs[j, _BD] = bd
    cs[j, _BT] = np.int64(block_bits[2 * b + 1])
    cs[j, _LAST] = 0 if b == first else np.int64(block_last[b - 1])


@_kernel
def _doc(words, cs, bufd, j, p):  # pragma: no cover - compiled
    """Doc ``p`` of cursor ``j``'s block, decoding the gaps up to it (each gap once)."""
    while cs[j, _DEC] <= p:
        cs[j, _LAST] += _get(words, cs[j, _GBIT], cs[j, _BD])
        cs[j, _GBIT] += cs[j, _BD]
        bufd[j, cs[j, _DEC]] = cs[j, _LAST]
        cs[j, _DEC] += 1
    return bufd[j, p]


@_kernel
def _tf(words, cs, j, p):  # pragma: no cover - compiled
    """The tf of posting ``p`` of cursor ``j``'s block (read alone: tfs are fixed-width)."""
    return _get(words, cs[j, _TBIT] + p * cs[j, _BT], cs[j, _BT])


@_kernel
def _first_block(block_last, b, end, d):  # pragma: no cover - compiled
    """The first block in ``b..end`` whose last doc is >= ``d`` (``end`` if none): galloping, then binary search."""
    if b >= end or np.int64(block_last[b]) >= d:
        return b
    lo = b  # block_last[lo] < d
    step = 1
    hi = b + 1
    while hi < end and np.int64(block_last[hi]) < d:
        lo = hi
        step *= 2
        hi = lo + step
    if hi > end:
        hi = end
    while hi - lo > 1:  # block_last[lo] < d <= block_last[hi] (or hi == end)
        mid = (lo + hi) >> 1
        if np.int64(block_last[mid]) < d:
            lo = mid
        else:
            hi = mid
    return hi


@_kernel
def _decode(ix, first, b, df, bufd, buft):  # pragma: no cover - compiled
    """Decode block ``b`` of a term whose blocks start at ``first`` and that has ``df`` postings: absolute doc ids
    into ``bufd``, tfs into ``buft``; returns the block's length."""
    block_last, block_bits, block_off, words = ix[2], ix[4], ix[5], ix[6]
    n = min(BLOCK, df - (b - first) * BLOCK)
    bd = np.int64(block_bits[2 * b])
    bt = np.int64(block_bits[2 * b + 1])
    pos = block_off[b] * 32
    _unpack(words, pos, bd, n, bufd)
    d = 0 if b == first else np.int64(block_last[b - 1])
    for i in range(n):
        d += bufd[i]
        bufd[i] = d
    _unpack(words, pos + n * bd, bt, n, buft)
    return n


@_kernel
def _taat(ix, terms, weights, order, k, ws, out_ids, out_scores):  # pragma: no cover - compiled
    """Every posting of every term, in ``order``, into the dense accumulator (bm25.py's kernel without pruning)."""
    indptr, term_blocks, idf, norm, k1p1 = ix[0], ix[1], ix[8], ix[9], ix[10][0]
    acc, seen, touched, _, vals, ties = ws
    bufd = np.empty(BLOCK, np.int64)
    buft = np.empty(BLOCK, np.int64)
    n = 0
    for r in range(terms.size):
        j = order[r]
        t = terms[j]
        w = weights[j]
        idf_t = idf[t]
        df = indptr[t + 1] - indptr[t]
        first = term_blocks[t]
        for b in range(first, term_blocks[t + 1]):
            m = _decode(ix, first, b, df, bufd, buft)
            for i in range(m):
                d = bufd[i]
                acc[d] += w * impact(idf_t, buft[i], norm[d], k1p1)
                touched[n] = d
                n += 1 - seen[d]
                seen[d] = 1
    return _select_and_reset(acc, seen, touched, n, touched, n, k, vals, ties, out_ids, out_scores)


@_kernel
def _taat_windows(ix, terms, weights, order, k, ws, out_ids, out_scores):  # pragma: no cover - compiled
    """Every posting of every term into a small accumulator, one window of :data:`WINDOW` documents at a time (the
    terms in ``order`` within a window, so every document gets its additions in the in-memory kernel's order: the
    same float32 scores), each window scanned for the top ``k``: for queries of common terms, with no touched list,
    no selection over millions of candidates, and the window's norms and scores in cache. Once the top ``k`` is full,
    a window where the terms' block maxima add up to less than the k-th score is skipped. Needs every impact >= 0;
    a document scoring 0 is not told from one that matched nothing, so when fewer than ``k`` documents score above
    0 the query is scored again by :func:`_taat`. Returns the number of hits."""
    indptr, term_blocks, block_last, block_max, idf, norm, k1p1 = ix[0], ix[1], ix[2], ix[3], ix[8], ix[9], ix[10][0]
    nt = terms.size
    n_docs = norm.size
    accw = np.zeros(WINDOW, np.float32)
    bufd = np.empty((nt, BLOCK), np.int64)
    buft = np.empty((nt, BLOCK), np.int64)
    first = np.empty(nt, np.int64)  # per term, in processing order: its first block, current block, end, df
    blk = np.empty(nt, np.int64)
    bend = np.empty(nt, np.int64)
    dfs = np.empty(nt, np.int64)
    pos = np.zeros(nt, np.int64)
    blen = np.zeros(nt, np.int64)
    w = np.empty(nt, np.float32)
    idf_r = np.empty(nt, np.float64)
    for r in range(nt):
        t = terms[order[r]]
        first[r] = term_blocks[t]
        blk[r] = term_blocks[t]
        bend[r] = term_blocks[t + 1]
        dfs[r] = indptr[t + 1] - indptr[t]
        w[r] = weights[order[r]]
        idf_r[r] = idf[t]
        if blk[r] < bend[r]:
            blen[r] = _decode(ix, first[r], blk[r], dfs[r], bufd[r], buft[r])
    hs = np.empty(max(k, 1), np.float32)
    hd = np.empty(max(k, 1), np.int64)
    size = 0
    floor = np.float32(0.0)  # a document must beat this to enter: 0, then the k-th best once the heap is full
    margin = 1.0 + 1e-6 * (nt + 2)  # covers float32 rounding of the summed scores
    for lo in range(0, n_docs, WINDOW):
        hi = min(lo + WINDOW, n_docs)
        if size == k:  # skip the window when the block maxima where it falls cannot beat the k-th score
            most = 0.0
            for r in range(nt):
                b = blk[r]
                top = 0.0
                while b < bend[r]:
                    top = max(top, np.float64(block_max[b]))
                    if np.int64(block_last[b]) >= hi:
                        break
                    b += 1
                most += w[r] * top
            if most * margin < floor:
                for r in range(nt):
                    b = _first_block(block_last, blk[r], bend[r], hi)
                    if b != blk[r]:
                        blk[r] = b
                        pos[r] = 0
                        if b < bend[r]:
                            blen[r] = _decode(ix, first[r], b, dfs[r], bufd[r], buft[r])
                    if b < bend[r]:
                        p = pos[r]
                        while bufd[r, p] < hi:  # the block's last doc is >= hi
                            p += 1
                        pos[r] = p
                continue
        for r in range(nt):
            wr = w[r]
            it = idf_r[r]
            while blk[r] < bend[r]:
                p = pos[r]
                n = blen[r]
                if np.int64(block_last[blk[r]]) >= hi:  # the block ends past the window: stop at hi
                    while p < n and bufd[r, p] < hi:
                        d = bufd[r, p]
                        accw[d - lo] += wr * impact(it, buft[r, p], norm[d], k1p1)
                        p += 1
                    pos[r] = p
                    break
                for q in range(p, n):
                    d = bufd[r, q]
                    accw[d - lo] += wr * impact(it, buft[r, q], norm[d], k1p1)
                blk[r] += 1
                pos[r] = 0
                if blk[r] < bend[r]:
                    blen[r] = _decode(ix, first[r], blk[r], dfs[r], bufd[r], buft[r])
        size, floor = _flush_window(accw, hi - lo, lo, hs, hd, size, k, floor)
    if size < k:
        return _taat(ix, terms, weights, order, k, ws, out_ids, out_scores)
    _sorted_heap_out(hs, hd, size, out_ids, out_scores)
    return size


@_kernel
def _search_one(ix, prune, terms, weights, k, ws, out_ids, out_scores):  # pragma: no cover - compiled
    """One query's top ``k`` into ``out_*`` (see the module docstring); returns the number of hits."""
    indptr, term_blocks, block_last, block_max, block_bits, term_max, idf, norm, k1p1 = (
        ix[0], ix[1], ix[2], ix[3], ix[4], ix[7], ix[8], ix[9], ix[10][0],
    )  # fmt: skip
    nt = terms.size
    bound, order = _term_order(indptr, term_max, terms, weights)  # the in-memory kernel's order of additions
    if not prune or nt == 0 or nt > DAAT_MAX_TERMS:
        return _taat(ix, terms, weights, order, k, ws, out_ids, out_scores)
    dfs = np.empty(nt, np.int64)
    for j in range(nt):
        dfs[j] = indptr[terms[j] + 1] - indptr[terms[j]]
    if k > 0 and _dense_pays(dfs, bound, ws[0].size, THETA_SHARE, DAAT_POSTING_COST):
        return _taat_windows(ix, terms, weights, order, k, ws, out_ids, out_scores)

    mx = np.argsort(bound, kind="mergesort")  # smallest bound first: the candidates for non-essential
    prefix = np.empty(nt, np.float64)
    run = 0.0
    for i in range(nt):
        run += bound[mx[i]]
        prefix[i] = run
    margin = 1.0 + 1e-6 * (nt + 2)  # covers float32 rounding of the summed scores
    words = ix[6]
    first = np.empty(nt, np.int64)
    end = np.empty(nt, np.int64)
    cs = np.zeros((nt, _NCOL), np.int64)  # the cursors (columns _CB.._CUR)
    sb = np.empty(nt, np.int64)  # the shallow cursor's block (block maxima only)
    bufd = np.empty((nt, BLOCK), np.int64)
    buft = np.empty((nt, BLOCK), np.int64)
    present = np.full(nt, -1, np.int64)  # the doc whose contribution contrib[j] is
    contrib = np.zeros(nt, np.float32)
    tfv = np.zeros(nt, np.int64)  # the tf of an essential term at the candidate
    bmv = np.zeros(nt, np.float64)
    for j in range(nt):
        t = terms[j]
        first[j] = term_blocks[t]
        end[j] = term_blocks[t + 1]
        sb[j] = first[j]
    # A first threshold, so that the long lists are non-essential from the start (documents arrive in id order, and
    # the first k would set a low one): a document's float32 score is at least each of its contributions (they are
    # >= 0), so the k-th largest contribution of any one term is at most the final k-th score. Short lists only.
    theta = -np.inf
    seed = np.empty(min(SEED_POSTINGS, dfs.max()), np.float32)
    for j in range(nt):
        if dfs[j] < k or dfs[j] > SEED_POSTINGS:
            continue
        m = 0
        for b in range(first[j], end[j]):
            n = _decode(ix, first[j], b, dfs[j], bufd[j], buft[j])
            for i in range(n):
                seed[m] = weights[j] * impact(idf[terms[j]], buft[j, i], norm[bufd[j, i]], k1p1)
                m += 1
        theta = max(theta, np.float64(_kth_ascending(seed, m, m - k)))
    for j in range(nt):
        _enter(ix, cs, j, first[j], first[j], dfs[j])
        cs[j, _CUR] = _doc(words, cs, bufd, j, 0)
    hs = np.empty(max(k, 1), np.float32)
    hd = np.empty(max(k, 1), np.int64)
    size = 0
    ne = 0  # terms mx[:ne] are non-essential
    while ne < nt and prefix[ne] * margin < theta:
        ne += 1
    nxt = _EXHAUSTED
    for j in range(nt):
        nxt = min(nxt, cs[j, _CUR])
    while ne < nt:
        d = nxt
        if d >= _EXHAUSTED:
            break
        known = 0.0  # first a bound from the essential terms' block maxima (no read of norm[d], a cache miss)
        nxt = _EXHAUSTED  # the next candidate: the smallest essential cursor once those at d have moved on
        for i in range(ne, nt):  # the essential terms at d, each cursor moved past it
            j = mx[i]
            if cs[j, _CUR] != d:
                nxt = min(nxt, cs[j, _CUR])
                continue
            known += weights[j] * block_max[cs[j, _CB]]
            tfv[j] = _tf(words, cs, j, cs[j, _POS])
            present[j] = d
            p = cs[j, _POS] + 1
            if p < cs[j, _BLEN]:
                cs[j, _POS] = p
                cs[j, _CUR] = _doc(words, cs, bufd, j, p)
            elif cs[j, _CB] + 1 < end[j]:
                _enter(ix, cs, j, first[j], cs[j, _CB] + 1, dfs[j])
                cs[j, _CUR] = _doc(words, cs, bufd, j, 0)
            else:
                cs[j, _CUR] = _EXHAUSTED
            nxt = min(nxt, cs[j, _CUR])
        rest = 0.0
        if ne > 0:
            if (known + prefix[ne - 1]) * margin < theta:  # not even with every non-essential term at its best
                continue
            for i in range(ne):  # the non-essential blocks' maxima where d would be
                j = mx[i]
                s = _first_block(block_last, sb[j], end[j], d)
                sb[j] = s
                bmv[i] = weights[j] * block_max[s] if s < end[j] else 0.0
                rest += bmv[i]
            if (known + rest) * margin < theta:
                continue
        known = 0.0  # now the essential terms' exact contributions
        nd = norm[d]
        for i in range(ne, nt):
            j = mx[i]
            if present[j] == d:
                c = weights[j] * impact(idf[terms[j]], tfv[j], nd, k1p1)
                contrib[j] = c
                known += c
        if ne > 0:
            rest = 0.0  # tighter: the most a non-essential block's widest tf can add to this document's length
            for i in range(ne):
                j = mx[i]
                s = sb[j]
                if s < end[j]:
                    most = (1 << np.int64(block_bits[2 * s + 1])) - 1
                    bmv[i] = min(bmv[i], weights[j] * impact(idf[terms[j]], most, nd, k1p1))
                rest += bmv[i]
            if (known + rest) * margin < theta:
                continue
            dropped = False
            for i in range(ne - 1, -1, -1):  # the non-essential lists, largest bound first, while d can still win
                j = mx[i]
                rest -= bmv[i]
                if cs[j, _CUR] < d and sb[j] < end[j]:
                    b = _first_block(block_last, cs[j, _CB], end[j], d)
                    if b != cs[j, _CB]:
                        _enter(ix, cs, j, first[j], b, dfs[j])
                    p = cs[j, _POS]
                    while _doc(words, cs, bufd, j, p) < d:  # decodes only as far as needed
                        p += 1
                    cs[j, _POS] = p
                    cs[j, _CUR] = bufd[j, p]
                if cs[j, _CUR] == d:
                    c = weights[j] * impact(idf[terms[j]], _tf(words, cs, j, cs[j, _POS]), nd, k1p1)
                    contrib[j] = c
                    present[j] = d
                    known += c
                if (known + rest) * margin < theta:
                    dropped = True
                    break
            if dropped:
                continue
        score = np.float32(0.0)
        for r in range(nt):  # the in-memory kernel's order of additions: the same float32 score
            j = order[r]
            if present[j] == d:
                score += contrib[j]
        size = _heap_push(hs, hd, size, k, score, d)
        if size == k and hs[0] > theta:
            theta = np.float64(hs[0])
            while ne < nt and prefix[ne] * margin < theta:
                ne += 1
    _sorted_heap_out(hs, hd, size, out_ids, out_scores)
    return size


@_kernel
def search_range(ix, prune, q_ptr, q_terms, q_weights, lo, hi, k, ws, out_ids, out_scores, out_n):
    # pragma: no cover - compiled
    """Search queries ``lo..hi`` (CSR ``q_ptr``/``q_terms``/``q_weights``) into rows of ``out_*``: the signature of
    bm25.py's ``_search_range``, over the packed index ``ix`` (indptr, term_blocks, block_last, block_max,
    block_bits, block_off, words, term_max, idf, norm, [k1 + 1])."""
    for q in range(lo, hi):
        a = q_ptr[q]
        b = q_ptr[q + 1]
        out_n[q] = _search_one(ix, prune, q_terms[a:b], q_weights[a:b], k, ws, out_ids[q], out_scores[q])
