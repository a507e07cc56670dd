"""Settings that take one of a few names: each is a ``Literal`` type, checked here, once.

A choice is declared as a type, ``Weighting = Literal["entropy", "equal"]``, and its names are
``choices_of(Weighting)``. Every choice is refused the same way, naming the setting, the value,
the names allowed and an example (:func:`check_choice`): a pydantic model gets that check for
each of its ``Literal`` fields from :class:`llama_index_ext_causalrag.presets.Choices`, a plain
constructor or function calls :func:`check_choice` itself. No ``llama_index`` import, so the
pure modules may use it.
"""

from __future__ import annotations

from typing import Any, Literal, Tuple, Union, get_args, get_origin

_NO_EXAMPLE = object()


def choices_of(kind: Any) -> Tuple[Any, ...]:
    """The names a ``Literal`` type allows (``Optional[Literal[...]]`` adds ``None``); ``()`` for
    any other type. A tuple of names is returned as it is."""
    if isinstance(kind, tuple):
        return kind
    origin = get_origin(kind)
    if origin is Literal:
        return get_args(kind)
    if origin is Union:
        parts = [choices_of(a) if a is not type(None) else (None,) for a in get_args(kind)]
        return tuple(c for p in parts for c in p) if all(parts) else ()
    return ()


def check_choice(value: Any, name: str, kind: Any, example: Any = _NO_EXAMPLE) -> Any:
    """``value`` if it is one of the names of ``kind`` (a ``Literal`` type or a tuple of names),
    else a ``ValueError`` naming ``name``, the value, the names allowed and an example
    (``example``, by default the first name)."""
    allowed = choices_of(kind)
    try:
        known = value in allowed
    except (TypeError, ValueError):  # e.g. an array, whose == is not a truth value
        known = False
    if not known:
        shown = allowed[0] if example is _NO_EXAMPLE else example
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}; pass one of them, e.g. {name}={shown!r}.")
    return value


__all__ = ["check_choice", "choices_of"]
