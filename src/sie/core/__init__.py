"""What every layer shares and nothing of ours is below: option enums, the chunk-cut dynamic programme,
heap housekeeping. Engine, adapters, wire and postprocess import from here, never from each other
for these; no torch, no web, no queue.
"""
