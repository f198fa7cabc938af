"""One training step per implementation, all with the same interface.

Each class is built from a ``common.Problem`` and has

* ``name`` and ``device`` ("cpu" or "gpu");
* ``step()``: one training step (forward, mean cross-entropy, backward, one Adam update),
  finished on the device when it returns (GPU work is synchronised);
* ``gradients()``: the gradients the last update used, NumPy arrays in minigrad's
  ``named_parameters`` order; ``parameters()``: the current parameters, likewise.

The language model's steps also have ``loss_value()``, the loss of the last step.

``available()`` lists the implementations this machine can run and, for the others, why
not; ``for_shape`` those of them that have a step of a shape's model, and ``reference`` the
float64 step that float32 gradients are compared with. ``GemmFloor`` is not an
implementation: it times the step's matrix products alone.
"""

import importlib.util

from steps.autograd_step import AutogradStep
from steps.gemm import GemmFloor
from steps.hand import HandWritten
from steps.minigrad_step import MinigradLanguageStep, MinigradStep
from steps.torch_step import TorchLanguageStep, TorchStep

__all__ = ["GemmFloor", "available", "for_shape", "gpu_name", "reference"]

# The implementations with a step of the language model (nn.CharMLP), on the CPU.
LANGUAGE_MODEL = {"minigrad": MinigradLanguageStep, "torch": TorchLanguageStep}


def gpu_name():
    """The first CUDA GPU's name, or None (torch or CuPy, whichever is installed)."""
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    if importlib.util.find_spec("cupy") is not None:
        import cupy

        try:
            if cupy.cuda.runtime.getDeviceCount() > 0:
                return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        except cupy.cuda.runtime.CUDARuntimeError:
            return None
    return None


def available():
    """``(makers, skipped)``: name -> (device, factory of a step from a problem) for each
    implementation that runs here, and name -> the reason for each one that cannot."""
    makers = {"minigrad": ("cpu", MinigradStep), "numpy": ("cpu", HandWritten),
              "autograd": ("cpu", AutogradStep), "torch": ("cpu", TorchStep)}
    skipped = {}
    gpu = gpu_name()
    if importlib.util.find_spec("jax") is None:
        skipped["jax"] = "JAX is not installed"
    else:
        from steps.jax_step import JaxStep

        makers["jax"] = (JaxStep.device, JaxStep)
    if importlib.util.find_spec("cupy") is None:
        for name in ("minigrad-cupy", "cupy"):
            skipped[name] = "CuPy is not installed"
    elif gpu is None:
        for name in ("minigrad-cupy", "cupy"):
            skipped[name] = "CuPy is installed but sees no GPU"
    else:
        makers["minigrad-cupy"] = ("gpu", MinigradStep.on_cupy)
        makers["cupy"] = ("gpu", HandWritten.on_cupy)
    import torch

    if torch.cuda.is_available():
        makers["torch-cuda"] = ("gpu", TorchStep.on_cuda)
    else:
        skipped["torch-cuda"] = f"torch {torch.__version__} sees no CUDA GPU"
    return makers, skipped


def for_shape(shape, makers):
    """The implementations of ``makers`` that run ``shape``: for an MLP, all of them (at a
    GPU-only shape, those on the GPU); for the language model, ``LANGUAGE_MODEL``'s."""
    if shape.kind == "charlm":
        return {name: ("cpu", LANGUAGE_MODEL[name]) for name in makers if name in LANGUAGE_MODEL}
    return {name: m for name, m in makers.items() if not shape.gpu_only or m[0] == "gpu"}


def reference(problem):
    """A step of ``problem`` (float64) by other code than the engine's where there is one:
    the hand-written step for an MLP, minigrad's own for the language model."""
    return MinigradLanguageStep(problem) if problem.shape.kind == "charlm" else \
        HandWritten(problem)
