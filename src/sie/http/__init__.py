"""The HTTP edge every process shares (the server, the gateway, sie-config): error rendering from the
one table, middleware, request metrics, path parts and model info. Starlette only: no engine, no
FastAPI."""
