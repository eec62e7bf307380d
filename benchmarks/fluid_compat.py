"""How much of PaddlePaddle 1.8's own Python test suite passes, unchanged, on this runtime.

    python benchmarks/fluid_compat.py /path/to/Paddle            # a checkout of tag v1.8.5
    python benchmarks/fluid_compat.py /path/to/Paddle -k while   # only files matching 'while'
    python benchmarks/fluid_compat.py /path/to/Paddle --json out.json --jobs 2

The files are python/paddle/fluid/tests/unittests/test_*.py and tests/book/test_*.py of the
checkout. Each runs in a subprocess of its own through `runtime.compat.install()` (so `import
paddle.fluid` is this runtime), from a scratch directory, with `paddle.dataset` replaced by
synthetic data of the real readers' format (benchmarks/fluid_compat_data.py: the real ones
download). Nothing of Paddle's is copied here; the checkout is read where it is.

Counted: test methods passed / run (skipped ones, e.g. CUDA-only, are not counted; a file that
cannot even be imported counts all its `def test*` methods as failed). Files left out, each
with the reason printed by --excluded:
  * op_test       OpTest-based kernel tests: they drive C++ ops through core.Operator.
  * core-internal other calls into the C++ core (`core.<name>` beyond the public handful,
                  ProgramDesc/OpDesc protobufs, IR graphs, passes).
  * dygraph       imperative mode (a C++ tracer); the runtime is the static-graph engine.
  * distributed   parameter servers, fleet, collective/NCCL, transpilers.
  * backend       MKL-DNN, nGraph, TensorRT, quantisation passes.
  * network       tests of the real data sets or of downloading them (no network here).
Prints a table (file, passed/total) and the overall share.
"""

import argparse
import ast
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SUITES = ("python/paddle/fluid/tests/unittests", "python/paddle/fluid/tests/book")
# core.<name> a test may use and still count as testing the Python API
PUBLIC_CORE = {
    "CPUPlace", "CUDAPlace", "CUDAPinnedPlace", "Place", "LoDTensor", "LoDTensorArray", "Scope",
    "is_compiled_with_cuda", "get_cuda_device_count", "EOFException", "EnforceNotMet",
    "VarDesc", "globals", "is_compiled_with_mkldnn", "cuda_places", "cpu_places",
    "get_cuda_device_count_or_zero", "SelectedRows",
}
RULES = (
    ("op_test", re.compile(r"\bop_test\b|\bOpTest\b")),
    ("dygraph", re.compile(r"dygraph|imperative|VarBase|Tracer|\bimport gast\b")),
    ("network", re.compile(r"dataset\.common import download|dataset\.sentiment\.")),
    ("distributed", re.compile(r"(?m)^\s*(from|import) .*(fleet|distribute_transpiler|"
                               r"test_dist_base|communicator|role_maker|collective|pslib)|"
                               r"listen_and_serv|gen_nccl_id|start_local_trainers|"
                               r"c_comm_init|c_broadcast|c_allreduce|checkpoint_notify|"
                               r"ListenAndServ|"
                               r"DistributeTranspiler\(")),
    ("backend", re.compile(r"mkldnn|ngraph|tensorrt|quantiz|contrib\.slim|inference_api|"
                           r"AnalysisConfig|paddlebox|PaddleBox")),
    ("cpp-trainer", re.compile(r"DatasetFactory|train_from_dataset|infer_from_dataset|"
                               r"TrainerDesc|trainer_desc|PipelineOptimizer|FetchHandler")),
    ("profiler", re.compile(r"fluid\.profiler|import profiler|nvprof")),
    ("subprocess", re.compile(r"subprocess\.(Popen|call|check_output|run)|os\.system\(")),
    ("core-internal", re.compile(r"core\._|core\.ops\b|core\.ProgramDesc|core\.OpDesc|"
                                 r"core\.BlockDesc|IrGraph|core\.Graph|core\.get_all_op|"
                                 r"fluid\.op import|core\.Operator|PassBuilder|_apply_pass|"
                                 r"core\.ir\b|core\.op_support_gpu|framework_pb2|"
                                 r"core\.kernel|core\.Reader|core\.init_|core\.nvprof")),
)


def select(checkout, pattern=None):
    """[(path, None)] for the files measured and [(path, reason)] for those left out."""
    chosen, left = [], []
    for suite in SUITES:
        folder = os.path.join(checkout, suite)
        if not os.path.isdir(folder):
            raise SystemExit(f"{folder} is missing: pass the root of a Paddle v1.8.5 checkout")
        for name in sorted(os.listdir(folder)):
            if not (name.startswith("test_") and name.endswith(".py")):
                continue
            path = os.path.join(folder, name)
            if pattern and not re.search(pattern, name):
                continue
            reason = exclusion(path)
            (left if reason else chosen).append((path, reason))
    return chosen, left


_DISTRIBUTED_NAMES = re.compile(r"test_dist_|fleet|collective|communicator|allgather|"
                                r"allreduce|broadcast|reducescatter|boxps|remote_table|"
                                r"recv_save|pyramid_hash|dgc|transpiler")


def exclusion(path, depth=0):
    """Why the file is left out (or None): itself, or a helper module of its folder it
    imports, reaches into what this measure leaves out."""
    name = os.path.basename(path)
    if _DISTRIBUTED_NAMES.search(name):
        return "distributed"
    if "imperative" in name or "dygraph" in name:
        return "dygraph"
    with open(path, encoding="utf-8", errors="replace") as f:
        text = _without_license(f.read())
    reason = _own_exclusion(path, text)
    if reason or depth >= 3:
        return reason
    for helper in _helpers(path, text):
        reason = exclusion(helper, depth + 1)
        if reason:
            return f"{reason} (via {os.path.basename(helper)})"
    return None


def _own_exclusion(path, text):
    book = os.path.basename(os.path.dirname(path)) == "book"
    for reason, rule in RULES:
        if reason == "distributed" and book:
            continue  # the book's transpiler branch runs only with is_local=False: never here
        if rule.search(text):
            return reason
    used = set(re.findall(r"\bcore\.([A-Za-z_]\w*)", text))
    private = sorted(used - PUBLIC_CORE)
    return f"core-internal ({', '.join(private[:3])})" if private else None


def _helpers(path, text):
    """Sibling modules the test file imports (simple_nets, test_eager_deletion_..., ...)."""
    folder = os.path.dirname(path)
    names = set(re.findall(r"(?m)^\s*from\s+(\w+)\s+import", text))
    names.update(re.findall(r"(?m)^\s*import\s+(\w+)\s*$", text))
    found = []
    for name in sorted(names):
        candidate = os.path.join(folder, name + ".py")
        if os.path.isfile(candidate) and candidate != path:
            found.append(candidate)
    return found


def _without_license(text):
    """The Apache header says 'distributed under the License': not a distributed test."""
    return re.sub(r"(?s)^(\s*#[^\n]*\n)+", "", text, count=1)


def count_tests(path):
    """`def test*` methods in classes of the file (what a failed import loses)."""
    try:
        tree = ast.parse(open(path, encoding="utf-8", errors="replace").read())
    except SyntaxError:
        return 1
    total = sum(1 for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                for item in node.body
                if isinstance(item, ast.FunctionDef) and item.name.startswith("test"))
    return max(total, 1)


def run_file(path, timeout):
    """{'file', 'passed', 'total', 'skipped', 'seconds', 'problems'} for one test file."""
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="fluidcompat-") as scratch:
        out = os.path.join(scratch, "result.json")
        cmd = [sys.executable, os.path.join(HERE, "fluid_compat_child.py"), path, out]
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                   OMP_NUM_THREADS="1")
        try:
            proc = subprocess.run(cmd, cwd=scratch, env=env, timeout=timeout,
                                  capture_output=True, text=True)
            tail = (proc.stdout + proc.stderr)[-3000:]
        except subprocess.TimeoutExpired:
            tail = f"timed out after {timeout}s"
        result = _read(out)
    name = os.path.relpath(path, os.path.dirname(os.path.dirname(path)))
    last = tail.strip().splitlines()[-1] if tail.strip() else "no result"
    if result is None:
        result = {"passed": 0, "total": None, "skipped": 0, "problems": [last]}
    if result["total"] is None:  # the file could not be imported: all its tests failed
        result["total"] = count_tests(path)
    elif not result.get("finished"):  # it died or timed out: the tests not run failed
        result["total"] = max(result["total"] + 1, count_tests(path) - result["skipped"])
        result["problems"] = result.get("problems", []) + [f"stopped: {last}"]
    result.update(file=name, seconds=round(time.time() - t0, 1))
    return result


def _read(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", help="root of a PaddlePaddle v1.8.5 checkout")
    parser.add_argument("-k", dest="pattern", help="only files whose name matches this regex")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per file")
    parser.add_argument("--json", help="write the per-file results here")
    parser.add_argument("--excluded", action="store_true", help="list the files left out")
    parser.add_argument("--problems", action="store_true", help="print each failure's line")
    args = parser.parse_args(argv)
    try:
        import six  # noqa: F401  (Paddle 1.8's tests import it)
    except ImportError:
        raise SystemExit("Paddle 1.8's tests import `six`: run this with an interpreter that "
                         "has it (pip install six)") from None
    chosen, left = select(args.checkout, args.pattern)
    if args.excluded:
        for path, reason in left:
            print(f"excluded {os.path.basename(path):60s} {reason}")
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda p: run_file(p[0], args.timeout), chosen))
    report(results, left, args.problems)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"files": results, "excluded": [[p, r] for p, r in left]}, f, indent=1)


def report(results, left, problems):
    passed = sum(r["passed"] for r in results)
    total = sum(r["total"] for r in results)
    for r in sorted(results, key=lambda r: r["file"]):
        skipped = f"  ({r['skipped']} skipped)" if r.get("skipped") else ""
        print(f"{r['file']:62s} {r['passed']:4d}/{r['total']:<4d}{skipped}")
        if problems:
            for line in r.get("problems", [])[:12]:
                print(f"      {line[:200]}")
    share = 100.0 * passed / total if total else 0.0
    print(f"\n{len(results)} files, {len(left)} left out: {passed}/{total} test methods "
          f"passed ({share:.1f}%)")


if __name__ == "__main__":
    main()
