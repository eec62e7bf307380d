#!/usr/bin/env bash
# The GPU checks in one go, for a session lent a GPU machine (its image holds CuPy and PyTorch
# with CUDA): the versions and libraries found (cuDNN, cuBLASLt), bench_runtime.py --place gpu
# (the CUDA graph, eager runtime, PyTorch eager and PyTorch CUDA graph contenders) and
# bench_cnn_gpu.py (a ResNet-style CNN against PyTorch eager with cuDNN), gpu_step_profile.py
# (a captured step's device and host time), the GPU tests, then `paddletune profile / report /
# advise` on a GPU for the runtime and for PyTorch (their output kept). About three minutes on
# an H200; each stage has its own time limit, so one that hangs leaves the others their time
# (they add up to 9.2 minutes: run it with the device tool's timeout_s at 600). Logs go to $OUT
# (or ./gpu-checks): env.log, bench.log, bench_cnn.log and profile.log (their JSON lines last),
# tests.log, ops.log, cli.log: 7 files, within the 8 the device tool brings back.
#
#     bash benchmarks/gpu_checks.sh            # from the repository's root
#
# Where the image's typer may not be the 0.29 the CLI needs (its version was not read), put wheels
# of typer 0.29 and its pydantic in .whl/ at the repository's root (benchmarks/gpu_wheels.sh,
# run where pip reaches the registry; the device tool carries .whl): they are installed into
# /tmp/site first.
set -u
out="${OUT:-gpu-checks}"
mkdir -p "$out"
py="${PYTHON:-python3}"
if compgen -G ".whl/*.whl" > /dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi -L 2>&1 | tee "$out/env.log"
"$py" - <<'PY' 2>&1 | tee -a "$out/env.log"
import ctypes, glob, importlib, importlib.util, os
import cupy, numpy, torch
try:
    import typer
    typer_version = typer.__version__
except Exception as e:  # the CLI tests will say so; the rest of this report still counts
    typer_version = f"missing ({type(e).__name__}: {e})"
print("cupy", cupy.__version__, "numpy", numpy.__version__, "torch", torch.__version__,
      "typer", typer_version, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "-")
print("CUDA runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver",
      cupy.cuda.runtime.driverGetVersion(), "torch cuDNN", torch.backends.cudnn.version())
for name in ("cupy.cuda.cudnn", "cupy_backends.cuda.libs.cudnn", "cupy_backends.cuda.libs.cublaslt",
             "cupy_backends.cuda.libs.cublas", "cupy.cuda.cublas"):
    try:
        importlib.import_module(name)
        print("import", name, "ok")
    except Exception as e:
        print("import", name, "failed:", type(e).__name__, e)
spec = importlib.util.find_spec("nvidia.cudnn")
dirs = list(spec.submodule_search_locations) if spec else []
libs = sorted(f for d in dirs for f in glob.glob(os.path.join(d, "lib", "libcudnn*.so*")))
print("libcudnn files", [os.path.basename(f) for f in libs])
main = [f for f in libs if os.path.basename(f).startswith("libcudnn.so")]
if main:
    lib = ctypes.CDLL(main[0])
    lib.cudnnGetVersion.restype = ctypes.c_size_t
    print("cudnnGetVersion", lib.cudnnGetVersion(), "from", main[0])
PY
set -o pipefail
timeout 120 "$py" benchmarks/bench_runtime.py --place gpu --steps 100 --rounds 9 2>&1 \
    | tee "$out/bench.log"
bench=$?
timeout 75 "$py" benchmarks/bench_cnn_gpu.py 2>&1 | tee "$out/bench_cnn.log"
cnn=$?
timeout 45 "$py" benchmarks/gpu_step_profile.py --steps 400 2>&1 | tee "$out/profile.log"
profile=$?
timeout 90 "$py" -m pytest -q -p no:cacheprovider -rs \
    tests/test_cuda_graph_real.py tests/test_gpu_real.py tests/test_bench_runtime_gpu.py \
    tests/test_cuda_graph.py tests/test_torch_gpu_real.py tests/test_paddle_gpu_real.py 2>&1 \
    | tee "$out/tests.log"
tests=$?
# every kernel against NumPy: many small cases, spread over processes where pytest-xdist is there
# (the pool grows on demand by default, so processes sharing the GPU do not starve each other)
spread=$("$py" -c "import xdist" 2>/dev/null && echo "-n 8")
timeout 120 "$py" -m pytest -q -p no:cacheprovider -rs $spread \
    tests/test_gpu_ops_real.py 2>&1 | tee "$out/ops.log"
ops=$?
timeout 100 "$py" -m pytest -q -p no:cacheprovider -rA tests/test_gpu_cli_real.py 2>&1 \
    | tee "$out/cli.log"
cli=$?
echo "bench exit $bench, cnn exit $cnn, profile exit $profile, tests exit $tests, ops exit $ops," \
    "cli exit $cli"
exit $(( tests != 0 || ops != 0 || bench != 0 || cnn != 0 || profile != 0 || cli != 0 ))
