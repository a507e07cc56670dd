"""Readers: PDF standards (pypdf outline + page text) and a folder of Markdown/text/PDF standards."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from llama_index.core.readers.base import BaseReader
from llama_index.core.schema import Document

from llama_index_ext_causalrag.choices import check_choice
from llama_index_ext_causalrag.standards.parser import OUTLINE_KEY

logger = logging.getLogger(__name__)

TEXT_SUFFIXES = (".md", ".markdown", ".txt", ".text")
PDF_SUFFIXES = (".pdf",)


def _flatten_outline(reader: Any, items: Any, level: int, out: List[Tuple[int, str, int]]) -> None:
    """pypdf's nested outline list -> ``(level, title, page_index)`` in order."""
    for it in items:
        if isinstance(it, list):
            _flatten_outline(reader, it, level + 1, out)
            continue
        try:
            page = reader.get_destination_page_number(it)
        except Exception:  # a dangling destination: keep the title, place it at page 0
            page = 0
        out.append((level, str(it.title).strip(), page if page is not None else 0))


def _find_title(text: str, title: str, start: int, end: int) -> int:
    """Offset of a heading line matching ``title`` (whitespace-flexible) in ``text[start:end]``, or -1."""
    words = [re.escape(w) for w in title.split()]
    if not words:
        return -1
    m = re.compile(r"[ \t]*" + r"\s+".join(words), re.I).search(text, start, end)
    if not m:
        return -1
    return max(start, text.rfind("\n", 0, m.start()) + 1)


def place_outline(
    text: str, page_start: Sequence[int], raw_outline: Sequence[Tuple[int, str, int]], source: str = "PDF"
) -> List[List[Any]]:
    """``[level, title, char_offset]`` per outline item, offsets increasing.

    ``page_start[p]`` is where page ``p`` starts in ``text`` (one extra entry: the text's end).
    A title is searched on its page after the previous section's start. A title that is not
    found starts at its page start when that lies after the previous section's start (a
    warning); otherwise (the previous section is on the same page, or the destination is
    dangling) it cannot be placed without cutting the previous section at a wrong offset, so it
    is left out with a warning and its text stays in the previous section.
    """
    n_pages = max(len(page_start) - 1, 0)
    outline: List[List[Any]] = []
    prev = -1
    for level, title, page in raw_outline:
        page = min(max(page, 0), n_pages - 1) if n_pages else 0
        a = page_start[page] if page_start else 0
        b = page_start[page + 1] if page + 1 < len(page_start) else len(text)
        off = _find_title(text, title, max(a, prev + 1), b)
        if off < 0 and a > prev:
            logger.warning(
                "%s: outline title %r is not in the text of page %d; its section starts at the page start.",
                source,
                title,
                page + 1,
            )
            off = a
        elif off < 0:
            logger.warning(
                "%s: outline title %r is not in the text of page %d after the previous "
                "section; left out, its text stays in the previous section.",
                source,
                title,
                page + 1,
            )
            continue
        outline.append([level, title, off])
        prev = off
    return outline


# kept out of LLM and embedding text, as LlamaIndex's SimpleDirectoryReader keeps its file keys
FILE_KEYS = ("file_name",)


def _file_document(text: str, path: Path, meta: Dict[str, Any]) -> Document:
    return Document(
        text=text,
        id_=path.stem,
        metadata=meta,
        excluded_llm_metadata_keys=list(FILE_KEYS),
        excluded_embed_metadata_keys=list(FILE_KEYS),
    )


class PDFStandardReader(BaseReader):
    """One Document per PDF: the page texts joined by blank lines, and the outline.

    ``Document.metadata[OUTLINE_KEY]`` holds ``[level, title, char_offset]`` per outline
    item, the offset being where the title's line starts on its page (or the page start
    when the title is not found in the page text). ``StructuredDocumentParser`` turns it
    into the section tree. Encrypted PDFs need ``password``; a malformed file raises a
    ``ValueError`` naming it.
    """

    def __init__(self, password: Optional[str] = None) -> None:
        self.password = password

    def load_data(self, file: str | Path, extra_info: Optional[Dict[str, Any]] = None) -> List[Document]:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError

        path = Path(file)
        try:
            reader = PdfReader(str(path))
            if reader.is_encrypted:
                ok = reader.decrypt(self.password or "")
                if not ok:
                    raise ValueError(
                        f"{path} is an encrypted PDF and "
                        + ("the password given does not open it" if self.password else "no password was given")
                        + "; pass PDFStandardReader(password=...) or decrypt it first (e.g. `qpdf --decrypt`)."
                    )
            pages = [(p.extract_text() or "") for p in reader.pages]
            raw_outline: List[Tuple[int, str, int]] = []
            _flatten_outline(reader, reader.outline, 1, raw_outline)
        except ValueError:
            raise
        except (PdfReadError, OSError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(
                f"{path} is not a readable PDF ({type(e).__name__}: {e}); check the file or re-export it."
            ) from e
        text_parts: List[str] = []
        page_start: List[int] = []
        pos = 0
        for t in pages:
            page_start.append(pos)
            text_parts.append(t)
            pos += len(t) + 2
        text = "\n\n".join(text_parts)
        page_start.append(len(text))
        outline = place_outline(text, page_start, raw_outline, str(path))
        meta: Dict[str, Any] = {"file_name": path.name, OUTLINE_KEY: outline, **(extra_info or {})}
        if not outline:
            logger.warning("%s has no outline (table of contents); structure will come from numbered headings.", path)
            meta.pop(OUTLINE_KEY)
        return [_file_document(text, path, meta)]


class StandardsFolderReader(BaseReader):
    """All standards in a folder: Markdown/text files as-is, PDFs via :class:`PDFStandardReader`.

    ``doc_id`` is the file stem. A file that cannot be read is skipped with a warning
    (``errors="warn"``, its message kept in :attr:`failures`) so the others are still
    indexed, or raises (``errors="raise"``).
    """

    def __init__(self, recursive: bool = True, errors: str = "warn", pdf_password: Optional[str] = None) -> None:
        check_choice(errors, "errors", ("warn", "raise"))
        self.recursive, self.errors = recursive, errors
        self.pdf_reader = PDFStandardReader(pdf_password)
        self.failures: Dict[str, str] = {}

    def load_data(self, folder: str | Path) -> List[Document]:  # type: ignore[override]
        root = Path(folder)
        if not root.is_dir():
            raise ValueError(f"{root} is not a folder; pass a folder of .md/.txt/.pdf standards.")
        files = sorted(root.rglob("*") if self.recursive else root.glob("*"))
        docs: List[Document] = []
        self.failures = {}
        for f in files:
            suffix = f.suffix.lower()
            if not f.is_file() or suffix not in TEXT_SUFFIXES + PDF_SUFFIXES:
                continue
            try:
                if suffix in PDF_SUFFIXES:
                    docs.extend(self.pdf_reader.load_data(f))
                else:
                    docs.append(_file_document(f.read_text(encoding="utf-8"), f, {"file_name": f.name}))
            except (ValueError, UnicodeDecodeError) as e:
                if self.errors == "raise":
                    raise
                self.failures[str(f)] = str(e)
                logger.warning("skipping %s: %s", f, e)
        if not docs:
            raise ValueError(
                f"no readable .md/.txt/.pdf standards in {root}"
                + (f" ({len(self.failures)} failed)" if self.failures else "")
                + "."
            )
        return docs
