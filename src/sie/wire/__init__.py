"""The wire contract shared by server, SDK and (later) gateway and worker: structs, codecs, error codes."""
