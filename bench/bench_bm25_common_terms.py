"""BM25 where query terms are common (issue 34): agentgym's on-disk BM25 (``DiskBM25``, the back-end the suite uses
for large corpora), with both idfs, against Lucene (Anserini) on a seeded catalogue-like corpus, in one run.

Catalogue search is where BM25 meets common terms: sizes, colours, "pack", "women" appear in 40-90% of product
passages. The corpus (:func:`write_catalogue`) has product passages of 25-60 words: a title (brand, style words, a
product noun, who it is for), then the attributes with their own frequencies (:data:`COMMON`: "women" 55%, "size"
88%, "black" 70%, "pack" 45%, ...) and a Zipfian description. Three query sets (:func:`write_queries`, seeded):

- **common**: 2-5 terms, every one of them in >= 40% of the passages (``women black pack medium``);
- **rare**: brand, product noun and description words of one passage, none of them common (``zobaku kettle ...``);
- **mixed**: 1-2 rare words of a passage plus 2-3 common terms (what a shopper types: ``zobaku kettle black large``).

Run by hand (the corpus, queries and Lucene's input are made once in ``--work`` and reused)::

    nice -n 10 python bench/bench_bm25_common_terms.py --passages 2M --anserini-jar JAR --work /tmp/cterms \\
        --out bench/results/bm25_common_terms

(the Anserini jar: see ``bench/bench_retrieval_scale.py``'s docstring). Each system runs in its own subprocess with
``--threads`` threads, one warm pass then one timed batched pass per query set; ours is built once per idf
(``okapi``: rank-bm25's negative-idf floor; ``lucene``: ``log(1 + (N - df + 0.5) / (df + 0.5))``), Lucene once
(``BM25Similarity(k1, b)`` over the same pre-tokenised terms). Printed and written to ``--out/results.json``: queries/s
per system and set, ours/Lucene ratios from the same run, and each idf's agreement with Lucene's top 10
(overlap@10: ``|ours & Lucene| / max(|ours|, |Lucene|)``, and recall@10 of Lucene's list). ``--systems`` may add
``mem``: the in-memory ``BM25Retriever`` (the ``"bm25"`` spec's back-end), built in its own process per idf.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TOPK = 10
SETS = ("common", "rare", "mixed")

COMMON: dict[str, float] = {
    "women": 0.55,
    "size": 0.88,
    "color": 0.9,
    "black": 0.7,
    "white": 0.6,
    "blue": 0.45,
    "small": 0.6,
    "medium": 0.75,
    "large": 0.65,
    "pack": 0.45,
    "cotton": 0.42,
}
"""The common attribute words and the share of passages each appears in (independently drawn)."""
OTHER_ATTRS: dict[str, float] = {
    "men": 0.3,
    "kids": 0.15,
    "red": 0.25,
    "grey": 0.2,
    "navy": 0.15,
    "green": 0.15,
    "pink": 0.12,
    "beige": 0.08,
    "xl": 0.35,
    "xxl": 0.15,
    "polyester": 0.25,
    "wool": 0.1,
    "leather": 0.08,
}
NOUNS = 400  # product nouns, Zipfian
BRANDS = 20_000  # brand names, Zipfian
DESC_VOCAB = 200_000  # description words, Zipfian (synthetic.word_of_rank, from rank DESC_OFFSET)
DESC_OFFSET = 2_000
CHUNK = 20_000
COMMON_SHARE = 0.4
RARE_SHARE = 0.05


def _synthetic() -> Any:
    from agentgym.tools.retrieval import synthetic

    return synthetic


def _zipf_cdf(n: int, a: float = 1.07) -> np.ndarray:
    w = np.arange(1, n + 1, dtype=np.float64) ** -a
    c = np.cumsum(w)
    return c / c[-1]


def _draw(rng: np.random.Generator, cdf: np.ndarray, n: int) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), len(cdf) - 1)


class Catalogue:
    """The word lists of the generator (deterministic: no randomness here)."""

    def __init__(self) -> None:
        word = _synthetic().word_of_rank
        self.brands = [word(100_000 + 7 * r).capitalize() for r in range(BRANDS)]
        self.nouns = [word(50_000 + 3 * r) for r in range(NOUNS)]
        self.desc = np.array([word(DESC_OFFSET + r).lower() for r in range(DESC_VOCAB)], dtype=object)
        self.brand_cdf, self.noun_cdf, self.desc_cdf = _zipf_cdf(BRANDS), _zipf_cdf(NOUNS), _zipf_cdf(DESC_VOCAB)
        self.attrs = {**COMMON, **OTHER_ATTRS}


def _chunk_rows(cat: Catalogue, seed: int, k: int, start: int, n: int) -> list[str]:
    """JSONL rows of passages ``start .. start + n`` (chunk ``k``)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(k,)))
    brands = _draw(rng, cat.brand_cdf, n)
    nouns = _draw(rng, cat.noun_cdf, n)
    n_desc = rng.integers(12, 40, size=n)
    bounds = np.concatenate(([0], np.cumsum(n_desc)))
    desc = cat.desc[_draw(rng, cat.desc_cdf, int(bounds[-1]))]
    names = list(cat.attrs)
    has = rng.random((n, len(names))) < np.array([cat.attrs[a] for a in names])
    packs = rng.choice(["2", "3", "4", "6", "10"], size=n)
    rows = []
    for i in range(n):
        a = {names[j] for j in np.flatnonzero(has[i]).tolist()}
        who = "Women's" if "women" in a else ("Men's" if "men" in a else ("Kids'" if "kids" in a else ""))
        title = f"{cat.brands[brands[i]]} {who} {cat.nouns[nouns[i]].capitalize()}".replace("  ", " ")
        parts = [" ".join(desc[bounds[i] : bounds[i] + 4].tolist()).capitalize() + "."]
        if "pack" in a:
            parts.append(f"Pack of {packs[i]}.")
        colours = [c for c in ("black", "white", "blue", "red", "grey", "navy", "green", "pink", "beige") if c in a]
        if "color" in a and colours:
            parts.append("Color: " + ", ".join(colours) + ".")
        elif colours:
            parts.append(" ".join(colours).capitalize() + ".")
        sizes = [s for s in ("small", "medium", "large", "xl", "xxl") if s in a]
        if "size" in a and sizes:
            parts.append("Size: " + ", ".join(sizes) + ".")
        elif sizes:
            parts.append(" ".join(sizes).capitalize() + ".")
        mats = [m for m in ("cotton", "polyester", "wool", "leather") if m in a]
        if mats:
            parts.append("Made of " + " and ".join(mats) + ".")
        if "women" in a and rng.random() < 0.3:
            parts.append("Fits women.")
        parts.append(" ".join(desc[bounds[i] + 4 : bounds[i + 1]].tolist()) + ".")
        text = " ".join(parts)
        rows.append(json.dumps({"id": str(start + i), "contents": f'"{title}"\n{text}'}) + "\n")
    return rows


def write_catalogue(path: Path, n: int, seed: int) -> None:
    """``n`` seeded catalogue passages as Search-R1-format JSONL (ids ``"0"..``), written atomically."""
    cat = Catalogue()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for k, start in enumerate(range(0, n, CHUNK)):
            f.writelines(_chunk_rows(cat, seed, k, start, min(CHUNK, n - start)))
    os.replace(tmp, path)


def write_queries(corpus: Path, out: Path, n_queries: int, seed: int, df: dict[str, int], n_docs: int) -> None:
    """The three query sets (``n_queries`` each) as ``{set: [query, ...]}`` JSON, from the document frequencies
    ``df`` (token -> passages): common terms are in >= :data:`COMMON_SHARE` of the passages, rare and mixed
    queries' passage words in < :data:`RARE_SHARE`."""
    from agentgym.tools.retrieval.bm25 import tokenize

    rng = np.random.default_rng(seed)
    common = sorted(w for w, c in df.items() if c >= COMMON_SHARE * n_docs)
    sets: dict[str, list[str]] = {s: [] for s in SETS}
    for _ in range(n_queries):
        m = int(rng.integers(2, 6))
        sets["common"].append(" ".join(rng.choice(common, size=m, replace=False).tolist()))
    lines = corpus.read_text(encoding="utf-8").splitlines() if n_docs <= 50_000 else None
    picks = rng.integers(0, n_docs, size=4 * n_queries)
    wanted = sorted(set(picks.tolist()))
    texts: dict[int, str] = {}
    if lines is None:
        want = set(wanted)
        with open(corpus, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i in want:
                    texts[i] = json.loads(line)["contents"]
    else:
        texts = {i: json.loads(lines[i])["contents"] for i in wanted}
    for p in picks.tolist():
        if len(sets["rare"]) >= n_queries and len(sets["mixed"]) >= n_queries:
            break
        toks = list(dict.fromkeys(t for t in tokenize(texts[p]) if df.get(t, 0) < RARE_SHARE * n_docs))
        if len(toks) < 3:
            continue
        if len(sets["rare"]) < n_queries:
            m = int(rng.integers(2, 5))
            sets["rare"].append(" ".join(toks[:2] + rng.choice(toks[2:], size=min(m, len(toks) - 2)).tolist()))
        if len(sets["mixed"]) < n_queries:
            rare = toks[: int(rng.integers(1, 3))]
            extra = rng.choice(common, size=int(rng.integers(2, 4)), replace=False).tolist()
            sets["mixed"].append(" ".join(rare + extra))
    out.write_text(json.dumps(sets), encoding="utf-8")


# ----------------------------------------------------------------------------------------------- children

DF = """\
from agentgym.tools.retrieval.bm25 import tokenize
from agentgym.tools.retrieval.corpus import CorpusFile
df = {}
with CorpusFile.open(A["corpus"], A["corpus_index"], progress=False) as c:
    n = len(c)
    os_dir = A["dir"]; parts = A["parts"]; per = -(-n // parts)
    files = [open(f"{os_dir}/part{p:02d}.jsonl", "w", encoding="utf-8") for p in range(parts)]
    i = 0
    for batch in c.iter_batches(8192):
        for d in batch:
            toks = tokenize(d.contents)
            for t in set(toks):
                df[t] = df.get(t, 0) + 1
            files[i // per].write(json.dumps({"id": d.id, "contents": " ".join(toks)}) + "\\n")
            i += 1
    for f in files:
        f.close()
json.dump({"n_docs": n, "df": df}, open(A["df_out"], "w"))
print(json.dumps({"docs": n}))
"""

SERVE = """\
from agentgym.tools.retrieval.bm25_disk import DiskBM25
from agentgym.tools.retrieval.corpus import CorpusFile
sets = json.load(open(A["queries"], encoding="utf-8"))
corpus = CorpusFile.open(A["corpus"], A["corpus_index"], progress=False)
r = DiskBM25(A["index"], corpus, n_threads=A["threads"])
out = {}
for name, qs in sets.items():
    r.search_ids(qs, A["k"])  # warm
    t0 = time.perf_counter(); res = r.search_ids(qs, A["k"]); t = time.perf_counter() - t0
    with open(A["ids_out"] + f".{name}", "w") as f:
        f.writelines(" ".join(map(str, ids.tolist())) + "\\n" for ids, _ in res)
    out[name] = {"qps": len(qs) / t}
print(json.dumps(out))
"""

MEM = """\
from agentgym.tools.retrieval.bm25 import BM25Retriever
from agentgym.tools.retrieval.corpus import CorpusFile
sets = json.load(open(A["queries"], encoding="utf-8"))
with CorpusFile.open(A["corpus"], A["corpus_index"], progress=False) as c:
    docs = [d for batch in c.iter_batches(65536) for d in batch]
t0 = time.perf_counter()
r = BM25Retriever(docs, k1=A["k1"], b=A["b"], idf=A["idf"], n_threads=A["threads"])
out = {"build_s": time.perf_counter() - t0}
for name, qs in sets.items():
    r.search_ids(qs, A["k"])  # warm
    t0 = time.perf_counter(); res = r.search_ids(qs, A["k"]); t = time.perf_counter() - t0
    with open(A["ids_out"] + f".{name}", "w") as f:
        f.writelines(" ".join(map(str, ids.tolist())) + "\\n" for ids, _ in res)
    out[name] = {"qps": len(qs) / t}
print(json.dumps(out))
"""

JAVA_MAIN = r"""
import java.nio.file.*;
import org.apache.lucene.index.*;
import org.apache.lucene.search.*;
import org.apache.lucene.search.similarities.BM25Similarity;
import org.apache.lucene.store.FSDirectory;

public class CommonBench {
  public static void main(String[] a) throws Exception {
    StringBuilder json = new StringBuilder("{");
    for (int s = 6; s < a.length; s++) {
      String[] args = {a[0], a[s] + ".txt", a[s] + ".ids", a[1], a[2], a[3], a[4], a[5]};
      java.io.ByteArrayOutputStream buf = new java.io.ByteArrayOutputStream();
      java.io.PrintStream old = System.out;
      System.setOut(new java.io.PrintStream(buf));
      ScaleBench.main(args);
      System.setOut(old);
      String name = Paths.get(a[s]).getFileName().toString();
      json.append(s == 6 ? "" : ", ").append("\"").append(name).append("\": ").append(buf.toString().trim());
    }
    System.out.println(json.append("}"));
  }
}
"""


def _scale_bench() -> Any:
    """bench_retrieval_scale (its Lucene program, child runner, overlap and size parsing)."""
    path = ROOT / "bench" / "bench_retrieval_scale.py"
    spec = importlib.util.spec_from_file_location("bench_retrieval_scale", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return sys.modules[spec.name]


def recall(ours: list[list[str]], ref: list[list[str]]) -> float:
    """Mean over queries with reference hits of |ours & ref| / |ref|."""
    vals = [len(set(x) & set(y)) / len(y) for x, y in zip(ours, ref, strict=True) if y]
    return sum(vals) / len(vals) if vals else float("nan")


def main(argv: list[str] | None = None) -> int:
    sb = _scale_bench()
    from agentgym.tools.retrieval.base import parse_size as parse_bytes

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passages", type=sb.parse_size, default=sb.parse_size("2M"))
    p.add_argument("--corpus", default="catalogue", choices=["catalogue", "wiki"],
                   help="catalogue passages, or the scale bench's wiki-18-shaped ones (Zipfian words: the most "
                   "frequent are in most passages)")  # fmt: skip
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--anserini-jar", type=Path, default=None)
    p.add_argument("--systems", default="ours,lucene")
    p.add_argument("--idfs", default="okapi,lucene")
    p.add_argument("--queries", type=int, default=400, help="queries per set")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-memory", type=parse_bytes, default=parse_bytes("6G"))
    p.add_argument("--k1", type=float, default=1.5)
    p.add_argument("--b", type=float, default=0.75)
    p.add_argument("--label", default="", help="a name for this run in results.json (e.g. before / after)")
    a = p.parse_args(argv)
    systems = [s for s in a.systems.split(",") if s]
    idfs = [s for s in a.idfs.split(",") if s]
    if "lucene" in systems and (a.anserini_jar is None or not a.anserini_jar.is_file()):
        p.error("--anserini-jar (Anserini 0.22.1's fat jar) is needed for lucene")
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    n, tag = a.passages, sb.size_label(a.passages)
    tag = f"{a.corpus}-{tag}"
    corpus = a.work / f"{a.corpus}-{n}-seed{a.seed}.jsonl"
    corpus_index = a.work / f"{a.corpus}-{n}.offsets"
    if not corpus.exists():
        sb.say(f"{tag}: generating {corpus.name}")
        if a.corpus == "catalogue":
            write_catalogue(corpus, n, a.seed)
        else:
            _synthetic().write_corpus(corpus, n, seed=a.seed, progress=False)
    pretok = a.work / f"pretok-{tag}"
    df_path = pretok / "df.json"
    if not df_path.exists():
        sb.say(f"{tag}: tokenising for Lucene and counting document frequencies (not timed)")
        shutil.rmtree(pretok, ignore_errors=True)
        pretok.mkdir()
        sb.run_python(DF, {"corpus": str(corpus), "corpus_index": str(corpus_index), "dir": str(pretok),
                           "parts": sb.LUCENE_PARTS, "df_out": str(df_path) + ".tmp"}, a.work / "df.log")  # fmt: skip
        os.replace(str(df_path) + ".tmp", df_path)
    stats = json.loads(df_path.read_text(encoding="utf-8"))
    df, n_docs = stats["df"], stats["n_docs"]
    queries = a.work / f"queries-{a.queries}-seed{a.seed}-of-{tag}.json"
    if not queries.exists():
        write_queries(corpus, queries, a.queries, a.seed, df, n_docs)
    sets = json.loads(queries.read_text(encoding="utf-8"))
    shares = {w: c / n_docs for w, c in sorted(df.items(), key=lambda x: -x[1]) if c >= COMMON_SHARE * n_docs}
    sb.say(f"{tag}: the common terms' share of passages: " + ", ".join(f"{w} {s:.0%}" for w, s in shares.items()))
    entry: dict[str, Any] = {"corpus": a.corpus, "passages": n, "queries_per_set": a.queries, "threads": a.threads,
                             "k1": a.k1, "b": a.b, "load": sb.load_info(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                             "common_df_share": shares, "systems": {}}  # fmt: skip
    ids: dict[str, dict[str, list[list[str]]]] = {}
    if "lucene" in systems:
        from agentgym.tools.retrieval.bm25 import tokenize

        jar = str(a.anserini_jar)
        classes = a.work / "java"
        if not (classes / "CommonBench.class").exists():
            classes.mkdir(exist_ok=True)
            (classes / "ScaleBench.java").write_text(sb.JAVA_SOURCE, encoding="utf-8")
            (classes / "CommonBench.java").write_text(JAVA_MAIN, encoding="utf-8")
            sb.run_child(["javac", "-cp", jar, "-d", str(classes), str(classes / "ScaleBench.java"),
                          str(classes / "CommonBench.java")], a.work / "javac.log")  # fmt: skip
        index = a.work / f"lucene-{tag}"
        if not (index / "segments_1").exists() and not any(index.glob("segments_*")):
            sb.say(f"{tag}: Lucene: IndexCollection")
            shutil.rmtree(index, ignore_errors=True)
            sb.run_child(["java", "-cp", jar, "io.anserini.index.IndexCollection", "-collection", "JsonCollection",
                          "-input", str(pretok), "-index", str(index), "-generator",
                          "DefaultLuceneDocumentGenerator", "-threads", str(a.threads), "-pretokenized", "-quiet"],
                         a.work / "lucene-build.log")  # fmt: skip
        stems = []
        for name, qs in sets.items():
            stem = a.work / f"q-{tag}-{name}"
            stem.with_suffix(".txt").write_text("".join(" ".join(tokenize(q)) + "\n" for q in qs), encoding="utf-8")
            stems.append(str(stem))
        sb.say(f"{tag}: Lucene: serving {len(sets)} query sets")
        c = sb.run_child(["java", "-cp", f"{jar}{os.pathsep}{classes}", "CommonBench", str(index), str(a.k1),
                          str(a.b), str(TOPK), str(a.threads), "0", *stems], a.work / "lucene-serve.log")  # fmt: skip
        res = {}
        for stem in stems:
            name = stem.rsplit("-", 1)[1]
            res[name] = {"qps": len(sets[name]) / c.result[Path(stem).name]["batched_s"]}
            ids.setdefault("lucene", {})[name] = sb.read_ids(Path(stem + ".ids"))
        entry["systems"]["lucene"] = res
    if "ours" in systems:
        for idf in idfs:
            index = a.work / f"ours-{tag}-{idf}"
            common = {"corpus": str(corpus), "corpus_index": str(corpus_index), "index": str(index)}
            if not (index / "meta.json").exists():
                sb.say(f"{tag}: ours ({idf} idf): build")
                sb.run_python(sb.OURS_BUILD, {**common, "k1": a.k1, "b": a.b, "idf": idf,
                                              "max_memory": a.max_memory}, a.work / "ours-build.log")  # fmt: skip
            sb.say(f"{tag}: ours ({idf} idf): serving {len(sets)} query sets")
            out = str(a.work / f"ids-ours-{tag}-{idf}")
            c = sb.run_python(SERVE, {**common, "queries": str(queries), "k": TOPK, "threads": a.threads,
                                      "ids_out": out}, a.work / "ours-serve.log")  # fmt: skip
            entry["systems"][f"ours-{idf}"] = c.result
            ids[f"ours-{idf}"] = {name: sb.read_ids(Path(f"{out}.{name}")) for name in sets}
    if "mem" in systems:
        for idf in idfs:
            sb.say(f"{tag}: ours in memory ({idf} idf): build and serve {len(sets)} query sets")
            out = str(a.work / f"ids-mem-{tag}-{idf}")
            c = sb.run_python(MEM, {"corpus": str(corpus), "corpus_index": str(corpus_index), "queries": str(queries),
                                    "k": TOPK, "k1": a.k1, "b": a.b, "idf": idf, "threads": a.threads,
                                    "ids_out": out}, a.work / "mem.log")  # fmt: skip
            entry["systems"][f"mem-{idf}"] = {**c.result, "rss_mb": c.maxrss_mb}
            ids[f"mem-{idf}"] = {name: sb.read_ids(Path(f"{out}.{name}")) for name in sets}
    if "lucene" in ids:
        entry["vs_lucene"] = {
            name: {
                s: {
                    "qps_ratio": entry["systems"][name][s]["qps"] / entry["systems"]["lucene"][s]["qps"],
                    "overlap@10": sb.overlap(ids[name][s], ids["lucene"][s]),
                    "recall@10": recall(ids[name][s], ids["lucene"][s]),
                }
                for s in sets
            }
            for name in ids
            if name != "lucene"
        }
    entry["load_after"] = sb.load_info()
    out_json = a.out / "results.json"
    results = json.loads(out_json.read_text(encoding="utf-8")) if out_json.exists() else {}
    results[a.label or f"{tag}-{entry['date']}"] = entry
    out_json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"\n### {tag} passages, {a.queries} queries per set, top {TOPK}, {a.threads} threads "
          f"({entry['load']})\n")  # fmt: skip
    print("| system | " + " | ".join(f"{s} q/s" for s in sets) + " |")
    print("|---|" + "---:|" * len(sets))
    for name, res in entry["systems"].items():
        print(f"| {name} | " + " | ".join(f"{res[s]['qps']:,.1f}" for s in sets) + " |")
    for name, per in entry.get("vs_lucene", {}).items():
        for s, v in per.items():
            print(f"{name} vs Lucene, {s}: q/s x{v['qps_ratio']:.2f}, overlap@10 {v['overlap@10']:.3f}, "
                  f"recall@10 {v['recall@10']:.3f}")  # fmt: skip
    sb.say(f"wrote {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
