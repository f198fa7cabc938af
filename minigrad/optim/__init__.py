"""Optimizers, gradient clipping and learning-rate schedules, following ``torch.optim``.

The math is pure and optax-style, one module per rule (``sgd``, ``adam``, ``adamw``), each
with ``init(params) -> state`` and ``update(grads, state, params, ...) -> (params, state)``
over sequences of arrays. ``SGD``, ``Adam`` and ``AdamW`` wrap them PyTorch-style around
``Parameter`` objects. Everything "per step" happens once per optimizer update, never per
micro-batch: the count for Adam's bias correction, weight decay, clipping and the schedule.
"""

from minigrad.optim import adam, adamw, registry, sgd
from minigrad.optim.adam import AdamState
from minigrad.optim.clip import clip_by_global_norm, clip_grad_norm_
from minigrad.optim.optimizer import SGD, Adam, AdamW, Optimizer
from minigrad.optim.registry import OPTIMIZERS, make
from minigrad.optim.scaler import GradScaler
from minigrad.optim.schedules import Scheduler, constant, cosine, linear_warmup, step_decay
from minigrad.optim.sgd import SGDState

__all__ = [
    "OPTIMIZERS",
    "SGD",
    "Adam",
    "AdamState",
    "AdamW",
    "GradScaler",
    "Optimizer",
    "SGDState",
    "Scheduler",
    "adam",
    "adamw",
    "clip_by_global_norm",
    "clip_grad_norm_",
    "constant",
    "cosine",
    "linear_warmup",
    "make",
    "registry",
    "sgd",
    "step_decay",
]
