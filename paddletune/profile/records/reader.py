"""The reader probe's records: a DataLoader pass's start (with its settings), its end, and its
queue counted over intervals."""

from dataclasses import dataclass
from typing import ClassVar, Dict, Literal, NamedTuple, Optional, Tuple

from ..schema import EMPTY, Bytes, Count, Id, Names, Number, Seconds, TimeS


@dataclass(frozen=True)
class LoaderConfig:
    """A DataLoader's settings as its pass started (the framework's own names).

    Fields:
      name               its name ("DataLoader#0")
      capacity           the queue's length in batches (a prefetch depth)
      iterable           iterated in Python (True) or fed inside the run (False)
      use_double_buffer  batches staged on the device ahead of the step
      num_workers        worker processes (0: a thread in the trainer, or the loop itself)
      use_shared_memory  workers hand batches over in shared memory
      prefetch_factor    batches each worker prepares ahead
      pin_memory         batches copied to page-locked memory
      persistent_workers  workers kept between passes
      source             sample | sample_list | batch: what the script's generator yields
      batch_size         samples per batch (None: unknown)
      feed               the variables it feeds
      places             the devices it feeds
      drop_last          a last partial batch is dropped
      timeout            seconds a pop waits before failing (None: forever)
      worker_pids        the pass's worker processes
      producer           where batches are made: thread (a thread of the trainer), loop
                         (the training loop itself, as it asks: PyTorch's num_workers=0),
                         workers (worker processes); None: thread, or workers when
                         num_workers > 0 (profiles before it was recorded)
      dataset            map | iterable: a PyTorch or Paddle Dataset's style (map: the
                         sampler's indices are split among the workers; iterable: each
                         worker runs the whole IterableDataset, which must yield only its
                         share); None: unknown (the embedded runtime's generators)
      sharing_strategy   how PyTorch's workers hand tensors over (torch.multiprocessing's
                         file_descriptor or file_system) as the pass started; None: not
                         PyTorch's workers
      start_method       how PyTorch's workers start, or would with num_workers=0
                         (multiprocessing's fork, spawn or forkserver: the loader's
                         multiprocessing_context, else the job's); spawn and forkserver
                         workers start a new interpreter each, inside the pass's first
                         next(); None: not PyTorch's loader, or an older profile
      args               the loader's other arguments the script set, for the advice's
                         code to keep: `name=value` where the value can be written
                         (shuffle=True, collate_fn=pad_batch: a function's own name), the
                         bare name where not (sampler: an object of the script's)
      dataset_name       the script's own expression for the loader's dataset where it is a
                         name or a dotted name (PyTorch: read from the source of the
                         DataLoader(...) call that built it; None: another expression, a
                         library's call), for the advice's code to pass it
    """

    name: Optional[str] = None
    capacity: Optional[Count] = None
    iterable: Optional[bool] = None
    use_double_buffer: Optional[bool] = None
    num_workers: Count = 0
    use_shared_memory: Optional[bool] = None
    prefetch_factor: Optional[Count] = None
    pin_memory: Optional[bool] = None
    persistent_workers: Optional[bool] = None
    source: Optional[str] = None
    batch_size: Optional[Count] = None
    feed: Names = ()
    places: Names = ()
    drop_last: Optional[bool] = None
    timeout: Optional[Number] = None
    worker_pids: Tuple[Id, ...] = ()
    producer: Optional[str] = None
    dataset: Optional[str] = None
    sharing_strategy: Optional[str] = None
    start_method: Optional[str] = None
    args: Names = ()
    dataset_name: Optional[str] = None

    @property
    def made_in(self) -> str:
        """thread | loop | workers (see `producer`)."""
        if self.producer:
            return self.producer
        return "workers" if self.num_workers else "thread"


@dataclass(frozen=True)
class ReaderStart:
    """A DataLoader pass began.

    Fields:
      t_s        when (its first batch asked for)
      loader     the loader's id
      pass_no    its pass, from 1
      config     its settings
      startup_s  from the loop's iter() to that first request: the framework starting the
                 pass's worker processes, or waking persistent ones; None: not measured
                 (the embedded runtime, profiles before 2026-12)
      first_wait_s  the loop's wait for that first batch, where the workers start inside
                 it (PyTorch's spawn and forkserver workers: their interpreter's start,
                 imports and the dataset's unpickling come before the batch is made; the
                 record is sent once it came); None: not measured (workers started in
                 iter(), as forked ones are; profiles before 2026-12)
    """

    KIND: ClassVar[str] = "reader"
    WHAT: ClassVar[str] = "start"
    t_s: TimeS
    loader: Id
    pass_no: Count
    config: LoaderConfig = LoaderConfig()
    startup_s: Optional[Seconds] = None
    first_wait_s: Optional[Seconds] = None


@dataclass(frozen=True)
class ReaderEnd:
    """A DataLoader pass ended, was reset, failed, or was left between two training steps.

    Fields:
      t_s      when
      loader   the loader's id
      pass_no  its pass
      what     end | reset | error | left (an evaluation loop left it: a `break` after
               some batches, read without gradients, the loop turning to another loader
               before a training step ended; eval_s is set)
      batches  batches it delivered
      detail   what happened (the error)
      eval_s   a pass that ran out or was left between two training steps (no step ended
               while it ran: an evaluation or validation loop): its time, left out of the steps
               (less any such pass inside it); None: not such a pass, or not known (the
               embedded runtime, profiles before 2026-12)
      eval_read_s  of eval_s, the loop's waits for its batches
    """

    KIND: ClassVar[str] = "reader"
    t_s: TimeS
    loader: Id
    pass_no: Count
    what: Literal["end", "reset", "error", "left"] = "end"
    batches: Count = 0
    detail: str = ""
    eval_s: Optional[Seconds] = None
    eval_read_s: Optional[Seconds] = None


class WorkerCounts(NamedTuple):
    """One producer's batches in an interval (written as a 4-item array).

    Fields:
      batches    batches it made
      produce_s  time making them
      cpu_s      CPU time making the batches whose CPU time was measured
      cpu_n      those batches (a PyTorch loop's own batches: a random eighth of
                 them; absent in a profile from before 2026-11-29: all of them)
    """

    JSON_ARRAY = True
    batches: Count
    produce_s: Seconds
    cpu_s: Seconds
    cpu_n: Optional[Count] = None

    @property
    def cpu_batches(self) -> int:
        """The batches `cpu_s` covers."""
        return self.batches if self.cpu_n is None else self.cpu_n


class StepCost(NamedTuple):
    """Training steps that consumed batches of one size (written as a 2-item array).

    Fields:
      steps      steps
      compute_s  their compute time, summed
    """

    JSON_ARRAY = True
    steps: Count
    compute_s: Seconds


@dataclass(frozen=True)
class ReaderInterval:
    """One DataLoader pass's queue over [t0_s, t_s): what the producers pushed, what the
    loop popped and how full the queue was, counted (never one record per batch).

    Fields:
      t0_s         the interval's start
      t_s          its end
      loader       the loader's id
      pass_no      its pass
      speed_test   the pops were peeks (FLAGS_reader_queue_speed_test_mode)
      pushes       batches pushed
      produce_s    producers' time making them
      cpu_s        producers' CPU time, summed over the batches that reported it
      cpu_n        batches that reported it
      put_wait_s   producers' time blocked on a full queue
      nbytes       bytes pushed
      workers      {producer: its counts} (-1: the loader's thread)
      shapes       {feed variable: {"64x100": batches}}
      pops         batches the loop took
      peeks        batches it peeked at (speed test)
      empty_pops   pops that found the queue empty (the loop waited for a producer)
      wait_s       the loop's time waiting for batches
      wait_max_s   its longest wait
      copy_s       copying batches to the device on the loop's thread
      handover_s   of wait_s, taking batches from worker processes once they were made
                   (PyTorch's storage hand-over)
      wait_hist    {bucket: pops}: bucket k holds waits in [10^(k/10), 10^((k+1)/10)) s,
                   each less its hand-over (the wait for the batch to be made)
      pop_sizes    {queue size at the pop: pops}
      occupancy    {queue size: samples}: the queue's fill sampled every 10 ms
      swings       drains from full to empty
      cost         {elements of the batches a step consumed: its cost}
      steps        training steps that popped batches of this pass
      step_wait_s  the waits of those pops
      programs     {program id: steps}
    """

    KIND: ClassVar[str] = "reader"
    WHAT: ClassVar[str] = "interval"
    t0_s: TimeS
    t_s: TimeS
    loader: Id
    pass_no: Count
    speed_test: bool = False
    pushes: Count = 0
    produce_s: Seconds = 0.0
    cpu_s: Seconds = 0.0
    cpu_n: Count = 0
    put_wait_s: Seconds = 0.0
    nbytes: Bytes = 0
    workers: Dict[int, WorkerCounts] = EMPTY
    shapes: Dict[str, Dict[str, Count]] = EMPTY
    pops: Count = 0
    peeks: Count = 0
    empty_pops: Count = 0
    wait_s: Seconds = 0.0
    wait_max_s: Seconds = 0.0
    copy_s: Seconds = 0.0
    handover_s: Seconds = 0.0
    wait_hist: Dict[int, Count] = EMPTY
    pop_sizes: Dict[int, Count] = EMPTY
    occupancy: Dict[int, Count] = EMPTY
    swings: Count = 0
    cost: Dict[int, StepCost] = EMPTY
    steps: Count = 0
    step_wait_s: Seconds = 0.0
    programs: Dict[int, Count] = EMPTY
