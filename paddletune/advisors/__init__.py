"""Advisors: pure rules turning a loaded profile into ranked, evidence-backed advice."""

# importing a rule module registers its rules (kept in docs/advice.md's order: base.rule)
from . import input  # noqa: F401  (#1)
from . import reader  # noqa: F401  (#2-#5)
from . import worker_memory  # noqa: F401  (#7)
from . import gpu  # noqa: F401  (#8, #13 on a GPU, #14, #24)
from . import fusion  # noqa: F401  (#9)
from . import parallel  # noqa: F401  (#10-#12)
from . import memory  # noqa: F401  (#13, #15-#17)
from . import cuda_allocator  # noqa: F401  (#13 for PyTorch on a GPU)
from . import sequences  # noqa: F401  (#18)
from . import optimizer  # noqa: F401  (#19)
from . import threads  # noqa: F401  (#21, and Reduce vs AllReduce)
from . import fetch  # noqa: F401  (#22)
from . import nan  # noqa: F401  (#23)
from . import scope  # noqa: F401  (#25)
from . import transfer  # noqa: F401  (#26)
from . import prefetch  # noqa: F401  (#27)
from . import gpu_model  # noqa: F401  (#28)
from . import handover  # noqa: F401  (#29)
from . import evaluation  # noqa: F401  (#30)
from . import pass_start  # noqa: F401  (#31)
from . import collector  # noqa: F401  (#32)
from .base import Advice, advise, checks, rank, rule, rules

__all__ = ["Advice", "advise", "checks", "rank", "rule", "rules"]
