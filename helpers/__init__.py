"""The course harness: device selection, grading, traffic counting, timing, cards.

Import it before `triton`: it decides, once, whether kernels run on a CUDA GPU
or through Triton's CPU interpreter.
"""

from helpers.device import DEVICE, INTERPRET, ON_GPU, describe, pick  # noqa: I001  (first: sets TRITON_INTERPRET)
from helpers import interpreter

import logging  # noqa: E402
import warnings  # noqa: E402

# What PyTorch and Triton say on their own that a learner can do nothing about: inductor's advice to
# turn on TF32 (lesson 07 compiles float32 matmuls as they are), a note from autograd's thread that it
# set the CUDA context itself, dynamo's advice on Tensor.item() (lesson 07 prints the graph breaks it
# finds), and Triton 3.9's notice, at a kernel's first compile, that its default for fused multiply-adds
# will change in 3.10 (the course keeps whatever default its Triton has).
warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores for float32 matrix multiplication")
warnings.filterwarnings("ignore", message="Attempting to run cuBLAS, but there was no current CUDA context")
warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION is unset")
logging.getLogger("torch._dynamo.variables.tensor").setLevel(logging.ERROR)
# And the whole PTX of a kernel, which Triton prints when ptxas fails (an interrupted cell stops it).
from helpers.compiled import shorten_ptxas_dumps  # noqa: E402

shorten_ptxas_dumps()

interpreter.install()

from helpers.check import CheckFailed, KernelTimeout, NotDone, check, passed  # noqa: E402
from helpers.worker import note_broken_context  # noqa: E402

note_broken_context()

__all__ = ["DEVICE", "INTERPRET", "ON_GPU", "describe", "pick", "check", "passed",
           "CheckFailed", "NotDone", "KernelTimeout"]
