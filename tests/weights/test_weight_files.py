"""Which repository files a copy or download fetches (``sie.weights.files``)."""

from sie.weights.files import needed_files

CLIP_LIKE = [
    "README.md",
    "LICENSE",
    ".gitattributes",
    "config.json",
    "tokenizer.json",
    "model.safetensors",
    "pytorch_model.bin",
    "tf_model.h5",
    "flax_model.msgpack",
    "rust_model.ot",
    "onnx/model.onnx",
    "model_quantized.onnx",
    "docs/usage.txt",
    "checkpoint-500/model.safetensors",
    "optimizer.pt",
    "training_args.bin",
    "openvino/openvino_model.bin",
]


def test_torch_models_keep_one_copy_of_the_weights_and_no_leftovers():
    assert needed_files(CLIP_LIKE, onnx=False) == [
        ".gitattributes",
        "config.json",
        "tokenizer.json",
        "model.safetensors",
    ]


def test_onnx_models_keep_their_graphs():
    kept = needed_files(CLIP_LIKE, onnx=True)
    assert "onnx/model.onnx" in kept and "model_quantized.onnx" in kept
    assert "pytorch_model.bin" not in kept and "README.md" not in kept


def test_legacy_weights_stay_where_no_safetensors_sit_beside_them():
    # sentence-transformers layout: a root safetensors, a dense head only as .bin in its own folder.
    files = ["model.safetensors", "pytorch_model.bin", "2_Dense/pytorch_model.bin", "2_Dense/config.json"]
    assert needed_files(files, onnx=False) == [
        "model.safetensors",
        "2_Dense/pytorch_model.bin",
        "2_Dense/config.json",
    ]
    # GLiNER / BGE-M3: .bin weights alone, and BGE-M3's extra heads as .pt.
    files = ["pytorch_model.bin", "sparse_linear.pt", "colbert_linear.pt", "gliner_config.json"]
    assert needed_files(files, onnx=False) == files
