"""Shared helpers of the incremental-update tests: real corpora read in place, result keys."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import List, Tuple

import pytest
from llama_index.core.schema import Document

DATASETS = Path("/work/shared/datasets")
HOLISQA_BIOLOGY = DATASETS / "holisqa" / "biology"
QUIC = DATASETS / "ietf_quic_rfcs"


def _jsonl(path: Path) -> List[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def holisqa_biology(n_articles: int = 60, n_questions: int = 60) -> Tuple[List[Document], List[str]]:
    """The first ``n_articles`` HolisQA biology abstracts (title, newline, sentences) and questions."""
    if not (HOLISQA_BIOLOGY / "sentences.jsonl").exists():
        pytest.skip(f"HolisQA biology not found at {HOLISQA_BIOLOGY} (shared dataset folder absent)")
    titles = {a["article_id"]: a.get("title") or "" for a in _jsonl(HOLISQA_BIOLOGY / "articles.jsonl")}
    by_article = defaultdict(list)
    for s in _jsonl(HOLISQA_BIOLOGY / "sentences.jsonl"):
        by_article[s["article_id"]].append(s["text"])
    docs = [
        Document(id_=a, text=titles.get(a, "") + "\n" + " ".join(sents), metadata={"title": titles.get(a, "")})
        for a, sents in list(by_article.items())[:n_articles]
    ]
    questions = [q["question"] for q in _jsonl(HOLISQA_BIOLOGY / "qa.jsonl")][:n_questions]
    return docs, questions


def quic_rfcs() -> Tuple[List[Document], List[str]]:
    """The six QUIC RFCs (file stem as id, rfc9002 last) and the dev questions."""
    files = sorted(QUIC.glob("rfc*.md")) if QUIC.exists() else []
    if len(files) < 6 or not (QUIC / "qa_dev.jsonl").exists():
        pytest.skip(f"QUIC RFCs not found at {QUIC} (shared dataset folder absent)")
    files = [f for f in files if f.stem != "rfc9002"] + [f for f in files if f.stem == "rfc9002"]
    docs = [Document(id_=f.stem, text=f.read_text(encoding="utf-8"), metadata={"file_name": f.name}) for f in files]
    questions = [q["question"] for q in _jsonl(QUIC / "qa_dev.jsonl")]
    return docs, questions


def result_key(nodes) -> List[Tuple[str, float]]:
    return [(n.node.node_id, float(n.score)) for n in nodes]


def assert_same_results(a, b, questions, tol: float = 1e-9) -> None:
    """Same ids in the same order and scores within ``tol`` for every question."""
    for q in questions:
        ra, rb = result_key(a.retrieve(q)), result_key(b.retrieve(q))
        assert [i for i, _ in ra] == [i for i, _ in rb], q
        for (_, sa), (_, sb) in zip(ra, rb):
            assert abs(sa - sb) <= tol, (q, sa, sb)
