"""The step timer of an eager framework: a training step is one step of the job's optimizer
(the first optimizer seen stepping, or one that took the steps over: `owns`; a second one, a
GAN's, steps inside the same step), timed from the previous step's end. What the loop did in
between is split by what the source saw: waiting for the DataLoader (read), host-to-device
copies (feed), host syncs (fetch), and the rest (compute: forward, backward, the update and
the loop's own Python).

A DataLoader pass that begins and ends between two training steps (no step ended while it
ran, and it was not inside an optimizer's step(): an evaluation or validation loop over its
own DataLoader, at an epoch's end or every N steps) is not part of training. It begins as
the loop asks for it (its iter(), which may start or wake its workers), and its time, with
the waits, copies and syncs in it, is left out of the step it fell in (`pass_ended` says how
much; StepEnd.eval_s carries it), so the steps' breakdown is the training's own.

An evaluation loop that leaves its pass before the end (a `break` after N batches, a kept
iterator read N times) is seen where the framework says whether gradients are on
(`grad_on`): a run of at least MIN_LEFT_BATCHES batches of one loader (or one batch of an
iter() of its own: `next(iter(val_loader))`), all asked for with gradients off and no
training step ending meanwhile, that the loop leaves for another loader (its iter() or a
batch) is an evaluation pass left there (`left`, the loader tracker's callback, ends it);
what it took is left out as above. Training never reads with gradients off, while
`torch.no_grad()` or `inference_mode()` around the evaluation loop is the idiom; a loader
read once a step without gradients beside the training one (a teacher's batch) makes runs of
one batch. An evaluation that turns gradients off only around its forward reads its batches
with gradients on; the model's mode says it then (`eval_mode`: the script's model.eval(),
the last Module.train/eval call, not undone): its batches count as without gradients, but
never those of the loader the latest step trained on (a backbone frozen in eval mode beside
a training head)."""

import time
from typing import Callable, Dict, NamedTuple, Optional

from ...profile.schema import made_in_c
from .bus import Bus, StepEnd

_perf = time.perf_counter
MIN_LEFT_BATCHES = 2  # a run of batches left for another loader: an evaluation's, from these
_step_end = made_in_c(StepEnd)


class EvalPass(NamedTuple):
    """A DataLoader pass that ran between two training steps, as it was left out of them."""

    eval_s: float  # its time left out (less any such pass inside it, left out already)
    read_s: float  # the loop's waits for its batches


class _PassMark(NamedTuple):
    """Where the step's running totals stood as a DataLoader pass began."""

    t: float
    steps: int
    read_s: float
    feed_s: float
    fetch_s: float
    feed_bytes: int
    fetch_bytes: int
    eval_s: float
    samples: int
    samples_of: Optional[int]
    batch_size: Optional[int]


class ModelMode:
    """The mode the script last put a model in: `training` False after its eval() (or
    train(False)), True again after train(). The sources' hooks on the framework's module
    class set it; StepTimer.eval_mode reads it."""

    def __init__(self):
        self.training = True

    def eval_mode(self) -> bool:
        return not self.training


class StepTimer:
    def __init__(self, bus: Bus, grad_on: Optional[Callable[[], bool]] = None):
        self.bus = bus
        self.grad_on = grad_on  # whether the framework computes gradients now (None: unknown)
        self.eval_mode: Optional[Callable[[], bool]] = None  # the model in eval mode now
        self.left: Optional[Callable[[int, float, EvalPass], None]] = None  # a pass left
        self.reset()

    def reset(self, t_start: Optional[float] = None):
        self.steps = 0
        self._t_prev_end = None  # the previous step's end
        self.last_begin = None  # the latest step's begin (after the passes left out of it)
        self._t_first = None  # the first DataLoader request before the first step
        self._t_start = t_start  # the job's start (a first step without any read)
        self._read_s = self._feed_s = self._fetch_s = 0.0
        self._feed_bytes = self._fetch_bytes = 0
        self._paused_s = 0.0
        self._eval_s = 0.0  # passes between two steps, left out of this one
        self._samples = 0  # the samples of the step's batches (of the first loader read)
        self._samples_of = None  # that loader
        self._trained_of = None  # the loader whose batches the latest step counted
        self._batch_size = None
        self._owner = None  # the optimizer whose steps are the training steps (its id)
        self._other = None  # another optimizer that stepped since the owner's last step
        self.stepping = False  # inside an optimizer's step() (a closure reading batches)
        self._passes: Dict[int, _PassMark] = {}  # loader id -> its running pass's start
        self._elsewhere = 0  # training steps timed elsewhere (Paddle's static graph runs)
        # the loop's latest run of batches from one loader (a left evaluation pass's)
        self._run_of: Optional[int] = None  # its loader
        self._run_mark: Optional[_PassMark] = None  # where it began, read without gradients
        self._run_batches = 0  # its batches, all without gradients
        self._run_asked = False  # it began with the loader's iter()

    # --- what the loop did since the last step --------------------------------------------
    def read(self, t_request: float, wait_s: float, batch_size: Optional[int],
             loader_id: Optional[int] = None):
        """A DataLoader batch was asked for at `t_request` and came `wait_s` later. The
        step's batch size and samples are those of the loader the latest step trained on
        where the step reads it, else of the first loader it read (several batches a step:
        gradient accumulation; a second loader's, a GAN's noise, not; nor those of a
        validation run the loop read first, with gradients on, that nothing left out).
        A batch of another loader than the latest run's begins a run (`_turn`)."""
        if loader_id != self._run_of:
            self._turn(loader_id, t_request)
        if self._run_mark is not None:  # (a run without gradients so far: still?)
            if self._no_training(loader_id):
                self._run_batches += 1
            else:
                self._run_mark = None
        if self._t_prev_end is None and self._t_first is None:
            self._t_first = t_request
        self._read_s += wait_s
        if batch_size is not None:
            if self._samples_of is None:
                self._samples_of = loader_id
            elif loader_id == self._trained_of and loader_id != self._samples_of:
                self._samples_of, self._samples = loader_id, 0  # (the training loader's)
            if loader_id == self._samples_of:
                self._batch_size = batch_size
                self._samples += batch_size

    def feed(self, seconds: float, nbytes: int = 0):
        self._feed_s += seconds
        self._feed_bytes += nbytes

    def fetch(self, seconds: float, nbytes: int = 0):
        self._fetch_s += seconds
        self._fetch_bytes += nbytes

    def pause(self, seconds: float):
        """The source's own work between two steps (an --ops window's reading) took `seconds`
        since the last step ended: left out of the next step, which starts after it
        (StepEnd.paused_s says by how much)."""
        if self._t_prev_end is not None:
            self._t_prev_end += seconds
            self._paused_s += seconds

    # --- DataLoader passes between two steps ----------------------------------------------
    def pass_began(self, loader_id: int, t: float, asked: bool = False):
        """A pass of the loader began at `t`: the loop asked for it (`asked`: iter(), which
        may start or wake its workers; the latest ask counts), or asked for its first batch
        (counted where no ask was seen). It counts until the pass ends (`pass_ended`) or
        the loop leaves it (a run of its batches)."""
        if asked:
            self._turn(loader_id, t, asked=True)
            self._passes[loader_id] = self._run_mark or self._mark(t)
        elif loader_id not in self._passes:
            self._passes[loader_id] = self._mark(t)

    def _mark(self, t: float) -> _PassMark:
        return _PassMark(t, self.steps + self._elsewhere, self._read_s, self._feed_s,
                         self._fetch_s, self._feed_bytes, self._fetch_bytes, self._eval_s,
                         self._samples, self._samples_of, self._batch_size)

    def _turn(self, loader_id: Optional[int], t: float, asked: bool = False):
        """The loop turns to `loader_id` at `t` (its iter(): `asked`, or a batch of a loader
        other than the latest run's): the latest run ends, left between two steps where it
        qualifies (`left` is told: MIN_LEFT_BATCHES, or one from an iter() of its own, a
        `next(iter(val_loader))`), and the loader's run begins, marked where gradients are
        off."""
        mark, left_of = self._run_mark, self._run_of
        if (mark is not None and mark.steps == self.steps + self._elsewhere
                and (self._run_batches >= MIN_LEFT_BATCHES
                     or self._run_asked and self._run_batches)):
            self._passes.pop(left_of, None)
            taken = self._take_out(mark, t)
            if self.left is not None:
                self.left(left_of, t, taken)
        self._run_of, self._run_batches, self._run_asked = loader_id, 0, asked
        self._run_mark = (self._mark(t) if self.grad_on is not None and loader_id is not None
                          and self._no_training(loader_id) else None)

    def _no_training(self, loader_id: Optional[int]) -> bool:
        """Whether a batch of `loader_id` asked for now is no training step's: gradients
        off, or the model in eval mode and the loader not the one the latest step trained
        on."""
        if not self.grad_on():
            return True
        eval_mode = self.eval_mode
        return eval_mode is not None and loader_id != self._trained_of and eval_mode()

    def pass_ended(self, loader_id: int, t: float,
                   ran_out: bool = True) -> Optional[EvalPass]:
        """The loader's pass stopped at `t`: it ran out (`ran_out`), or failed or was
        replaced (then nothing is left out). A pass that ran out with no training step
        ending since it began ran between two steps: what it took is left out of the step it
        fell in, and said (None otherwise); not one that ran out inside an optimizer's
        step() (`stepping`: its closure's). A pass inside it that was left out already is
        not again."""
        mark = self._passes.pop(loader_id, None)
        if loader_id == self._run_of:  # (its run ends with it)
            self._run_of = self._run_mark = None
        if (mark is None or mark.steps != self.steps + self._elsewhere or not ran_out
                or self.stepping):  # (a pass inside step(): L-BFGS's closure, training)
            return None
        return self._take_out(mark, t)

    def _take_out(self, mark: _PassMark, t: float) -> EvalPass:
        """What the loop did from `mark` to `t` is left out of the step: the totals go back
        to the mark's, and the time is added to the step's eval_s."""
        eval_s = max(0.0, t - mark.t - (self._eval_s - mark.eval_s))
        read_s = max(0.0, self._read_s - mark.read_s)
        # (what the pass added since its start is taken back: the totals go back to theirs)
        self._read_s = min(self._read_s, mark.read_s)
        self._feed_s = min(self._feed_s, mark.feed_s)
        self._fetch_s = min(self._fetch_s, mark.fetch_s)
        self._feed_bytes = min(self._feed_bytes, mark.feed_bytes)
        self._fetch_bytes = min(self._fetch_bytes, mark.fetch_bytes)
        # (its batches are not the step's: the step's batch size and samples as before it)
        self._samples, self._samples_of = mark.samples, mark.samples_of
        self._batch_size = mark.batch_size
        self._eval_s += eval_s
        return EvalPass(eval_s, read_s)

    def stepped_elsewhere(self):
        """A training step was timed outside this timer (a static-graph program's run): a
        DataLoader pass it fell in is training's."""
        self._elsewhere += 1

    @property
    def last_end(self) -> Optional[float]:
        """When the latest step ended, as the next one starts (perf_counter; None: none
        yet)."""
        return self._t_prev_end

    @property
    def batch_size(self) -> Optional[int]:
        """The latest batch's size (None: none seen)."""
        return self._batch_size

    # --- the step's end -------------------------------------------------------------------
    def owns(self, optimizer) -> bool:
        """Whether `optimizer`'s step ends a training step. The first optimizer to step owns
        the steps. Another that steps twice with no step of the owner between takes them
        over (a new optimizer each fold or stage; a GAN's critic stepping k times to its
        generator's once, whichever stepped first); one stepping once between two of the
        owner's (a GAN's other optimizer) steps inside the owner's step."""
        key = id(optimizer)
        if key == self._owner or self._owner is None:
            self._owner, self._other = key, None
            return True
        if key == self._other:  # (its second step since the owner's last)
            self._owner, self._other = key, None
            return True
        self._other = key
        return False

    def step_done(self, place: str):
        """The step ended now: emit its record (when someone listens) and start the next."""
        t_end = _perf()
        t_begin = self._t_prev_end
        if t_begin is None:
            t_begin = self._t_first if self._t_first is not None else (
                self._t_start if self._t_start is not None else t_end)
        eval_s = self._eval_s
        if eval_s:  # (passes between the steps: left out, the step begins after them)
            t_begin = t_begin + eval_s if t_begin + eval_s < t_end else t_end
        record = None
        if self.bus.subs.get("step_end"):  # (_record, inlined: this runs every step)
            wall = t_end - t_begin
            if wall < 0.0:
                wall = 0.0
            read_s, feed_s, fetch_s = self._read_s, self._feed_s, self._fetch_s
            parts = read_s + feed_s + fetch_s
            if parts > wall > 0:  # (clock jitter: never above wall)
                scale = wall / parts
                read_s, feed_s, fetch_s = read_s * scale, feed_s * scale, fetch_s * scale
            record = _step_end((self.steps, t_begin, t_end, read_s, feed_s, fetch_s,
                                wall - parts if wall > parts else 0.0, self._batch_size, place,
                                self._feed_bytes, self._fetch_bytes, 0, 0, None, (), (), False,
                                self._paused_s, None, None, eval_s, self._samples or None))
        self.steps += 1
        self._t_prev_end, self.last_begin = t_end, t_begin
        self._read_s = self._feed_s = self._fetch_s = 0.0
        self._feed_bytes = self._fetch_bytes = 0
        self._paused_s = self._eval_s = 0.0
        self._trained_of = self._samples_of
        self._samples, self._samples_of = 0, None
        if record is not None:  # last: a subscriber may end the job here (the step limit)
            self.bus.emit("step_end", record)


def first_dim(batch, shape_of: Callable) -> Optional[int]:
    """The batch size of `batch` (a tensor, or lists, tuples and dicts of them), from the
    shapes of its first tensors (`batch_dim`); None when none is found."""
    return batch_dim(tuple(shape_of(item) for item in iter_tensors(batch, shape_of, limit=8)))


def batch_dim(shapes: tuple) -> Optional[int]:
    """The batch size from a batch's tensor shapes: the first dimension most of them share
    (a time-major sequence [T, B] beside its lengths and labels [B]: B); on a tie, the
    first tensor's. None where no tensor has a dimension."""
    firsts = [shape[0] for shape in shapes if shape]
    if not firsts:
        return None
    first = firsts[0]
    if firsts.count(first) == len(firsts):  # (the usual batch: they agree)
        return int(first)
    return int(max(firsts, key=firsts.count))  # (the earliest of the most shared)


def iter_tensors(batch, shape_of: Callable, limit: int = 64):
    """The tensors of a batch (nested lists, tuples and dicts), at most `limit` of them."""
    if isinstance(batch, (list, tuple)) and len(batch) <= limit:
        for item in batch:
            if shape_of(item) is None:
                break
        else:
            return iter(batch)  # the usual (inputs, labels): no walk
    return _walk_tensors(batch, shape_of, limit)


def _walk_tensors(batch, shape_of: Callable, limit: int):
    stack, found = [batch], 0
    while stack and found < limit:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif shape_of(item) is not None:
            found += 1
            yield item
