"""The cluster's contract between gateways and workers: subjects, streams, the work item and its
result, the codec from a request to its work items and back, the payload store, the NATS connection.
No engine: a gateway imports all of it."""
