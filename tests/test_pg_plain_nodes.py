"""Units read from a PostgreSQL docstore are built without pydantic's validation where nothing
needs it (:func:`_plain_text_node`): the same nodes as validation makes, and a refusal, so the
caller validates, for anything else."""

import json

import pytest
from llama_index.core.schema import Document, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore.utils import doc_to_json

from llama_index_ext_causalrag.storage.pg.docstore import _plain_text_node, _StoredTextNode

TEXT = TextNode.get_type()


def _stored(node):
    return json.dumps(doc_to_json(node))


def _nodes():
    parent = TextNode(id_="p", text="parent text", metadata={"title": "T", "umg_granularity": 8})
    child = TextNode(
        id_="c",
        text="a unit's text, with ünïcode",
        metadata={"title": "T", "umg_sentence_span": [0, 2], "nested": {"a": [1, 2.5, None]}},
        excluded_embed_metadata_keys=["title"],
        start_char_idx=3,
        end_char_idx=40,
        relationships={
            NodeRelationship.SOURCE: RelatedNodeInfo(node_id="doc", node_type="4", metadata={"title": "T"}),
            NodeRelationship.PARENT: parent.as_related_node_info(),
            NodeRelationship.CHILD: [RelatedNodeInfo(node_id="x"), RelatedNodeInfo(node_id="y", hash="h")],
        },
    )
    return [parent, child, TextNode(text="")]


@pytest.mark.parametrize("node", _nodes(), ids=["parent", "child", "empty"])
def test_a_plain_unit_is_the_node_validation_makes(node):
    value = _stored(node)
    built, validated = _plain_text_node(value, TEXT), _StoredTextNode.model_validate_json(value).data
    assert built is not None
    assert built == validated and built == node
    assert built.model_dump() == validated.model_dump()
    assert built.model_fields_set == validated.model_fields_set
    assert built.hash == node.hash and built.get_content("all") == node.get_content("all")
    assert built.parent_node == node.parent_node and built.child_nodes == node.child_nodes


def _with(field, value):
    data = doc_to_json(_nodes()[1])
    data["__data__"][field] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    "value",
    [
        _stored(TextNode(text="t", embedding=[0.1, 0.2])),  # an embedding: validation turns ints into floats
        _stored(Document(text="a document")),  # another node type
        _with("text", None),
        _with("start_char_idx", "3"),
        _with("excluded_llm_metadata_keys", ["ok", 3]),
        _with("relationships", {"9": {"node_id": "x"}}),  # no such relationship
        _with("relationships", {"1": {"node_id": 7}}),
        _with("an_unknown_field", 1),
        json.dumps([1, 2]),
    ],
    ids=["embedding", "document", "text", "index", "excluded", "relationship", "related-id", "unknown", "not-a-node"],
)
def test_anything_else_is_left_to_validation(value):
    assert _plain_text_node(value, TEXT) is None


@pytest.mark.parametrize("value", [float("inf"), 2**70], ids=["infinity", "past-64-bits"])
def test_values_only_the_json_module_reads_are_read(value):
    node = TextNode(id_="n", text="t", metadata={"x": value})
    built = _plain_text_node(_stored(node), TEXT)
    assert built is not None and built.metadata["x"] == value and built == node
