"""Text generation: causal language models on transformers' continuous batching (``causal_lm``),
per-request sampling (``sampling``), structured output (``grammar``) and streamed text (``text``)."""
