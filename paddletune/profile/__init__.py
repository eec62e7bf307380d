"""The profile: the typed record stream a job's measurements are written as (records.py),
bounded however long the job runs (accumulate.py), read back by `load()` into a frozen
`Profile` with its summary (figures.py, summarize.py). Nothing outside this package builds or
parses records by hand."""

from . import figures, records
from .header import env_record, header_record
from .load import ProfileError, from_records, load
from .model import Profile
from .paths import RUNS_DIR, default_path, latest, new_run_path, writing_path
from .records import SCHEMA_VERSION
from .schema import SchemaError
from .writer import ProfileWriter, write_records

__all__ = ["Profile", "ProfileError", "ProfileWriter", "RUNS_DIR", "SCHEMA_VERSION",
           "SchemaError", "default_path", "env_record", "figures", "from_records",
           "header_record", "latest", "load", "new_run_path", "records", "write_records",
           "writing_path"]
