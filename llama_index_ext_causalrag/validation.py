"""Argument checks shared by the constructors and retrievers: each error names the argument,
the value given and the fix.

Which call refused the value is not passed down as an argument: a public method is decorated
with :func:`public_method` (or runs its body in ``with public_call("Index.verb"):``), and the
checks called below it name that call (:func:`caller`), however deep they run. The innermost
public call names the error, so ``StandardsIndex.from_documents`` reports what
``StandardsGraph.from_documents`` refused as ``StandardsGraph.from_documents``.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
import math
import numbers
import unicodedata
from collections import Counter
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Collection, Dict, Iterable, Iterator, List, Optional, TypeVar

import numpy as np
from llama_index.core.schema import BaseNode, Document, QueryBundle

logger = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
_CALL: ContextVar[str] = ContextVar("llama_index_ext_causalrag_call", default="")


@contextmanager
def public_call(name: str) -> Iterator[None]:
    """Errors raised by the checks inside the block name ``name`` (e.g. ``"StandardsIndex.insert"``)."""
    token = _CALL.set(name)
    try:
        yield
    finally:
        _CALL.reset(token)


def public_method(fn: F) -> F:
    """A public method whose errors name it: ``Class.method``, or ``Class`` for ``__init__``
    (the class of ``self``, or ``cls`` under ``@classmethod``: put this decorator below it)."""

    def name(first: Any) -> str:
        cls = first if isinstance(first, type) else type(first)
        return cls.__name__ if fn.__name__ == "__init__" else f"{cls.__name__}.{fn.__name__}"

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def acall(first: Any, *args: Any, **kwargs: Any) -> Any:
            with public_call(name(first)):
                return await fn(first, *args, **kwargs)

        return acall  # type: ignore[return-value]

    @functools.wraps(fn)
    def call(first: Any, *args: Any, **kwargs: Any) -> Any:
        with public_call(name(first)):
            return fn(first, *args, **kwargs)

    return call  # type: ignore[return-value]


def caller(default: str = "this call") -> str:
    """The public call being run (:func:`public_call`), else ``default``."""
    return _CALL.get() or default


def unexpected_keyword(name: str, allowed: Collection[str], call: Optional[str] = None) -> TypeError:
    """``TypeError`` naming the call (by default :func:`caller`), ``name``, the closest allowed
    names and all of them."""
    close = difflib.get_close_matches(name, list(allowed), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    call = call or f"{caller()}()"
    return TypeError(f"{call} got an unexpected keyword argument {name!r}{hint}; it takes {sorted(allowed)}.")


def check_keywords(given: Iterable[str], allowed: Collection[str]) -> None:
    """Raise :func:`unexpected_keyword` for the first name of ``given`` not in ``allowed``."""
    for name in given:
        if name not in allowed:
            raise unexpected_keyword(name, allowed)


def check_no_vector_store(kwargs: Collection[str]) -> None:
    """``vector_store=`` is how ``VectorStoreIndex`` is told its store; our indexes need a docstore
    beside it, so they take a ``StorageContext`` and say which."""
    if "vector_store" in kwargs:
        raise TypeError(
            f"{caller()}() takes its stores as storage_context=, not vector_store=: "
            "pass storage_context=StorageContext.from_defaults(vector_store=vector_store, docstore=docstore) "
            "(docs/stores.md)."
        )


def check_top_k(value: Any, name: str = "similarity_top_k") -> int:
    """An int >= 1 (not a bool, float or string)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}; pass e.g. {name}=10.")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}; pass e.g. {name}=10.")
    return int(value)


def check_finite(value: Any, name: str, fix: str = "") -> float:
    """A real, finite number (no NaN, no infinity)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}" + (f"; {fix}." if fix else "."))
    return float(value)


def check_finite_values(values: Dict[str, Any], fix: str = "pass a finite number or leave the default") -> None:
    """:func:`check_finite` for each ``{name: value}``."""
    for name, value in values.items():
        check_finite(value, name, fix)


def check_in_range(value: Any, name: str, low: float, high: Optional[float], fix: str) -> float:
    """A finite number in ``[low, high]`` (``high=None``: no upper bound)."""
    v = check_finite(value, name, fix)
    if v < low or (high is not None and v > high):
        bounds = f"[{low:g}, {high:g}]" if high is not None else f">= {low:g}"
        raise ValueError(f"{name} must be {bounds}, got {value!r}; {fix}.")
    return v


def check_finite_array(array: np.ndarray, name: str) -> None:
    """No NaN or infinite entry; the error says which row."""
    bad = ~np.isfinite(array)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise ValueError(
            f"{name} holds {int(bad.sum())} NaN or infinite values (first in row {row}); "
            "fix or re-embed those rows (a failed embedding call often returns NaN)."
        )


def check_nodes(nodes: Any, argument: str = "nodes") -> List[BaseNode]:
    """A list (any iterable) of ``BaseNode``: not None, a string or a single node."""
    owner = caller()
    if not _is_collection(nodes):
        raise ValueError(
            f"{owner} {argument} must be a list of nodes, got {type(nodes).__name__} {_short(nodes)}; "
            "e.g. SentenceSplitter().get_nodes_from_documents(documents)."
        )
    out = list(nodes)
    bad = next((n for n in out if not isinstance(n, BaseNode)), None)
    if bad is not None:
        raise ValueError(
            f"{owner} {argument} must hold llama_index nodes, got a {type(bad).__name__} {_short(bad)}; "
            "wrap text as TextNode(text=...) or split Documents with a node parser."
        )
    return out


def has_visible_text(text: str) -> bool:
    """At least one character that is not white space, a control or a format character
    (zero-width space, joiners, BOM): text an index can find."""
    return any(unicodedata.category(c)[0] not in "ZC" for c in text)


def check_documents(documents: Any, invisible: str = "refuse") -> List[Document]:
    """A list (any iterable) of ``Document`` (strings are the usual mistake) that an index can
    hold the same way in memory and in any store:

    * each ``doc_id`` once: two documents with one id in one call are refused by name;
    * no NUL character (PostgreSQL cannot store one): refused by name before anything is written;
    * text with a visible character: with ``invisible="skip"`` (builds) such documents are left
      out with a warning naming them; with ``"refuse"`` (updates: ``insert``,
      ``refresh_ref_docs``) they are refused by name, with ``delete_ref_doc`` as the fix.
    """
    owner = caller()
    if not _is_collection(documents):
        raise ValueError(
            f"{owner} documents must be a list of Document, got {type(documents).__name__} "
            f"{_short(documents)}; wrap text as Document(text=...)."
        )
    out = list(documents)
    bad = next((d for d in out if not isinstance(d, Document)), None)
    if bad is not None:
        raise ValueError(
            f"{owner} documents must hold Document objects, got a {type(bad).__name__} {_short(bad)}; "
            "wrap text as Document(text=...), or load files with SimpleDirectoryReader."
        )
    repeated = sorted(i for i, c in Counter(d.doc_id for d in out).items() if c > 1)
    if repeated:
        raise ValueError(
            f"{owner} got the document ids {_ids(repeated)} more than once in one call; give each document its "
            "own id_ (units, the docstore and updates are keyed by it), or pass only the latest version."
        )
    with_nul = [d.doc_id for d in out if "\x00" in d.text]
    if with_nul:
        raise ValueError(
            f"{owner}: the documents {_ids(with_nul)} contain NUL characters (\\x00), which PostgreSQL and "
            "other stores cannot hold; remove them first, e.g. Document(id_=d.id_, "
            "text=d.text.replace('\\x00', ''), metadata=d.metadata)."
        )
    blank = [d.doc_id for d in out if not has_visible_text(d.text)]
    if blank and invisible == "refuse":
        raise ValueError(
            f"{owner}: the documents {_ids(blank)} have no visible character, so there is nothing to index; "
            "to remove an indexed document call delete_ref_doc(its id), and skip empty texts before updating."
        )
    if blank:
        logger.warning("%s: the documents %s have no visible character and are not indexed.", owner, _ids(blank))
        left_out = set(blank)  # ids are unique here
        out = [d for d in out if d.doc_id not in left_out]
    return out


def _ids(ids: List[str], most: int = 5) -> str:
    shown = ", ".join(repr(i) for i in ids[:most])
    return f"[{shown}{', ...' if len(ids) > most else ''}] ({len(ids)})" if len(ids) > 1 else f"[{shown}]"


def check_query(query_bundle: QueryBundle, owner: str) -> None:
    """Reject an empty or whitespace-only query: there is nothing to search for."""
    if not query_bundle.query_str.strip():
        raise ValueError(
            f"{owner} got an empty query ({query_bundle.query_str!r}); pass a question or "
            "keywords, and skip empty inputs before retrieval."
        )


def _is_collection(value: Any) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, BaseNode))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = [
    "caller",
    "check_documents",
    "check_finite",
    "check_finite_array",
    "check_finite_values",
    "check_in_range",
    "check_keywords",
    "check_no_vector_store",
    "check_nodes",
    "check_query",
    "check_top_k",
    "has_visible_text",
    "public_call",
    "public_method",
    "unexpected_keyword",
]
