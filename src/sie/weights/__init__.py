"""Where model weights come from: packages, the local cache, a cluster cache, the Hub."""
