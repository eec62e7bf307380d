"""The live view's data side: follow a profile stream as it is written, keep a rolling window
of its records, and compute the dashboard's figures from it (no rich here: the panels are
drawn by paddletune/render/dashboard.py).

  follow.Follower   incremental reads of the complete lines appended to a profile file,
                    as typed records (paddletune.profile.records)
  window.LiveModel  the records of the last `window_s` seconds (a long job's StepWindows
                    and SampleWindows included), all-time counters, and `state()`: every
                    panel's figures (figures.py) as a state.LiveState
  tally             the model's running sums (steps, windows, ops) and history
  loop.LiveLoop     a daemon thread: poll, update, draw at a fixed rate; rolling advice every
                    few seconds; its own CPU time measured (the drawing's cost)
  runner.run_live   `paddletune profile --live`: the session with the dashboard following
                    the profile it writes, the script's output sent to a log file
"""

from .follow import Follower
from .loop import LiveLoop
from .state import LiveState
from .window import LiveModel

__all__ = ["Follower", "LiveLoop", "LiveModel", "LiveState"]
