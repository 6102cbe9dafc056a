"""The queue front end of the engine: a worker pulls work items from its lane, runs them through the
engine the HTTP routes call, and answers each on its inbox (docs/cluster.md)."""
