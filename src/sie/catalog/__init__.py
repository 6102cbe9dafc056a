"""What is servable and what a request may ask of it, with no model loaded: model configs, the
catalogue, bundles, the family table as data, request admission and options, the plans of encode and
score, and the follower of sie-config every process runs. Torch-free: the engine, the gateway and
sie-config all use it."""
