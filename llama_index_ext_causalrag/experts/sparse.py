"""SparseExpert: BM25 over node text with bm25s, tokenized by bm25s with settings that persist."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence

import bm25s
import bm25s.tokenization
import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle

from llama_index_ext_causalrag.experts._nodes_io import load_nodes, require_nodes, save_nodes
from llama_index_ext_causalrag.experts.expert_updates import ExpertUpdates
from llama_index_ext_causalrag.fusion import top_k_indices
from llama_index_ext_causalrag.storage.persistence import open_persisted, persist_to
from llama_index_ext_causalrag.storage.update_plan import Source, in_plan_order
from llama_index_ext_causalrag.text.provenance import annotate
from llama_index_ext_causalrag.validation import check_in_range, check_query, check_top_k, public_method

logger = logging.getLogger(__name__)

DEFAULT_TOKEN_PATTERN = r"(?u)\b\w\w+\b"
DEFAULT_K1, DEFAULT_B = 1.5, 0.75  # BM25 (Robertson et al.; bm25s and Lucene defaults)

# language -> (PyStemmer algorithm, bm25s stopword list name)
LANGUAGES: Dict[str, tuple[str, str]] = {
    "english": ("english", "STOPWORDS_EN"),
    "german": ("german", "STOPWORDS_GERMAN"),
    "french": ("french", "STOPWORDS_FRENCH"),
    "spanish": ("spanish", "STOPWORDS_SPANISH"),
    "italian": ("italian", "STOPWORDS_ITALIAN"),
    "portuguese": ("portuguese", "STOPWORDS_PORTUGUESE"),
    "dutch": ("dutch", "STOPWORDS_DUTCH"),
    "danish": ("danish", "STOPWORDS_DANISH"),
    "swedish": ("swedish", "STOPWORDS_SWEDISH"),
    "norwegian": ("norwegian", "STOPWORDS_NORWEGIAN"),
    "russian": ("russian", "STOPWORDS_RUSSIAN"),
    "turkish": ("turkish", "STOPWORDS_TURKISH"),
}


class BM25Tokenizer:
    """The settings of bm25s's tokenizer (``bm25s.tokenization.tokenize``): lower-case, regex
    tokens, stopwords out, Snowball stems. Fully described by :meth:`params`, which
    ``SparseExpert.persist`` writes, so a loaded index tokenizes queries as it was built.

    The token vocabulary is not the tokenizer's: ``bm25s.BM25`` builds and persists it from the
    token strings. :meth:`tokenize` is bm25s's function; ``tokenizer(text)`` gives the same tokens
    for one text.
    """

    def __init__(
        self,
        language: Optional[str] = "english",
        stemmer: Optional[str] = "default",
        stopwords: Optional[Sequence[str] | str] = "default",
        token_pattern: str = DEFAULT_TOKEN_PATTERN,
    ) -> None:
        if language is not None and language not in LANGUAGES:
            raise ValueError(
                f"unknown language {language!r}; use one of {sorted(LANGUAGES)}, or "
                "language=None with stemmer=None and your own stopwords list."
            )
        stem_algo, stop_name = LANGUAGES[language] if language else (None, None)
        self.language = language
        self.stemmer_name: Optional[str] = stem_algo if stemmer == "default" else stemmer
        if stopwords == "default":
            import bm25s.stopwords as sw

            self.stopwords: List[str] = sorted(getattr(sw, stop_name)) if stop_name else []
        elif isinstance(stopwords, str):
            raise ValueError(f"stopwords must be 'default', None or a list of words, got {stopwords!r}.")
        else:
            self.stopwords = sorted(stopwords or [])
        self.token_pattern = token_pattern
        self._pattern = re.compile(token_pattern)
        self._stop = frozenset(self.stopwords)
        self._stemmer = None
        if self.stemmer_name:
            try:
                import Stemmer
            except ImportError as e:
                raise ImportError("stemming needs PyStemmer: run `pip install PyStemmer`, or pass stemmer=None.") from e
            self._stemmer = Stemmer.Stemmer(self.stemmer_name)

    def tokenize(self, texts: Sequence[str]) -> List[List[str]]:
        """The tokens of each text, by ``bm25s.tokenization.tokenize`` (one call for all)."""
        return bm25s.tokenization.tokenize(
            list(texts),
            lower=True,
            token_pattern=self.token_pattern,
            stopwords=self.stopwords,
            stemmer=self._stemmer,
            return_ids=False,
            show_progress=False,
        )

    def __call__(self, text: str) -> List[str]:
        """The tokens of one text (a query), equal to ``self.tokenize([text])[0]``.

        Kept instead of that call: bm25s's function wraps its loops in three progress bars even
        with ``show_progress=False``, 237 us a call against 13 us here for one HolisQA-like
        sentence, and retrieval tokenizes each query once per sparse expert.
        """
        toks = [t for t in self._pattern.findall(text.lower()) if t not in self._stop]
        return self._stemmer.stemWords(toks) if self._stemmer else toks

    def params(self) -> Dict[str, Any]:
        return {
            "language": self.language,
            "stemmer": self.stemmer_name,
            "stopwords": self.stopwords,
            "token_pattern": self.token_pattern,
        }


def _require_terms(corpus: Sequence[List[str]], tokenizer: BM25Tokenizer) -> None:
    if not any(corpus):
        raise ValueError(
            f"SparseExpert got {len(corpus)} nodes and none has an indexable term (all empty, or "
            f"only stopwords/symbols for language={tokenizer.language!r}); drop empty nodes, check "
            "how the documents were loaded, or pass another language/token_pattern."
        )


def bm25_from_tokens(tokens: Sequence[List[str]], k1: float, b: float) -> Any:
    """A bm25s index of ready token lists (one per document, in order)."""
    bm25 = bm25s.BM25(k1=k1, b=b)
    bm25.index([list(t) for t in tokens], show_progress=False)
    return bm25


class _SparseState(NamedTuple):
    nodes: List[BaseNode]
    tokens: Optional[List[List[str]]]  # per node; None until needed (a loaded index)
    bm25: Any


class SparseExpert(ExpertUpdates, BaseRetriever):
    """BM25 (bm25s, Lucene variant) over nodes; ``persist`` keeps the whole tokenizer.

    The per-node tokens are kept, so ``insert_nodes`` / ``delete_ref_doc`` /
    ``refresh_ref_docs`` tokenise only the new nodes and rebuild the BM25 matrices (document
    frequencies and lengths of the whole corpus) from them: scores equal a rebuild's.
    """

    @public_method
    def __init__(
        self,
        nodes: Sequence[BaseNode],
        similarity_top_k: int = 10,
        language: Optional[str] = "english",
        stemmer: Optional[str] = "default",
        stopwords: Optional[Sequence[str] | str] = "default",
        token_pattern: str = DEFAULT_TOKEN_PATTERN,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        name: str = "sparse",
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        _bm25: Any = None,
        _tokens: Optional[Sequence[List[str]]] = None,
    ) -> None:
        check_top_k(similarity_top_k)
        check_in_range(k1, "k1", 0.0, None, f"BM25 uses k1 >= 0, typically 1.2 to 2.0 ({DEFAULT_K1} by default)")
        check_in_range(b, "b", 0.0, 1.0, f"BM25 length normalisation b is in [0, 1] ({DEFAULT_B} by default)")
        nodes = require_nodes(nodes)
        self.tokenizer = BM25Tokenizer(language, stemmer, stopwords, token_pattern)
        self.similarity_top_k = similarity_top_k
        self.name = name
        self.k1, self.b = k1, b
        tokens = None if _tokens is None else [list(t) for t in _tokens]
        if _bm25 is None:
            tokens = tokens if tokens is not None else self._tokenize(nodes)
            _require_terms(tokens, self.tokenizer)
            _bm25 = bm25_from_tokens(tokens, k1, b)
        self._st = _SparseState(nodes, tokens, _bm25)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _tokenize(self, nodes: Sequence[BaseNode]) -> List[List[str]]:
        return self.tokenizer.tokenize([n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes])

    @property
    def _bm25(self) -> Any:
        return self._st.bm25

    @property
    def tokens(self) -> List[List[str]]:
        """The BM25 tokens of every node (tokenised once, on first use after loading)."""
        st = self._st
        if st.tokens is not None:
            return st.tokens
        tokens = self._tokenize(st.nodes)
        if self._st is st:  # keep them, unless an update replaced the state meanwhile
            self._st = st._replace(tokens=tokens)
        return tokens

    def _updated(self, plan: List[Source], new_nodes: List[BaseNode]) -> _SparseState:
        old_tokens = self.tokens
        tokens = in_plan_order(plan, old_tokens, self._tokenize(new_nodes))
        _require_terms(tokens, self.tokenizer)
        return _SparseState(
            in_plan_order(plan, self._st.nodes, new_nodes), tokens, bm25_from_tokens(tokens, self.k1, self.b)
        )

    def idf(self, terms: Sequence[str]) -> Dict[str, float]:
        """Lucene idf ``log(1 + (N - df + 0.5) / (df + 0.5))`` of each of ``terms`` (already
        tokenized) that occurs in the index, N nodes, df read off the bm25s index."""
        bm25 = self._st.bm25
        indptr, n = bm25.scores["indptr"], float(bm25.scores["num_docs"])
        out: Dict[str, float] = {}
        for t in set(terms):
            tid = bm25.vocab_dict.get(t)
            df = 0.0 if tid is None else float(indptr[tid + 1] - indptr[tid])
            if df > 0:
                out[t] = float(np.log(1.0 + (n - df + 0.5) / (df + 0.5)))
        return out

    def score_all(self, query: str) -> np.ndarray:
        """BM25 score of every node for ``query``, shape ``(n_nodes,)``; zeros if no term is known."""
        return self._score(self._st, query)

    def score_terms(self, terms: Mapping[str, float]) -> np.ndarray:
        """BM25 of every node for weighted query ``terms`` (tokens -> weight; BM25 is a sum over
        the query's terms, so a weight of 2 is the term given twice), shape ``(n_nodes,)``, float64."""
        st = self._st
        out = np.zeros(len(st.nodes), dtype=np.float64)
        for t, w in terms.items():
            if w:
                out += float(w) * np.asarray(st.bm25.get_scores([t]), dtype=np.float64)
        return out

    def _score(self, st: _SparseState, query: str) -> np.ndarray:
        toks = self.tokenizer(query)
        if not toks:
            return np.zeros(len(st.nodes), dtype=np.float32)
        return np.asarray(st.bm25.get_scores(toks), dtype=np.float32)

    def top_k(self, query: str, k: Optional[int] = None) -> List[NodeWithScore]:
        st = self._st  # one read: a concurrent update swaps the whole state
        scores = self._score(st, query)
        idx = [i for i in top_k_indices(scores, k or self.similarity_top_k) if scores[i] > 0]
        return [
            annotate(
                NodeWithScore(node=st.nodes[i], score=float(scores[i])),
                expert=self.name,
                scores={self.name: float(scores[i])},
                rank=r,
            )
            for r, i in enumerate(idx, start=1)
        ]

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "SparseExpert")
        if not self.tokenizer(query_bundle.query_str):
            logger.info(
                "SparseExpert: query %r has no indexable terms (only stopwords or symbols); returning no results.",
                query_bundle.query_str,
            )
            return []
        return self.top_k(query_bundle.query_str)

    def persist(self, persist_dir: str | Path) -> None:
        """bm25s index files (``bm25/``), ``nodes.json``, ``tokens.json`` (per-node tokens, for
        updates), ``params.json`` with the tokenizer settings and ``manifest.json``, swapped
        in atomically (no pickle)."""
        st = self._st
        with persist_to(persist_dir, "SparseExpert") as w:
            st.bm25.save(w.dir / "bm25", allow_pickle=False, show_progress=False)
            if st.tokens is not None:  # so that an update after loading tokenises only new nodes
                w.write_json("tokens.json", st.tokens, ensure_ascii=False)
            save_nodes(st.nodes, w.dir / "nodes.json")
            w.rows["nodes"] = len(st.nodes)
            w.params.update(
                similarity_top_k=self.similarity_top_k,
                name=self.name,
                k1=self.k1,
                b=self.b,
                **self.tokenizer.params(),
            )

    @classmethod
    def from_persist_dir(cls, persist_dir: str | Path, **overrides: Any) -> "SparseExpert":
        persisted = open_persisted(persist_dir, "SparseExpert", "SparseExpert.persist(dir)")
        p = persisted.params
        bm25 = bm25s.BM25.load(persisted.path("bm25"), allow_pickle=False, show_progress=False)
        kwargs: Dict[str, Any] = dict(
            similarity_top_k=p["similarity_top_k"],
            language=p["language"],
            stemmer=p["stemmer"],
            stopwords=p["stopwords"],
            token_pattern=p["token_pattern"],
            k1=p["k1"],
            b=p["b"],
            name=p["name"],
        )
        kwargs.update(overrides)
        nodes = load_nodes(persisted.path("nodes.json"))
        persisted.check_rows("nodes", len(nodes))
        tokens = persisted.json("tokens.json") if persisted.has("tokens.json") else None
        return cls(nodes, _bm25=bm25, _tokens=tokens, **kwargs)
