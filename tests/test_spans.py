import pytest

from llama_index_ext_causalrag.llm.parse import find_json_object, parse_json_object, salvage_truncated_json
from llama_index_ext_causalrag.text.spans import span_overlap


def test_span_overlap_over_shorter_span():
    assert span_overlap((0, 10), (5, 20)) == pytest.approx(0.5)
    assert span_overlap((0, 100), (10, 20)) == 1.0
    assert span_overlap((0, 10), (10, 20)) == 0.0


def test_json_object_found_in_prose_and_fences():
    text = 'Sure! {not json} here:\n```json\n{"keep": ["n1", "n2"], "why": "a } in a string"}\n```'
    assert find_json_object(text) == {"keep": ["n1", "n2"], "why": "a } in a string"}
    assert find_json_object("[1, 2]") is None
    with pytest.raises(ValueError, match="no well-formed JSON object"):
        parse_json_object('{"keep": [')


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a": "x", "b": {"c": "y", "d": "tr', {"a": "x", "b": {"c": "y"}}),
        ('```json\n{"a": "x, {y}", "q": ["1", "2", "3', {"a": "x, {y}", "q": ["1", "2"]}),
        ('{"a": {"b": "c"}, "d": "e', {"a": {"b": "c"}}),
        ('{"a": "x"}', None),  # balanced: not truncated
        ('{"a": "cut before any comma', None),
        ("no json", None),
    ],
)
def test_salvage_keeps_the_complete_members_of_a_cut_object(text, expected):
    assert salvage_truncated_json(text) == expected
