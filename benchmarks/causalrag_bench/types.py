"""Evaluation data types: documents, questions and gold character spans."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from llama_index.core.schema import Document


@dataclass(frozen=True)
class GoldSpan:
    """A gold evidence span: characters ``[start, end)`` of document ``doc_id``."""

    doc_id: str
    start: int
    end: int


@dataclass
class EvalExample:
    """One question with its gold spans; ``metadata`` carries dataset extras
    (answer options, answer, question type, ...)."""

    qid: str
    question: str
    gold: List[GoldSpan]
    metadata: Dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalDataset:
    """A corpus and its questions. Document ids are stable (``doc.doc_id``)."""

    name: str
    path: str
    documents: List[Document]
    examples: List[EvalExample]
    metadata: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_id = {d.doc_id: d for d in self.documents}

    def doc_text(self, doc_id: str) -> str:
        return self._by_id[doc_id].text

    def has_doc(self, doc_id: str) -> bool:
        return doc_id in self._by_id


def corpus_subset(dataset: EvalDataset, n_questions: int, n_distractors: Optional[int] = None) -> EvalDataset:
    """The first ``n_questions`` questions (with gold) and a corpus cut to the documents holding
    their gold plus ``n_distractors`` other documents (default ``n_questions``), in corpus order.

    For smoke runs: the build cost follows the cut corpus, and the distractors keep retrieval
    from being trivial. Numbers on a subset are not comparable to full-corpus numbers.
    """
    if n_questions < 1:
        raise ValueError(f"corpus limit must be >= 1 question, got {n_questions!r}.")
    examples = [e for e in dataset.examples if e.gold][:n_questions]
    gold_docs = {g.doc_id for e in examples for g in e.gold}
    extra = n_questions if n_distractors is None else n_distractors
    keep: List[Document] = []
    for d in dataset.documents:
        if d.doc_id in gold_docs:
            keep.append(d)
        elif extra > 0:
            keep.append(d)
            extra -= 1
    meta = {**dataset.metadata, "corpus_limit": n_questions}
    return EvalDataset(dataset.name, dataset.path, keep, examples, meta)
