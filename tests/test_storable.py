"""The write path's shortcuts give what their plain forms give: `escaped` with its
one-pass check against the walk over every string, `result_id` against uuid.uuid5."""

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from mce_dagster.core.models import RESULT_NAMESPACE, result_id
from mce_dagster.core.storable import _escaped, escaped

# Text with the characters that matter drawn often: NUL, lone surrogates, the
# escape's own backslash-u, non-ASCII that needs nothing.
text = st.text(alphabet=st.sampled_from(["a", "\x00", "\ud800", "\udfff", "\\", "u", "0", "é", "\U0001f600", '"', "\n"]) | st.characters())
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | text
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4), max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(values)
def test_escaped_equals_the_walk_over_every_string(value):
    walked_count, fast_count = [0], [0]
    walked = _escaped(value, walked_count)
    fast = escaped(value, fast_count)
    assert fast == walked or (fast != fast and walked != walked)  # NaN is not equal to itself
    assert repr(fast) == repr(walked)
    assert fast_count == walked_count


def test_escaped_finds_what_a_graph_cannot_store_inside_a_batch_of_rows():
    rows = [{"id": f"r{i}", "result": float(i), "metadata": '{"n": 1}'} for i in range(1000)]
    assert escaped(rows) is rows  # nothing to escape: the batch itself, not a copy
    rows[500]["reasoning"] = "cut\x00here"
    rows[700]["entityId"] = "half \ud83d pair"
    count = [0]
    out = escaped(rows, count)
    assert out[500]["reasoning"] == "cut\\u0000here"
    assert out[700]["entityId"] == "half \\ud83d pair"
    assert count == [2]
    assert out[0] is rows[0]  # rows without anything to escape are not copied


def test_escaped_leaves_what_json_cannot_encode_to_the_walk():
    class Opaque:
        pass

    thing = Opaque()
    assert escaped({"x": thing, "y": "a\x00"}) == {"x": thing, "y": "a\\u0000"}
    assert escaped((b"\x00", "ok")) == (b"\x00", "ok")


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text(), st.text(), st.integers(min_value=0, max_value=10**6))
def test_result_id_is_uuid5_of_its_parts(name, provider, entity_id, version):
    try:
        expected = str(uuid.uuid5(RESULT_NAMESPACE, f"{provider}\x1f{name}\x1f{entity_id}\x1f{version}"))
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form: both refuse it
        try:
            result_id(name, provider, entity_id, version)
        except UnicodeEncodeError:
            return
        raise AssertionError("result_id took text uuid5 refuses")
    assert result_id(name, provider, entity_id, version) == expected
