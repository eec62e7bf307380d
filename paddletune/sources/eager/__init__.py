"""What the sources of eager frameworks (PyTorch, Paddle 3.x) share, importing none of them:
an event bus with the payloads the probes read (bus.py), the step timer that turns optimizer
steps, DataLoader waits, host-to-device copies and host syncs into step records (steps.py),
the DataLoader pass tracker (loaders.py), the overrides a tuner imposes on a DataLoader's
arguments (overrides.py), and the base source class (source.py)."""
