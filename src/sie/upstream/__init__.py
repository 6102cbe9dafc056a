"""Upstreams: the operator's OpenAI-compatible endpoints that remote profiles call (the file, the
client with its limits, the two calls), for ``sie.server.remote``, which decides when to call them."""
