"""Small readers the dataset loaders share: a document with its metadata kept out of the
embedded and LLM text, and JSON Lines with the failing line named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

from llama_index.core.schema import Document


def make_doc(doc_id: str, text: str, **metadata: Any) -> Document:
    """A document whose metadata is neither embedded nor shown to an LLM (the text is what counts)."""
    return Document(
        id_=doc_id,
        text=text,
        metadata=metadata,
        excluded_llm_metadata_keys=list(metadata),
        excluded_embed_metadata_keys=list(metadata),
    )


def read_jsonl(path: Path) -> List[Dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{lineno} is not valid JSON ({e}); expected JSON Lines.") from e
    return rows
