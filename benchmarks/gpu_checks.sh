#!/usr/bin/env bash
# The GPU checks in one go, for a session lent a GPU machine (its image holds CuPy and PyTorch
# with CUDA; nothing is installed): the GPU tests, then bench_runtime.py --place gpu (the CUDA
# graph, eager runtime, PyTorch eager and PyTorch CUDA graph contenders). About 5 minutes on an
# H100. Logs go to $OUT (or ./gpu-checks) as tests.log and bench.log; the bench's JSON line is
# the last line of bench.log.
#
#     bash benchmarks/gpu_checks.sh            # from the repository's root
set -u
out="${OUT:-gpu-checks}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py="${PYTHON:-python3}"
"$py" - <<'EOF' 2>&1 | tee "$out/env.log"
import cupy, numpy, torch
print("cupy", cupy.__version__, "numpy", numpy.__version__, "torch", torch.__version__,
      "cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available()
      else "-")
EOF
set -o pipefail
timeout 240 "$py" -m pytest -q -p no:cacheprovider -x tests/test_cuda_graph_real.py \
    tests/test_gpu_real.py tests/test_gpu_ops_real.py tests/test_bench_runtime_gpu.py \
    tests/test_cuda_graph.py 2>&1 | tee "$out/tests.log"
tests=$?
timeout 300 "$py" benchmarks/bench_runtime.py --place gpu --steps 100 --rounds 11 2>&1 \
    | tee "$out/bench.log"
bench=$?
echo "tests exit $tests, bench exit $bench"
exit $(( tests != 0 || bench != 0 ))
