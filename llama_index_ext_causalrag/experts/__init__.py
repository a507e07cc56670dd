from llama_index_ext_causalrag.experts.dense import DenseExpert
from llama_index_ext_causalrag.experts.sparse import BM25Tokenizer, SparseExpert

__all__ = ["DenseExpert", "SparseExpert", "BM25Tokenizer"]
