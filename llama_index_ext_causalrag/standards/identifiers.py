"""Pure: code identifiers in a query (``max_idle_timeout``, ``INVALID_TOKEN``, ``kInitialRtt``).

Standards name protocol elements with identifiers that must be matched exactly: an error
code, a transport parameter, a constant. BM25 already keeps them as single tokens (``\\w``
includes ``_``), but a long question dilutes their weight among ordinary words. The
retriever gives these tokens extra BM25 weight (``identifier_weight``). Standard library only.
"""

from __future__ import annotations

import re
from typing import List

# snake/SCREAMING case with at least one underscore, or lower camelCase (kInitialRtt, maxAckDelay).
# Plain acronyms (QUIC, TLS, HTTP) are not identifiers: they occur in most units.
IDENTIFIER_PATTERN = re.compile(r"\b(?:[A-Za-z0-9]+_[A-Za-z0-9_]+|[a-z]+[A-Z][A-Za-z0-9]*)\b")


def query_identifiers(text: str) -> List[str]:
    """Identifier tokens of ``text`` in order of appearance, repeats kept.

    >>> query_identifiers("When is INVALID_TOKEN sent, and what is kInitialRtt? Not QUIC.")
    ['INVALID_TOKEN', 'kInitialRtt']
    """
    return IDENTIFIER_PATTERN.findall(text)
