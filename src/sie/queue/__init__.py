"""The queue front end: the JetStream contract shared with gateways, and the bridge from work items to
the engine's operations."""
