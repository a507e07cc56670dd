"""Named configurations: one lookup for every method's presets."""

from __future__ import annotations

from typing import Mapping, TypeVar

from llama_index.core.bridge.pydantic import BaseModel

C = TypeVar("C", bound=BaseModel)


def resolve_preset(preset: "str | C", presets: Mapping[str, C], config_cls: type) -> C:
    """``preset`` itself if it is a ``config_cls`` instance, else ``presets[preset]``."""
    if isinstance(preset, config_cls):
        return preset  # type: ignore[return-value]
    if not isinstance(preset, str) or preset not in presets:
        raise ValueError(
            f"unknown preset {preset!r}; choose from {sorted(presets)} or pass a {config_cls.__name__}."
        )
    return presets[preset]
