"""The cluster's config control plane: ``sie-config`` (the single writer) and the follower that
gateways and workers use to converge on what it holds."""
