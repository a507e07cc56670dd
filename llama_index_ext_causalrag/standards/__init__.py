"""Structure-aware retrieval for technical standards (normative RAG, arXiv 2604.09868)."""

from llama_index_ext_causalrag.standards.graph import StandardsGraph
from llama_index_ext_causalrag.standards.index import StandardsIndex
from llama_index_ext_causalrag.standards.parser import StructuredDocumentParser, retrievable_nodes
from llama_index_ext_causalrag.standards.pdf import PDFStandardReader, StandardsFolderReader
from llama_index_ext_causalrag.standards.presets import STANDARDS_PRESETS, StructureAwareConfig
from llama_index_ext_causalrag.standards.retriever import StructureAwareRetriever
from llama_index_ext_causalrag.standards.smoothing import smooth_embeddings

__all__ = [
    "STANDARDS_PRESETS",
    "StandardsGraph",
    "StandardsIndex",
    "StructureAwareConfig",
    "StructuredDocumentParser",
    "PDFStandardReader",
    "StandardsFolderReader",
    "StructureAwareRetriever",
    "smooth_embeddings",
    "retrievable_nodes",
]
