#!/usr/bin/env bash
# Wheels the GPU machine's image lacks for the CLI (typer 0.29 and the pydantic it imports;
# the image's own typer is another version), for Python 3.12 on x86-64, into .whl/ at the
# repository's root, where benchmarks/gpu_checks.sh installs them from. Run here, where pip
# reaches the registry; the device tool's `carry` then names .whl (ignored by git:
# .git/info/exclude).
#
#     bash benchmarks/gpu_wheels.sh && grep -q '^/.whl/' .git/info/exclude || echo /.whl/ >> .git/info/exclude
set -eu
py="${PYTHON:-python3}"
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl typer==0.29.2 pydantic==2.14.4 \
    pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 annotated-doc==0.0.7
ls .whl
