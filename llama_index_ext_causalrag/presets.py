"""Named configurations: one lookup for every method's presets, and the base of their typed
settings, one config per stage (:class:`Stage`) composed by the method's config (:class:`StagedConfig`)."""

from __future__ import annotations

import difflib
from typing import Any, ClassVar, Dict, Mapping, Optional, Type, TypeVar

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, model_validator

from llama_index_ext_causalrag.choices import check_choice, choices_of

C = TypeVar("C", bound=BaseModel)
S = TypeVar("S", bound="StagedConfig")


def resolve_preset(preset: "str | C", presets: Mapping[str, C], config_cls: type) -> C:
    """``preset`` itself if it is a ``config_cls`` instance, else ``presets[preset]``."""
    if isinstance(preset, config_cls):
        return preset  # type: ignore[return-value]
    if not isinstance(preset, str) or preset not in presets:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(presets)} or pass a {config_cls.__name__}.")
    return presets[preset]


class Choices(BaseModel):
    """A model whose ``Literal`` fields are checked by :func:`~llama_index_ext_causalrag.choices.check_choice`:
    a value that is none of the names is refused naming the field, the value, the names and the
    field's default as the example (instead of pydantic's "Input should be ...")."""

    @model_validator(mode="before")
    @classmethod
    def _check_choices(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                allowed = choices_of(field.annotation)
                if allowed and name in data:
                    check_choice(data[name], name, allowed, field.default)
        return data


class Stage(Choices):
    """The settings of one stage of a method: typed, frozen, one default each."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _is_stage(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, Stage)


class StagedConfig(BaseModel):
    """A method's settings: one :class:`Stage` per stage field, beside a few fields of its own.

    A setting may also be given by name, ``Config(rrf_k=30)``: it goes to the stage that has it
    (so a configuration written before the stages, all its settings flat, still loads). A name
    that is no setting is refused, naming it. :meth:`settings` gives every setting by name,
    :meth:`with_settings` a copy with some replaced.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    STAGES: ClassVar[Dict[str, Type[Stage]]] = {}
    # setting name -> the stage holding it (None: a field of the config itself)
    STAGE_OF: ClassVar[Dict[str, Optional[str]]] = {}
    # deprecated setting names still taken by name -> the stage that reads them (its validator maps them)
    DEPRECATED_STAGE_OF: ClassVar[Dict[str, str]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.STAGES = {n: f.annotation for n, f in cls.model_fields.items() if _is_stage(f.annotation)}
        where: Dict[str, Optional[str]] = {n: None for n in cls.model_fields if n not in cls.STAGES}
        for stage, stage_cls in cls.STAGES.items():
            for name in stage_cls.model_fields:
                if name in where or name in cls.STAGES:
                    raise TypeError(f"{cls.__name__}: the setting {name!r} of stage {stage!r} is named twice.")
                where[name] = stage
        cls.STAGE_OF = where

    @model_validator(mode="before")
    @classmethod
    def _by_name(cls, data: Any) -> Any:
        """Settings given by name moved into their stage (``{"rrf_k": 30}`` -> ``{"fusion": {"rrf_k": 30}}``)."""
        if not isinstance(data, dict):
            return data
        out: Dict[str, Any] = {}
        for stage in cls.STAGES:
            given = data.get(stage)
            out[stage] = dict(given.model_dump() if isinstance(given, BaseModel) else given or {})
        for key, value in data.items():
            if key in cls.STAGES:
                continue
            if key in cls.DEPRECATED_STAGE_OF and key not in cls.STAGE_OF:
                out[cls.DEPRECATED_STAGE_OF[key]][key] = value
                continue
            if key not in cls.STAGE_OF:
                close = difflib.get_close_matches(str(key), list(cls.STAGE_OF), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(
                    f"{cls.__name__} has no setting {key!r}{hint}; its settings are "
                    f"{sorted(cls.STAGE_OF)}, its stages {sorted(cls.STAGES)}."
                )
            stage = cls.STAGE_OF[key]
            if stage is None:
                out[key] = value
            else:
                out[stage][key] = value
        return out

    @classmethod
    def setting_names(cls) -> frozenset:
        """Every setting the config takes by name (the stages' fields and its own; not the deprecated names)."""
        return frozenset(cls.STAGE_OF)

    def settings(self) -> Dict[str, Any]:
        """Every setting by name (the stages' fields, flat, and the config's own)."""
        dumped = self.model_dump()
        return {name: dumped[name] if stage is None else dumped[stage][name] for name, stage in self.STAGE_OF.items()}

    def with_settings(self: S, **settings: Any) -> S:
        """A copy with ``settings`` (by name, or whole stages) replaced."""
        return type(self)(**{**self.model_dump(), **settings}) if settings else self
