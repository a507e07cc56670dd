"""Loaders for the evaluation formats the bench reads; each takes a path, so the same
code reads any data in the same format. Gold evidence becomes character spans in the loaded
documents' text.
"""

from __future__ import annotations

import json
import logging
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Dict, List

from llama_index.core.schema import Document

from causalrag_bench.corpus_io import make_doc, read_jsonl
from causalrag_bench.passage_loaders import load_beir, load_hipporag
from causalrag_bench.types import EvalDataset, EvalExample, GoldSpan

logger = logging.getLogger(__name__)

DatasetLoader = Callable[[Path], EvalDataset]


_doc = make_doc
_read_jsonl = read_jsonl


def _need(path: Path, *names: str) -> List[Path]:
    files = [path / n for n in names]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise FileNotFoundError(f"{path} does not look like this dataset: missing {', '.join(missing)}.")
    return files


def _file(path: Path, name: str, dataset: str) -> Path:
    """``path`` itself, or ``path / name`` when given the folder; an error if it is missing."""
    if path.is_dir():
        path = path / name
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; pass the {dataset} {name} file.")
    return path


def load_holisqa(path: Path, prefix: str = "") -> EvalDataset:
    """HolisQA domain folder: one document per article (title, newline, its sentences joined by
    single spaces, in file order); gold = the question's context sentences. ``prefix`` goes before
    every article, sentence and question id (the domains number their articles alike: two domains
    in one corpus need a prefix each)."""
    articles_f, sentences_f, qa_f = _need(path, "articles.jsonl", "sentences.jsonl", "qa.jsonl")
    titles = {prefix + a["article_id"]: a.get("title") or "" for a in _read_jsonl(articles_f)}
    by_article: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
    for s in _read_jsonl(sentences_f):
        by_article[prefix + s["article_id"]].append(s)
    documents: List[Document] = []
    sent_span: Dict[str, GoldSpan] = {}
    for article_id, sents in by_article.items():
        text = titles.get(article_id, "")
        parts = []
        offset = len(text) + 1
        for s in sents:
            sent_span[prefix + s["sentence_id"]] = GoldSpan(article_id, offset, offset + len(s["text"]))
            parts.append(s["text"])
            offset += len(s["text"]) + 1
        documents.append(_doc(article_id, text + "\n" + " ".join(parts), title=titles.get(article_id, "")))
    examples = []
    for qa in _read_jsonl(qa_f):
        ids = [prefix + i for i in qa.get("context_sentence_ids") or []]
        gold = [sent_span[i] for i in ids if i in sent_span]
        if len(gold) < len(ids):
            logger.warning("holisqa %s: %d gold sentence ids not in sentences.jsonl", qa["qa_id"], len(ids) - len(gold))
        examples.append(
            EvalExample(
                qid=prefix + qa["qa_id"],
                question=qa["question"],
                gold=gold,
                metadata={
                    "answer": qa.get("answer"),
                    "slice_id": qa.get("slice_id"),
                    "n_articles": len({g.doc_id for g in gold}),
                },
            )
        )
    return EvalDataset("holisqa", str(path), documents, examples, {"sentence_spans": sent_span})


def load_quic(path: Path) -> EvalDataset:
    """QUIC RFC sources: one document per ``rfc*.md`` (exact file text); gold = verbatim quotes."""
    (qa_f,) = _need(path, "qa_dev.jsonl")
    files = sorted(path.glob("rfc*.md"))
    if not files:
        raise FileNotFoundError(f"{path} has no rfc*.md files; expected the QUIC RFC sources.")
    texts = {f.stem: f.read_text(encoding="utf-8") for f in files}
    documents = [_doc(stem, text, file_name=f"{stem}.md") for stem, text in texts.items()]
    examples = []
    for qa in _read_jsonl(qa_f):
        gold = []
        for g in qa.get("gold", []):
            text = texts.get(g["doc"])
            start = text.find(g["quote"]) if text is not None else -1
            if start < 0:
                logger.warning("quic %s: quote not found in %s", qa["qid"], g["doc"])
                continue
            gold.append(GoldSpan(g["doc"], start, start + len(g["quote"])))
        examples.append(
            EvalExample(qa["qid"], qa["question"], gold, {"type": qa.get("type"), "answer": qa.get("answer")})
        )
    return EvalDataset("quic", str(path), documents, examples)


def load_medmcqa(path: Path) -> EvalDataset:
    """MedMCQA JSON Lines: corpus = the explanations (one document per question that has one);
    gold = the question's own explanation (document-level match)."""
    path = _file(path, "dev.jsonl", "MedMCQA")
    documents, examples = [], []
    for row in _read_jsonl(path):
        exp = (row.get("exp") or "").strip()
        if not exp:
            continue
        documents.append(_doc(row["id"], exp))
        options = {k: row[f"op{k.lower()}"] for k in "ABCD"}
        answer = "ABCD"[int(row["cop"]) - 1] if row.get("cop") in (1, 2, 3, 4) else None
        examples.append(
            EvalExample(
                row["id"],
                row["question"],
                [GoldSpan(row["id"], 0, len(exp))],
                {"options": options, "answer": answer, "subject": row.get("subject_name")},
            )
        )
    return EvalDataset("medmcqa", str(path), documents, examples, {"gold_rule": "doc"})


def load_pubmedqa(path: Path) -> EvalDataset:
    """PubMedQA test set: pooled CONTEXTS, one document per PMID (sections joined by newlines);
    gold = the question's own abstract (document-level match)."""
    path = _file(path, "test_set.json", "PubMedQA")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); expected PubMedQA's test_set.json.") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object PMID -> item, got {type(data).__name__}.")
    documents, examples = [], []
    letters = {"yes": "A", "no": "B", "maybe": "C"}
    for pmid, item in data.items():
        text = "\n".join(item["CONTEXTS"])
        documents.append(_doc(str(pmid), text))
        examples.append(
            EvalExample(
                str(pmid),
                item["QUESTION"],
                [GoldSpan(str(pmid), 0, len(text))],
                {
                    "options": {"A": "yes", "B": "no", "C": "maybe"},
                    "answer": letters.get(item.get("final_decision", "")),
                },
            )
        )
    return EvalDataset("pubmedqa", str(path), documents, examples, {"gold_rule": "doc"})


_WORD = re.compile(r"\w+")


def _fuzzy_find(sentence: str, text: str, index: Dict[str, List[int]], starts: List[int]) -> tuple[int, int] | None:
    """Locate a (possibly paraphrased) evidence sentence: exact match, else the source sentence
    sharing the most distinct words with it (at least 60% of them)."""
    pos = text.find(sentence)
    if pos >= 0:
        return pos, pos + len(sentence)
    words = {w.lower() for w in _WORD.findall(sentence) if len(w) > 2}
    if not words:
        return None
    votes: Dict[int, int] = defaultdict(int)
    for w in words:
        hits = index.get(w, [])
        if len(hits) < 200:
            for sid in hits:
                votes[sid] += 1
    if not votes:
        return None
    sid, n = max(votes.items(), key=lambda kv: (kv[1], -kv[0]))
    if n < 0.6 * len(words):
        return None
    return starts[sid], starts[sid + 1] if sid + 1 < len(starts) else len(text)


def load_graphrag_bench(path: Path) -> EvalDataset:
    """GraphRAG-Bench novel: folder with corpus/novel.json and questions/novel_questions.json;
    gold = evidence sentences (split on '; '), located exactly or fuzzily in the novel's text.
    Questions with no locatable evidence are dropped (counted in a log line)."""
    corpus_f, questions_f = _need(path, "corpus/novel.json", "questions/novel_questions.json")
    corpus = json.loads(corpus_f.read_text(encoding="utf-8"))
    documents = [_doc(c["corpus_name"], c["context"]) for c in corpus]
    texts = {c["corpus_name"]: c["context"] for c in corpus}
    indexes: Dict[str, tuple[Dict[str, List[int]], List[int]]] = {}
    for name, text in texts.items():
        starts = [0] + [m.end() for m in re.finditer(r"(?<=[.!?])\s+", text)]
        index: Dict[str, List[int]] = defaultdict(list)
        for sid, st in enumerate(starts):
            end = starts[sid + 1] if sid + 1 < len(starts) else len(text)
            for w in {w.lower() for w in _WORD.findall(text[st:end]) if len(w) > 2}:
                index[w].append(sid)
        indexes[name] = (index, starts)
    examples, dropped = [], 0
    for q in json.loads(questions_f.read_text(encoding="utf-8")):
        text = texts.get(q["source"])
        if text is None:
            dropped += 1
            continue
        index, starts = indexes[q["source"]]
        gold = []
        for piece in (q.get("evidence") or "").split("; "):
            hit = _fuzzy_find(piece.strip(), text, index, starts) if piece.strip() else None
            if hit:
                gold.append(GoldSpan(q["source"], *hit))
        if not gold:
            dropped += 1
            continue
        examples.append(
            EvalExample(q["id"], q["question"], gold, {"type": q.get("question_type"), "answer": q.get("answer")})
        )
    if dropped:
        logger.warning("graphrag_bench: %d questions dropped (no evidence located in the corpus)", dropped)
    return EvalDataset("graphrag_bench", str(path), documents, examples)


LOADERS: Dict[str, DatasetLoader] = {
    "holisqa": load_holisqa,
    "quic": load_quic,
    "medmcqa": load_medmcqa,
    "pubmedqa": load_pubmedqa,
    "graphrag_bench": load_graphrag_bench,
    "hipporag": load_hipporag,
    "beir": load_beir,
}


def load_dataset(kind: str, path: str | Path) -> EvalDataset:
    """Load dataset ``kind`` from ``path``; errors name the value and what was expected."""
    if kind not in LOADERS:
        raise ValueError(f"unknown dataset kind {kind!r}; choose from: {', '.join(sorted(LOADERS))}.")
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"dataset path {str(p)!r} does not exist; pass the folder or file of a {kind} dataset.")
    try:
        ds = LOADERS[kind](p)
    except (KeyError, TypeError) as e:
        raise ValueError(f"{p} is not in the {kind} format (missing field {e}); check --dataset.") from e
    if not ds.documents:
        raise ValueError(f"{p}: the {kind} corpus is empty (0 documents); nothing to retrieve from.")
    return ds
