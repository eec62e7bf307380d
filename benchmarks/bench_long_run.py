"""What profiling a long job costs: a fast job (benchmarks/long_run_job.py, a few hundred
microseconds a step) run bare and under `paddletune profile`, at 10^4, 10^5 and 10^6 steps.

For each size: the job's own loop steps/s bare and profiled (their ratio), the profile's
size, the profiled process's peak RSS against the bare one's (what the profiler adds), how
long `paddletune report` takes on the profile, and how many records it holds. The bare and
profiled runs alternate (--repeats pairs per size) so machine noise hits both alike.

Targets (issue 22): at 10^6 steps the profile is at most 20 MB, the profiler adds at most
100 MB of RSS, and `report` takes at most 2 s.
Prints a table and, last, one JSON line. Run: python benchmarks/bench_long_run.py
[--sizes 10000,100000,1000000 --repeats 1 --keep DIR]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOB = HERE / "long_run_job.py"
MIB = 2 ** 20


def run(command, cwd):
    """(stdout, seconds, peak RSS bytes) of one child process (its own rusage: wait4)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command))} exited {proc.returncode}")
    return out, time.perf_counter() - t0, usage.ru_maxrss * 1024  # Linux: KiB


def steps_per_s(out: str) -> float:
    line = next(x for x in out.splitlines() if x.startswith("steps_per_s="))
    return float(line.split("=", 1)[1])


def one_pair(steps: int, workdir: Path) -> dict:
    bare_out, bare_s, bare_rss = run([sys.executable, str(JOB), "--steps", str(steps)], workdir)
    profile = workdir / f"run-{steps}.jsonl"
    if profile.exists():
        profile.unlink()
    out, prof_s, prof_rss = run([sys.executable, "-m", "paddletune", "profile", "--quiet",
                                 "-o", str(profile), str(JOB), "--", "--steps", str(steps)],
                                workdir)
    _, report_s, _ = run([sys.executable, "-m", "paddletune", "report", str(profile)], workdir)
    with open(profile, "rb") as f:
        records = sum(1 for _ in f)
    return {"bare_steps_per_s": steps_per_s(bare_out), "profiled_steps_per_s": steps_per_s(out),
            "bare_rss_bytes": bare_rss, "profiled_rss_bytes": prof_rss,
            "profile_bytes": profile.stat().st_size, "records": records,
            "report_s": report_s, "bare_wall_s": bare_s, "profiled_wall_s": prof_s}


def measure(steps: int, repeats: int, workdir: Path) -> dict:
    pairs = [one_pair(steps, workdir) for _ in range(repeats)]
    med = {k: statistics.median(p[k] for p in pairs) for k in pairs[0]}
    med["steps"] = steps
    med["ratio"] = med["profiled_steps_per_s"] / med["bare_steps_per_s"]
    med["rss_added_bytes"] = med["profiled_rss_bytes"] - med["bare_rss_bytes"]
    return med


def table(rows) -> str:
    head = (f"{'steps':>9} {'bare st/s':>10} {'profiled':>10} {'ratio':>6} {'profile':>9} "
            f"{'records':>8} {'RSS bare':>9} {'+RSS':>8} {'report':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['steps']:>9,} {r['bare_steps_per_s']:>10,.0f} "
                     f"{r['profiled_steps_per_s']:>10,.0f} {r['ratio']:>6.3f} "
                     f"{r['profile_bytes'] / MIB:>7.2f}MB {r['records']:>8,} "
                     f"{r['bare_rss_bytes'] / MIB:>7.0f}MB {r['rss_added_bytes'] / MIB:>6.0f}MB "
                     f"{r['report_s']:>6.2f}s")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--keep", help="keep the profiles in this folder")
    args = parser.parse_args()
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="paddletune-long-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        rows = [measure(int(n), args.repeats, workdir) for n in args.sizes.split(",")]
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(table(rows))
    print(json.dumps({"bench": "long_run", "python": sys.version.split()[0],
                      "cpus": os.cpu_count(), "rows": rows}))


if __name__ == "__main__":
    main()
