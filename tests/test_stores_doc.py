"""docs/stores.md: the PostgreSQL blocks (text, not run: they need a server) call real APIs with real arguments."""

import ast
import inspect
import re
from pathlib import Path

import pytest

from llama_index_ext_causalrag import MultiGranularityIndex

DOC = Path(__file__).resolve().parents[1] / "docs" / "stores.md"


def postgres_block() -> str:
    """Every such block of the guide, joined (the set-up and the full-text variant)."""
    blocks = re.findall(r"^```text\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)
    return "\n".join(b for b in blocks if "PGVectorStore" in b)


def test_postgres_block_binds_to_the_real_signatures():
    pytest.importorskip("llama_index.vector_stores.postgres")
    from llama_index.storage.docstore.postgres import PostgresDocumentStore
    from llama_index.storage.kvstore.postgres import PostgresKVStore
    from llama_index.vector_stores.postgres import PGVectorStore

    targets = {
        ("PGVectorStore", "from_params"): PGVectorStore.from_params,
        ("PostgresDocumentStore", "from_uri"): PostgresDocumentStore.from_uri,
        ("PostgresKVStore", "from_uri"): PostgresKVStore.from_uri,
        ("MultiGranularityIndex", "from_documents"): MultiGranularityIndex.from_documents,
        ("MultiGranularityIndex", "from_vector_store"): MultiGranularityIndex.from_vector_store,
    }
    seen = set()
    for node in ast.walk(ast.parse(postgres_block())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            key = (node.func.value.id, node.func.attr)
            if key in targets:
                args = [None] * len(node.args)
                inspect.signature(targets[key]).bind(*args, **{k.arg: None for k in node.keywords})
                seen.add(key)
    assert seen == set(targets)
