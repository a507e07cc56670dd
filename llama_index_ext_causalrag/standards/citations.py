"""Pure: citation extraction from section text and resolution to sections and documents.

Recognised forms (kramdown-RFC markup first, then prose):

* ``{{anchor}}``, ``{{<anchor}}`` -- a section (or figure) of the same document, or a
  document when the anchor is a reference key (``{{QUIC-TLS}}``, ``{{RFC9204}}``);
* ``{{!QUIC-TRANSPORT=RFC9000}}`` -- a document, and defines the alias;
* ``{{Section 6 of QUIC-RECOVERY}}``, ``{{Sections 4.1 and 4.2 of RFC9001}}``;
* ``Section 4.2 of [RFC9001]``, ``[RFC9001], Section 4.2``, ``clause 5.2 of EN 301 489-1``;
* ``Section 4.2``, ``clause 5.2``, ``Annex A`` -- a section of the same document;
* ``RFC 9000``, ``[QUIC-TRANSPORT]``, ``[1]``, ``EN 301 489-1`` -- a document.

Resolution: section only -> that section here; document only -> that
document's root; both -> that section there; target not in the corpus -> an external
placeholder. Only the standard library here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

_NUM = r"(?:\d+(?:\.\d+)*|[A-Z](?:\.\d+)*)"
_NUMLIST = rf"{_NUM}(?:\s*(?:,\s*and|,|and|or|through|to)\s+{_NUM})*"
_ETSI = r"(?:ETSI\s+)?(?:EN|TS|TR|ES|EG|GS)\s+\d{3}\s+\d{3}(?:-\d+)*(?:\s+V\d+(?:\.\d+)*)?"
_KIND = r"(?:\b(?:[Ss]ections?|[Cc]lauses?|[Ss]ubclauses?|Annex(?:es)?|[Aa]ppendix|[Aa]ppendices)|\u00a7)"


def _docref(g: str) -> str:
    return (
        rf"(?:\[(?P<{g}br>[A-Za-z0-9][\w\-./]*)\](?!\()|(?P<{g}rfc>\bRFC\s?\d{{3,5}}\b)"
        rf"|(?P<{g}etsi>\b{_ETSI}))"
    )


_KRAMDOWN_RE = re.compile(r"(?<!\{)\{\{(?!\{)([^{}]{1,200}?)\}\}(?!\})")
_K_SECTION_RE = re.compile(rf"^(?:Sections?|Appendix|Appendices)\s+({_NUMLIST})\s+(?:of|in)\s+(\S+)$")
_K_SECTION_AFTER_RE = re.compile(rf"^(\S+?),?\s+(?:Sections?|Appendix)\s+({_NUMLIST})$")
_PROSE_SEC_OF_RE = re.compile(rf"{_KIND}\s*(?P<nums>{_NUMLIST})\s+(?:of|in)\s+(?:the\s+)?" + _docref("a"))
_PROSE_DOC_SEC_RE = re.compile(_docref("b") + rf",?\s+{_KIND}\s*(?P<nums>{_NUMLIST})\b")
_PROSE_SEC_RE = re.compile(rf"{_KIND}\s*(?P<nums>{_NUMLIST})\b")
_PROSE_DOC_RE = re.compile(_docref("c"))


@dataclass(frozen=True)
class Citation:
    """One reference in the text, before resolution.

    ``doc``: the document as written (``"QUIC-RECOVERY"``, ``"RFC 9000"``), or None for the
    citing document; ``section``: a section number, or None for the whole document;
    ``anchor``: a kramdown anchor (``{{frame-ack}}``), resolved in the citing document first.
    """

    start: int
    end: int
    raw: str
    doc: Optional[str] = None
    section: Optional[str] = None
    anchor: Optional[str] = None
    alias_of: Optional[str] = None


def normalize_doc_key(key: str) -> str:
    """``"RFC 9000"`` -> ``"RFC9000"``, ``"ETSI EN 301 489-1"`` -> ``"EN301489-1"``, ``"[X]"`` -> ``"X"``."""
    k = key.strip().strip("[]").upper()
    k = re.sub(r"^ETSI\s+", "", k)
    k = re.sub(r"\s+V\d+(\.\d+)*$", "", k)
    k = re.sub(r"\s+", "", k)
    if k.startswith("DRAFT-"):
        k = re.sub(r"-(\d+|LATEST)$", "", k)
    return k


def _split_numbers(numlist: str) -> List[str]:
    parts = re.split(r"\s*(?:,\s*and|,|and|or|through|to)\s+", numlist.strip())
    return [p.rstrip(".") for p in parts if p]


def _doc_from(m: re.Match, g: str) -> str:
    return m.group(f"{g}br") or m.group(f"{g}rfc") or m.group(f"{g}etsi")


def extract_citations(
    text: str, start: int = 0, end: Optional[int] = None, skip: Sequence[Tuple[int, int]] = ()
) -> List[Citation]:
    """Citations in ``text[start:end]`` with absolute char offsets, in document order.

    kramdown markup is read first and masked, so prose patterns never match inside it.
    ``skip`` ranges (e.g. fenced code blocks) are ignored for prose patterns. Triple braces
    (``{{{Name}}}``, kramdown-RFC contact markup) are not citations.
    """
    end = len(text) if end is None else end
    seg = text[start:end]
    out: List[Citation] = []
    taken: List[Tuple[int, int]] = [
        (max(a, start) - start, min(b, end) - start) for a, b in skip if b > start and a < end
    ]

    def free(a: int, b: int) -> bool:
        return all(b <= x or a >= y for x, y in taken)

    for m in _KRAMDOWN_RE.finditer(seg):
        body = re.sub(r"\s+", " ", m.group(1)).strip().lstrip("<>").strip()
        a, b = start + m.start(), start + m.end()
        taken.append((m.start(), m.end()))
        sm = _K_SECTION_RE.match(body)
        if sm:
            for num in _split_numbers(sm.group(1)):
                out.append(Citation(a, b, m.group(0), doc=sm.group(2).lstrip("!?"), section=num))
            continue
        sm = _K_SECTION_AFTER_RE.match(body)
        if sm:
            for num in _split_numbers(sm.group(2)):
                out.append(Citation(a, b, m.group(0), doc=sm.group(1).lstrip("!?"), section=num))
            continue
        if body.startswith(("!", "?")):
            body = body[1:]
            if "=" in body:
                alias, target = body.split("=", 1)
                out.append(Citation(a, b, m.group(0), doc=alias.strip(), alias_of=target.strip()))
            else:
                out.append(Citation(a, b, m.group(0), doc=body.strip()))
            continue
        if "=" in body:
            alias, target = body.split("=", 1)
            out.append(Citation(a, b, m.group(0), doc=alias.strip(), alias_of=target.strip()))
            continue
        if re.fullmatch(r"[\w\-.:]+", body):
            out.append(Citation(a, b, m.group(0), anchor=body))
    for rx, kind in (
        (_PROSE_SEC_OF_RE, "sec_of"),
        (_PROSE_DOC_SEC_RE, "doc_sec"),
        (_PROSE_SEC_RE, "sec"),
        (_PROSE_DOC_RE, "doc"),
    ):
        for m in rx.finditer(seg):
            if not free(m.start(), m.end()):
                continue
            taken.append((m.start(), m.end()))
            a, b = start + m.start(), start + m.end()
            if kind == "sec_of":
                for num in _split_numbers(m.group("nums")):
                    out.append(Citation(a, b, m.group(0), doc=_doc_from(m, "a"), section=num))
            elif kind == "doc_sec":
                for num in _split_numbers(m.group("nums")):
                    out.append(Citation(a, b, m.group(0), doc=_doc_from(m, "b"), section=num))
            elif kind == "sec":
                for num in _split_numbers(m.group("nums")):
                    out.append(Citation(a, b, m.group(0), section=num))
            else:
                out.append(Citation(a, b, m.group(0), doc=_doc_from(m, "c")))
    out.sort(key=lambda c: (c.start, c.section or ""))
    return out


# ---------------------------------------------------------------------------------------
# aliases from the document itself
# ---------------------------------------------------------------------------------------


def aliases_from_front_matter(front: Dict) -> Dict[str, str]:
    """Reference keys of kramdown-RFC front matter -> canonical document keys.

    ``QUIC-TLS: {seriesinfo: {RFC: 9001}}`` -> ``{"QUIC-TLS": "RFC9001"}``;
    ``TLS13: RFC8446`` -> ``{"TLS13": "RFC8446"}``; ``RFC8126:`` -> itself.
    """
    out: Dict[str, str] = {}
    for section in ("normative", "informative"):
        refs = front.get(section) or {}
        if not isinstance(refs, dict):
            continue
        for key, val in refs.items():
            key = str(key)
            target = key
            if isinstance(val, str) and val.strip():
                target = val.strip()
            elif isinstance(val, dict):
                si = val.get("seriesinfo") or {}
                if isinstance(si, dict):
                    for series in ("RFC", "BCP", "STD", "EN", "TS", "TR", "Internet-Draft"):
                        if series == "Internet-Draft" and series in si:
                            target = str(si[series])
                            break
                        if series in si:
                            target = f"{series}{si[series]}"
                            break
            out[normalize_doc_key(key)] = normalize_doc_key(target)
    return out


_REFLIST_RE = re.compile(r"^\s*\[(?P<key>[\w.\-]+)\]\s+(?P<rest>.+)$", re.M)


def aliases_from_reference_list(text: str) -> Dict[str, str]:
    """``[1] ETSI EN 301 489-1 V2.2.3: ...`` lines -> ``{"1": "EN301489-1"}`` (ETSI/plain-text style)."""
    out: Dict[str, str] = {}
    for m in _REFLIST_RE.finditer(text):
        rest = m.group("rest")
        d = re.search(_ETSI, rest) or re.search(r"RFC\s?\d{3,5}", rest)
        if d:
            out[normalize_doc_key(m.group("key"))] = normalize_doc_key(d.group(0))
    return out


def designations_in(text: str, limit: int = 500) -> Set[str]:
    """The designation a plain-text/PDF standard gives itself: the first ``ETSI EN 301 489-1``-like
    name (or ``Request for Comments: 9000``) in its first ``limit`` characters."""
    head = text[:limit]
    out: Set[str] = set()
    m = re.search(_ETSI, head)
    if m:
        out.add(normalize_doc_key(m.group(0)))
    m = re.search(r"Request for Comments:\s*(\d{3,5})", head)
    if m:
        out.add(f"RFC{m.group(1)}")
    return out


# ---------------------------------------------------------------------------------------
# resolution
# ---------------------------------------------------------------------------------------


@dataclass
class DocIndex:
    """What resolution needs to know about one document of the corpus."""

    doc_id: str
    designations: Set[str] = field(default_factory=set)
    aliases: Dict[str, str] = field(default_factory=dict)
    numbers: Dict[str, str] = field(default_factory=dict)
    anchors: Dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    """Where a citation points: a section key of a corpus document, or an external placeholder."""

    doc_id: Optional[str]
    section_key: Optional[str]
    external: Optional[str] = None

    @property
    def is_external(self) -> bool:
        return self.external is not None


class CitationResolver:
    """Resolve :class:`Citation` objects against a corpus of :class:`DocIndex` entries.

    ``user_aliases`` maps names a user knows (``"QUIC-TRANSPORT"``, ``"EN 301 489-1"``) to a
    corpus ``doc_id`` or a designation; document-local aliases win over them.
    """

    def __init__(self, docs: Sequence[DocIndex], user_aliases: Optional[Dict[str, str]] = None) -> None:
        self.docs = {d.doc_id: d for d in docs}
        self.user_aliases = {normalize_doc_key(k): v for k, v in (user_aliases or {}).items()}
        self._by_name: Dict[str, str] = {}
        for d in docs:
            self._by_name[normalize_doc_key(d.doc_id)] = d.doc_id
            for des in d.designations:
                self._by_name[normalize_doc_key(des)] = d.doc_id

    def resolve_doc(self, name: str, citing: str) -> Tuple[Optional[str], str]:
        """``(doc_id or None, canonical key)`` of a document name as written in ``citing``."""
        key = normalize_doc_key(name)
        seen: Set[str] = set()
        local = self.docs[citing].aliases if citing in self.docs else {}
        while key not in seen:
            seen.add(key)
            if key in self._by_name:
                return self._by_name[key], key
            if key in local and local[key] != key:
                key = local[key]
                continue
            if key in self.user_aliases:
                target = self.user_aliases[key]
                if target in self.docs:
                    return target, key
                key = normalize_doc_key(target)
                continue
            break
        return None, key

    def resolve(self, cit: Citation, citing: str) -> Target:
        here = self.docs.get(citing)
        if cit.anchor is not None:
            if here and cit.anchor in here.anchors:
                return Target(citing, here.anchors[cit.anchor])
            doc_id, key = self.resolve_doc(cit.anchor, citing)
            if doc_id is not None:
                return Target(doc_id, "root")
            if re.fullmatch(r"[a-z0-9][a-z0-9\-_.]*", cit.anchor):  # looks like a section anchor
                return Target(None, None, external=f"{normalize_doc_key(citing)}#{cit.anchor}")
            return Target(None, None, external=key)
        if cit.doc is None:
            doc_id: Optional[str] = citing
            canon = normalize_doc_key(citing)
        else:
            doc_id, canon = self.resolve_doc(cit.alias_of or cit.doc, citing)
        if doc_id is None:
            return Target(None, None, external=canon + (f"#{cit.section}" if cit.section else ""))
        if cit.section is None:
            return Target(doc_id, "root")
        numbers = self.docs[doc_id].numbers
        if cit.section in numbers:
            return Target(doc_id, numbers[cit.section])
        return Target(None, None, external=f"{canon}#{cit.section}")
