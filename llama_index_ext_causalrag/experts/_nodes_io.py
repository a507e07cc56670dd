"""JSON (de)serialisation of node lists: no pickle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Sequence

from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc

from llama_index_ext_causalrag.validation import caller, check_nodes


def save_nodes(nodes: Sequence[BaseNode], path: Path) -> None:
    """Write nodes as a JSON list, embeddings stripped (they live in .npy files)."""
    payload = [doc_to_json(n.model_copy(update={"embedding": None})) for n in nodes]
    path.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")


def load_nodes(path: Path) -> List[BaseNode]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return [json_to_doc(d) for d in data]


def require_nodes(nodes: Sequence[BaseNode]) -> List[BaseNode]:
    """A non-empty list of nodes; the error names the public call (:func:`caller`)."""
    nodes = check_nodes(nodes)
    if not nodes:
        raise ValueError(
            f"{caller()} got an empty corpus (0 nodes); pass at least one node, e.g. "
            "SentenceSplitter().get_nodes_from_documents(documents)."
        )
    return nodes


__all__ = ["save_nodes", "load_nodes", "require_nodes"]
