import pytest

from sie.core.options import OutputDType, OutputType, Pooling
from sie.engine.encode_plan import plan_encode
from sie.engine.errors import InvalidInput
from sie.wire.requests import EncodeParams, Item

DENSE = {"dense"}


def test_defaults():
    plan = plan_encode("m", DENSE, {}, None)
    assert plan.output_types == (OutputType.DENSE,)
    assert plan.output_dtype is OutputDType.FLOAT32
    assert plan.normalize is True and plan.pooling is None and plan.is_query is False


def test_request_options_overlay_profile_runtime():
    runtime = {"pooling": "cls", "normalize": True, "instruction": "profile"}
    params = EncodeParams(options={"normalize": False, "pooling": "last_token", "is_query": True})
    plan = plan_encode("m", DENSE, runtime, params)
    assert plan.pooling is Pooling.LAST and plan.normalize is False and plan.is_query is True
    assert plan.instruction == "profile"


def test_precedence_of_dtype_and_instruction():
    params = EncodeParams(
        output_dtype=OutputDType.INT8, instruction="req", options={"output_dtype": "binary"}
    )
    plan = plan_encode("m", DENSE, {"default_instruction": "d"}, params)
    assert plan.output_dtype is OutputDType.INT8 and plan.instruction == "req"
    assert plan_encode("m", DENSE, {"default_instruction": "d"}, None).instruction == "d"


def test_templates_and_instruction_shape_the_text():
    query = plan_encode(
        "m",
        DENSE,
        {"query_template": "query: {text}", "doc_template": "passage: {text}"},
        EncodeParams(options={"is_query": True}),
    )
    assert query.text_for(Item(text="x"), "A") == "query: x"
    doc = plan_encode(
        "m", DENSE, {"query_template": "query: {text}", "doc_template": "passage: {text}"}, None
    )
    assert doc.text_for(Item(text="x"), "A") == "passage: x"
    instructed = plan_encode("m", DENSE, {}, EncodeParams(instruction="Represent this"))
    assert instructed.text_for(Item(text="x"), "A") == "Represent this x"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            EncodeParams(output_types=[OutputType.SPARSE]),
            "Model 'm' does not support output types: {'sparse'}. Supported: {'dense'}",
        ),
        (EncodeParams(options={"output_types": ["foo"]}), "Unknown output types: ['foo']"),
        (EncodeParams(options={"output_dtype": "float64"}), "Unknown output_dtype 'float64'"),
        (EncodeParams(options={"pooling": "max"}), "Unknown pooling 'max'"),
        (EncodeParams(options={"normalize": "yes"}), "Option 'normalize' must be bool"),
    ],
)
def test_invalid_requests_name_the_bad_value(params, message):
    with pytest.raises(InvalidInput) as info:
        plan_encode("m", DENSE, {}, params)
    assert message in str(info.value)


def test_item_without_text_is_invalid():
    with pytest.raises(InvalidInput, match="requires text input"):
        plan_encode("m", DENSE, {}, None).text_for(Item(), "SentenceTransformer")
