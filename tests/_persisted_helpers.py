"""Rewrite a file of a persisted index as an earlier version wrote it, its manifest entry with it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Dict


def rewrite_json(folder: Path, name: str, change: Callable[[Dict[str, Any]], Dict[str, Any]]) -> None:
    """``folder/name`` replaced by ``change(its JSON)``, with the size and sha256 the manifest records."""
    path = folder / name
    path.write_text(json.dumps(change(json.loads(path.read_text(encoding="utf-8")))), encoding="utf-8")
    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    data = path.read_bytes()
    manifest["files"][name] = {**manifest["files"][name], "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
