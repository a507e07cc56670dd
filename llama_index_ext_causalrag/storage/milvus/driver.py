"""The Milvus driver (:class:`MilvusDriver`): which errors mean Milvus is unreachable, and where
a Milvus store lives. Milvus has no transactions across collections, so an update's rows are
committed before its state head (see docs/stores.md, "What a reader sees")."""

from __future__ import annotations

import re
from typing import Any, Optional

from llama_index_ext_causalrag.storage.drivers import StoreDriver

_UNREACHABLE = re.compile(r"Fail connecting to server|server unavailable|StatusCode\.UNAVAILABLE", re.I)
_CLASSES = ("MilvusVectorStore", "MilvusUnits")


class MilvusDriver(StoreDriver):
    name = "milvus"

    def owns(self, store: Any) -> bool:
        return type(store).__name__ in _CLASSES

    def lost_connection(self, error: BaseException) -> bool:
        return type(error).__name__ == "MilvusException" and bool(_UNREACHABLE.search(str(error)))

    def describe(self, store: Any) -> Optional[str]:
        url = getattr(store, "connection_string", None)
        if not url:
            return None
        table = getattr(store, "table_name", None)
        return f"{type(store).__name__} at {url}" + (f", table {table!r}" if table else "")


MILVUS_DRIVER = MilvusDriver()

__all__ = ["MILVUS_DRIVER", "MilvusDriver"]
