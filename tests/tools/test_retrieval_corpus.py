"""Streaming corpus access (CorpusFile) against load_corpus, persisted indexes, threads, and the synthetic generator."""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agentgym.envs.search_qa.flashrag import FlashRAGFormatError, load_corpus
from agentgym.tools.retrieval import corpus as corpus_mod
from agentgym.tools.retrieval.base import Document
from agentgym.tools.retrieval.corpus import CorpusFile, CorpusFormatError, parse_row
from agentgym.tools.retrieval.synthetic import main as synthetic_main, word_of_rank, write_corpus, write_queries

SMALL = {"vocab_size": 3000, "progress": False}


def outcome_of_load(path: Path) -> tuple[str, object]:
    try:
        return "ok", load_corpus(path)
    except FlashRAGFormatError as e:
        return "error", str(e)


def outcome_of_file(path: Path, index_dir: Path | None = None) -> tuple[str, object]:
    try:
        with CorpusFile.open(path, index_dir, progress=False) as c:
            docs = list(c)
            assert len(docs) == len(c)
            assert [c[i] for i in range(len(c))] == docs
            assert all(c.get(d.id) == d for d in docs)
            return "ok", docs
    except CorpusFormatError as e:
        return "error", str(e)


@pytest.fixture(scope="module")
def wiki(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("wiki") / "wiki.jsonl"
    write_corpus(path, 600, seed=3, **SMALL)
    return path


# --- CorpusFile agrees with load_corpus ----------------------------------------------------------------------


def test_generated_corpus_agrees_with_load_corpus(wiki):
    docs = load_corpus(wiki)
    assert outcome_of_file(wiki) == ("ok", docs)
    with CorpusFile.open(wiki, progress=False) as c:
        assert c.ids_are_row_numbers
        assert [len(b) for b in c.iter_batches(256)] == [256, 256, 88]
        assert [d for b in c.iter_batches(7, start=10, stop=30) for d in b] == docs[10:30]
        assert c[-1] == docs[-1] and c[np.int64(5)] == docs[5]
        with pytest.raises(IndexError):
            c[600]
        with pytest.raises(TypeError):
            c["0"]


ID = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=6),
    st.integers(-5, 30),
    st.sampled_from(["0", "1", "01", " 1", "é", "\u2028", "a\nb", "1.0"]),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
)
TEXT = st.text(st.characters(codec="utf-8"), max_size=30)
ROW = st.one_of(
    st.builds(lambda i, c: {"id": i, "contents": c}, ID, TEXT),
    st.builds(lambda i, t, x: {"id": i, "title": t, "text": x}, ID, TEXT, TEXT),
    st.builds(lambda i, x: {"id": i, "text": x}, ID, TEXT),
    st.builds(lambda i, c, x: {"id": i, "contents": c, "text": x}, ID, st.integers(), TEXT),
)
LINE = st.one_of(
    ROW.map(lambda r: json.dumps(r).encode()),
    ROW.map(lambda r: json.dumps(r, ensure_ascii=False, indent=None, separators=(",", ":")).encode()),
    st.sampled_from([b"", b" ", b"\t", b"\r", "\u3000".encode(), b"\x1c"]),
)
BAD_LINE = st.sampled_from(
    [b"not json", b'{"id": "x"', b'"string"', b"[1]", b'{"contents": "x"}', b'{"id": "z", "contents": 5}', b"\xff\xfe"]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(st.one_of(LINE, LINE, LINE, LINE, LINE, LINE, BAD_LINE), max_size=12),
    bom=st.booleans(),
    crlf=st.booleans(),
    final_newline=st.booleans(),
)
def test_agrees_with_load_corpus_on_any_jsonl(lines, bom, crlf, final_newline):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.jsonl"
        end = b"\r\n" if crlf else b"\n"
        data = end.join(lines) + (end if final_newline else b"")
        path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
        expected = outcome_of_load(path)
        assert outcome_of_file(path) == expected
        # and again through a saved index (built, then loaded)
        assert outcome_of_file(path, Path(d) / "idx") == expected
        if expected[0] == "ok":
            assert outcome_of_file(path, Path(d) / "idx") == expected


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"contents": "x"}\n', ":1: a corpus row needs an 'id'"),
        (b'{"id": "0", "contents": "\\"T\\"\\nx"}\n{"id": "1"}\n', ":2: a corpus row needs a string 'contents'"),
        (b'{"id": "0", "contents": 3}\n', ":1: a corpus row needs a string 'contents'"),
        (b'{"id": "0", "contents": "a"}\n{"id": 0, "title": "t", "text": "b"}\n', ":2: duplicate document id '0'"),
        (b'{"id": "a", "contents": "a"}\n\n{"id": "b", "contents": "b"}\n{"id": "a", "contents": "c"}\n',
         ":4: duplicate document id 'a'"),
        (b'{"id": "a", "contents": "a"}\n{"id": "a", "contents": "b"}\nnot json\n', ":2: duplicate document id 'a'"),
        (b'{"id": "0", "contents": "a"}\nnot json\n', ":2: not valid JSON"),
        (b'{"id": "0", "contents": "a"}\n{"id": "1", "contents": "\xff"}\n', ":2: not valid UTF-8"),
        (b'\n["a"]\n', ":2: expected a JSON object, got list"),
        (b"\xef\xbb\xbf\xef\xbb\xbf{}\n", ":1: not valid JSON"),
    ],
)  # fmt: skip
def test_malformed_files_fail_like_load_corpus(tmp_path, content, message):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(content)
    expected = outcome_of_load(path)
    assert expected[0] == "error" and expected[1].startswith(f"{path}{message}"), expected
    assert outcome_of_file(path) == expected
    with pytest.raises(FlashRAGFormatError):  # flashrag's error is a CorpusFormatError (and a ValueError)
        load_corpus(path)
    assert issubclass(FlashRAGFormatError, CorpusFormatError) and issubclass(CorpusFormatError, ValueError)


def test_missing_file_and_long_lines(tmp_path):
    with pytest.raises(CorpusFormatError, match="cannot open"):
        CorpusFile.open(tmp_path / "missing.jsonl")
    with pytest.raises(CorpusFormatError, match=r"cannot open \(not a regular file\)"):
        CorpusFile.open(tmp_path)
    if hasattr(os, "mkfifo"):  # a FIFO with no writer must not hang the open
        os.mkfifo(tmp_path / "fifo")
        with pytest.raises(FlashRAGFormatError, match="not a regular file"):
            load_corpus(tmp_path / "fifo")
    huge = tmp_path / "huge.jsonl"
    huge.write_text('{"id": ' + "9" * 5000 + ', "contents": "x"}\n')
    kind, message = outcome_of_load(huge)
    assert kind == "error" and str(message).startswith(f"{huge}:1: not valid JSON (")
    assert outcome_of_file(huge) == (kind, message)
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "0", "contents": "short"}\n' + json.dumps({"id": "1", "contents": "x" * 300}) + "\n")
    with pytest.raises(CorpusFormatError, match=re.escape(f"{path}:2: line longer than 100 bytes")):
        CorpusFile.open(path, progress=False, max_line_bytes=100)
    assert len(CorpusFile.open(path, progress=False, max_line_bytes=400)) == 2


def test_reads_cap_at_the_longest_row_over_blank_gaps(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "contents": "x"}\n' + " \n" * 5000 + '{"id": "b", "contents": "y"}')
    with CorpusFile.open(path, progress=False) as c:
        assert c._span(0)[1] < 100
        assert [d.contents for d in c] == ["x", "y"] and c.get("b").contents == "y"


# --- get(id) ---------------------------------------------------------------------------------------------------


def test_get_by_numeric_ids(wiki):
    with CorpusFile.open(wiki, progress=False) as c:
        assert c.get("0").id == "0" and c.get("599").id == "599" and "17" in c
        for bad in ["600", "-1", "01", "00", "", " 1", "1.0", "١", "x"]:
            with pytest.raises(KeyError):
                c.get(bad)
            assert bad not in c


def test_get_by_other_ids(tmp_path):
    path = tmp_path / "c.jsonl"
    rows = [{"id": i, "contents": f"c{i}"} for i in ["b", "a", "0", "é", "🙂", "\ud800"]] + [{"id": 7, "text": "t"}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with CorpusFile.open(path, progress=False) as c:
        assert not c.ids_are_row_numbers
        for r in rows[:-1]:
            assert c.get(r["id"]) == Document(r["id"], r["contents"])
        assert c.get("7") == Document("7", '""\nt')
        for bad in ["1", "c", "7 ", "A"]:
            with pytest.raises(KeyError):
                c.get(bad)


def test_ids_that_stop_being_row_numbers(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "contents": "x"}) + "\n" for i in [0, 1, 2, 4, 3, "0x"]))
    with CorpusFile.open(path, progress=False) as c:
        assert not c.ids_are_row_numbers
        ids = ["0", "1", "2", "3", "4", "0x"]
        assert [c.get(i).id for i in ids] == ids and [d.id for d in c] == ["0", "1", "2", "4", "3", "0x"]


def test_hash_collisions_are_not_duplicates(tmp_path, monkeypatch):
    """With every id hashing to the same 64 bits, the build still accepts unique ids, finds real duplicates, and
    ``get`` walks the run of equal hashes."""
    real = hashlib.blake2b

    class Colliding:
        def __init__(self, data: bytes = b"", digest_size: int = 64):
            self._h = real(data, digest_size=digest_size)
            self._size = digest_size

        def update(self, data: bytes) -> None:
            self._h.update(data)

        def digest(self) -> bytes:
            return b"\x00" * 8 if self._size == 8 else self._h.digest()

        def hexdigest(self) -> str:
            return self._h.hexdigest()

    monkeypatch.setattr(corpus_mod.hashlib, "blake2b", Colliding)
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"id": f"d{i}", "contents": f"c{i}"}) + "\n" for i in range(20)))
    with CorpusFile.open(path, progress=False) as c:
        assert [c.get(f"d{i}").contents for i in range(20)] == [f"c{i}" for i in range(20)]
        with pytest.raises(KeyError):
            c.get("d20")
    with path.open("a") as f:
        f.write('{"id": "d5", "contents": "again"}\n')
    with pytest.raises(CorpusFormatError, match=":21: duplicate document id 'd5'"):
        CorpusFile.open(path, progress=False)


# --- persisted index ---------------------------------------------------------------------------------------------


def index_mtimes(index_dir: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in index_dir.iterdir()}


@pytest.mark.parametrize("ids", ["rows", "names"])
def test_persisted_index_is_reused_then_rebuilt_when_the_file_changes(tmp_path, ids):
    path = tmp_path / "c.jsonl"
    key = (lambda i: str(i)) if ids == "rows" else (lambda i: f"n{i}")
    path.write_text("".join(json.dumps({"id": key(i), "contents": f"text {i}"}) + "\n" for i in range(50)))
    idx = tmp_path / "idx"
    with CorpusFile.open(path, idx, progress=False) as c:
        assert c.built and len(c) == 50
    saved = index_mtimes(idx)
    assert {"corpus_index.json", "corpus_offsets.npy"} <= set(saved)
    assert ("corpus_id_hashes.npy" in saved) == (ids == "names")
    with CorpusFile.open(path, idx, progress=False) as c:
        assert not c.built and c.get(key(7)).contents == "text 7"
        assert isinstance(c._offsets, np.memmap)
    assert index_mtimes(idx) == saved

    with path.open("a") as f:  # appended line
        f.write(json.dumps({"id": key(50), "contents": "text 50"}) + "\n")
    with CorpusFile.open(path, idx, progress=False) as c:
        assert c.built and len(c) == 51 and c.get(key(50)).contents == "text 50"

    st = path.stat()  # same-size edit, even with the old mtime put back
    path.write_bytes(path.read_bytes().replace(b"text 7", b"TEXT 7"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with CorpusFile.open(path, idx, progress=False) as c:
        assert c.built and c.get(key(7)).contents == "TEXT 7"
    with CorpusFile.open(path, idx, progress=False) as c:
        assert not c.built

    other = tmp_path / "other.jsonl"  # a foreign index in the same folder is not trusted
    other.write_text('{"id": "q", "contents": "other"}\n')
    with CorpusFile.open(other, idx, progress=False) as c:
        assert c.built and len(c) == 1
    (idx / "corpus_index.json").write_text("{not json")
    with CorpusFile.open(other, idx, progress=False) as c:
        assert c.built and c.get("q").contents == "other"
    assert not [p for p in idx.iterdir() if p.name.endswith(".tmp")]


def test_a_file_changed_after_open_is_reported(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "0", "contents": "a"}\n')
    with CorpusFile.open(path, progress=False) as c:
        with path.open("a") as f:
            f.write('{"id": "1", "contents": "b"}\n')
        with pytest.raises(CorpusFormatError, match="changed since it was indexed"):
            c[0]


# --- threads -------------------------------------------------------------------------------------------------------


def test_reads_from_four_threads(wiki):
    docs = load_corpus(wiki)
    errors: list[str] = []
    with CorpusFile.open(wiki, progress=False) as c:

        def work(seed: int) -> None:
            rng = np.random.default_rng(seed)
            for i in rng.integers(0, len(docs), 400).tolist():
                if c[i] != docs[i] or c.get(str(i)) != docs[i]:
                    errors.append(f"row {i}")
            if [d for b in c.iter_batches(97) for d in b] != docs:
                errors.append("batches")

        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors


# --- the synthetic generator -----------------------------------------------------------------------------------


def test_generator_is_deterministic(tmp_path, wiki):
    again, other = tmp_path / "again.jsonl", tmp_path / "other.jsonl"
    write_corpus(again, 600, seed=3, **SMALL)
    write_corpus(other, 600, seed=4, **SMALL)
    assert again.read_bytes() == wiki.read_bytes()
    assert other.read_bytes() != wiki.read_bytes()
    prefix = tmp_path / "prefix.jsonl"  # a smaller corpus is a prefix of a bigger one
    write_corpus(prefix, 250, seed=3, **SMALL)
    assert wiki.read_bytes().startswith(prefix.read_bytes())


def test_generator_shape(wiki):
    lines = wiki.read_text().splitlines()
    assert len(lines) == 600
    rows = [json.loads(line) for line in lines]
    assert [r["id"] for r in rows] == [str(i) for i in range(600)]
    assert all(set(r) == {"id", "contents"} for r in rows)
    docs = [Document(r["id"], r["contents"]) for r in rows]
    lengths = [len(d.text.split()) for d in docs]
    assert min(lengths) >= 90 and max(lengths) <= 110
    titles = [d.title for d in docs]
    assert all(1 <= len(t.split()) <= 4 and t.istitle() for t in titles)
    runs = [len(list(g)) for _, g in itertools.groupby(titles)]
    assert 1.8 <= len(titles) / len(runs) <= 4.5 and max(runs) >= 3  # articles of ~3 passages
    words = [w.strip(",.").lower() for d in docs for w in d.text.split()]
    counts = collections.Counter(words)
    top, tenth = counts[word_of_rank(0)], counts[word_of_rank(9)]
    assert counts.most_common(1)[0][0] == word_of_rank(0)
    assert 10**0.9 <= top / tenth <= 10**1.25, (top, tenth)  # about 10**a with a = 1.07
    assert any(w[0].isupper() for d in docs for w in d.text.split()[1:])  # some capitalised names
    assert all(re.fullmatch(r"[A-Za-z]+[,.]?", w) for d in docs[:20] for w in d.text.split())


def test_words_are_unique_and_pronounceable():
    words = [word_of_rank(r) for r in range(7000)]
    assert len({w.lower() for w in words}) == 7000
    assert all(re.fullmatch(r"([bdfghklmnprstvwz][aeiou])+", w.lower()) for w in words)


def test_queries(tmp_path):
    path = tmp_path / "q.jsonl"
    corpus = tmp_path / "c.jsonl"
    write_corpus(corpus, 120, seed=2, vocab_size=3000, chunk_size=50, progress=False)
    write_queries(path, 60, seed=1, n_passages=120, corpus_seed=2, vocab_size=3000, chunk_size=50)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 60 and [r["id"] for r in rows] == [f"q{i}" for i in range(60)]
    assert all(set(r) == {"id", "question", "source_id"} for r in rows)
    assert all(1 <= len(r["question"].split()) <= 6 for r in rows)
    docs = {d.id: d for d in load_corpus(corpus)}
    matched = [r for r in rows if r["source_id"] is not None]
    assert 15 <= len(matched) <= 45
    for r in matched:
        text = {w.strip(",.").lower() for w in docs[r["source_id"]].text.split()}
        assert {w.lower() for w in r["question"].split()} <= text
    again = tmp_path / "q2.jsonl"
    write_queries(again, 60, seed=1, n_passages=120, corpus_seed=2, vocab_size=3000, chunk_size=50)
    assert again.read_bytes() == path.read_bytes()


def test_cli(tmp_path, capsys):
    out = tmp_path / "c.jsonl"
    assert synthetic_main(["corpus", str(out), "--passages", "30", "--seed", "5", "--vocab-size", "500"]) == 0
    assert len(out.read_text().splitlines()) == 30
    assert synthetic_main(["queries", str(tmp_path / "q.jsonl"), "--n", "4", "--vocab-size", "500"]) == 0
    for argv in (
        ["corpus", str(out), "--passages", "-1"],
        ["corpus", str(tmp_path / "no" / "c.jsonl"), "--passages", "3"],
        ["corpus", str(out), "--passages", "3", "--zipf-a", "0"],
        ["queries", str(out)],
    ):
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            synthetic_main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("python -m agentgym.tools.retrieval.synthetic") and ": error: " in err[-1], err


def test_cli_as_module(tmp_path):
    out = tmp_path / "c.jsonl"
    args = [sys.executable, "-m", "agentgym.tools.retrieval.synthetic", "corpus", str(out), "--passages", "3"]
    done = subprocess.run([*args, "--vocab-size", "300", "--no-progress"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert outcome_of_file(out)[0] == "ok"
    bad = subprocess.run([*args[:-1], "lots"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid int value" in bad.stderr


def test_parse_row_alone():
    assert parse_row(b"  \r\n") is None
    assert parse_row(b'\xef\xbb\xbf{"id": 1, "contents": "c"}') == Document("1", "c")
    with pytest.raises(CorpusFormatError, match=r"^f:2: not valid JSON"):
        parse_row(b'\xef\xbb\xbf{"id": 1, "contents": "c"}', "f", 2)


# --- memory ------------------------------------------------------------------------------------------------------

PEAK_RSS = """
import re, sys
from agentgym.tools.retrieval.corpus import CorpusFile
def hwm():
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
before = hwm()
c = CorpusFile.open(sys.argv[1], progress=False)
print(hwm() - before, len(c))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
@pytest.mark.parametrize(("ids", "bytes_per_row"), [("rows", 8), ("names", 24)])
def test_build_peak_memory_grows_by_the_index_only(tmp_path, ids, bytes_per_row):
    """The peak RSS of a build grows with the row count by the offsets (8 bytes/row), plus the id map (16) when
    ids are not row numbers; the text itself (~500 bytes/row here) is never held."""
    text = "lorem ipsum " * 40
    peaks = {}
    for n in (50_000, 300_000):
        path = tmp_path / f"{n}.jsonl"
        key = "{}" if ids == "rows" else "d{}"
        with path.open("w") as f:
            f.writelines(f'{{"id": "{key.format(i)}", "contents": "\\"T{i // 3}\\"\\n{text}{i}"}}\n' for i in range(n))
        out = subprocess.run([sys.executable, "-c", PEAK_RSS, str(path)], capture_output=True, text=True, check=True)
        peaks[n] = int(out.stdout.split()[0])
    per_row = (peaks[300_000] - peaks[50_000]) / 250_000
    assert per_row < bytes_per_row + 6, per_row


@pytest.mark.parametrize("ids", ["rows", "names", "late"])
def test_small_blocks(tmp_path, monkeypatch, ids):
    """Index columns spread over many blocks and reads split over many blocks give the same answers."""
    monkeypatch.setattr(corpus_mod, "_BLOCK_ROWS", 3)
    monkeypatch.setattr(corpus_mod, "_READ_BLOCK", 150)
    path = tmp_path / "c.jsonl"
    key = {"rows": str, "names": "n{}".format, "late": lambda i: str(i) if i < 20 else f"x{i}"}[ids]
    path.write_text(
        "".join(json.dumps({"id": key(i), "contents": f"text {i}"}) + "\n" * (1 + i % 3) for i in range(40))
    )
    docs = load_corpus(path)
    with CorpusFile.open(path, progress=False) as c:
        assert c.ids_are_row_numbers == (ids == "rows")
        assert list(c) == docs and [d for b in c.iter_batches(7) for d in b] == docs
        assert [c.get(d.id) for d in docs] == docs
