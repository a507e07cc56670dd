"""UMG-RAG / UMGP-RAG: entropy-weighted multi-granularity fusion with parent promotion."""

from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex
from llama_index_ext_causalrag.multigranularity.promotion import ParentPromotionPostprocessor
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.windows import (
    MultiGranularityNodeParser,
    split_sentence_spans,
)
from llama_index_ext_causalrag.storage.ann import HNSW, IVF

__all__ = [
    "EntropyFusionRetriever",
    "HNSW",
    "IVF",
    "MultiGranularityIndex",
    "MultiGranularityNodeParser",
    "ParentPromotionPostprocessor",
    "split_sentence_spans",
]
