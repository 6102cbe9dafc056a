from types import SimpleNamespace

import pytest

from sie.adapters.batch import ImageData
from sie.adapters.contract import NO_TRAITS, TEXT_ONLY, Trait
from sie.catalog.encode_plan import plan_encode
from sie.catalog.errors import InvalidInput
from sie.core.options import Capability, Modality, OutputDType, OutputType, Pooling
from sie.core.task import Task
from sie.engine.inputs import encode_input, encode_task, encode_text
from sie.wire.requests import EncodeParams, ImageInput, Item

DENSE = frozenset({Capability.DENSE})


def planned(runtime: dict | None = None, params: EncodeParams | None = None):
    """``plan_encode`` as the encode operation calls it, from a request's ``params``."""
    params = params or EncodeParams()
    return plan_encode(
        "m",
        DENSE,
        runtime or {},
        params.options,
        output_types=params.output_types,
        output_dtype=params.output_dtype,
        instruction=params.instruction,
    )


# What a plan reads of an adapter: its family (named in errors) and the inputs it takes.
NAMED_A = SimpleNamespace(family="A", inputs=TEXT_ONLY, traits=NO_TRAITS)
NAMED_ST = SimpleNamespace(family="SentenceTransformer", inputs=TEXT_ONLY, traits=NO_TRAITS)
VISION = SimpleNamespace(family="CLIP", inputs=frozenset({Modality.TEXT, Modality.IMAGE}), traits=NO_TRAITS)
# A chat VLM (Qwen3-VL-Embedding): reads an image with its caption, places the instruction itself.
CHAT_VLM = SimpleNamespace(
    family="Qwen3-VL-Embedding",
    inputs=frozenset({Modality.TEXT, Modality.IMAGE}),
    traits=frozenset({Trait.READS_IMAGE_TEXT, Trait.PLACES_INSTRUCTION}),
)


def test_defaults():
    plan = planned({}, None)
    assert plan.output_types == (OutputType.DENSE,)
    assert plan.output_dtype is OutputDType.FLOAT32
    assert plan.normalize is True and plan.pooling is None and plan.is_query is False


def test_request_options_overlay_profile_runtime():
    runtime = {"pooling": "cls", "normalize": True, "instruction": "profile"}
    params = EncodeParams(options={"normalize": False, "pooling": "last_token", "is_query": True})
    plan = planned(runtime, params)
    assert plan.pooling is Pooling.LAST and plan.normalize is False and plan.is_query is True
    assert plan.instruction == "profile"


def test_precedence_of_dtype_and_instruction():
    params = EncodeParams(
        output_dtype=OutputDType.INT8, instruction="req", options={"output_dtype": "binary"}
    )
    plan = planned({"default_instruction": "d"}, params)
    assert plan.output_dtype is OutputDType.INT8 and plan.instruction == "req"
    assert planned({"default_instruction": "d"}, None).instruction == "d"


def test_templates_and_instruction_shape_the_text():
    query = planned(
        {"query_template": "query: {text}", "doc_template": "passage: {text}"},
        EncodeParams(options={"is_query": True}),
    )
    assert encode_text(query, Item(text="x"), NAMED_A) == "query: x"
    doc = planned({"query_template": "query: {text}", "doc_template": "passage: {text}"}, None)
    assert encode_text(doc, Item(text="x"), NAMED_A) == "passage: x"
    instructed = planned({}, EncodeParams(instruction="Represent this"))
    assert encode_text(instructed, Item(text="x"), NAMED_A) == "Represent this x"


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
        planned({}, params)
    assert message in str(info.value)


def test_item_without_text_is_invalid():
    with pytest.raises(InvalidInput, match="requires text input"):
        encode_text(planned({}, None), Item(), NAMED_ST)


def test_an_image_goes_to_a_model_that_takes_images_and_text_otherwise():
    plan = planned({"query_template": "q: {text}"}, EncodeParams(options={"is_query": True}))
    image = ImageInput(b"\x89PNG...", "png")
    assert encode_input(plan, Item(text="a", images=[image]), "m", VISION) == ImageData(b"\x89PNG...", "png")
    assert encode_input(plan, Item(text="a"), "m", VISION) == "q: a"


def test_a_family_that_places_the_instruction_gets_it_apart_and_reads_an_images_caption():
    plan = planned({"default_instruction": "Represent the user's input."}, None)
    image = ImageInput(b"\x89PNG...", "png")
    assert encode_text(plan, Item(text="x"), CHAT_VLM) == "x"  # not "{instruction} x"
    assert encode_task(plan, CHAT_VLM) == Task(instruction="Represent the user's input.")
    assert encode_input(plan, Item(text="a cat", images=[image]), "m", CHAT_VLM) == ImageData(
        b"\x89PNG...", "png", "a cat"
    )
    assert encode_input(plan, Item(images=[image]), "m", CHAT_VLM) == ImageData(b"\x89PNG...", "png")
    asked = planned({}, EncodeParams(instruction="Find it"))
    assert encode_task(asked, CHAT_VLM) == Task(instruction="Find it")
    # Everyone else: the instruction stays in front of the text, and no task carries it.
    assert encode_text(asked, Item(text="x"), NAMED_A) == "Find it x" and encode_task(asked, NAMED_A) is None
    assert encode_task(planned({}, None), CHAT_VLM) is None


def test_an_image_to_a_text_only_model_or_several_images_are_invalid():
    plan = planned({}, None)
    image = ImageInput(b"x", "jpeg")
    with pytest.raises(InvalidInput, match="Model 'm' does not support image input"):
        encode_input(plan, Item(images=[image]), "m", NAMED_ST)
    with pytest.raises(InvalidInput, match="one image per item, got 2"):
        encode_input(plan, Item(images=[image, image]), "m", VISION)


def test_a_requests_sequence_length_is_read_as_the_public_server_reads_it():
    """``query_max_length`` for queries, ``max_seq_length`` for documents; a positive integer or a
    string of one, anything else leaving the model's own (the public server never refuses it)."""
    assert planned({"query_max_length": 48, "max_seq_length": 300}).max_length == 300
    query = EncodeParams(options={"is_query": True, "query_max_length": "16"})
    assert planned({"max_seq_length": 300}, query).max_length == 16
    for raw in (0, -3, True, "many", None, 2.5e400, [4]):
        assert planned({}, EncodeParams(options={"max_seq_length": raw})).max_length is None
    assert planned({}, EncodeParams(options={"max_seq_length": 7.9})).max_length == 7
