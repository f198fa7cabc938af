"""The speed targets, float32, and their verdicts from one run's results
(``results[shape][dtype][name]["median_ms"]``, as ``run.py`` records them)."""

from typing import NamedTuple


class Target(NamedTuple):
    """A speed target, float32: met when time(subject) / time(reference) <= limit (< limit
    when strict); ``subject`` and ``reference`` are (shape, implementation)."""

    label: str
    subject: tuple
    reference: tuple
    limit: float
    strict: bool
    issue: int


# Issue 34 set the CPU and GPU limits against the hand-written step and PyTorch CUDA; the
# others are issue 10's, which issue 34 left as they were; issue 36 the language model's.
TARGETS = [
    Target("CPU LARGE: minigrad <= 1.0x hand-written NumPy", ("large", "minigrad"),
           ("large", "numpy"), 1.0, False, 34),
    Target("CPU LARGE: minigrad <= 1.0x PyTorch eager", ("large", "minigrad"),
           ("large", "torch"), 1.0, False, 10),
    Target("CPU SMALL: minigrad <= 1.3x hand-written NumPy", ("small", "minigrad"),
           ("small", "numpy"), 1.3, False, 34),
    Target("CPU SMALL: minigrad faster than PyTorch eager", ("small", "minigrad"),
           ("small", "torch"), 1.0, True, 10),
    Target("CPU SMALL: minigrad faster than HIPS autograd", ("small", "minigrad"),
           ("small", "autograd"), 1.0, True, 10),
    Target("ACCUM 8x512 <= 1.10x one LARGE step (minigrad)", ("accum", "minigrad"),
           ("large", "minigrad"), 1.10, False, 10),
    Target("CPU LM: minigrad <= 1.5x PyTorch eager", ("lm", "minigrad"), ("lm", "torch"), 1.5,
           False, 36),
    Target("GPU LARGE: minigrad on CuPy <= 1.5x PyTorch CUDA eager", ("large", "minigrad-cupy"),
           ("large", "torch-cuda"), 1.5, False, 34),
    Target("GPU ACCUM: minigrad on CuPy <= 1.5x PyTorch CUDA eager", ("accum", "minigrad-cupy"),
           ("accum", "torch-cuda"), 1.5, False, 34),
    Target("GPU XL: minigrad on CuPy <= 1.05x PyTorch CUDA eager", ("xl", "minigrad-cupy"),
           ("xl", "torch-cuda"), 1.05, False, 34),
]
NOT_JUDGED = "not judged: earlier update"


def judge(results, judged=True):
    """Each float32 target with its measured ratio and verdict: those of the shapes this
    record measured, GPU targets only when a GPU implementation ran. ``judged=False`` (a
    record of the earlier update): the ratios without a verdict."""
    gpu_ran = any(t["device"] == "gpu" for by_dtype in results.values()
                  for timed in by_dtype.values() for t in timed.values())
    out = []
    for target in TARGETS:
        if target.label.startswith("GPU") and not gpu_ran or target.subject[0] not in results:
            continue
        (s1, n1), (s2, n2) = target.subject, target.reference
        a = results.get(s1, {}).get("float32", {}).get(n1)
        b = results.get(s2, {}).get("float32", {}).get(n2)
        found = {"target": target.label, "issue": target.issue}
        if a is None or b is None:
            out.append(found | {"ratio": None, "verdict": "not measured"})
            continue
        ratio = a["median_ms"] / b["median_ms"]
        met = ratio < target.limit if target.strict else ratio <= target.limit
        verdict = NOT_JUDGED if not judged else "met" if met else "NOT met"
        out.append(found | {"ratio": ratio, "limit": target.limit, "verdict": verdict})
    return out
