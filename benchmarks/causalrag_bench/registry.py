"""The retriever registry of ``causalrag-bench``: methods register by name, not by editing the CLI.

A builder takes a :class:`BenchContext` and returns a ``BaseRetriever`` (or any object with
``retrieve(str | QueryBundle)``). If the object also has ``retrieve_example(example)``, the
bench calls that instead, so a method can use per-question metadata (answer options).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode

from causalrag_bench.types import EvalDataset

logger = logging.getLogger(__name__)


@dataclass
class BenchContext:
    """What a builder may use. Shared nodes are built once per run and memoised."""

    dataset: EvalDataset
    embed_model: BaseEmbedding
    work_dir: Path
    top_k: int = 10
    chunk_size: int = 256
    llm: Optional[LLM] = None
    show_progress: bool = False
    _memo: Dict[str, Any] = field(default_factory=dict)

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        """Build ``make()`` once per run under ``key`` (e.g. flat chunks shared by baselines)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def flat_nodes(self) -> List[BaseNode]:
        """``SentenceSplitter(chunk_size)`` chunks of the corpus, with char spans."""
        from llama_index.core.node_parser import SentenceSplitter

        return self.memo(
            f"flat_nodes_{self.chunk_size}",
            lambda: SentenceSplitter(chunk_size=self.chunk_size, chunk_overlap=0).get_nodes_from_documents(
                self.dataset.documents
            ),
        )

    def artifact_dir(self, name: str) -> Path:
        """A per-dataset folder a builder may persist into and reuse across runs."""
        d = self.work_dir / "artifacts" / name
        d.mkdir(parents=True, exist_ok=True)
        return d


Builder = Callable[[BenchContext], Any]


class RowUnavailable(RuntimeError):
    """A registered row cannot run here (an optional dependency is missing); the message says
    what to install. Raised by a spec's ``check`` before any row of the run is built."""


@dataclass
class RetrieverSpec:
    name: str
    build: Builder
    description: str
    group: str = "baseline"
    needs_llm: bool = False
    check: Optional[Callable[[], None]] = None  # raises RowUnavailable if the row cannot run here


_REGISTRY: Dict[str, RetrieverSpec] = {}


def register_retriever(
    name: str,
    description: str,
    group: str = "baseline",
    needs_llm: bool = False,
    check: Optional[Callable[[], None]] = None,
) -> Callable[[Builder], Builder]:
    """Decorator: ``@register_retriever("umgp", "UMG fusion + parent promotion", group="umg")``.

    ``check``, if given, is called before any row of a run is built and raises
    :class:`RowUnavailable` when this row cannot run here (e.g. a missing optional extra)."""

    def deco(fn: Builder) -> Builder:
        if name in _REGISTRY and _REGISTRY[name].build is not fn:
            raise ValueError(f"retriever name {name!r} is registered twice; pick another name.")
        _REGISTRY[name] = RetrieverSpec(name, fn, description, group, needs_llm, check)
        return fn

    return deco


ENTRY_POINT_GROUP = "causalrag_bench.retrievers"
_LOADED = False


def _load_plugins() -> None:
    """Import every module registered under the ``causalrag_bench.retrievers`` entry point group.

    Each module registers its retrievers on import (``@register_retriever``), so a new method
    (ours or a third party's) joins the bench by declaring an entry point in its own
    ``pyproject.toml``; the CLI is never edited.
    """
    global _LOADED
    if _LOADED:
        return
    from importlib.metadata import entry_points

    eps = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)
    if not eps:
        raise RuntimeError(
            f"no retrievers registered under the entry point group {ENTRY_POINT_GROUP!r}; "
            "install the benchmark package: pip install -e benchmarks"
        )
    for ep in eps:
        try:
            ep.load()
        except ImportError as e:  # a method whose optional dependency is absent
            logger.warning("bench: could not load retrievers from %s (%s): %s", ep.name, ep.value, e)
    _LOADED = True


def get_spec(name: str) -> RetrieverSpec:
    _load_plugins()
    if name not in _REGISTRY:
        raise ValueError(f"unknown retriever {name!r}; choose from: {', '.join(sorted(_REGISTRY))}.")
    return _REGISTRY[name]


def available() -> Dict[str, RetrieverSpec]:
    _load_plugins()
    return dict(sorted(_REGISTRY.items()))
