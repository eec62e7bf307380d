"""fluid.io: saving/loading persistables (arrives in a later commit)."""
