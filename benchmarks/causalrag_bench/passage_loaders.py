"""Loaders for passage-retrieval sets, where peers publish: HippoRAG's multi-hop layout
(HotpotQA, 2WikiMultiHopQA, MuSiQue) and BEIR's layout (SciFact, ...).

Each passage is one document whose whole text is the gold span, so the span metrics (CR@B)
apply unchanged; ``metadata["passage_metrics"]`` asks the runner for the peers' own metrics on
the ranking of distinct passages (:mod:`causalrag_bench.metrics`): recall@2 and @5 for HippoRAG
sets, nDCG@10 and recall@100 for BEIR sets.
"""

from __future__ import annotations

import csv
import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Tuple

from causalrag_bench.corpus_io import make_doc, read_jsonl
from causalrag_bench.types import EvalDataset, EvalExample, GoldSpan

logger = logging.getLogger(__name__)

HIPPORAG_KS = (2, 5)
BEIR_NDCG_K = 10
BEIR_RECALL_K = 100


def _questions_file(path: Path) -> Tuple[Path, Path]:
    """The questions file ``path`` (``multihop/hotpotqa.json``) and ``{name}_corpus.json`` beside it."""
    q = path
    if q.is_dir() or q.suffix != ".json":
        raise ValueError(f"{path}: pass the questions file of a hipporag set, --path FOLDER/NAME.json.")
    if q.name.endswith("_corpus.json"):
        raise ValueError(f"{path} is a corpus file; pass the questions file beside it ({q.name[:-12]}.json).")
    corpus = q.with_name(q.stem + "_corpus.json")
    missing = [str(f) for f in (q, corpus) if not f.exists()]
    if missing:
        raise FileNotFoundError(
            f"{path}: missing {', '.join(missing)}; a hipporag set is a folder holding {{name}}.json "
            "(questions) beside {name}_corpus.json (passages), pass --path FOLDER/NAME.json."
        )
    return q, corpus


def _load_json_list(path: Path) -> List[Dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); expected a list of objects.") from e
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list, got {type(data).__name__}.")
    return data


def _gold_passages(
    q: Dict[str, Any], by_title: Dict[str, List[int]], by_text: Dict[Tuple[str, str], int]
) -> Tuple[List[int], int]:
    """Corpus indexes of the question's gold passages, and how many gold references had no
    passage: ``paragraphs[is_supporting]`` matched by title and text (title alone when that names
    one passage), else the titles of ``supporting_facts``."""
    found: List[int] = []
    missed = 0
    if q.get("paragraphs"):
        for p in q["paragraphs"]:
            if not p.get("is_supporting"):
                continue
            text = (p.get("paragraph_text") or p.get("text") or "").strip()
            idx = by_text.get((p["title"], text))
            if idx is None and len(by_title.get(p["title"], [])) == 1:
                idx = by_title[p["title"]][0]
            if idx is None:
                missed += 1
            elif idx not in found:
                found.append(idx)
        return found, missed
    for fact in q.get("supporting_facts") or []:
        title = fact[0] if isinstance(fact, (list, tuple)) else fact
        hits = by_title.get(title)
        if not hits:
            missed += 1
        for idx in hits or []:
            if idx not in found:
                found.append(idx)
    return found, missed


def load_hipporag(path: Path) -> EvalDataset:
    """HippoRAG layout: ``{name}.json`` questions beside ``{name}_corpus.json`` passages
    (``{"title", "text"}``). One document per passage, text ``title + "\\n" + text`` as HippoRAG 2
    indexes it, id ``p<position>``; gold = whole passages (:func:`_gold_passages`)."""
    q_file, corpus_file = _questions_file(path)
    corpus = _load_json_list(corpus_file)
    documents = []
    by_title: Dict[str, List[int]] = defaultdict(list)
    by_text: Dict[Tuple[str, str], int] = {}
    for i, p in enumerate(corpus):
        title, text = p["title"], p["text"]
        documents.append(make_doc(f"p{i}", f"{title}\n{text}", title=title))
        by_title[title].append(i)
        by_text.setdefault((title, text.strip()), i)
    examples, missed = [], 0
    for n, q in enumerate(_load_json_list(q_file)):
        gold_idx, miss = _gold_passages(q, by_title, by_text)
        missed += miss
        gold = [GoldSpan(f"p{i}", 0, len(documents[i].text)) for i in gold_idx]
        qid = str(q.get("_id") or q.get("id") or n)
        examples.append(EvalExample(qid, q["question"], gold, {"answer": q.get("answer"), "type": q.get("type")}))
    if missed:
        logger.warning("hipporag %s: %d gold passage references not found in %s", q_file.name, missed, corpus_file.name)
    meta = {"passage_metrics": "hipporag", "gold_rule": "span"}
    return EvalDataset(f"hipporag:{q_file.stem}", str(path), documents, examples, meta)


def _qrels_file(path: Path) -> Tuple[Path, Path]:
    """The BEIR folder and its qrels file: ``path`` is the folder (whose ``qrels/`` holds one
    ``*.tsv``, or ``test.tsv`` among several) or a qrels file inside it."""
    if path.is_file():
        return path.parent.parent, path
    tsvs = sorted((path / "qrels").glob("*.tsv"))
    if not tsvs:
        raise FileNotFoundError(
            f"{path / 'qrels'} has no *.tsv; a beir set holds corpus.jsonl, queries.jsonl, qrels/*.tsv."
        )
    test = [t for t in tsvs if t.name == "test.tsv"]
    if len(tsvs) > 1 and not test:
        raise ValueError(
            f"{path / 'qrels'} holds {', '.join(t.name for t in tsvs)}; pass the one to score "
            f"as --path {path / 'qrels' / tsvs[0].name}."
        )
    return path, (test or tsvs)[0]


def read_qrels(path: Path) -> Dict[str, Dict[str, int]]:
    """``query-id -> {corpus-id: grade}`` of a BEIR qrels TSV (header row, grade > 0 kept)."""
    out: Dict[str, Dict[str, int]] = defaultdict(dict)
    with open(path, encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter="\t")
        header = next(rows, None)
        if header is None or [h.strip() for h in header[:2]] != ["query-id", "corpus-id"]:
            raise ValueError(f"{path}: expected a header 'query-id<TAB>corpus-id<TAB>score', got {header!r}.")
        for lineno, row in enumerate(rows, start=2):
            if not row:
                continue
            if len(row) < 3 or not row[2].strip().lstrip("-").isdigit():
                raise ValueError(f"{path}:{lineno}: expected query-id, corpus-id and an integer score, got {row!r}.")
            if int(row[2]) > 0:
                out[row[0]][row[1]] = int(row[2])
    return dict(out)


def load_beir(path: Path) -> EvalDataset:
    """BEIR layout: ``corpus.jsonl`` (``_id, title, text``), ``queries.jsonl`` (``_id, text``),
    ``qrels/<split>.tsv``. One document per corpus entry, text ``title + " " + text`` as BEIR
    embeds it; the questions are the queries with a relevant document in the qrels, in query-file
    order; gold = the relevant documents, whole, their grades in ``metadata["qrels"]``."""
    folder, qrels_file = _qrels_file(path)
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / name).exists():
            raise FileNotFoundError(
                f"{folder} has no {name}; a beir set holds corpus.jsonl, queries.jsonl, qrels/*.tsv."
            )
    documents = []
    for row in read_jsonl(folder / "corpus.jsonl"):
        title = (row.get("title") or "").strip()
        text = f"{title} {row['text']}".strip() if title else row["text"]
        documents.append(make_doc(str(row["_id"]), text, title=title))
    lengths = {d.doc_id: len(d.text) for d in documents}
    qrels = read_qrels(qrels_file)
    examples, missing = [], 0
    for row in read_jsonl(folder / "queries.jsonl"):
        rel = qrels.get(str(row["_id"]))
        if not rel:
            continue
        gold = [GoldSpan(d, 0, lengths[d]) for d in rel if d in lengths]
        missing += len(rel) - len(gold)
        examples.append(EvalExample(str(row["_id"]), row["text"], gold, {"qrels": rel}))
    if missing:
        logger.warning("beir %s: %d relevant ids not in corpus.jsonl", qrels_file.name, missing)
    meta = {"passage_metrics": "beir", "gold_rule": "span", "split": qrels_file.stem}
    return EvalDataset(f"beir:{folder.name}", str(path), documents, examples, meta)
