"""Generated protobuf modules; regenerate with `python proto/generate.py`."""
