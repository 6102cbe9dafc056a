"""Routes: each handler decodes, calls one engine method, encodes."""
