"""Milvus answers every candidate list of a :class:`MultiGranularityIndex`: dense and BM25.

Milvus (Lite, Standalone or Distributed: one pymilvus client, one gRPC protocol) shards a
collection over query nodes and runs both of UMGP's experts on the server: dense search and
full-text BM25 (its ``BM25`` function over an analyzed text field, a sparse inverted index with
the collection's statistics). :class:`MilvusLists` keeps, per granularity ``g``, a collection
``{name}__g{g}`` with one row per unit of the list (schema and rows: :mod:`~.rows`):

* ``pk`` (the node id), ``embedding`` (the unit's embedding scaled to length 1, searched by
  inner product ``IP`` with the query scaled the same: the cosine, at about half the cost per row
  of Milvus's ``COSINE``, which divides by both norms at every row; ``FLAT`` exact search, or
  ``HNSW``), ``norm`` (the embedding's length: :meth:`MilvusLists.get` gives the embedding back),
  ``n_tokens`` (fusion divides by it), ``doc_id`` (its document) and ``metadata`` (JSON, the
  unit's metadata: filters test it on the server, before each list's top-k). Collections written
  before ``norm`` (``COSINE``, the embedding as given) are still read and written as they are;
* ``terms``: the unit's BM25 tokens (our tokenizer's, stemmed), space-separated, analyzed by
  Milvus's ``whitespace`` tokenizer (no filter: each token passes through unchanged; the
  ``standard`` one would split ``foo_bar`` in two), and ``sparse``, the BM25 function's output,
  indexed by ``SPARSE_INVERTED_INDEX`` with ``DAAT_MAXSCORE`` (exact top-k, the fastest of
  knowhere's algorithms on questions of many terms) and searched with ``drop_ratio_search`` 0
  (no query term dropped: the lists equal the in-memory index's).

So a list's BM25 uses the in-memory expert's tokens and parameters, with the document
frequencies and mean length Milvus keeps (per collection, i.e. per granularity, as in memory).
Milvus scores BM25 with a ``(k1 + 1)`` factor bm25s leaves out; :meth:`MilvusLists.start_lists`
divides it out, so the scores fusion sees are bm25s's (float32 sums: equal within a relative 1e-5).

Dense lists: ``FLAT`` (exact, ``ann=None``) anywhere; ``HNSW`` (``ann=HNSW(...)``) on Milvus
Standalone and Distributed; ``IVF_FLAT`` (``ann=IVF(nlist, nprobe)``: ``nlist`` at the index's
build, ``nprobe`` sent with each search) anywhere. Milvus Lite 2.5's C++ engine builds
``FLAT``/``IVF_FLAT``/``AUTOINDEX`` only (HNSW is refused: :meth:`MilvusLists.create` says so),
and it keeps a collection in one growing segment whose ``IVF_FLAT`` is the server's interim
index: no index below 100,000 rows (exact search), above it its own ``nlist``/``nprobe``, not the
index's (measured in docs/stores.md).

:class:`~.store.MilvusUnits` is the LlamaIndex vector store the index's writers (build,
insert, refresh, delete, and the journal that undoes an interrupted write) write its unit rows
to: :meth:`MilvusLists.insert` puts each row into the collections of its granularities. Milvus has no transactions: a write becomes visible row
by row (a reader during a write can see part of it); the kvstore's journal puts an interrupted
write back to the old index at the next open or write (see docs/stores.md).
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.storage.ann import ANN, list_executor
from llama_index_ext_causalrag.storage.drivers import first_line, is_connection_error
from llama_index_ext_causalrag.storage.milvus import rows
from llama_index_ext_causalrag.storage.milvus.filters import milvus_filter, milvus_literal
from llama_index_ext_causalrag.validation import caller

T = TypeVar("T")

MILVUS = "milvus"  # the store layout recorded in params.json
INSERT_ROWS = 1000  # rows an insert call sends (a gRPC message well under Milvus's 64 MB)
WRITE_BATCH = 2000  # units a build hands the writer at a time (DEFAULT_BATCH_SIZE is 256)
_RELEASED = re.compile(r"is in state 'released'|collection not loaded|call load\(\)", re.I)
_LOCAL_ONLY = re.compile(r"local mode only support", re.I)
ListKey = Tuple[str, int]
Found = Tuple[List[str], List[float], List[int]]


def _ids_filter(ids: Sequence[str]) -> str:
    return f"pk in {milvus_literal(list(ids))}"


# ---- the collections ---------------------------------------------------------------------
class MilvusLists:
    """The collections ``{name}__g{g}`` of ``granularities`` on the server of ``client``."""

    def __init__(
        self,
        client: Any,
        name: str,
        granularities: Sequence[int],
        dim: int,
        ann: Optional[ANN] = None,
        uri: str = "",
        reconnect: Optional[Callable[[], Any]] = None,
    ) -> None:
        self.client, self.name, self.dim, self.ann, self.uri = client, name, int(dim), ann, uri
        self._reconnect = reconnect
        self._reconnecting = threading.Lock()
        self.granularities = sorted(int(g) for g in granularities)
        self.lists = {g: self.collection(g) for g in self.granularities}
        self.k1: Optional[float] = None
        self.b: Optional[float] = None
        self._metric: Optional[str] = None

    def bm25(self, k1: float, b: float) -> None:
        """The BM25 parameters new collections are created with (the index's; before :meth:`create`)."""
        self.k1, self.b = float(k1), float(b)

    def collection(self, g: int) -> str:
        """The name of granularity ``g``'s collection."""
        return f"{self.name}__g{g}"

    layout = MILVUS

    def describe(self) -> str:
        return f"the Milvus collections {self.name}__g* at {self.uri or 'the MilvusVectorStore client'}"

    def params(self) -> Dict[str, Any]:
        """What an index served by these collections records to reopen them."""
        return {"milvus_collection": self.name}

    def describe_bm25(self) -> Optional[str]:
        return None

    def check_open(self, where: str) -> None:
        """The collections of an index in ``where`` are all there, with the build's vector index."""
        owner = caller("MultiGranularityIndex")
        missing = self.missing()
        if missing:
            raise ValueError(
                f"{owner}: {self.describe()} lack {', '.join(missing)}; the index in {where} was served from them. "
                "Pass the MilvusVectorStore (URI and collection_name) it was built into, or rebuild it."
            )
        self.check_ann()

    def after_update(self, added: bool, removed: bool, failed: bool) -> None:
        """Nothing: each collection's BM25 function keeps its statistics."""

    @property
    def relations(self) -> List[str]:
        return list(self.lists.values())

    def read(self, op: Callable[[Any], T]) -> T:
        """``op(client)``; after a lost connection (a server restarted) once more on a new client,
        then a ``ConnectionError`` naming the server; collections a restart left released are
        loaded again."""
        failed = self.client
        try:
            return self._loaded(op)
        except Exception as e:
            if not is_connection_error(e):
                raise
            first = e
        time.sleep(0.2)
        with self._reconnecting:  # the lists of one query fail together: one new client for them all
            if self._reconnect is not None and self.client is failed:
                self.client = self._reconnect()
        try:
            return self._loaded(op)
        except Exception as e:
            if is_connection_error(e):
                raise ConnectionError(
                    f"{self.describe()}: cannot reach Milvus ({first_line(e)}); is the server up?"
                ) from first
            raise

    def _loaded(self, op: Callable[[Any], T]) -> T:
        """``op(client)``, once more after loading the collections if the server had released them."""
        try:
            return op(self.client)
        except Exception as e:
            if not _RELEASED.search(str(e)):
                raise
        self.load()
        return op(self.client)

    def load(self) -> None:
        for name in self.relations:
            self.client.load_collection(name)

    def existing(self) -> List[int]:
        """The granularities whose collection exists on the server."""
        prefix = f"{self.name}__g"
        return sorted(
            int(c[len(prefix) :])
            for c in self.read(lambda c: c.list_collections())
            if c.startswith(prefix) and c[len(prefix) :].isdigit()
        )

    def missing(self) -> List[str]:
        have = set(self.client.list_collections())
        return [c for c in self.relations if c not in have]

    # ---- creating ---------------------------------------------------------------------
    def _schema(self) -> Tuple[Any, Any]:
        if self.k1 is None or self.b is None:
            raise RuntimeError(f"{self.describe()}: call bm25(k1, b) with the index's parameters before create().")
        return rows.collection_schema(self.client, self.dim, self.ann, self.k1, self.b)

    @property
    def metric(self) -> str:
        """The dense lists' metric: ``IP`` over unit vectors, or ``COSINE`` (collections written before)."""
        if self._metric is None:
            desc = self.read(lambda c: c.describe_index(self.lists[self.granularities[0]], "embedding")) or {}
            self._metric = str(desc.get("metric_type") or rows.IP).upper()
        return self._metric

    def create(self) -> None:
        """Every missing collection (``Strong`` consistency: a search sees every committed write),
        its indexes and its load. The indexes are not waited for (``sync=False``): on an empty
        collection there is nothing to build, and pymilvus's wait polls every 0.5 s, which made
        five collections take 5 s of a 17 s build (HolisQA biology)."""
        for g in self.granularities:
            name = self.lists[g]
            if self.client.has_collection(name):
                self._check_dim(name)
                continue
            self._metric = rows.DENSE_METRIC
            schema, ip = self._schema()
            kind = rows.dense_index(self.ann)[0]
            self.client.create_collection(name, schema=schema, consistency_level="Strong")
            try:
                self.client.create_index(name, ip, sync=False)
                self.client.load_collection(name)
            except Exception as e:
                if self.ann is None or not _LOCAL_ONLY.search(str(e)):
                    raise
                self.client.drop_collection(name)
                raise ValueError(
                    f"{self.describe()}: the server is Milvus Lite, which builds no {kind} index ({first_line(e)}); "
                    "pass ann=None (exact search) or ann=IVF(...), or serve the index from Milvus Standalone or "
                    "Distributed."
                ) from e

    def _check_dim(self, name: str) -> None:
        fields = self.client.describe_collection(name).get("fields", [])
        have = next((f.get("params", {}).get("dim") for f in fields if f.get("name") == "embedding"), None)
        if have is None or int(have) != self.dim:
            raise ValueError(
                f"the Milvus collection {name!r} at {self.uri} holds "
                f"{'no embedding field' if have is None else f'{int(have)}-dimensional embeddings'}, the index "
                f"embeds in {self.dim}; drop it (client.drop_collection({name!r})) or use another collection_name."
            )

    def count(self) -> int:
        """Rows of the collections that exist (the units of every list)."""
        total = 0
        for g in self.existing():
            res = self.client.query(self.collection(g), filter="", output_fields=["count(*)"])
            total += int(res[0]["count(*)"]) if res else 0
        return total

    def drop_if_table_empty(self) -> None:
        if self.count() == 0:
            self.drop()

    def drop(self) -> None:
        for g in self.existing():
            self.client.drop_collection(self.collection(g))

    def build_ann(self) -> None:
        """Nothing to do: Milvus indexes rows as they arrive."""

    def analyze(self) -> None:
        """Seal the build's rows into indexed segments."""
        for name in self.relations:
            self.client.flush(name)

    def check_ann(self) -> None:
        """The reopened index's ``ann`` matches its collections' vector index (type, and IVF's ``nlist``)."""
        kind, params = rows.dense_index(self.ann)
        for name in self.relations:
            desc = self.client.describe_index(name, "embedding") or {}
            # the dense metric, read here once: the queries need no read of their own
            self._metric = str(desc.get("metric_type") or self._metric or rows.IP).upper()
            have = str(desc.get("index_type", "")).upper()
            nlist = desc.get("nlist")
            if have and (have != kind or (kind == "IVF_FLAT" and nlist is not None and int(nlist) != params["nlist"])):
                built = {"FLAT": "None", "IVF_FLAT": f"IVF(nlist={nlist}, ...)"}.get(have, f"{have.title()}(...)")
                raise ValueError(
                    f"{self.describe()}: collection {name!r} has a {have} vector index"
                    f"{f' (nlist={nlist})' if nlist is not None else ''}, the index was opened with ann={self.ann!r}; "
                    f"pass the ann= it was built with (ann={built})."
                )

    # ---- rows -----------------------------------------------------------------------------
    def insert(self, units: Sequence[BaseNode], embeddings: Optional[np.ndarray] = None) -> None:
        """Each unit (a vector-store row: metadata set; its embedding, or row ``i`` of
        ``embeddings``) into its granularities' collections. The collections' batches are sent at
        once (:func:`list_executor`): while the server indexes one, the client encodes the next
        (HolisQA biology, 16,139 units: measured below)."""
        batches: Dict[int, List[Dict[str, Any]]] = {g: [] for g in self.granularities}
        for i, u in enumerate(units):
            row, lo, hi = rows.unit_row(u, u.get_embedding() if embeddings is None else embeddings[i], self.metric)
            for g in self.granularities:
                if lo <= g <= hi:
                    batches[g].append(row)
        futures = [
            list_executor().submit(self.client.insert, self.lists[g], batch[start : start + INSERT_ROWS])
            for g, batch in batches.items()
            for start in range(0, len(batch), INSERT_ROWS)
        ]
        errors = [f.exception() for f in futures]  # every batch ended before this returns
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first

    def delete(self, ids: Sequence[str]) -> None:
        if not ids:
            return
        gs = self.existing()
        for start in range(0, len(ids), 1000):
            expr = _ids_filter(ids[start : start + 1000])
            for g in gs:
                self.client.delete(self.collection(g), filter=expr)

    def delete_document(self, doc_id: str) -> None:
        for g in self.existing():
            self.client.delete(self.collection(g), filter=f"doc_id == {milvus_literal(doc_id)}")

    def get(self, ids: Sequence[str]) -> Dict[str, Dict[str, Any]]:
        """The stored rows of ``ids`` (embedding, metadata, doc id), from any collection holding them."""
        out: Dict[str, Dict[str, Any]] = {}
        fields = ["pk", "embedding", "metadata", "doc_id"] + (["norm"] if self.metric == rows.IP else [])
        for g in self.existing():
            wanted = [i for i in ids if i not in out]
            if not wanted:
                break
            for r in self.client.query(self.collection(g), filter=_ids_filter(wanted), output_fields=fields):
                vec = np.asarray(r["embedding"], dtype=np.float32)
                out[str(r["pk"])] = {**r, "embedding": vec * np.float32(r.get("norm", 1.0))}
        return out

    # ---- querying -------------------------------------------------------------------------
    def query_vector(self, qvec: Any) -> np.ndarray:
        """The query as the dense lists take it (:meth:`_search`): scaled to length 1 under ``IP``."""
        v = np.asarray(qvec, dtype=np.float32)
        return rows.unit_vector(v)[0] if self.metric == rows.IP else v

    def _search(self, kind: str, g: int, data: Any, k: int, expr: str) -> Found:
        field = "embedding" if kind == "dense" else "sparse"
        search_params: Dict[str, Any] = {"metric_type": self.metric if kind == "dense" else "BM25"}
        if kind == "dense" and self.ann is not None:
            search_params["params"] = rows.dense_search_params(self.ann, k)
        elif kind == "sparse":
            search_params["params"] = {"drop_ratio_search": rows.DROP_RATIO}
        hits = self.read(
            lambda c: c.search(
                self.lists[g],
                data=[data],
                anns_field=field,
                limit=int(k),
                filter=expr,
                output_fields=["n_tokens"],
                search_params=search_params,
            )
        )[0]
        ids = [str(h.get("pk", h.get("id"))) for h in hits]
        scores = [float(h["distance"]) for h in hits]
        lengths = [int(h["entity"]["n_tokens"]) for h in hits]
        return ids, scores, lengths

    def start_lists(
        self,
        qvec: Optional[np.ndarray],
        terms: Mapping[str, int],
        wanted: Sequence[ListKey],
        k: int,
        k1: float,
        b: float,
        filters: Optional[MetadataFilters] = None,
    ) -> Callable[[], Tuple[Dict[ListKey, Found], List[int]]]:
        """Every list of ``wanted``, ``k`` rows each, one search per list sent at once; the
        returned function waits and gives the lists (and no write counter: Milvus keeps none).
        BM25 scores as bm25s's (Milvus's sign and ``k1 + 1`` factor removed)."""
        expr = milvus_filter(filters)
        text = rows.term_text(terms)
        dense = self.query_vector(qvec) if qvec is not None and any(e == "dense" for e, _ in wanted) else None
        futures = {}
        for e, g in wanted:
            if e == "sparse" and not text:
                continue
            futures[(e, g)] = list_executor().submit(self._search, e, g, dense if e == "dense" else text, k, expr)

        def result() -> Tuple[Dict[ListKey, Found], List[int]]:
            out: Dict[ListKey, Found] = {key: ([], [], []) for key in wanted}
            for key, future in futures.items():
                ids, scores, lengths = future.result()
                if key[0] == "sparse":
                    scores = [abs(s) / (float(k1) + 1.0) for s in scores]
                out[key] = (ids, scores, lengths)
            return out, []

        return result


__all__ = ["MILVUS", "MilvusLists"]
