"""Settings that take one of a few names: Literal types, refused by one check with one message
(the setting, the value, the names allowed and an example)."""

from __future__ import annotations

import re
from typing import Literal, Optional

import pytest
from llama_index.core.storage.docstore import SimpleDocumentStore

from llama_index_ext_causalrag.causal_graph.stages import ExpansionConfig, ModulesConfig, RankingConfig
from llama_index_ext_causalrag.choices import check_choice, choices_of
from llama_index_ext_causalrag.multigranularity.entropy import fuse
from llama_index_ext_causalrag.multigranularity.promotion import ParentPromotionPostprocessor
from llama_index_ext_causalrag.multigranularity.stages import FittingConfig, FusionConfig, PromotionConfig
from llama_index_ext_causalrag.presets import Choices, Stage
from llama_index_ext_causalrag.standards.parser import StructuredDocumentParser
from llama_index_ext_causalrag.standards.stages import ExpansionConfig as StandardsExpansion


def test_choices_of_reads_literal_and_optional_literal_types():
    assert choices_of(Literal["a", "b"]) == ("a", "b")
    assert choices_of(Optional[Literal["a", "b"]]) == ("a", "b", None)
    assert choices_of(("x", "y")) == ("x", "y")
    assert choices_of(str) == () and choices_of(Optional[int]) == ()


def test_check_choice_passes_a_name_and_refuses_anything_else_naming_value_choices_and_example():
    assert check_choice("b", "mode", Literal["a", "b"]) == "b"
    with pytest.raises(ValueError) as e:
        check_choice("c", "mode", Literal["a", "b"])
    assert str(e.value) == "mode must be one of ('a', 'b'), got 'c'; pass one of them, e.g. mode='a'."
    with pytest.raises(ValueError, match=r"got \['a'\]; pass one of them, e\.g\. mode='b'"):
        check_choice(["a"], "mode", ("a", "b"), example="b")  # unhashable: simply not a name


class _Toy(Stage):
    mode: Literal["fast", "exact"] = "exact"
    label: Optional[Literal["x"]] = None
    free: str = "anything"


def test_a_stage_checks_each_literal_field_it_is_given_with_its_default_as_the_example():
    assert _Toy(mode="fast", label="x", free="whatever").mode == "fast"
    assert issubclass(Stage, Choices)
    with pytest.raises(ValueError, match=r"mode must be one of \('fast', 'exact'\), got 'slow'; .*e\.g\. mode='exact'"):
        _Toy(mode="slow")
    with pytest.raises(ValueError, match=r"label must be one of \('x', None\), got 'y'"):
        _Toy(label="y")


# every choice setting of the package, its class and a value that is none of its names
CHOICE_SETTINGS = [
    (FusionConfig, "weighting", "loud"),
    (PromotionConfig, "parent_evidence", "doc"),
    (FittingConfig, "fit_evidence", "oracle"),
    (FittingConfig, "allocation", "all"),
    (ParentPromotionPostprocessor, "parent_evidence", "doc"),
    (ParentPromotionPostprocessor, "fit_evidence", "oracle"),
    (ParentPromotionPostprocessor, "allocation", "all"),
    (StructuredDocumentParser, "doc_format", "docx"),
    (StandardsExpansion, "neighbour_pick", "best"),
    (ExpansionConfig, "search", "bfs"),
    (RankingConfig, "graph_aggregate", "mean"),
    (ModulesConfig, "module_embedding", "titles"),
]


@pytest.mark.parametrize("cls,name,bad", CHOICE_SETTINGS, ids=[f"{c.__name__}.{n}" for c, n, _ in CHOICE_SETTINGS])
def test_every_choice_setting_is_a_literal_refused_with_the_one_message(cls, name, bad):
    field = cls.model_fields[name]
    allowed = choices_of(field.annotation)
    assert allowed and field.default in allowed
    needed = {"docstore": SimpleDocumentStore()} if cls is ParentPromotionPostprocessor else {}
    message = f"{name} must be one of {allowed}, got {bad!r}; pass one of them, e.g. {name}={field.default!r}."
    with pytest.raises(ValueError, match=re.escape(message)):
        cls(**needed, **{name: bad})
    for good in allowed:
        if good is not None:
            assert getattr(cls(**needed, **{name: good}), name) == good


def test_plain_functions_use_the_same_check():
    with pytest.raises(ValueError, match=re.escape("weighting must be one of ('entropy', 'equal'), got 'x'")):
        fuse([], 0, "x")  # type: ignore[arg-type]
