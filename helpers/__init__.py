"""The course harness: device selection, grading, traffic counting, timing, cards.

Import it before `triton`: it decides, once, whether kernels run on a CUDA GPU
or through Triton's CPU interpreter.
"""

from helpers.device import DEVICE, INTERPRET, ON_GPU, describe, pick  # noqa: I001  (first: sets TRITON_INTERPRET)
from helpers import interpreter

import logging  # noqa: E402
import warnings  # noqa: E402

# What PyTorch says on its own that a learner can do nothing about: inductor's advice to turn on TF32
# (lesson 07 compiles float32 matmuls as they are), a note from autograd's thread that it set the CUDA
# context itself, and dynamo's advice on Tensor.item() (lesson 07 prints the graph breaks it finds).
warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores for float32 matrix multiplication")
warnings.filterwarnings("ignore", message="Attempting to run cuBLAS, but there was no current CUDA context")
logging.getLogger("torch._dynamo.variables.tensor").setLevel(logging.ERROR)

interpreter.install()

from helpers.check import CheckFailed, KernelTimeout, NotDone, check, passed  # noqa: E402
from helpers.worker import note_broken_context  # noqa: E402

note_broken_context()

__all__ = ["DEVICE", "INTERPRET", "ON_GPU", "describe", "pick", "check", "passed",
           "CheckFailed", "NotDone", "KernelTimeout"]
