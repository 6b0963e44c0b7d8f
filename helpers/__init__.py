"""The course harness: device selection, grading, traffic counting, timing, cards.

Import it before `triton`: it decides, once, whether kernels run on a CUDA GPU
or through Triton's CPU interpreter.
"""

from helpers.device import DEVICE, INTERPRET, ON_GPU, describe, pick  # noqa: I001  (first: sets TRITON_INTERPRET)
from helpers import interpreter

interpreter.install()

from helpers.check import CheckFailed, KernelTimeout, NotDone, check, passed  # noqa: E402
from helpers.worker import note_broken_context  # noqa: E402

note_broken_context()

__all__ = ["DEVICE", "INTERPRET", "ON_GPU", "describe", "pick", "check", "passed",
           "CheckFailed", "NotDone", "KernelTimeout"]
