"""Faults and topologies for the cluster's chaos runs (``scripts/chaos``, docs/cluster.md): hosts as
network namespaces, a replicated NATS cluster, the processes of the cluster on them, and the faults a
run injects under steady load. Like ``bench``, it is run from a checkout, not installed."""
