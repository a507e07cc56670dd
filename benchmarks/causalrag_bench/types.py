"""Evaluation data types: documents, questions and gold character spans."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

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
