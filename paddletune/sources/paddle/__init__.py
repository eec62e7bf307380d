"""PaddlePaddle 2.6 / 3.x as a source (source.py, hooks.py, loaders.py, profiler_ops.py, ...:
imported only when a Paddle job runs; importing them imports paddle), the versions it supports
(version.py, checked before anything beyond paddle's top package is imported) and how a
change is written in Paddle 3 code (code.py: imports nothing of paddle)."""
