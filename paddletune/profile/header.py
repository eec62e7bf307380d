"""The header record of a new profile, from the session's plain values (the environment's
parts that do not fit their types are left out, never a reason to fail a job)."""

import os
import time
from dataclasses import fields
from typing import Optional

from . import records as r
from .schema import SchemaError, decode


def header_record(command: dict, options: dict, env: dict, t0_unix: float,
                  source: Optional[r.SourceInfo] = None) -> r.Header:
    from .. import __version__
    return r.Header(schema=r.SCHEMA_VERSION, tool=f"paddletune {__version__}",
                    created=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t0_unix)),
                    t0_unix_s=t0_unix, pid=os.getpid(), command=decode(r.Command, command),
                    options=decode(r.Options, options), env=env_record(env),
                    source=source or r.SourceInfo())


def env_record(env: dict) -> r.Env:
    """`env` (paddletune.env.collect_env()) as an Env; a part that does not fit is dropped."""
    kept = {}
    for f in fields(r.Env):
        if f.name not in (env or {}):
            continue
        try:
            decode(r.Env, {f.name: env[f.name]})
        except SchemaError:
            continue
        kept[f.name] = env[f.name]
    return decode(r.Env, kept)
