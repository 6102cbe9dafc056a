"""The engine: one piece of code fed by every front end (HTTP now, the queue pull loop later)."""
