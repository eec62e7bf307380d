"""The DataLoader passes that ran between two training steps (evaluation), from the reader
records: each such pass's end (records.ReaderEnd with its eval_s) and its start's settings
(records.ReaderStart)."""

from typing import Dict, Optional

from . import figures as F
from . import records as r


def evaluation_figures(profile, duration_s: float) -> Optional[F.EvalFigures]:
    """What the passes between training steps cost the run, by loader (None: none ran)."""
    starts: Dict[int, r.ReaderStart] = {}  # loader -> its latest start
    by_loader: Dict[int, list] = {}  # loader -> [passes, batches, total_s, read_s, config]
    for record in profile.reader:
        if isinstance(record, r.ReaderStart):
            starts[record.loader] = record
        elif isinstance(record, r.ReaderEnd) and record.eval_s is not None:
            start = starts.get(record.loader)
            row = by_loader.setdefault(record.loader, [0, 0, 0.0, 0.0, None])
            row[0] += 1
            row[1] += record.batches
            row[2] += record.eval_s
            row[3] += record.eval_read_s or 0.0
            if start is not None:
                row[4] = start.config
    if not by_loader:
        return None
    loaders = tuple(
        F.EvalLoader(loader, config.name if config else None, passes, batches, total_s,
                     read_s, config.num_workers if config else 0)
        for loader, (passes, batches, total_s, read_s, config) in sorted(by_loader.items()))
    total_s = sum(f.total_s for f in loaders)
    share = total_s / duration_s if duration_s > 0 else None
    return F.EvalFigures(sum(f.passes for f in loaders), total_s,
                         sum(f.read_s for f in loaders),
                         share if share is None or share <= 1.0 else None, loaders)
