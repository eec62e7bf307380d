"""PyTorch as a source (source.py, hooks.py: imported only when a PyTorch job runs) and how a
change is written in PyTorch code (code.py: imports nothing of torch)."""
