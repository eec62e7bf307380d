"""`python -m paddletune.trialrun --steps N --out PROFILE [--duration S [--min-steps N]] [-m]
TARGET -- ARGS`:
`paddletune profile --quiet` as the tuner's trials run it, without the command line's parser.

Each tuning trial is a new process, and typer (with pydantic) and rich cost about 0.1 s of its
start-up, for a parser whose input the tuner writes itself and a report nobody reads. The
profile, the exit status (a job interrupted by Ctrl-C dies by SIGINT, as under `python`) and
the one-line errors (a bad FLAGS_* value, an unusable target: exit 2) are those of
`paddletune profile --quiet`; it does not read the profile back after the job (the tuner
does, and records a trial whose profile is unreadable as crashed).

A trial keeps every step in full (HEAD_STEPS: more than any trial runs, --duration ones
included): the tuner's throughput interval is computed from blocks of consecutive steps, which
the aggregated windows of a long job's tail would not give.
"""

import sys

USAGE = ("usage: python -m paddletune.trialrun --steps N --out PROFILE [--duration SECONDS] "
         "[--min-steps N] [--speed-test STEPS] [-m] TARGET [-- ARGS]")
EXIT_USAGE = 2
HEAD_STEPS = 10 ** 6  # steps per program recorded in full: all of a trial's


def parse(argv):
    """(target, script args, module, out, steps, duration_s, speed_test) from `argv`;
    ValueError if malformed."""
    return parse_all(argv)[:7]


def parse_all(argv):
    """parse's, then min_steps: --min-steps, after which --duration may end the job (a slow
    job's trial still measures enough steps); None without it."""
    opts = {"--steps": None, "--out": None, "--duration": None, "--speed-test": None,
            "--min-steps": None}
    module, i = False, 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] == "-m":
            module, i = True, i + 1
        elif argv[i] in opts and i + 1 < len(argv):
            opts[argv[i]], i = argv[i + 1], i + 2
        else:
            raise ValueError(f"unknown option {argv[i]!r}")
    if i >= len(argv) or opts["--steps"] is None or opts["--out"] is None:
        raise ValueError("give --steps, --out and the target")
    target, rest = argv[i], argv[i + 1:]
    args = rest[1:] if rest[:1] == ["--"] else rest
    steps = int(opts["--steps"])
    duration = float(opts["--duration"]) if opts["--duration"] is not None else None
    speed_test = int(opts["--speed-test"]) if opts["--speed-test"] is not None else None
    if speed_test is not None and speed_test <= 0:
        raise ValueError("--speed-test must be positive")
    if steps < 1 or (duration is not None and duration <= 0):
        raise ValueError("--steps and --duration must be positive")
    min_steps = int(opts["--min-steps"]) if opts["--min-steps"] is not None else None
    if min_steps is not None and min_steps < 1:
        raise ValueError("--min-steps must be positive")
    return target, args, module, opts["--out"], steps, duration, speed_test, min_steps


def main(argv=None) -> int:
    try:
        target, args, module, out, steps, duration_s, speed_test, min_steps = parse_all(
            sys.argv[1:] if argv is None else argv)
    except ValueError as err:
        return _fail(f"{err}\n{USAGE}")
    from .runtime_import import BadFlag, import_runtime_or_say
    from .sources.detect import DetectError, detect
    try:
        framework = detect(target, module)
    except DetectError as err:
        return _fail(str(err))
    try:  # first: the session's probes import it
        import_runtime_or_say(lambda line: print(line, file=sys.stderr),
                              hide_flags=framework != "fluid")
    except BadFlag as err:
        return _fail(str(err))
    from . import session
    options = session.Options(target, args, module, out, steps, duration_s=duration_s,
                              head_steps=HEAD_STEPS, framework=framework,
                              speed_test=speed_test, min_steps=min_steps)
    try:
        outcome = session.run(options)
    except session.SessionError as err:
        return _fail(str(err))
    session.die_if_interrupted(outcome)
    return outcome.status


def _fail(message) -> int:
    print(f"paddletune: {message}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
