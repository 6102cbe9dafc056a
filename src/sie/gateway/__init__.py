"""sie-gateway: the cluster's stateless front door (HTTP in, work items on NATS JetStream out)."""
