"""Whether a model's vectors depend on the texts batched with them.

Batched transformer inference pads a batch to its longest text. On some backends (torch) that
moves float32 results by about 1e-7, so an index embeds one document at a time
(``storage.update_plan.embed_by_document``) and a unit's vector never depends on the rest of the
corpus. A model that declares ``batch_invariant = True`` computes every row alone and gives
bit-identical vectors in any batch, so its texts can go in one length-ordered call (full
batches, little padding) with the same result.
"""

from __future__ import annotations

from typing import Any


def batch_invariant(embed_model: Any) -> bool:
    """``True`` when ``embed_model`` says a text's vector does not depend on its batch."""
    return getattr(embed_model, "batch_invariant", False) is True


__all__ = ["batch_invariant"]
