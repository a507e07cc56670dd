"""A sentence-transformers model on ONNX Runtime: same vectors as the torch path, less CPU time.

``OnnxEmbedding`` reads a local sentence-transformers folder (mean pooling + ``Normalize``, e.g.
all-MiniLM-L6-v2), exports its weights to ONNX once with ``torch.onnx.export`` into the user
cache, and from then on runs with ``onnxruntime`` alone. Tokenization is the folder's own
``tokenizer.json`` (``tokenizers``), truncated to ``max_seq_length`` from
``sentence_bert_config.json``; pooling and L2 normalisation follow sentence-transformers'
``Pooling(mean)`` and ``Normalize`` modules. Nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Awaitable, Callable, List, Literal, Optional, Sequence

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.callbacks import CallbackManager

from llama_index_ext_causalrag.choices import check_choice

logger = logging.getLogger(__name__)

ONNX_EXTRA_HINT = "pip install onnxruntime"
# Bumped when the exported graph changes, so an old cached file is never reused.
EXPORT_FORMAT_VERSION = 1
_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
Precision = Literal["fp32", "int8"]


def cache_root() -> Path:
    """``$CAUSALRAG_CACHE_DIR`` if set, else ``~/.cache/llama_index_ext_causalrag``."""
    return Path(os.environ.get("CAUSALRAG_CACHE_DIR", str(Path.home() / ".cache" / "llama_index_ext_causalrag")))


def mean_pool_normalize(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Masked mean over tokens, then L2 normalisation: ``(b, s, d), (b, s) -> (b, d)``.

    As sentence-transformers ``Pooling(pooling_mode_mean_tokens=True)`` (token count clamped
    at 1e-9) followed by ``Normalize`` (``torch.nn.functional.normalize``, norm clamped at 1e-12).
    """
    mask = attention_mask[..., None].astype(hidden.dtype)
    summed = (hidden * mask).sum(axis=1)
    counts = np.clip(mask.sum(axis=1), 1e-9, None)
    pooled = summed / counts
    norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
    return pooled / norms


def read_model_config(model_dir: Path) -> dict[str, Any]:
    """``max_seq_length`` and ``do_lower_case`` of a sentence-transformers folder, checked for mean pooling."""
    bert_cfg = _read_json(model_dir / "sentence_bert_config.json")
    modules = _read_json(model_dir / "modules.json")
    types = [m.get("type", "") for m in modules]
    pooling_dirs = [m["path"] for m in modules if m.get("type", "").endswith("models.Pooling")]
    if not pooling_dirs or not any(t.endswith("models.Normalize") for t in types):
        raise ValueError(
            f"OnnxEmbedding needs a sentence-transformers folder with Pooling and Normalize modules, "
            f"got modules {types!r} in {model_dir}; use HuggingFaceEmbedding for this model."
        )
    pooling = _read_json(model_dir / pooling_dirs[0] / "config.json")
    other_modes = [
        k for k, v in pooling.items() if k.startswith("pooling_mode_") and v and k != "pooling_mode_mean_tokens"
    ]
    if not pooling.get("pooling_mode_mean_tokens") or other_modes:
        raise ValueError(
            f"OnnxEmbedding implements mean pooling only, got {pooling!r}; use HuggingFaceEmbedding for this model."
        )
    return {"max_seq_length": int(bert_cfg["max_seq_length"]), "do_lower_case": bool(bert_cfg.get("do_lower_case"))}


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{path.name} is missing from the model folder {path.parent}.")
    return json.loads(path.read_text(encoding="utf-8"))


def default_cache_key(model_dir: Path) -> str:
    """``<folder name>-<hash of the weight and config files' names, sizes and mtimes>``."""
    h = hashlib.sha256(str(EXPORT_FORMAT_VERSION).encode())
    for f in sorted(model_dir.glob("*")):
        if f.is_file() and f.suffix in {".safetensors", ".bin", ".json"}:
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{int(st.st_mtime)}".encode())
    return f"{model_dir.name}-{h.hexdigest()[:12]}"


def export_onnx(model_dir: Path, target: Path) -> Path:
    """Export the folder's transformer to ONNX at ``target`` (fp32, dynamic batch and length).

    Needs torch and transformers, only here. Writes a temporary file in ``target``'s folder and
    renames it into place, so a concurrent or interrupted export never leaves a partial file.
    """
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager", local_files_only=True).eval()

    class _LastHidden(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    # Two rows of different lengths, so the traced graph keeps the padding-mask branch.
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]], dtype=torch.long)
    mask = (ids != 0).long()
    example = (ids, mask, torch.zeros_like(ids))
    axes = {n: {0: "batch", 1: "sequence"} for n in (*_INPUT_NAMES, "last_hidden_state")}
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=str(target.parent))
    os.close(fd)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _LastHidden(model),
                example,
                tmp,
                input_names=list(_INPUT_NAMES),
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def quantize_int8(source: Path, target: Path) -> Path:
    """Dynamic int8 quantization (weights int8, activations quantized at run time), atomically written."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as e:
        raise ImportError(f"int8 quantization needs onnx: run `pip install onnx`. ({e})") from e
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=str(target.parent))
    os.close(fd)
    try:
        quantize_dynamic(str(source), tmp, weight_type=QuantType.QInt8)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def ensure_onnx_file(model_dir: Path, cache_dir: Path, precision: Precision) -> Path:
    """The cached ONNX file for ``model_dir`` at ``precision``, exported (and quantized) if absent."""
    fp32 = cache_dir / "model-fp32.onnx"
    if not fp32.is_file():
        logger.info("Exporting %s to ONNX (once) into %s", model_dir.name, cache_dir)
        export_onnx(model_dir, fp32)
    if precision == "fp32":
        return fp32
    int8 = cache_dir / "model-int8.onnx"
    if not int8.is_file():
        quantize_int8(fp32, int8)
    return int8


# microseconds a worker thread spins for more work before it sleeps (allow_spinning=False):
# HolisQA-like queries, 2 cores: 5.3 ms a query against 6.3 sleeping at once and 5.2 spinning;
# CPU burnt while idle after a query 0.1 ms against 27 ms spinning
SPIN_US = 200
# padded word pieces per session run (OnnxEmbedding.max_batch_tokens): two texts of 256, twelve of 40.
# HolisQA biology, first 100 documents, one process alternating (2 cores, shared): 852 sentences
# 8.1 s in 64-text runs, 5.5 s at 4096, 4.5 s at 2048, 3.6 s at 512; 295 chunks of 256 tokens
# 10.1 s, 8.2 s, 7.2 s, 6.9 s (a run's activations stay in the core's cache)
MAX_BATCH_TOKENS = 512


class OnnxEmbedding(BaseEmbedding):
    """A local sentence-transformers model (mean pooling) run by ONNX Runtime on CPU.

    The ONNX file is exported from ``model_path`` on first use into
    ``cache_dir or $CAUSALRAG_CACHE_DIR/onnx/<cache_key>`` and reused afterwards.
    Batches follow ``embed_batch_size``; with ``sort_by_length`` a batch call embeds texts in
    order of length (less padding) and returns the vectors in input order.
    """

    model_path: str = Field(description="Local sentence-transformers model folder.")
    max_length: int = Field(gt=0, description="Word pieces kept per text (the model's max_seq_length).")
    precision: Precision = Field(default="fp32", description="fp32, or int8 (dynamic quantization).")
    sort_by_length: bool = Field(default=True, description="Embed a batch call's texts in order of length.")
    intra_op_num_threads: Optional[int] = Field(
        default=None, ge=1, description="ONNX Runtime intra-op threads; None lets ONNX Runtime choose."
    )
    allow_spinning: bool = Field(
        default=False,
        description="Let ONNX Runtime's worker threads spin after a run, waiting for the next "
        "(ONNX Runtime's own default). Off, a thread spins at most 200 us for work "
        "(session.intra_op.spin_duration_us): long enough between the operators of a run (a thread that "
        "sleeps at once is woken for each: batches 14% slower), short enough to sleep right after it; a "
        "thread spinning after a query's embedding holds a core for tens of milliseconds, which the rest of "
        "the query (BM25, a database's scans) needs.",
    )
    max_batch_tokens: int = Field(
        default=MAX_BATCH_TOKENS,
        gt=0,
        description="Padded word pieces per session run: a batch call's texts "
        "(at most embed_batch_size) are run in groups of similar length holding at most this many (a group "
        "holds one text at least). Vectors are the same in any grouping (fp32).",
    )
    onnx_file: str = Field(default="", description="The ONNX file in use (set at construction).")

    _session: Any = PrivateAttr()
    _tokenizer: Any = PrivateAttr()
    _input_names: List[str] = PrivateAttr()
    _lower_case: bool = PrivateAttr()

    def __init__(
        self,
        model_path: str | Path,
        model_name: Optional[str] = None,
        precision: Precision = "fp32",
        sort_by_length: bool = True,
        intra_op_num_threads: Optional[int] = None,
        allow_spinning: bool = False,
        max_length: Optional[int] = None,
        cache_dir: Optional[str | Path] = None,
        cache_key: Optional[str] = None,
        embed_batch_size: int = 64,
        max_batch_tokens: int = 0,
        callback_manager: Optional[CallbackManager] = None,
        **kwargs: Any,
    ) -> None:
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise ImportError(f"OnnxEmbedding needs onnxruntime: run `{ONNX_EXTRA_HINT}`.") from e
        check_choice(precision, "precision", ("fp32", "int8"))
        model_dir = Path(model_path)
        cfg = read_model_config(model_dir)
        folder = Path(cache_dir) if cache_dir else cache_root() / "onnx" / (cache_key or default_cache_key(model_dir))
        onnx_file = ensure_onnx_file(model_dir, folder, precision)
        super().__init__(
            model_name=model_name or str(model_dir),
            model_path=str(model_dir),
            max_length=max_length or cfg["max_seq_length"],
            precision=precision,
            sort_by_length=sort_by_length,
            intra_op_num_threads=intra_op_num_threads,
            allow_spinning=allow_spinning,
            onnx_file=str(onnx_file),
            embed_batch_size=embed_batch_size,
            max_batch_tokens=max_batch_tokens or MAX_BATCH_TOKENS,
            callback_manager=callback_manager,
            **kwargs,
        )
        self._tokenizer = _load_tokenizer(model_dir, self.max_length)
        options = ort.SessionOptions()
        if intra_op_num_threads:
            options.intra_op_num_threads = intra_op_num_threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "1")
        options.add_session_config_entry("session.inter_op.allow_spinning", "1")
        if not allow_spinning:  # spin between a run's operators, sleep right after the run
            for pool in ("intra_op", "inter_op"):
                options.add_session_config_entry(f"session.{pool}.spin_duration_us", str(SPIN_US))
        self._session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        self._input_names = [i.name for i in self._session.get_inputs()]
        self._lower_case = cfg["do_lower_case"]

    @classmethod
    def class_name(cls) -> str:
        return "OnnxEmbedding"

    @property
    def batch_invariant(self) -> bool:
        """fp32: a text's vector is bit-identical in any batch (ONNX Runtime's CPU kernels compute
        each row alone; padded positions add exact zeros), so a build may batch across documents.
        Not int8: dynamic quantization scales activations by the whole batch."""
        return self.precision == "fp32"

    def _embed(self, texts: Sequence[str]) -> List[Embedding]:
        if not texts:
            return []
        # sentence-transformers lowercases before tokenizing when do_lower_case is set.
        batch = [t.lower() for t in texts] if self._lower_case else list(texts)
        encodings = self._tokenizer.encode_batch(batch)
        arrays = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        lengths = arrays["attention_mask"].sum(axis=1)
        out = np.empty((len(batch), 0), dtype=np.float32)
        for rows in token_groups(lengths, self.max_batch_tokens):
            width = int(lengths[rows].max())  # right padding: columns past the group's longest are padding
            feeds = {name: arrays[name][rows, :width] for name in self._input_names}
            (hidden,) = self._session.run(["last_hidden_state"], feeds)
            pooled = mean_pool_normalize(hidden, arrays["attention_mask"][rows, :width])
            if out.shape[1] == 0:
                out = np.empty((len(batch), pooled.shape[1]), dtype=pooled.dtype)
            out[rows] = pooled
        return out.tolist()

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._embed([query])[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._embed([text])[0]

    def get_query_embedding_batch(self, queries: List[str]) -> List[Embedding]:
        """Query embeddings of several texts in one session run (queries and texts embed alike)."""
        return self._get_text_embeddings(list(queries))

    def _get_text_embeddings(self, texts: List[str]) -> List[Embedding]:
        return self._embed(texts)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: List[str]) -> List[Embedding]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)

    def get_text_embedding_batch(self, texts: List[str], show_progress: bool = False, **kwargs: Any) -> List[Embedding]:
        def embed(batch: List[str]) -> List[Embedding]:
            return super(OnnxEmbedding, self).get_text_embedding_batch(batch, show_progress=show_progress, **kwargs)

        return in_length_order(texts, embed) if self.sort_by_length else embed(texts)

    async def aget_text_embedding_batch(
        self, texts: List[str], show_progress: bool = False, **kwargs: Any
    ) -> List[Embedding]:
        async def aembed(batch: List[str]) -> List[Embedding]:
            return await super(OnnxEmbedding, self).aget_text_embedding_batch(
                batch, show_progress=show_progress, **kwargs
            )

        return await ain_length_order(texts, aembed) if self.sort_by_length else await aembed(texts)


def token_groups(lengths: np.ndarray, max_tokens: int) -> List[np.ndarray]:
    """Row indices of texts with ``lengths`` word pieces, longest first, in groups whose padded
    size (rows x longest) stays within ``max_tokens`` (a group holds one row at least).

    A large run is slow out of proportion on CPU (a 64 x 256 run's attention scores alone are
    200 MB): see ``MAX_BATCH_TOKENS``."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    groups: List[np.ndarray] = []
    start = 0
    while start < len(order):
        longest = max(1, int(lengths[order[start]]))
        end = start + max(1, max_tokens // longest)
        groups.append(order[start:end])
        start = end
    return groups


def in_length_order(texts: Sequence[str], embed: Callable[[List[str]], List[Any]]) -> List[Any]:
    """``embed`` of ``texts`` taken longest first (a padded batch then holds texts of similar
    length), returned in input order."""
    if len(texts) <= 1:
        return embed(list(texts))
    order = length_order(texts)
    return unsort(embed([texts[i] for i in order]), order)


async def ain_length_order(texts: Sequence[str], aembed: Callable[[List[str]], Awaitable[List[Any]]]) -> List[Any]:
    """:func:`in_length_order` for an async ``aembed``."""
    if len(texts) <= 1:
        return await aembed(list(texts))
    order = length_order(texts)
    return unsort(await aembed([texts[i] for i in order]), order)


def length_order(texts: Sequence[str]) -> List[int]:
    """Indices of ``texts`` longest first (stable); character length stands in for word pieces."""
    return sorted(range(len(texts)), key=lambda i: -len(texts[i]))


def unsort(values: Sequence[Any], order: Sequence[int]) -> List[Any]:
    """Inverse of taking ``values[k] = original[order[k]]``: the values back in input order."""
    out: List[Any] = [None] * len(order)
    for k, i in enumerate(order):
        out[i] = values[k]
    return out


def _load_tokenizer(model_dir: Path, max_length: int) -> Any:
    from tokenizers import Tokenizer

    path = model_dir / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer.json is missing from the model folder {model_dir}.")
    tok = Tokenizer.from_file(str(path))
    tok.enable_truncation(max_length=max_length)
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
    return tok
