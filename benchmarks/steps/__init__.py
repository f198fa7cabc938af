"""One training step per implementation, all with the same interface.

Each class is built from a ``common.Problem`` and has

* ``name`` and ``device`` ("cpu" or "gpu");
* ``step()``: one training step (forward, mean cross-entropy, backward, one Adam update),
  finished on the device when it returns (GPU work is synchronised);
* ``gradients()``: the gradients the last update used, NumPy arrays in minigrad's
  ``named_parameters`` order; ``parameters()``: the current parameters, likewise.

``available()`` lists the implementations this machine can run and, for the others, why
not. ``GemmFloor`` is not an implementation: it times the step's matrix products alone.
"""

import importlib.util

from steps.autograd_step import AutogradStep
from steps.gemm import GemmFloor
from steps.hand import HandWritten
from steps.minigrad_step import MinigradStep
from steps.torch_step import TorchStep

__all__ = ["GemmFloor", "available", "gpu_name"]


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
