"""BM25 retrieval: a numba inverted-index back-end ("fast", the default) and the ``rank-bm25`` library ("rank_bm25").

Scoring (both back-ends, identical up to float32 rounding of the precomputed impacts) is rank-bm25's ``BM25Okapi``
formula, with Lucene's idf by default::

    score(q, d) = sum over query tokens t (repeats count again) of
                  idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

    idf(t) = log(1 + (N - df + 0.5) / (df + 0.5))               (idf="lucene", the default: always positive, small
                                                                 for common terms; Lucene's and so pyserini's)
    idf(t) = log(N - df + 0.5) - log(df + 0.5)                  (idf="okapi": rank-bm25's BM25Okapi)
             negative values are replaced by epsilon * mean idf over the vocabulary (rank-bm25's floor)

Lucene's idf is the default because it ranks like the Lucene/pyserini BM25 that Search-R1 and WebShop use, and
rank-bm25's floor gives a term in most documents (a size, a colour) more weight than one in 40% of them
(``bench/bench_bm25_common_terms.py`` measures both against Lucene: docs/scale.md).

``|d|`` counts a document's tokens after stop-word removal; title and text are both indexed.

Result policy (both back-ends): the hits are the documents that contain at least one query token, ranked by score
(descending), equal scores broken by corpus order (lower index first), at most ``topk`` of them. So a query with no
indexed token (empty, only stop words, punctuation, unknown words) returns ``[]`` and a query matching fewer than
``topk`` documents returns fewer hits. (With the okapi idf a matching document can score <= 0; it is still a hit.)

The fast back-end is a CSR inverted index (per-term posting lists of document ids with the per-posting BM25 impact
``idf * tf-saturation`` precomputed in float32). A numba kernel (compiled once, cached on disk, releasing the GIL)
accumulates a query term-at-a-time into a dense score buffer, remembering the touched documents, selects the top-k
among them with quickselect (``O(touched + k log k)``) and resets only the touched entries. Terms are processed
shortest posting list first; as soon as the largest impacts of the remaining terms could not lift an unseen document
into the top k, the kernel stops creating accumulators and only updates (and prunes) the candidates: exact,
MaxScore-style dynamic pruning (the results are the same with ``prune=False``). A query of common terms, where that
pruning would still visit most of their postings (:func:`_dense_pays`), is scored instead window by window: every
posting into a cache-sized accumulator of :data:`WINDOW` documents, the terms in the same order (so the same float32
scores), each window scanned for the top k, with no touched list and no selection over millions of candidates.
``batch_search`` spreads query chunks over a thread pool running that kernel in parallel. Indexing tokenises the
corpus and builds the postings in numba.

Compiling the kernels takes 15-30 s, once: numba caches them on disk (``__pycache__`` next to this file when it is
writable, else the user's cache directory, ``~/.cache/numba``; ``$NUMBA_CACHE_DIR`` overrides both), so later
processes load them in well under a second. A process that does compile says so on stderr, once, with
:data:`COMPILE_NOTICE`; a fast retriever compiles (or loads) its search kernels when it is built, so the pause
comes there and not at the first query.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sys
import threading
import unicodedata
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit
from numba.core import event as numba_event

from .base import Document, Hit, Retriever, atomic_output, cache_key, corpus_fingerprint

__all__ = ["COMPILE_NOTICE", "STOPWORDS", "TOKENIZER_VERSION", "BM25Params", "BM25Retriever", "tokenize"]

COMPILE_NOTICE = "compiling retrieval kernels (first run only)..."
"""Printed on stderr, once per process, when this module's numba kernels are being compiled (not loaded from the
on-disk cache)."""
UNCACHED_NOTICE = (
    "compiling retrieval kernels (numba found no writable cache directory, so every process compiles them: "
    "set NUMBA_CACHE_DIR to a writable directory)..."
)

TOKENIZER_VERSION = "nfkc-lower-alnum-stop1"
"""Changes whenever :func:`tokenize` would split any text differently (it is part of index cache keys)."""

STOPWORDS: frozenset[str] = frozenset(
    """a an and are as at be been but by did do does for from had has have he her his how i if in into is it its
    of on or she so such than that the their them then there these they this to was we were what when where
    which who whom whose why will with you your""".split()  # noqa: SIM905
)
"""English function words dropped by :func:`tokenize` (articles, auxiliaries, pronouns, prepositions, wh-words)."""

_WORD = re.compile(r"[^\W_]+")
_ASCII_TABLE = bytes(ord(chr(c).lower()) if chr(c).isalnum() else 32 for c in range(128)) + b" " * 128
_INDEX_FORMAT = 1


def tokenize(text: str) -> list[str]:
    """Split ``text`` into BM25 terms: NFKC-normalise, lowercase, keep runs of Unicode letters/digits, drop stop words.

    >>> tokenize("Who directed the film 'Ovra Lake' (1998)?")
    ['directed', 'film', 'ovra', 'lake', '1998']
    """
    if text.isascii():  # fast path, same tokens as the regex: ASCII letters/digits, lowercased by the table
        words = text.encode("ascii").translate(_ASCII_TABLE).decode("ascii").split()
    else:
        words = _WORD.findall(unicodedata.normalize("NFKC", text).lower())
    return [t for t in words if t not in STOPWORDS]


@dataclass(frozen=True)
class BM25Params:
    """BM25 parameters: rank-bm25 ``BM25Okapi``'s k1, b and epsilon; Lucene's idf (see the module docstring)."""

    k1: float = 1.5
    b: float = 0.75
    epsilon: float = 0.25
    idf: str = "lucene"

    def __post_init__(self) -> None:
        if self.idf not in ("okapi", "lucene"):
            raise ValueError(f"idf must be 'okapi' or 'lucene', not {self.idf!r}")
        if not (self.k1 >= 0 and 0 <= self.b <= 1):
            raise ValueError(f"need k1 >= 0 and 0 <= b <= 1, got k1={self.k1}, b={self.b}")


def _idf(df: np.ndarray, n_docs: int, params: BM25Params) -> np.ndarray:
    """Per-term idf (float64) from document frequencies, as documented in the module docstring."""
    df = df.astype(np.float64)
    if params.idf == "lucene":
        return np.log1p((n_docs - df + 0.5) / (df + 0.5))
    idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
    if idf.size:
        floor = params.epsilon * math.fsum(idf.tolist()) / idf.size
        idf[idf < 0] = floor
    return idf


# ----------------------------------------------------------------------------------------------- numba kernels

WINDOW = 4096
"""Documents per window of the window kernels (their scores, and on disk their norms, stay in cache)."""
DAAT_POSTING_COST = 10
"""What the on-disk document-at-a-time search costs per posting of its essential terms, in postings scored into a
window."""
THETA_SHARE = 0.8
"""The k-th score :func:`_dense_pays` expects for the on-disk search, as a share of the sum of the query's term
bounds. It and :data:`DAAT_POSTING_COST` were fitted to per-query timings of both ways on 2M catalogue and wiki
passages (the corpora of ``bench/bench_bm25_common_terms.py``, common and mixed queries, both idfs)."""
MEM_POSTING_COST = 8
"""The same for the in-memory term-at-a-time search, which adds every posting of the lists it reads before pruning
into the touched-document list: dearer than the on-disk pass, so windows pay sooner (at 2M wiki passages they doubled
mixed queries' rate with the okapi idf, :data:`MEM_THETA_SHARE` and this)."""
MEM_THETA_SHARE = 0.5
""":data:`THETA_SHARE` for the in-memory search."""
SCAN_COST = 1
"""What scanning one document of a window for the top k costs, in postings scored into a window."""


_uncached: list[str] = []  # kernels compiled without an on-disk cache (no writable cache location)


def _kernel(fn: Any) -> Any:
    """``njit(nogil=True)``, cached on disk. Where numba finds no writable cache location (a read-only install and
    no writable home), it would raise at import: compile in each process instead."""
    try:
        return njit(cache=True, nogil=True)(fn)
    except RuntimeError as e:  # "cannot cache function ...: no locator available for file ..."
        if "cannot cache" not in str(e):
            raise
        _uncached.append(fn.__name__)
        return njit(nogil=True)(fn)


class _CompileNotice(numba_event.Listener):
    """Says on stderr, once per process, that this module's kernels are compiling. numba broadcasts a
    ``numba:compile`` event only when it really compiles, never when it loads a kernel from its cache."""

    def __init__(self) -> None:
        self.said = False
        self._lock = threading.Lock()

    def on_start(self, event: Any) -> None:
        dispatcher = (event.data or {}).get("dispatcher")
        if getattr(getattr(dispatcher, "py_func", None), "__module__", None) != __name__:
            return
        with self._lock:
            if self.said:
                return
            self.said = True
        from tqdm import tqdm

        tqdm.write(UNCACHED_NOTICE if _uncached else COMPILE_NOTICE, file=sys.stderr)  # clears progress bars first

    def on_end(self, event: Any) -> None:
        pass


numba_event.register("numba:compile", _CompileNotice())


@_kernel
def _kth_ascending(a, n, target):  # pragma: no cover - compiled
    """Reorder ``a[:n]`` in place (Hoare quickselect) and return the value at ascending position ``target``."""
    lo = 0
    hi = n - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        x, y, z = a[lo], a[mid], a[hi]
        if x > y:
            x, y = y, x
        if y > z:
            y = z
            if x > y:
                y = x
        pivot = y
        i = lo
        j = hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if target <= j:
            hi = j
        elif target >= i:
            lo = i
        else:
            return a[target]
    return a[target]


@_kernel
def _select_topk(acc, touched, n, k, vals, ties, out_ids, out_scores):  # pragma: no cover - compiled
    """Write the top ``k`` of the docs ``touched[:n]`` (score desc, id asc) to ``out_*``; return how many."""
    if n == 0 or k <= 0:
        return 0
    m = 0
    if k >= n:
        for i in range(n):
            out_ids[i] = touched[i]
        m = n
    else:
        for i in range(n):
            vals[i] = acc[touched[i]]
        thr = _kth_ascending(vals, n, n - k)  # the k-th largest score
        n_ties = 0
        for i in range(n):
            d = touched[i]
            s = acc[d]
            if s > thr:
                out_ids[m] = d
                m += 1
            elif s == thr:
                ties[n_ties] = d
                n_ties += 1
        need = k - m
        if n_ties > need:  # keep the `need` lowest doc ids among the ties
            cut = _kth_ascending(ties, n_ties, need - 1)
            for i in range(n_ties):
                if ties[i] < cut:
                    out_ids[m] = ties[i]
                    m += 1
            for i in range(n_ties):
                if m < k and ties[i] == cut:
                    out_ids[m] = ties[i]
                    m += 1
        else:
            for i in range(n_ties):
                out_ids[m] = ties[i]
                m += 1
    # Sort the m selected docs by (score desc, id asc): sort ids, then a stable sort on -score.
    ids = np.sort(out_ids[:m])
    neg = np.empty(m, dtype=np.float32)
    for i in range(m):
        neg[i] = -acc[ids[i]]
    order = np.argsort(neg, kind="mergesort")
    for i in range(m):
        d = ids[order[i]]
        out_ids[i] = d
        out_scores[i] = acc[d]
    return m


@_kernel
def _select_and_reset(acc, seen, touched, n, sel, m, k, vals, ties, out_ids, out_scores):  # pragma: no cover
    """The top ``k`` of the docs ``sel[:m]`` into ``out_*`` (:func:`_select_topk`), then ``acc`` and ``seen`` back to
    zero on the ``touched[:n]`` docs; returns the number of hits."""
    found = _select_topk(acc, sel, m, k, vals, ties, out_ids, out_scores)
    for i in range(n):
        d = touched[i]
        acc[d] = 0
        seen[d] = 0
    return found


@_kernel
def _kth_score(acc, docs, n, k, vals):  # pragma: no cover - compiled
    """The k-th largest of ``acc[docs[:n]]`` (``n >= k``)."""
    for i in range(n):
        vals[i] = acc[docs[i]]
    return _kth_ascending(vals, n, n - k)


@_kernel
def _term_order(indptr, term_max, terms, weights):  # pragma: no cover - compiled
    """Each query term's bound (the most it can add to one document) and the order the kernels add the terms in:
    shortest posting list first, ties by larger bound. The on-disk kernel uses the same order, so its float32 sums
    equal this kernel's."""
    nt = terms.size
    bound = np.empty(nt, np.float64)
    for j in range(nt):
        bound[j] = weights[j] * term_max[terms[j]]
    top = bound.max() if nt else 0.0
    key = np.empty(nt, np.float64)
    for j in range(nt):
        t = terms[j]
        key[j] = (indptr[t + 1] - indptr[t]) - 0.5 * bound[j] / (top + 1e-30)
    return bound, np.argsort(key, kind="mergesort")


@_kernel
def _heap_push(hs, hd, size, k, s, d):  # pragma: no cover - compiled
    """Offer (score ``s``, doc ``d``) to the min-heap ``hs/hd[:size]`` of the best ``k`` (worst on top: lower score,
    then higher doc id; docs arrive in ascending id order, so an equal score never displaces). Returns the size."""
    if size < k:
        i = size
        size += 1
    elif s > hs[0]:
        i = 0  # replace the top, then sift down
        while True:
            c = 2 * i + 1
            if c >= size:
                break
            if c + 1 < size and (hs[c + 1] < hs[c] or (hs[c + 1] == hs[c] and hd[c + 1] > hd[c])):
                c += 1
            if hs[c] < s or (hs[c] == s and hd[c] > d):
                hs[i] = hs[c]
                hd[i] = hd[c]
                i = c
            else:
                break
        hs[i] = s
        hd[i] = d
        return size
    else:
        return size
    while i > 0:  # sift up
        p = (i - 1) >> 1
        if hs[p] > s or (hs[p] == s and hd[p] < d):
            hs[i] = hs[p]
            hd[i] = hd[p]
            i = p
        else:
            break
    hs[i] = s
    hd[i] = d
    return size


@_kernel
def _flush_window(accw, n, lo, hs, hd, size, k, floor):  # pragma: no cover - compiled
    """Offer the window's documents ``lo .. lo + n - 1`` (scores ``accw[:n]``) to the top-``k`` heap in ascending id
    order (an equal score never displaces: lower id first), zeroing ``accw[:n]`` for the next window. ``floor`` is
    what a document must beat: 0, then the k-th best once the heap is full. Returns the new size and floor."""
    for i in range(n):
        s = accw[i]
        if s > floor:
            size = _heap_push(hs, hd, size, k, s, lo + i)
            if size == k:
                floor = hs[0]
        accw[i] = 0
    return size, floor


@_kernel
def _sorted_heap_out(hs, hd, size, out_ids, out_scores):  # pragma: no cover - compiled
    """The heap's ``size`` entries into ``out_*`` by score descending, then doc id ascending."""
    by_id = np.argsort(hd[:size])  # ids ascending, then a stable sort on -score
    neg = np.empty(size, np.float32)
    for i in range(size):
        neg[i] = -hs[by_id[i]]
    rank = np.argsort(neg, kind="mergesort")
    for i in range(size):
        out_ids[i] = hd[by_id[rank[i]]]
        out_scores[i] = hs[by_id[rank[i]]]


@_kernel
def _dense_pays(dfs, bound, n_docs, theta_share, posting_cost):  # pragma: no cover - compiled
    """Whether scoring every posting window by window (:func:`_taat_windows`, ``postings._taat_windows``) costs less
    than the pruned search, which visits every posting of its essential terms at ``posting_cost`` times the cost of
    a posting scored into a window. Those are estimated with the k-th score at ``theta_share`` of the sum of the term
    bounds (where the top documents land: they have most of the query's terms): the terms whose bounds, smallest
    first, add up to less than that are non-essential, the rest essential."""
    theta = theta_share * bound.sum()
    total = 0
    essential = 0
    run = 0.0
    for j in np.argsort(bound, kind="mergesort"):
        run += bound[j]
        total += dfs[j]
        if run >= theta:
            essential += dfs[j]
    return posting_cost * essential > total + SCAN_COST * n_docs


@_kernel
def _taat_windows(index, terms, weights, order, k, ws, out_ids, out_scores):  # pragma: no cover - compiled
    """Every posting of every term into a small accumulator, one window of :data:`WINDOW` documents at a time (the
    terms in ``order`` within a window, so every document gets its additions in :func:`_search_one`'s order: the
    same float32 scores), each window scanned for the top ``k``: for queries of common terms, with no touched list
    and no selection over millions of candidates. Needs every impact >= 0; a document scoring 0 is not told from
    one that matched nothing: when fewer than ``k`` documents score above 0, returns -1 (score the query the usual
    way), else the number of hits."""
    indptr, post_docs, post_imp = index[0], index[1], index[2]
    nt = terms.size
    n_docs = ws[0].size
    accw = np.zeros(WINDOW, np.float32)
    pos = np.empty(nt, np.int64)  # per term, in processing order: the next posting, the end, the weight
    end = np.empty(nt, np.int64)
    w = np.empty(nt, np.float32)
    for r in range(nt):
        t = terms[order[r]]
        pos[r] = indptr[t]
        end[r] = indptr[t + 1]
        w[r] = weights[order[r]]
    hs = np.empty(max(k, 1), np.float32)
    hd = np.empty(max(k, 1), np.int64)
    size = 0
    floor = np.float32(0.0)  # a document must beat this to enter: 0, then the k-th best once the heap is full
    for lo in range(0, n_docs, WINDOW):
        hi = min(lo + WINDOW, n_docs)
        for r in range(nt):
            wr = w[r]
            p = pos[r]
            e = end[r]
            while p < e and post_docs[p] < hi:
                accw[post_docs[p] - lo] += wr * post_imp[p]
                p += 1
            pos[r] = p
        size, floor = _flush_window(accw, hi - lo, lo, hs, hd, size, k, floor)
    if size < k:
        return -1
    _sorted_heap_out(hs, hd, size, out_ids, out_scores)
    return size


@_kernel
def _search_one(index, prune, terms, weights, k, ws, out_ids, out_scores):  # pragma: no cover - compiled
    """Score one query term-at-a-time and write its top ``k``; return the number of hits.

    Terms go in increasing order of posting-list length. With ``prune`` (all impacts >= 0), once the k-th best
    score so far exceeds what the remaining terms could add (their largest impacts) to an unseen document, no new
    document can reach the top k: the remaining terms only update the surviving candidates (by binary search in,
    or a scan of, their posting lists), and candidates that can no longer reach the k-th score are dropped. Every
    kept document gets the same additions in the same order as without pruning, so the results are identical.
    ``index`` is (indptr, post_docs, post_imp, term_max); ``ws`` the workspace (acc, seen, touched, cand, vals, ties).
    """
    indptr, post_docs, post_imp, term_max = index
    acc, seen, touched, cand, vals, ties = ws
    nt = terms.size
    bound, order = _term_order(indptr, term_max, terms, weights)
    if prune and nt > 0 and k > 0:
        dfs = np.empty(nt, np.int64)
        for j in range(nt):
            dfs[j] = indptr[terms[j] + 1] - indptr[terms[j]]
        if _dense_pays(dfs, bound, acc.size, MEM_THETA_SHARE, MEM_POSTING_COST):
            found = _taat_windows(index, terms, weights, order, k, ws, out_ids, out_scores)
            if found >= 0:
                return found
    rest = np.zeros(nt + 1, np.float64)  # rest[j]: the most terms j.. (in processing order) can add to a document
    rest_len = np.zeros(nt + 1, np.int64)  # their postings
    for j in range(nt - 1, -1, -1):
        t = terms[order[j]]
        rest[j] = rest[j + 1] + bound[order[j]]
        rest_len[j] = rest_len[j + 1] + indptr[t + 1] - indptr[t]
    margin = 1.0 + 1e-6 * (nt + 2)  # covers float32 rounding of the accumulated scores
    n = 0
    j = 0
    theta = 0.0
    pruning = False
    processed = 0
    next_check = 0
    while j < nt:
        t = terms[order[j]]
        w = weights[order[j]]
        lo = indptr[t]
        hi = indptr[t + 1]
        for p in range(lo, hi):  # branch-free: acc and seen are zero outside touched[:n]
            d = post_docs[p]
            acc[d] += w * post_imp[p]
            touched[n] = d
            n += 1 - seen[d]
            seen[d] = 1
        j += 1
        processed += hi - lo
        # A check costs O(touched): only when the postings left could repay it, on a geometric schedule.
        if prune and j < nt and n >= k and rest_len[j] > n and processed >= next_check:
            next_check = 2 * processed
            theta = _kth_score(acc, touched, n, k, vals)
            if rest[j] * margin < theta:
                pruning = True
                break
    if not pruning:
        return _select_and_reset(acc, seen, touched, n, touched, n, k, vals, ties, out_ids, out_scores)

    m = 0  # candidates: seen == 2; the other touched documents are done (seen back to 0)
    for i in range(n):
        d = touched[i]
        if (acc[d] + rest[j]) * margin >= theta:
            seen[d] = 2
            cand[m] = d
            m += 1
        else:
            seen[d] = 0
    cand_sorted = False
    while j < nt:
        t = terms[order[j]]
        w = weights[order[j]]
        lo = indptr[t]
        hi = indptr[t + 1]
        if m * (np.log2(hi - lo + 1) + 1) < hi - lo:  # few candidates: binary search, moving the lower end
            if not cand_sorted:
                cand[:m] = np.sort(cand[:m])
                cand_sorted = True
            for i in range(m):
                d = cand[i]
                a = lo
                b = hi
                while a < b:
                    mid = (a + b) >> 1
                    if post_docs[mid] < d:
                        a = mid + 1
                    else:
                        b = mid
                lo = a
                if a < hi and post_docs[a] == d:
                    acc[d] += w * post_imp[a]
        else:  # scan the posting list, updating candidates only
            for p in range(lo, hi):
                d = post_docs[p]
                if seen[d] == 2:
                    acc[d] += w * post_imp[p]
        j += 1
        if j < nt and rest_len[j] > m:  # raise the bar and drop the candidates that can no longer make it
            theta = _kth_score(acc, cand, m, k, vals)
            kept = 0
            for i in range(m):
                d = cand[i]
                if (acc[d] + rest[j]) * margin >= theta:
                    cand[kept] = d
                    kept += 1
                else:
                    seen[d] = 0
            m = kept
    return _select_and_reset(acc, seen, touched, n, cand, m, k, vals, ties, out_ids, out_scores)


@_kernel
def _search_range(index, prune, q_ptr, q_terms, q_weights, lo, hi, k, ws, out_ids, out_scores, out_n):
    # pragma: no cover - compiled
    """Search queries ``lo..hi`` (CSR ``q_ptr``/``q_terms``/``q_weights``) into rows of ``out_*``."""
    for q in range(lo, hi):
        a = q_ptr[q]
        b = q_ptr[q + 1]
        out_n[q] = _search_one(index, prune, q_terms[a:b], q_weights[a:b], k, ws, out_ids[q], out_scores[q])


# ----------------------------------------------------------------------------------------------- corpus tokenizing
#
# Indexing tokenises the whole corpus in one numba pass: the documents are concatenated into one byte buffer; ASCII
# documents go in raw (a token is a run of ASCII letters/digits, lowercased: exactly what `tokenize` does to ASCII
# text), other documents go in already tokenised by `tokenize` (tokens joined by spaces). Terms are numbered in order
# of first occurrence through an open-addressing hash table (FNV-1a hashes, collisions resolved by comparing the
# bytes, so it is exact) that is seeded with the stop words, which are then dropped.

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@_kernel
def _is_token_byte(c, pretok):  # pragma: no cover - compiled
    if pretok:
        return c != 32
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122)


@_kernel
def _lower(c):  # pragma: no cover - compiled
    return c + 32 if 65 <= c <= 90 else c


@_kernel
def _intern(src, s, e, table, blob, wstart, n_words, used):  # pragma: no cover - compiled
    """Look up the word ``lower(src[s:e])``; add it (id ``n_words``, bytes at ``blob[used:]``) when new.

    ``table`` rows are (hash, id | length << 32, first 8 bytes packed) with -1 marking empty rows: most lookups
    are decided by the row alone. Returns (id, 1 if the word was added else 0); the caller grows the table.
    """
    h = _FNV_OFFSET
    prefix = np.uint64(0)
    for k in range(s, e):
        c = np.uint64(_lower(src[k]))
        h = (h ^ c) * _FNV_PRIME
        if k - s < 8:
            prefix |= c << np.uint64(8 * (k - s))
    hs = np.int64(h)
    ps = np.int64(prefix)
    length = e - s
    mask = table.shape[0] - 1
    slot = np.int64(h & np.uint64(mask))
    while True:
        packed = table[slot, 1]
        if packed < 0:
            break
        if table[slot, 0] == hs and (packed >> 32) == length and table[slot, 2] == ps:
            t = packed & 0xFFFFFFFF
            same = True
            a = wstart[t]
            for k in range(8, length):
                if blob[a + k] != _lower(src[s + k]):
                    same = False
                    break
            if same:
                return t, 0
        slot = (slot + 1) & mask
    for k in range(length):
        blob[used + k] = _lower(src[s + k])
    wstart[n_words] = used
    table[slot, 0] = hs
    table[slot, 1] = n_words | (length << 32)
    table[slot, 2] = ps
    return n_words, 1


@_kernel
def _rehash(table):  # pragma: no cover - compiled
    """The same rows in a table twice the size."""
    new = np.full((2 * table.shape[0], 3), -1, np.int64)
    mask = new.shape[0] - 1
    for q in range(table.shape[0]):
        if table[q, 1] >= 0:
            r = np.int64(np.uint64(table[q, 0]) & np.uint64(mask))
            while new[r, 1] >= 0:
                r = (r + 1) & mask
            new[r, 0] = table[q, 0]
            new[r, 1] = table[q, 1]
            new[r, 2] = table[q, 2]
    return new


@_kernel
def _index_tokens(buf, doc_ptr, pretok, stop_blob, stop_ptr):  # pragma: no cover - compiled
    """Tokenise and number the terms: (term per token, doc per token, word bytes, word starts, word lengths)."""
    n_docs = doc_ptr.size - 1
    n_max = 0  # tokens before stop-word removal: an upper bound for the output
    for d in range(n_docs):
        prev = False
        for i in range(doc_ptr[d], doc_ptr[d + 1]):
            cur = _is_token_byte(buf[i], pretok[d])
            if cur and not prev:
                n_max += 1
            prev = cur
    n_stop = stop_ptr.size - 1
    term_of = np.empty(n_max, np.int32)
    doc_of = np.empty(n_max, np.int32)
    table = np.full((1 << 12, 3), -1, np.int64)
    blob = np.empty(buf.size + stop_blob.size, np.uint8)  # every word's bytes, once
    wstart = np.empty(n_max + n_stop + 1, np.int64)
    wlen = np.empty(n_max + n_stop + 1, np.int32)
    n_words = 0
    used = 0
    for j in range(n_stop):  # the stop words take ids 0 .. n_stop - 1
        t, new = _intern(stop_blob, stop_ptr[j], stop_ptr[j + 1], table, blob, wstart, n_words, used)
        if new:
            wlen[n_words] = stop_ptr[j + 1] - stop_ptr[j]
            used += wlen[n_words]
            n_words += 1
    n = 0
    for d in range(n_docs):
        i = doc_ptr[d]
        hi = doc_ptr[d + 1]
        pt = pretok[d]
        while i < hi:
            if not _is_token_byte(buf[i], pt):
                i += 1
                continue
            s = i
            while i < hi and _is_token_byte(buf[i], pt):
                i += 1
            t, new = _intern(buf, s, i, table, blob, wstart, n_words, used)
            if new:
                wlen[n_words] = i - s
                used += i - s
                n_words += 1
                if 2 * n_words > table.shape[0]:  # keep the load factor <= 1/2
                    table = _rehash(table)
            if t >= n_stop:
                term_of[n] = t - n_stop
                doc_of[n] = d
                n += 1
    first = wstart[n_stop] if n_words > n_stop else used
    return term_of[:n], doc_of[:n], blob[first:used], wstart[n_stop:n_words] - first, wlen[n_stop:n_words]


@_kernel
def _csr_from_tokens(term_of, doc_of, n_terms):  # pragma: no cover - compiled
    """Counting sort of (term, doc) token pairs (docs ascending in the input) into CSR postings with tf."""
    n = term_of.size
    start = np.zeros(n_terms + 1, np.int64)
    for i in range(n):
        start[term_of[i] + 1] += 1
    for t in range(n_terms):
        start[t + 1] += start[t]
    pos = start[:-1].copy()
    docs = np.empty(n, np.int32)
    for i in range(n):
        t = term_of[i]
        docs[pos[t]] = doc_of[i]
        pos[t] += 1
    indptr = np.zeros(n_terms + 1, np.int64)
    post_doc = np.empty(n, np.int32)
    post_tf = np.empty(n, np.int32)
    m = 0
    for t in range(n_terms):
        prev = -1
        for p in range(start[t], start[t + 1]):
            d = docs[p]
            if d == prev:
                post_tf[m - 1] += 1
            else:
                post_doc[m] = d
                post_tf[m] = 1
                m += 1
                prev = d
        indptr[t + 1] = m
    return indptr, post_doc[:m].copy(), post_tf[:m].copy()


def _tokenize_corpus_numba(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(term number per token, doc per token, vocabulary), terms numbered in order of first occurrence."""
    term_of, doc_of, blob, starts, lengths = _tokenize_corpus_raw(texts)
    raw = blob.tobytes()
    words = [raw[a : a + b].decode("utf-8") for a, b in zip(starts.tolist(), lengths.tolist(), strict=True)]
    return term_of, doc_of, words


def _tokenize_corpus_raw(texts: Sequence[str]) -> tuple[np.ndarray, ...]:
    """Like :func:`_tokenize_corpus_numba`, with the vocabulary as UTF-8 bytes: (term per token, doc per token,
    word bytes, word starts, word lengths)."""
    parts, pretok = [], np.zeros(len(texts), np.uint8)
    for i, text in enumerate(texts):
        if text.isascii():
            parts.append(text.encode("ascii"))
        else:
            parts.append(" ".join(tokenize(text)).encode("utf-8"))
            pretok[i] = 1
    doc_ptr = np.zeros(len(texts) + 1, np.int64)
    np.cumsum([len(p) for p in parts], out=doc_ptr[1:])
    buf = np.frombuffer(b"".join(parts), np.uint8)
    del parts
    stops = sorted(w.encode() for w in STOPWORDS)
    stop_ptr = np.zeros(len(stops) + 1, np.int64)
    np.cumsum([len(w) for w in stops], out=stop_ptr[1:])
    stop_blob = np.frombuffer(b"".join(stops), np.uint8)
    return _index_tokens(buf, doc_ptr, pretok, stop_blob, stop_ptr)


def _tokenize_corpus_python(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The pure-Python definition of :func:`_tokenize_corpus_numba` (the same output; used by tests)."""
    vocab: dict[str, int] = {}
    tokenized = [tokenize(t) for t in texts]
    term_of = np.fromiter((vocab.setdefault(t, len(vocab)) for toks in tokenized for t in toks), dtype=np.int32)
    lens = np.fromiter((len(toks) for toks in tokenized), dtype=np.int64, count=len(texts))
    doc_of = np.repeat(np.arange(len(texts), dtype=np.int32), lens)
    return term_of, doc_of, list(vocab)


# ----------------------------------------------------------------------------------------------- fast index


@dataclass
class _Workspace:
    """Scratch buffers sized to the corpus, reused across queries; ``acc`` and ``seen`` are all zero between them."""

    acc: np.ndarray
    seen: np.ndarray
    touched: np.ndarray
    cand: np.ndarray
    vals: np.ndarray
    ties: np.ndarray

    @classmethod
    def new(cls, n_docs: int) -> _Workspace:
        n = max(n_docs, 1)
        return cls(
            acc=np.zeros(n, np.float32),
            seen=np.zeros(n, np.uint8),
            touched=np.zeros(n + 1, np.int32),  # one spare slot for the branch-free append
            cand=np.zeros(n, np.int32),
            vals=np.zeros(n, np.float32),
            ties=np.zeros(n, np.int32),
        )

    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.acc, self.seen, self.touched, self.cand, self.vals, self.ties


class _WorkspacePool:
    """Hands out workspaces to concurrent searches; grows to the peak concurrency and reuses them."""

    def __init__(self, n_docs: int) -> None:
        self._n_docs = n_docs
        self._free: list[_Workspace] = []
        self._lock = threading.Lock()

    def acquire(self) -> _Workspace:
        with self._lock:
            if self._free:
                return self._free.pop()
        return _Workspace.new(self._n_docs)

    def release(self, ws: _Workspace) -> None:
        with self._lock:
            self._free.append(ws)


def run_queries(
    index: tuple[np.ndarray, ...],
    prune: bool,
    encoded: tuple[np.ndarray, np.ndarray, np.ndarray],
    nq: int,
    k: int,
    workspaces: _WorkspacePool,
    executor: Callable[[], ThreadPoolExecutor],
    n_threads: int,
    kernel: Callable[..., None] | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(doc ids, scores)`` of the top ``k`` of each of ``nq`` encoded queries (``(q_ptr, q_terms, q_weights)``)
    against the CSR ``index`` arrays (indptr, doc ids, impacts, per-term max impact), by the numba kernel: query
    chunks spread over ``executor()``'s threads when ``n_threads`` > 1 and there are enough queries, each with a
    workspace from ``workspaces``. Shared by the in-memory and the on-disk index: ``kernel`` (default
    ``_search_range``) is the compiled search over ``index``, with ``_search_range``'s signature."""
    search = _search_range if kernel is None else kernel
    out_ids = np.zeros((nq, max(k, 1)), np.int32)
    out_scores = np.zeros((nq, max(k, 1)), np.float32)
    out_n = np.zeros(nq, np.int64)
    q_ptr, q_terms, q_w = encoded
    if k > 0 and nq:

        def run(lo: int, hi: int) -> None:
            ws = workspaces.acquire()
            try:
                search(index, prune, q_ptr, q_terms, q_w, lo, hi, k, ws.arrays(), out_ids, out_scores, out_n)
            finally:
                workspaces.release(ws)

        n_chunks = min(nq, n_threads * 4) if n_threads > 1 and nq >= 2 * n_threads else 1
        if n_chunks == 1:
            run(0, nq)
        else:
            bounds = np.linspace(0, nq, n_chunks + 1).astype(int)
            pool = executor()
            for f in [pool.submit(run, lo, hi) for lo, hi in itertools.pairwise(bounds.tolist())]:
                f.result()
    return [(out_ids[i, : out_n[i]], out_scores[i, : out_n[i]]) for i in range(nq)]


@dataclass
class _FastIndex:
    """CSR inverted index: postings of term ``t`` are ``post_docs/post_imp[indptr[t]:indptr[t+1]]``."""

    vocab: dict[str, int]
    indptr: np.ndarray  # int64 [V + 1]
    post_docs: np.ndarray  # int32 [P], ascending within a term
    post_imp: np.ndarray  # float32 [P]
    doc_len: np.ndarray  # int32 [N]
    n_docs: int
    term_max: np.ndarray = field(init=False, repr=False)  # float32 [V]: the largest impact of each term
    nonneg: bool = field(init=False)  # no negative impact (okapi floor on a tiny corpus): pruning is exact

    def __post_init__(self) -> None:
        if self.post_imp.size:
            self.term_max = np.maximum.reduceat(self.post_imp, self.indptr[:-1]).astype(np.float32)
        else:
            self.term_max = np.zeros(len(self.vocab), np.float32)
        self.nonneg = bool(self.post_imp.size == 0 or self.post_imp.min() >= 0)

    def kernel_arrays(self) -> tuple[np.ndarray, ...]:
        return self.indptr, self.post_docs, self.post_imp, self.term_max

    @classmethod
    def build(cls, texts: Sequence[str], params: BM25Params) -> _FastIndex:
        """Index ``texts`` (tokenised as :func:`tokenize` does): numba for ASCII text, Python for the rest."""
        n_docs = len(texts)
        term_of, doc_of, words = _tokenize_corpus_numba(texts)
        indptr, post_doc, post_tf = _csr_from_tokens(term_of, doc_of, len(words))
        doc_len = np.bincount(doc_of, minlength=n_docs).astype(np.int64)
        df = np.diff(indptr)
        idf = _idf(df, n_docs, params)
        avgdl = float(doc_len.sum()) / n_docs if n_docs else 0.0
        norm = params.k1 * (1 - params.b + params.b * doc_len / (avgdl or 1.0))
        tf = post_tf.astype(np.float64)
        post_term = np.repeat(np.arange(len(words)), df)
        impacts = idf[post_term] * (tf * (params.k1 + 1) / (tf + norm[post_doc]))
        return cls(
            vocab={w: i for i, w in enumerate(words)},
            indptr=indptr,
            post_docs=post_doc,
            post_imp=impacts.astype(np.float32),
            doc_len=doc_len.astype(np.int32),
            n_docs=n_docs,
        )

    def encode_queries(self, queries: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Queries as CSR (``q_ptr``, term ids, weights = repeat counts), unknown terms dropped."""
        ptr = [0]
        terms: list[int] = []
        weights: list[float] = []
        get = self.vocab.get
        for q in queries:
            counts: dict[int, int] = {}
            for tok in tokenize(q):
                t = get(tok)
                if t is not None:
                    counts[t] = counts.get(t, 0) + 1
            terms.extend(counts)
            weights.extend(counts.values())
            ptr.append(len(terms))
        return np.asarray(ptr, np.int64), np.asarray(terms, np.int64), np.asarray(weights, np.float32)

    # -- persistence

    def arrays(self) -> dict[str, np.ndarray]:
        words = "\n".join(self.vocab)  # tokens never contain "\n"
        return {
            "vocab": np.frombuffer(words.encode("utf-8", "surrogatepass"), dtype=np.uint8),
            "indptr": self.indptr,
            "post_docs": self.post_docs,
            "post_imp": self.post_imp,
            "doc_len": self.doc_len,
        }

    @classmethod
    def from_arrays(cls, arrays: Any, n_docs: int) -> _FastIndex:
        words = arrays["vocab"].tobytes().decode("utf-8", "surrogatepass")
        vocab = {w: i for i, w in enumerate(words.split("\n"))} if words else {}
        indptr, docs, imp = arrays["indptr"], arrays["post_docs"], arrays["post_imp"]
        # The kernels do not bounds-check: refuse anything that could make them read or write out of bounds.
        ok = (
            indptr.dtype == np.int64
            and docs.dtype == np.int32
            and imp.dtype == np.float32
            and len(indptr) == len(vocab) + 1
            and len(arrays["doc_len"]) == n_docs
            and indptr[0] == 0
            and indptr[-1] == len(docs) == len(imp)
            and bool(np.all(np.diff(indptr) >= 0))
            and (docs.size == 0 or (docs.min() >= 0 and docs.max() < n_docs))
        )
        if not ok:
            raise ValueError("inconsistent BM25 index arrays")
        return cls(vocab, indptr, docs, imp, arrays["doc_len"], n_docs)


# ----------------------------------------------------------------------------------------------- rank-bm25


class _RankBM25Index:
    """The reference back-end: ``rank_bm25.BM25Okapi.get_scores`` over every document."""

    def __init__(self, tokenized: Sequence[Sequence[str]], params: BM25Params) -> None:
        from rank_bm25 import BM25Okapi

        self.n_docs = len(tokenized)
        postings: dict[str, list[int]] = {}
        for i, toks in enumerate(tokenized):
            for t in set(toks):
                postings.setdefault(t, []).append(i)
        self.postings = {t: np.asarray(p, np.int64) for t, p in postings.items()}
        self.bm25 = None
        if postings:  # rank-bm25 divides by the vocabulary size and avgdl
            self.bm25 = BM25Okapi([list(t) for t in tokenized], k1=params.k1, b=params.b, epsilon=params.epsilon)
            if params.idf == "lucene":
                words = list(self.postings)
                df = np.asarray([len(self.postings[w]) for w in words])
                self.bm25.idf = dict(zip(words, _idf(df, self.n_docs, params).tolist(), strict=True))

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        toks = tokenize(query)
        hits = [self.postings[t] for t in dict.fromkeys(toks) if t in self.postings]
        if not hits or k <= 0 or self.bm25 is None:
            return np.zeros(0, np.int64), np.zeros(0)
        cand = np.unique(np.concatenate(hits))
        scores = self.bm25.get_scores(toks)[cand]
        order = np.lexsort((cand, -scores))[:k]
        return cand[order], scores[order]


# ----------------------------------------------------------------------------------------------- retriever


class BM25Retriever(Retriever):
    """BM25 over a corpus of :class:`Document` (title + text), with rank-bm25 ``BM25Okapi``'s formula.

    Args:
        corpus: the documents; hits refer to these objects.
        k1, b, epsilon: BM25 parameters (rank-bm25 defaults); ``epsilon`` scales the okapi idf floor.
        idf: ``"lucene"`` (Lucene's, default) or ``"okapi"`` (rank-bm25's); see the module docstring.
        backend: ``"fast"`` (numba inverted index) or ``"rank_bm25"`` (the reference library, slow).
        cache_dir: fast back-end only: load the index from here when a file for this exact corpus, parameters and
            tokenizer exists, else build it and save it there (atomically).
        n_threads: threads for ``batch_search`` (default: the CPUs available to this process).
        prune: fast back-end: skip work that cannot change the top k (exact: the same results either way).
    """

    def __init__(
        self,
        corpus: Sequence[Document],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
        idf: str = "lucene",
        backend: str = "fast",
        cache_dir: str | os.PathLike[str] | None = None,
        n_threads: int | None = None,
        prune: bool = True,
        _index: _FastIndex | None = None,
    ) -> None:
        if backend not in ("fast", "rank_bm25"):
            raise ValueError(f"backend must be 'fast' or 'rank_bm25', not {backend!r}")
        self.corpus = list(corpus)
        self.params = BM25Params(k1=k1, b=b, epsilon=epsilon, idf=idf)
        self.backend = backend
        self.prune = prune
        self.n_threads = max(1, n_threads or _available_cpus())
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._fast: _FastIndex | None = _index
        self._rank: _RankBM25Index | None = None
        self.loaded_from_cache = False
        if backend == "rank_bm25":
            self._rank = _RankBM25Index([tokenize(d.contents) for d in self.corpus], self.params)
        elif self._fast is None:
            path = Path(cache_dir) / f"bm25-{self.cache_key()}.npz" if cache_dir is not None else None
            if path is not None and path.exists():
                try:
                    self._fast = _read_index(path, self._meta())
                    self.loaded_from_cache = True
                except Exception:  # unreadable, truncated or foreign file: rebuild and overwrite it
                    self._fast = None
            if self._fast is None:
                # Tokenising `contents` gives the title and text tokens: the quotes and newline are separators.
                self._fast = _FastIndex.build([d.contents for d in self.corpus], self.params)
                if path is not None:
                    _write_index(path, self._fast, self._meta())
        self._workspaces = _WorkspacePool(len(self.corpus))
        if self._fast is not None:  # compile (or load) the search kernels now, not during the first query
            self._fast_search([""], 1, 1)

    # -- search

    def search(self, query: str, topk: int = 3) -> list[Hit]:
        return self._search_many([query], topk, parallel=False)[0]

    def batch_search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        return self._search_many(list(queries), topk, parallel=True)

    def search_ids(
        self, queries: Sequence[str], topk: int = 3, *, n_threads: int | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Like ``batch_search`` but returns ``(corpus indices, scores)`` arrays per query (no Hit objects)."""
        queries = list(queries)
        topk = max(0, int(topk))
        if self._rank is not None:
            return [self._rank.search(q, topk) for q in queries]
        return self._fast_search(queries, topk, self.n_threads if n_threads is None else max(1, n_threads))

    def _search_many(self, queries: list[str], topk: int, *, parallel: bool) -> list[list[Hit]]:
        results = self.search_ids(queries, topk, n_threads=None if parallel else 1)
        corpus = self.corpus
        return [
            [Hit(corpus[i], float(s)) for i, s in zip(ids.tolist(), scores.tolist(), strict=True)]
            for ids, scores in results
        ]

    def _fast_search(self, queries: list[str], topk: int, n_threads: int) -> list[tuple[np.ndarray, np.ndarray]]:
        idx = self._fast
        assert idx is not None
        nq = len(queries)
        k = min(topk, idx.n_docs)
        q_ptr, q_terms, q_w = idx.encode_queries(queries)
        return run_queries(idx.kernel_arrays(), self.prune and idx.nonneg, (q_ptr, q_terms, q_w), nq, k,
                           self._workspaces, self._executor, n_threads)  # fmt: skip

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.n_threads, thread_name_prefix="bm25")
            return self._pool

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    # -- persistence

    def _meta(self) -> dict[str, Any]:
        return {
            "format": _INDEX_FORMAT,
            "tokenizer": TOKENIZER_VERSION,
            "stopwords": sorted(STOPWORDS),
            "params": asdict(self.params),
            "corpus": corpus_fingerprint(self.corpus),
            "n_docs": len(self.corpus),
        }

    def cache_key(self) -> str:
        """Key of this index in a cache directory: corpus contents + parameters + tokenizer version."""
        return cache_key(self._meta())

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write the fast index to ``directory/bm25_index.npz`` (atomically); returns the file path."""
        if self._fast is None:
            raise ValueError("only the 'fast' BM25 back-end can be saved")
        path = Path(directory) / "bm25_index.npz"
        _write_index(path, self._fast, self._meta())
        return path

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike[str],
        corpus: Sequence[Document],
        *,
        n_threads: int | None = None,
        prune: bool = True,
    ) -> BM25Retriever:
        """Load an index written by :meth:`save`; ``corpus`` must be the one it was built from (checked)."""
        path = Path(directory) / "bm25_index.npz"
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
        params = BM25Params(**meta["params"])
        probe = {
            **meta,
            "tokenizer": TOKENIZER_VERSION,
            "stopwords": sorted(STOPWORDS),
            "format": _INDEX_FORMAT,
            "corpus": corpus_fingerprint(corpus),
            "n_docs": len(corpus),
        }
        index = _read_index(path, probe)
        return cls(corpus, **asdict(params), backend="fast", n_threads=n_threads, prune=prune, _index=index)


def _write_index(path: Path, index: _FastIndex, meta: dict[str, Any]) -> None:
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, meta=np.array(json.dumps(meta)), **index.arrays())


def _read_index(path: Path, expected_meta: dict[str, Any]) -> _FastIndex:
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        for key in ("format", "tokenizer", "stopwords", "params", "corpus", "n_docs"):
            if meta.get(key) != expected_meta.get(key):
                raise ValueError(f"{path}: BM25 index does not match ({key} differs); rebuild it")
        return _FastIndex.from_arrays({k: z[k] for k in z.files if k != "meta"}, int(meta["n_docs"]))


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
