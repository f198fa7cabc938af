"""The arguments of ``check_accumulation`` (``minigrad.interop.torch``), checked before
anything runs: each error names the argument, the value and what is allowed."""

import numbers

import torch

from minigrad.interop.torch_bound import count_items


def _require(name, value, ok, allowed):
    if not ok:
        raise TypeError(f"{name} must be {allowed}, got {value!r}"[:300])


def validate(model, loss_fn, x, y, train_step, optimizer, scheduler, scaler, max_norm, seed):
    """TypeError or ValueError on the first argument ``check_accumulation`` cannot take."""
    _require("model", model, isinstance(model, torch.nn.Module), "a torch.nn.Module")
    _require("loss_fn", loss_fn, callable(loss_fn), "a callable loss_fn(output, y), a mean")
    _require("train_step", train_step, callable(train_step),
             "a callable train_step(model, x, y[, optimizer[, scheduler]][, scaler])")
    for name, value in (("x", x), ("y", y)):
        _require(name, value, isinstance(value, torch.Tensor), "a torch.Tensor")
    if x.ndim == 0 or x.shape[0] < 1 or y.ndim == 0 or y.shape[0] != x.shape[0]:
        raise ValueError(f"x and y must hold the same number (>= 1) of samples along dim 0, "
                         f"got x of shape {tuple(x.shape)} and y of shape {tuple(y.shape)}")
    _require("optimizer", optimizer, optimizer is None
             or isinstance(optimizer, torch.optim.Optimizer), "None or a torch.optim.Optimizer")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model must have a parameter that requires grad, got a model whose "
                         "every parameter is frozen: there is no gradient to compare")
    if optimizer is not None:
        mine = {id(p) for p in model.parameters()}
        if any(id(p) not in mine for g in optimizer.param_groups for p in g["params"]):
            raise ValueError("optimizer must update parameters of model, got an optimizer "
                             "holding parameters that model does not have")
    _require("scheduler", scheduler, scheduler is None or (
        optimizer is not None and getattr(scheduler, "optimizer", None) is optimizer),
        "None, or an LR scheduler of the given optimizer")
    _require("scaler", scaler, scaler is None or (
        optimizer is not None and isinstance(scaler, torch.amp.GradScaler)),
        "None, or a torch.amp.GradScaler (with an optimizer given)")
    if max_norm is not None and not (isinstance(max_norm, numbers.Real) and max_norm > 0
                                     and not isinstance(max_norm, bool)):
        raise ValueError(f"max_norm must be None or a positive number, got {max_norm!r}")
    _require("seed", seed, isinstance(seed, int) and not isinstance(seed, bool), "an int")
    reduction = getattr(loss_fn, "reduction", "mean")
    if reduction != "mean":
        raise ValueError(f"loss_fn must be a mean over items (reduction='mean'), got "
                         f"reduction={reduction!r}: the full batch's gradient is the mean's")
    dtypes = {p.dtype for p in params}
    if x.is_floating_point() and x.dtype not in dtypes:
        raise TypeError(f"x must have the model's dtype {sorted(map(str, dtypes))}, got "
                        f"x of dtype {x.dtype}: the step would cast or fail")
    devices = {p.device for p in params} | {x.device, y.device}
    if len(devices) > 1:
        raise ValueError(f"model, x and y must be on one device, got {sorted(map(str, devices))}")
    if count_items(loss_fn, y) == 0:
        ignore = getattr(loss_fn, "ignore_index", -100)
        raise ValueError(f"y must hold at least one item, got every target equal to "
                         f"ignore_index={ignore}: the mean over items is undefined")
