"""The kernels families share, none of them a family: the tokenizer, the transformer backbone and its
packed BERT forward, attention, pooling, device placement, images, ONNX sessions, checkpoints."""
