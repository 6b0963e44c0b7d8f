"""Where kernels run: a CUDA GPU if there is one, else Triton's CPU interpreter.

The choice is made once, when `helpers` is first imported, and it must happen
before `triton` is imported: Triton reads TRITON_INTERPRET when a kernel is
decorated with `@triton.jit`. Force either side with an environment variable:

    COURSE_DEVICE=cpu   # the interpreter, even on a machine with a GPU
    COURSE_DEVICE=cuda  # a GPU, or a clear error if there is none
"""

import os
import sys

import torch

_choice = os.environ.get("COURSE_DEVICE", "auto").strip().lower()
if _choice not in ("auto", "cpu", "cuda", "gpu"):
    raise ValueError(f"COURSE_DEVICE must be 'cpu', 'cuda' or unset, not {_choice!r}")
if _choice in ("cuda", "gpu") and not torch.cuda.is_available():
    raise RuntimeError("COURSE_DEVICE=cuda, but PyTorch sees no CUDA GPU here. "
                       "Unset COURSE_DEVICE to run on the CPU through Triton's interpreter.")

ON_GPU = _choice != "cpu" and torch.cuda.is_available()
INTERPRET = not ON_GPU
DEVICE = torch.device("cuda" if ON_GPU else "cpu")

if INTERPRET:
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("Import `helpers` before `triton`: the interpreter has to be switched on "
                           "before any kernel is defined. Restart the kernel and put "
                           "`from helpers import ...` in the first cell.")
    os.environ["TRITON_INTERPRET"] = "1"
elif os.environ.get("TRITON_INTERPRET") == "1":
    raise RuntimeError("TRITON_INTERPRET=1 is set but the course chose the GPU: "
                       "set COURSE_DEVICE=cpu instead to use the interpreter.")


def pick(cpu, gpu):
    """A problem size (or any setting) for this device: small on the interpreter, full on a GPU."""
    return gpu if ON_GPU else cpu


def describe():
    """One line naming the device and the versions that matter."""
    import triton

    if ON_GPU:
        where = f"GPU: {torch.cuda.get_device_name()}"
    else:
        where = "CPU: Triton's interpreter (timings mean nothing here; bytes and FLOPs do)"
    return f"{where} | torch {torch.__version__} | triton {triton.__version__}"
