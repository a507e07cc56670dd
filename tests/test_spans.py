import pytest

from llama_index_ext_causalrag.spans import find_json_object, parse_json_object, span_overlap


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
