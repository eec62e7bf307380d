"""The reader's faults, each in a real subprocess with a hard timeout (docs/reliability.md cases
1-12): a failing, killed, crashed or hung worker, shared memory running out, odd generators,
the user's loop failing or breaking, and leaks. Every case also checks that no process of the
script outlives it."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from paddletune import profile as prof

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="worker processes need fork")

ROOT = Path(__file__).resolve().parent.parent
HARD_TIMEOUT_S = 60

PRELUDE = '''
import faulthandler, json, os, signal, sys, threading, time, warnings
faulthandler.register(signal.SIGUSR1)  # `kill -USR1` shows where a hung case hangs
import numpy as np
import runtime as fluid

main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup):
    x = fluid.data("x", [-1, 3], "float32")
    total = fluid.layers.reduce_sum(x)
exe = fluid.Executor(fluid.CPUPlace())


def make_loader(**kw):
    kw.setdefault("capacity", 4)
    with fluid.program_guard(main, startup):
        return fluid.io.DataLoader.from_generator(feed_list=[x], **kw)


def batch(i, rows=1):
    return [np.full((rows, 3), i, "float32")]


def train(loader, steps=None):
    done = 0
    for data in loader():
        exe.run(main, feed=data, fetch_list=[total])
        done += 1
        if steps is not None and done == steps:
            break
    return done


def report(**fields):
    import psutil
    fields["children"] = [p.pid for p in psutil.Process().children(recursive=True)
                          if p.status() != psutil.STATUS_ZOMBIE]
    print("REPORT " + json.dumps(fields), flush=True)
'''


class Case:
    def __init__(self, result, elapsed_s, script, ended_unix_s):
        self.rc, self.out, self.err = result.returncode, result.stdout, result.stderr
        self.elapsed_s, self.script = elapsed_s, script
        self.ended_unix_s = ended_unix_s  # when the script's process had exited
        reports = [line[7:] for line in self.out.splitlines() if line.startswith("REPORT ")]
        self.report = json.loads(reports[-1]) if reports else {}


def run_case(tmp_path, body, profile_out=None, env=None):
    """Run PRELUDE + body as a script (under `paddletune profile` when profile_out is
    given); fails if it outlives HARD_TIMEOUT_S or leaves a process behind."""
    script = tmp_path / "case.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    cmd = [sys.executable, str(script)]
    if profile_out is not None:
        cmd = [sys.executable, "-m", "paddletune", "profile", "--quiet", "--out",
               str(profile_out), str(script)]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "",
                **(env or {})}
    t0 = time.monotonic()
    try:  # a process group of its own: a case may signal its whole group
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=HARD_TIMEOUT_S,
                                cwd=tmp_path, env=full_env, start_new_session=True)
        ended_unix_s = time.time()
    finally:
        leftovers = _processes_of(script, settle_s=1.0)
        for p in leftovers:
            p.kill()
    assert not leftovers, f"processes of the case outlived it: {leftovers}"
    return Case(result, time.monotonic() - t0, script, ended_unix_s)


def _processes_of(script, settle_s=0.0):
    """Live processes running `script`, after giving them `settle_s` to exit (a worker whose
    trainer died notices within its 0.2 s poll)."""
    deadline = time.monotonic() + settle_s
    while True:
        found = _scan(script)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


def _scan(script):
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if str(script) in " ".join(p.info["cmdline"] or ()) and \
                    p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def training_steps(path):
    return [s for s in prof.load(path).steps if not s.startup]


# --- 1, 2: a worker raises -------------------------------------------------------------------
def test_worker_raises_stops_promptly_with_type_message_and_worker_traceback(tmp_path):
    body = '''
    def gen():
        info = fluid.io.get_worker_info()
        for i in range(info.id, 100, info.num_workers):
            if i == 3:
                time.sleep(0.3)  # the trainer has taken batches 0-2 by now
                with open("t_fail", "w") as f:
                    f.write(repr(time.time()))
                raise ValueError(f"bad batch {i}")
            yield batch(i)

    loader = make_loader(num_workers=2).set_batch_generator(gen)
    try:
        train(loader)
    except ValueError:
        with open("latency", "w") as f:
            f.write(repr(time.time() - float(open("t_fail").read())))
        raise
    '''
    case = run_case(tmp_path, body, profile_out=tmp_path / "run.jsonl")
    assert case.rc == 1
    assert "ValueError: bad batch 3" in case.err
    assert "the traceback in reader worker 1 (pid" in case.err
    assert 'raise ValueError(f"bad batch {i}")' in case.err  # the worker's own line
    assert "while preparing batch 3" in case.err
    assert float((tmp_path / "latency").read_text()) < 1.0
    assert len(training_steps(tmp_path / "run.jsonl")) == 3
    errors = prof.load(tmp_path / "run.jsonl").events_of("error")
    assert errors and errors[0].exception == "ValueError"


def test_exception_with_two_required_arguments_keeps_its_type_and_text(tmp_path):
    body = '''
    class TwoArgs(Exception):
        def __init__(self, path, line):
            super().__init__(f"{path}:{line}: corrupt record")

    def gen():
        fluid.io.get_worker_info()
        yield batch(0)
        raise TwoArgs("data.bin", 7)

    train(make_loader(num_workers=1).set_batch_generator(gen))
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 1
    assert "TwoArgs: data.bin:7: corrupt record" in case.err
    assert "TypeError" not in case.err


# --- 3, 4: a worker dies ---------------------------------------------------------------------
def test_worker_sigkill_is_detected_and_named_and_the_profile_kept(tmp_path):
    body = '''
    def gen():
        info = fluid.io.get_worker_info()
        for i in range(info.id, 100, info.num_workers):
            if i == 5:
                time.sleep(0.2)
                with open("t_kill", "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            yield batch(i)

    loader = make_loader(num_workers=2).set_batch_generator(gen)
    try:
        train(loader)
    except fluid.io.ReaderWorkerError:
        with open("latency", "w") as f:
            f.write(repr(time.time() - float(open("t_kill").read())))
        raise
    '''
    case = run_case(tmp_path, body, profile_out=tmp_path / "run.jsonl")
    assert case.rc == 1
    assert "reader worker 1 (pid" in case.err and "killed by signal SIGKILL" in case.err
    # the poll interval is 0.1 s; the death is seen through the process sentinel at once
    assert float((tmp_path / "latency").read_text()) < 2 * 0.1 + 0.5
    assert len(training_steps(tmp_path / "run.jsonl")) == 5


def test_worker_segfault_is_named(tmp_path):
    body = '''
    import ctypes

    def gen():
        fluid.io.get_worker_info()
        yield batch(0)
        ctypes.string_at(0)

    train(make_loader(num_workers=1).set_batch_generator(gen))
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 1
    assert "reader worker 0 (pid" in case.err and "Segmentation fault" in case.err


# --- 5: shared memory runs out ---------------------------------------------------------------
def test_shared_memory_full_names_sizes_and_the_way_out(tmp_path):
    body = '''
    from runtime.reader import worker_main

    def no_space(fd, offset, size):
        raise OSError(28, "No space left on device")
    worker_main._fallocate = no_space  # inherited by the forked workers

    def gen():
        fluid.io.get_worker_info()
        yield batch(0, rows=100000)

    train(make_loader(num_workers=1).set_batch_generator(gen))
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 1
    assert "SharedMemoryExhausted: out of shared memory: the batch needs 1.1 MiB" in case.err
    assert "MiB available" in case.err and "/dev/shm" in case.err
    assert "use_shared_memory=False" in case.err


# --- 6: a worker hangs -----------------------------------------------------------------------
@pytest.mark.parametrize("ignores_sigterm", [False, True])
def test_hung_worker_with_timeout_raises_and_is_reaped(tmp_path, ignores_sigterm):
    body = f'''
    def gen():
        fluid.io.get_worker_info()
        yield batch(0)
        if {ignores_sigterm}:
            signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM}})
        time.sleep(1000)

    loader = make_loader(num_workers=1, timeout=1).set_batch_generator(gen)
    it = loader()
    next(it)
    pids = loader._pass.pool.pids
    t0 = time.monotonic()
    try:
        next(it)
    except fluid.io.ReaderTimeout as err:
        report(waited=time.monotonic() - t0, message=str(err),
               alive=[p for p in pids if os.path.exists(f"/proc/{{p}}")])
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 0, case.err
    r = case.report
    assert "no batch arrived within timeout=1 s" in r["message"]
    limit = 1.5 + (0.5 if ignores_sigterm else 0.0)  # + the SIGTERM grace before SIGKILL
    assert 1.0 <= r["waited"] < limit
    assert r["alive"] == [] and r["children"] == []


def test_a_stuck_reader_thread_with_timeout_raises_at_the_timeout(tmp_path):
    """A generator stuck in a thread producer: ReaderTimeout at the timeout (not after also
    waiting for a thread that cannot be stopped), saying the thread stays inside the
    generator and that a worker process would be stopped at once."""
    body = """
    def gen():
        yield batch(0)
        time.sleep(3)

    it = make_loader(timeout=1).set_batch_generator(gen)()
    next(it)
    t0 = time.monotonic()
    try:
        next(it)
    except fluid.io.ReaderTimeout as err:
        report(waited=time.monotonic() - t0, message=str(err))
    """
    case = run_case(tmp_path, body)
    assert case.rc == 0, case.err
    r = case.report
    assert 1.0 <= r["waited"] < 1.5, r
    assert "stays inside your generator" in r["message"] and "num_workers=1" in r["message"]


# --- 7: an item that cannot be pickled -------------------------------------------------------
def test_unpicklable_batch_is_an_immediate_error_naming_the_index(tmp_path):
    body = '''
    class Odd(np.ndarray):
        def __reduce__(self):
            raise RuntimeError("Odd arrays do not pickle")

    def gen():
        fluid.io.get_worker_info()
        for i in range(5):
            b = batch(i)
            yield [b[0].view(Odd)] if i == 2 else b

    t0 = time.monotonic()
    try:
        train(make_loader(num_workers=1, use_shared_memory=False).set_batch_generator(gen))
    except TypeError as err:
        report(waited=time.monotonic() - t0, message=str(err),
               notes="\\n".join(getattr(err, "__notes__", [])))
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 0, case.err
    assert "pickling it failed with RuntimeError: Odd arrays do not pickle" in \
        case.report["message"]
    assert "while preparing batch 2" in case.report["notes"]
    assert case.report["waited"] < 1.0


# --- 8: SIGKILL while a worker writes a 100 MB batch -----------------------------------------
def test_sigkill_during_a_100mb_put_never_hangs(tmp_path):
    body = '''
    import random
    big = np.ones((100 * 2**20 // 12, 3), "float32")  # inherited by the forked worker

    def gen():
        fluid.io.get_worker_info()
        while True:
            yield [big]

    outcomes = {}
    for rep in range(50):
        loader = make_loader(num_workers=1, capacity=2).set_batch_generator(gen)
        it = loader()
        next(it)  # the pass is running; the worker is writing the next batches
        pid = loader._pass.pool.pids[0]
        time.sleep(random.uniform(0.0, 0.06))
        os.kill(pid, signal.SIGKILL)
        try:
            for _ in it:
                pass
        except fluid.io.ReaderWorkerError as err:
            key = "killed" if "SIGKILL" in str(err) else str(err)
            outcomes[key] = outcomes.get(key, 0) + 1
    report(outcomes=outcomes)
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 0, case.err
    assert case.report["outcomes"] == {"killed": 50}
    assert case.report["children"] == []


# --- 9: odd generators -----------------------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
def test_empty_generator_warns_instead_of_hanging(tmp_path, workers):
    body = f'''
    def gen():
        fluid.io.get_worker_info()
        return
        yield

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        n = train(make_loader(num_workers={workers}).set_batch_generator(gen))
    report(n=n, warnings=[str(w.message) for w in caught])
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 0, case.err
    assert case.report["n"] == 0
    assert any("the reader produced 0 batches" in w for w in case.report["warnings"])


@pytest.mark.parametrize("workers", [0, 1])
def test_stopiteration_inside_the_generator_is_pep479s_runtime_error(tmp_path, workers):
    body = f'''
    def gen():
        fluid.io.get_worker_info()
        yield batch(0)
        next(iter([]))  # a StopIteration escaping a generator

    train(make_loader(num_workers={workers}).set_batch_generator(gen))
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 1
    assert "RuntimeError: generator raised StopIteration" in case.err
    assert "next(iter([]))" in case.err  # the traceback shows where


# --- 10, 11: the user's loop fails or stops early --------------------------------------------
def test_user_code_raising_in_the_loop_exits_promptly_and_cleanly(tmp_path):
    body = '''
    def gen():
        info = fluid.io.get_worker_info()
        for i in range(info.id, 10**6, info.num_workers):
            yield batch(i)

    for step, data in enumerate(make_loader(num_workers=2).set_batch_generator(gen)()):
        if step == 2:
            with open("raised_at", "w") as f:
                f.write(repr(time.time()))
            raise RuntimeError("the user's bug")
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 1 and "RuntimeError: the user's bug" in case.err
    assert case.ended_unix_s - float((tmp_path / "raised_at").read_text()) < 5.0
    assert "leaked" not in case.err and "resource_tracker" not in case.err


def test_break_at_batch_3_stops_the_workers_within_a_second(tmp_path):
    body = '''
    def gen():
        info = fluid.io.get_worker_info()
        for i in range(info.id, 10**6, info.num_workers):
            time.sleep(0.001)
            yield batch(i)

    loader = make_loader(num_workers=2).set_batch_generator(gen)
    for step, data in enumerate(loader()):
        pids = loader._pass.pool.pids
        if step == 3:
            break
    t0 = time.monotonic()
    while any(os.path.exists(f"/proc/{p}") for p in pids) and time.monotonic() - t0 < 5:
        time.sleep(0.01)
    report(gone_after=time.monotonic() - t0, threads=[t.name for t in threading.enumerate()])
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 0, case.err
    assert case.report["gone_after"] < 1.0
    assert case.report["threads"] == ["MainThread"]


# --- 12: leaks -------------------------------------------------------------------------------
def test_200_short_epochs_keep_descriptors_and_threads_flat_under_a_low_fd_limit(tmp_path):
    body = '''
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    def gen():
        info = fluid.io.get_worker_info()
        for i in range(info.id, 4, info.num_workers):
            yield batch(i)

    loader = make_loader(num_workers=2).set_batch_generator(gen)
    counts = []
    for epoch in range(200):
        assert train(loader) == 4
        if epoch in (9, 199):
            counts.append((len(os.listdir("/proc/self/fd")), threading.active_count()))
    report(counts=counts)
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 0, case.err
    (fds_10, threads_10), (fds_200, threads_200) = case.report["counts"]
    assert fds_200 <= fds_10 and threads_200 <= threads_10


def test_running_out_of_descriptors_says_how_to_raise_the_limit(tmp_path):
    body = '''
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    hog = []
    try:
        while True:
            hog.append(open(os.devnull))
    except OSError:
        hog.pop().close()  # one free descriptor: not enough for a worker

    def gen():
        fluid.io.get_worker_info()
        yield batch(0)

    train(make_loader(num_workers=2).set_batch_generator(gen))
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 1
    assert "too many open files" in case.err and "RLIMIT_NOFILE, is 64" in case.err
    assert "ulimit -n" in case.err


def test_running_out_of_descriptors_after_the_workers_started_says_so(tmp_path):
    """The trainer exhausts its file descriptors while the workers run: the next batch that
    needs a new shared-memory buffer cannot be taken. It was reported as the worker having
    "closed its channel"; it is the trainer's limit, and the error says how to raise it."""
    body = '''
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    def gen():
        for i in range(2000):  # a larger buffer once the trainer holds every descriptor
            yield batch(i, rows=4096 if os.path.exists("hogging") else 1)

    open("ready", "w").close()
    hog = []
    try:
        for step, data in enumerate(make_loader(num_workers=1).set_batch_generator(gen)()):
            exe.run(main, feed=data, fetch_list=[total])
            if step == 1:
                try:
                    while True:
                        hog.append(open(os.devnull))
                except OSError:
                    os.rename("ready", "hogging")  # needs no descriptor
    finally:
        for f in hog:
            f.close()
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 1, case.err
    assert "the trainer has run out of file descriptors" in case.err
    assert "RLIMIT_NOFILE, is 256" in case.err and "ulimit -n" in case.err
    assert "closed its channel" not in case.err


# --- the trainer ends while workers run ------------------------------------------------------
@pytest.mark.parametrize("end", ["os.kill(os.getpid(), signal.SIGKILL)", "pass"])
def test_a_process_the_generator_started_does_not_outlive_its_worker(tmp_path, end):
    """A generator in a worker starts a process of its own; the trainer is killed by SIGKILL
    (no cleanup at all), or ends its pass: that grandchild goes too."""
    body = f"""
    import subprocess

    def gen():
        info = fluid.io.get_worker_info()
        helper = subprocess.Popen(["sleep", "60"])
        with open("helper.pid", "w") as f:
            f.write(str(helper.pid))
        for i in range(10**6):
            yield batch(i)

    train(make_loader(num_workers=1).set_batch_generator(gen), steps=5)
    {end}
    """
    run_case(tmp_path, body)
    helper = int((tmp_path / "helper.pid").read_text())
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and _running(helper):
        time.sleep(0.05)
    assert not _running(helper)


def _running(pid) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_ctrl_c_under_profile_writes_the_profile_and_reaps_the_workers(tmp_path):
    body = '''
    def gen():
        info = fluid.io.get_worker_info()
        for i in range(info.id, 10**6, info.num_workers):
            time.sleep(0.002)
            yield batch(i)

    for step, data in enumerate(make_loader(num_workers=2).set_batch_generator(gen)()):
        exe.run(main, feed=data, fetch_list=[total])
        if step == 20:
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends the trainer
    '''
    out = tmp_path / "run.jsonl"
    case = run_case(tmp_path, body, profile_out=out)
    assert case.rc == -2, case.err  # died by SIGINT, as Python does
    assert "KeyboardInterrupt" in case.err
    loaded = prof.load(out)
    assert loaded.complete and len(training_steps(out)) >= 20
    assert loaded.events_of("exit")[0].reason == "interrupted"


def test_a_second_ctrl_c_during_the_dataloaders_cleanup_ends_the_job_at_once(tmp_path):
    """A first Ctrl-C in the loop's body leaves the DataLoader's iterator suspended; it is
    cleaned up (here: a reader thread inside a slow generator, waited for 2 s) by a finalizer
    once the traceback is dropped, and a KeyboardInterrupt raised in a finalizer is printed
    as "Exception ignored" and dropped: the second Ctrl-C was swallowed and the job went on.
    It must end the job at once, by SIGINT, as its user means."""
    body = """
    def gen():
        for i in range(10**6):
            if i == 22:
                time.sleep(30)  # the reader thread is inside the generator at the Ctrl-C
            yield batch(i)

    for step, data in enumerate(make_loader().set_batch_generator(gen)()):
        exe.run(main, feed=data, fetch_list=[total])
        if step == 20:
            time.sleep(0.8)  # the profile's first flush
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()  # the 2nd
            os.kill(os.getpid(), signal.SIGINT)  # the 1st, landing in the loop's body
            time.sleep(1)
    """
    out = tmp_path / "run.jsonl"
    case = run_case(tmp_path, body, profile_out=out)
    assert case.rc == -2, case.err  # died by SIGINT
    assert "Exception ignored" not in case.err, case.err
    assert len(training_steps(out)) >= 20
    exit_record = prof.load(out).events_of("exit")  # the exit record written first
    assert [e.reason for e in exit_record] == ["interrupted"]
    assert exit_record[0].message.startswith("interrupted twice (Ctrl-C): ended at once")


@pytest.mark.parametrize("how", ["sys.exit(3)", "os._exit(5)"])
def test_the_trainer_exiting_mid_pass_leaves_no_worker(tmp_path, how):
    body = f'''
    def gen():
        info = fluid.io.get_worker_info()
        for i in range(info.id, 10**6, info.num_workers):
            yield batch(i)

    for step, data in enumerate(make_loader(num_workers=2).set_batch_generator(gen)()):
        if step == 5:
            {how}
    '''
    case = run_case(tmp_path, body)  # which checks that no worker outlives it
    assert case.rc == int(how[-2])


# --- found in review -------------------------------------------------------------------------
def test_a_trainer_thread_importing_numpy_random_at_fork_time_does_not_hang_workers(tmp_path):
    body = '''
    # NumPy 2 imports numpy.random lazily: a worker forked while this thread holds the import
    # lock would wait for it forever, unless the trainer imported it before forking
    threading.Thread(target=lambda: np.random.default_rng(), daemon=True).start()

    def gen():
        info = fluid.io.get_worker_info()
        for i in range(info.id, 8, info.num_workers):
            yield batch(i)

    report(n=train(make_loader(num_workers=4, timeout=10).set_batch_generator(gen)))
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 0, case.err
    assert case.report["n"] == 8


def test_a_sigterm_to_the_process_group_leaves_the_workers_to_the_trainer(tmp_path):
    body = '''
    stop = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(1))

    def gen():
        info = fluid.io.get_worker_info()
        for i in range(info.id, 10**6, info.num_workers):
            time.sleep(0.002)
            yield batch(i)

    after = 0
    for step, data in enumerate(make_loader(num_workers=2).set_batch_generator(gen)()):
        if step == 10:
            os.killpg(os.getpgid(0), signal.SIGTERM)  # a preempted job's scheduler
        if stop:
            after += 1
            if after == 10:
                break  # checkpoint and exit
    report(after=after)
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 0, case.err
    assert case.report["after"] == 10


def test_a_dead_worker_is_seen_although_a_process_it_started_holds_its_pipes(tmp_path):
    body = '''
    def gen():
        fluid.io.get_worker_info()
        helper = os.fork()
        if helper == 0:  # e.g. a decoding server the generator starts
            time.sleep(3)
            os._exit(0)
        with open("helper", "w") as f:
            f.write(str(helper))
        yield batch(0)
        os.kill(os.getpid(), signal.SIGKILL)
        yield batch(1)

    t0 = time.monotonic()
    try:
        train(make_loader(num_workers=1).set_batch_generator(gen))
    except fluid.io.ReaderWorkerError as err:
        report(waited=time.monotonic() - t0, message=str(err))
    finally:
        os.kill(int(open("helper").read()), signal.SIGKILL)
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 0, case.err
    assert "killed by signal SIGKILL" in case.report["message"]
    assert case.report["waited"] < 2.0


@pytest.mark.parametrize("workers", [0, 1])
def test_sys_exit_in_the_generator_is_an_error_not_a_silent_end(tmp_path, workers):
    body = f'''
    def gen():
        fluid.io.get_worker_info()
        yield batch(0)
        sys.exit(0)  # e.g. a library helper giving up on a bad file

    train(make_loader(num_workers={workers}).set_batch_generator(gen))
    print("training finished")
    '''
    case = run_case(tmp_path, body)
    assert case.rc == 1 and "training finished" not in case.out
    assert "ReaderWorkerError: the generator" in case.err
    assert "a reader cannot end the job" in case.err
