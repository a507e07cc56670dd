from llama_index_ext_causalrag.experts.dense import DenseExpert
from llama_index_ext_causalrag.experts.sparse import BM25Tokenizer, SparseExpert
from llama_index_ext_causalrag.experts.store import VectorStoreExpert
from llama_index_ext_causalrag.experts.store_text import VectorStoreTextExpert
from llama_index_ext_causalrag.storage.stores import add_nodes_to_vector_store

__all__ = [
    "DenseExpert",
    "SparseExpert",
    "BM25Tokenizer",
    "VectorStoreExpert",
    "VectorStoreTextExpert",
    "add_nodes_to_vector_store",
]
