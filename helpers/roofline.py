"""Rooflines: what real chips can do, where the ridge lies, and a plot that places kernels on it.

A kernel that does `flops` floating-point operations while moving `bytes` through device memory
has an *arithmetic intensity* of flops / bytes (FLOP per byte). No kernel runs faster than

    min(peak FLOP/s, intensity x memory bandwidth)

which, drawn against intensity on log-log axes, is a roof: a slope (memory-bound) that meets a
flat ceiling (compute-bound) at the *ridge point*, intensity = peak / bandwidth.

The chip figures below are NVIDIA's published numbers: peaks (dense, no sparsity), HBM size and
bandwidth from each GPU's datasheet; SM count, L2 size, register file and shared memory per SM from
NVIDIA's architecture whitepapers (Ampere GA100, Hopper GH100; the H200 is the same GH100 chip with
more and faster HBM, and more of its L2 enabled, as the device itself reports). On-chip sizes are as
NVIDIA writes them (KB = 1024 bytes). Measured ceilings (a large copy, cuBLAS's best matmul) come
from `helpers/recorded/bench/<gpu>.json` when `make bench` has recorded them.
"""

import dataclasses
import math

from helpers import bench


@dataclasses.dataclass(frozen=True)
class Chip:
    """A GPU's datasheet ceilings."""

    name: str
    bandwidth_tbs: float  # HBM bandwidth, TB/s (10**12 bytes per second)
    tflops: dict          # precision -> dense peak TFLOP/s
    l2_mb: float          # L2 cache, MB, one for the whole chip
    sms: int              # streaming multiprocessors
    register_kb: int      # register file per SM, KB
    shared_kb: int        # shared memory per SM, KB: the SM's L1/shared SRAM configured as shared memory
    shared_kb_per_program: int  # the most one program (thread block) may claim, KB: 1 KB less than the
                                # SM's on Hopper and Ampere (cudaDevAttrMaxSharedMemoryPerBlockOptin)
    hbm_gb: int           # device memory (HBM), GB
    warps_per_sm: int = 64  # the most warps resident on one SM at once (2048 threads, Ampere and Hopper)

    def ridge(self, precision="fp16"):
        """The intensity (FLOP/byte) above which a kernel can be compute-bound."""
        return self.tflops[precision] / self.bandwidth_tbs

    def attainable(self, intensity, precision="fp16"):
        """The roof: the most TFLOP/s a kernel of this intensity can reach."""
        return min(self.tflops[precision], intensity * self.bandwidth_tbs)


# "fp16"/"bf16": tensor cores, dense; "tf32": tensor cores on float32 inputs; "fp32": ordinary
# float32 units (what elementwise code and a float32 matmul without TF32 use).
CHIPS = {
    "H100 SXM": Chip("H100 SXM", 3.35, {"fp16": 989.4, "bf16": 989.4, "tf32": 494.7, "fp32": 66.9}, 50, 132,
                     register_kb=256, shared_kb=228, shared_kb_per_program=227, hbm_gb=80),
    # The H200 enables more of GH100's L2 than the H100: it reports 62,914,560 bytes (60 MB), read from
    # torch.cuda.get_device_properties on the course's H200 (2026-11-22), with 132 SMs, 65,536 registers
    # and 228 KB of shared memory per SM.
    "H200": Chip("H200 SXM", 4.8, {"fp16": 989.4, "bf16": 989.4, "tf32": 494.7, "fp32": 66.9}, 60, 132,
                 register_kb=256, shared_kb=228, shared_kb_per_program=227, hbm_gb=141),
    "A100 SXM": Chip("A100 SXM 80GB", 2.039, {"fp16": 312.0, "bf16": 312.0, "tf32": 156.0, "fp32": 19.5},
                     40, 108, register_kb=256, shared_kb=164, shared_kb_per_program=163, hbm_gb=80),
}

PRECISION_NAMES = {"fp16": "fp16 tensor cores", "bf16": "bf16 tensor cores",
                   "tf32": "tf32 tensor cores", "fp32": "fp32 (no tensor cores)"}


def chip_for(device_name):
    """The CHIPS entry that a device name (as torch reports it) belongs to, or None."""
    name = (device_name or "").upper()
    if "H200" in name:
        return CHIPS["H200"]
    if "H100" in name and "PCIE" not in name:
        return CHIPS["H100 SXM"]
    if "A100" in name and "PCIE" not in name:
        return CHIPS["A100 SXM"]
    return None


def chip_table(precisions=("fp16", "fp32")):
    """The datasheet figures and ridge points, as a text table."""
    head = f"{'chip':<15}{'HBM TB/s':>9}" + "".join(f"{p + ' TFLOP/s':>15}{'ridge':>7}" for p in precisions)
    lines = [head]
    for chip in CHIPS.values():
        row = f"{chip.name:<15}{chip.bandwidth_tbs:>9.2f}"
        row += "".join(f"{chip.tflops[p]:>15.1f}{chip.ridge(p):>7.0f}" for p in precisions)
        lines.append(row)
    lines.append("(ridge: FLOP per byte where the bandwidth slope meets the compute ceiling)")
    return "\n".join(lines)


def memory_table(chips=("H100 SXM", "H200")):
    """The memory levels of `chips` (CHIPS keys), nearest the arithmetic first, as a text table."""
    chips = [CHIPS[name] for name in chips]
    rows = [
        ("registers", "per SM", [f"{c.register_kb} KB" for c in chips]),
        ("", "all SMs", [f"{c.register_kb * c.sms / 1024:.0f} MB" for c in chips]),
        ("shared memory", "per SM, at most", [f"{c.shared_kb} KB" for c in chips]),
        ("", "per program, at most", [f"{c.shared_kb_per_program} KB" for c in chips]),
        ("", "all SMs", [f"{c.shared_kb * c.sms / 1024:.0f} MB" for c in chips]),
        ("L2 cache", "one, for all SMs", [f"{c.l2_mb:.0f} MB" for c in chips]),
        ("HBM", "device memory", [f"{c.hbm_gb} GB" for c in chips]),
        ("HBM bandwidth", "datasheet", [f"{1000 * c.bandwidth_tbs:.0f} GB/s" for c in chips]),
    ]
    width = max(len(where) for _, where, _ in rows) + 1
    lines = [f"{'level':<15}{'where':<{width}}" + "".join(f"{c.name:>12}" for c in chips),
             f"{'SMs':<15}{'':<{width}}" + "".join(f"{c.sms:>12}" for c in chips)]
    lines += [f"{level:<15}{where:<{width}}" + "".join(f"{v:>12}" for v in values)
              for level, where, values in rows]
    return "\n".join(lines)


def measured_ceilings():
    """{'device', 'copy_tbs', 'matmul_tflops'} recorded by `make bench`, or None before any recording.

    copy_tbs counts bytes read plus bytes written by a large device-to-device copy; matmul_tflops
    is the best fp16 figure any cuBLAS row of the recording reached (None if there is none).
    """
    data = bench.recorded()
    if not data:
        return None
    cublas = [r["tflops"] for r in data.get("results", [])
              if r["impl"].lower().startswith("cublas") and "fp16" in r["group"]]
    return {"device": data["device"], "copy_tbs": data["copy_gbps"] / 1000,
            "matmul_tflops": max(cublas) if cublas else None}


def recorded_row(group, impl, size=None):
    """The recorded row of one implementation at one size (default: the largest), or None."""
    rows, _ = bench.recorded_rows(group)
    rows = [r for r in rows if r["impl"] == impl and (size is None or r["size"] == size)]
    return max(rows, key=lambda r: r["size"]) if rows else None


@dataclasses.dataclass
class Point:
    """A kernel on the roofline: its work, its traffic and, if timed, its time."""

    name: str
    flops: float
    bytes: float
    ms: float | None = None  # None: not timed; the plot puts it on the roof, hollow

    @property
    def intensity(self):
        return self.flops / self.bytes

    @property
    def tflops(self):
        return None if self.ms is None else self.flops / self.ms / 1e9


def timed_point(name, flops, nbytes, fn, make_inputs, recorded):
    """A Point for `fn`: timed now on a GPU (on `make_inputs()`), else with the time `make bench`
    recorded for `recorded` = (group, impl, size); untimed if there is neither."""
    from helpers.device import ON_GPU

    if ON_GPU:
        inputs = make_inputs()
        return Point(name, flops, nbytes, ms=bench.measure(lambda: fn(*inputs)))
    row = recorded_row(*recorded)
    return Point(name, flops, nbytes, ms=row["ms"] if row else None)


def plot(points, chip="H100 SXM", precisions=("fp16", "fp32"), measured=True, title=None, save=None, ax=None):
    """Draw the roofline of `chip` and place `points` (a list of Point) on it; return the axes.

    A timed point sits at its achieved TFLOP/s; an untimed one sits, hollow, on the roof (the best
    it could do). With `measured`, the ceilings recorded by `make bench` are drawn dashed, when the
    recording was made on this chip. `save`: a file name, written under notebooks/figures/.
    """
    import matplotlib.pyplot as plt

    chip = CHIPS[chip] if isinstance(chip, str) else chip
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4.6))
    intensities = [p.intensity for p in points] or [1.0]
    lo = 10 ** math.floor(math.log10(min(intensities + [0.05]) / 2))
    hi = 10 ** math.ceil(math.log10(max(intensities + [chip.ridge(precisions[0]) * 4]) * 2))
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    styles = ["-", "-.", ":"]
    for precision, style in zip(precisions, styles):
        ys = [chip.attainable(x, precision) for x in xs]
        ax.plot(xs, ys, style, color="black", lw=1.4,
                label=f"{chip.name} datasheet, {PRECISION_NAMES[precision]}: "
                      f"ridge {chip.ridge(precision):.0f} FLOP/B")
    ceilings = measured_ceilings() if measured else None
    if ceilings and chip_for(ceilings["device"]) == chip:
        peak = ceilings["matmul_tflops"]
        roof = [(x, min(peak or math.inf, x * ceilings["copy_tbs"])) for x in xs]
        roof = [(x, y) for x, y in roof if y <= chip.tflops[precisions[0]]]
        label = f"measured on {ceilings['device']}: copy {ceilings['copy_tbs']:.2f} TB/s"
        label += f", cuBLAS fp16 {peak:.0f} TFLOP/s" if peak else " (no matmul recorded)"
        ax.plot([x for x, _ in roof], [y for _, y in roof], "--", color="tab:gray", lw=1.2, label=label)
    colours = plt.get_cmap("tab10" if len(points) <= 10 else "tab20")   # no two points share a colour
    for k, p in enumerate(points):
        colour = colours(k % colours.N)
        if p.ms is None:
            y = chip.attainable(p.intensity, precisions[0])
            ax.plot([p.intensity], [y], "o", mfc="none", mec=colour, ms=8, mew=1.6,
                    label=f"{p.name} (not timed: drawn on the roof)")
        else:
            ax.plot([p.intensity], [p.tflops], "o", color=colour, ms=8,
                    label=f"{p.name}: {p.tflops:.3g} TFLOP/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    top = max(chip.tflops.values())
    ax.set_ylim(lo * chip.bandwidth_tbs / 2, top * 2)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of device memory traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title or f"Roofline of the {chip.name}", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    if save:
        bench.FIGURES.mkdir(parents=True, exist_ok=True)
        ax.figure.tight_layout()
        ax.figure.savefig(bench.FIGURES / save, dpi=110, metadata={"Software": None})
    return ax
