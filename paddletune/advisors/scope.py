"""docs/advice.md #25: what the profile does not cover. A compiled model measured with
per-module hooks (--ops, --check-nan split its graph), one rank of a distributed job: info
cards that say what was not measured, and how to measure it."""

from typing import List, Optional

from ..profile.records import CompiledEvent, DistributedEvent
from .base import Advice, rule
from .facts import script

HIDDEN_OPTION = {"ops": "--ops", "check_nan": "--check-nan"}


@rule
def profile_scope(profile) -> List[Advice]:
    """what the profile covers (#25)

    A compiled model profiled with --ops or --check-nan; a distributed job's rank.
    """
    out = [_compiled(profile, e) for e in profile.events_of("compiled")]
    ranks = profile.events_of("distributed")
    if ranks:
        out.append(_distributed(profile, ranks[-1]))
    return [a for a in out if a is not None]


def _compiled(profile, e: CompiledEvent) -> Optional[Advice]:
    if not e.hidden:
        return None  # measured as the script runs it: the steps are the compiled model's
    options = [HIDDEN_OPTION.get(h, h) for h in e.hidden]
    shown = " and ".join(options)
    return Advice(
        id="compiled-graph-split", source=25, severity="info", confidence="high",
        title=f"{shown} split the compiled {e.target}'s graph",
        evidence=(f"the script compiled {e.target} (torch.compile, backend {e.backend!r}); "
                  f"{shown} {'hook' if len(options) > 1 else 'hooks'} every module's "
                  f"forward, and Dynamo breaks the graph at each hook: this run's step times are those of a model compiled in pieces, not "
                  f"of the graph the script runs without {shown}"),
        change=(f"# the compiled model as the script runs it, without {shown}:\n"
                f"paddletune profile {script(profile)}"),
        expected_gain="none to the job: this says what the profile measured",
        figures={"target": e.target, "backend": e.backend, "mode": e.mode,
                 "hidden": list(e.hidden)})


def _distributed(profile, e: DistributedEvent) -> Advice:
    rank = "?" if e.rank is None else e.rank
    world = "?" if e.world_size is None else e.world_size
    alone = e.world_size == 1
    covers = ("the only rank: the profile covers the whole job" if alone else
              f"rank {rank} of {world}: the other ranks' steps, DataLoaders and waits are "
              f"not in this profile, and the DataLoader and thread advice sizes this rank "
              f"from cores the ranks on this machine share")
    inside = ("the gradient all-reduce runs inside the backward pass" if e.module else
              "collective calls run inside the step")
    return Advice(
        id="distributed-rank", source=25, severity="info", confidence="high",
        title=f"A distributed job: this profile is rank {rank} of {world} (backend "
              f"{e.backend or '?'})",
        evidence=(f"{e.call}: backend {e.backend or '?'}, {covers}; {inside}, counted as "
                  f"compute (not split out)"),
        change=("# nothing to change: with one rank the profile is the whole job" if alone
                else "# each rank is its own process: start the rank to measure under\n"
                     f"paddletune profile --out rank{rank}.jsonl {script(profile)}"),
        expected_gain="none to the job: this says what the profile measured",
        figures={"call": e.call, "backend": e.backend, "rank": e.rank,
                 "world_size": e.world_size, "module": e.module})
