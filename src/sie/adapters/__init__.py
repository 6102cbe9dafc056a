"""Model families behind one small protocol; backends (torch, onnxruntime) are imported lazily."""
