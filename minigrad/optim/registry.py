"""Optimizers by name, for set-ups described in words (``analysis.check``, ``minigrad check``).

>>> import numpy as np
>>> from minigrad.engine import Parameter
>>> opt = make("momentum", [Parameter(np.zeros(2))], lr=0.1)
>>> type(opt).__name__, opt.hyperparams["momentum"]
('SGD', 0.9)
"""

from minigrad.engine import validate
from minigrad.optim.optimizer import SGD, Adam, AdamW

_MAKE = {
    "sgd": lambda params, lr, wd: SGD(params, lr, weight_decay=wd),
    "momentum": lambda params, lr, wd: SGD(params, lr, momentum=0.9, weight_decay=wd),
    "adam": lambda params, lr, wd: Adam(params, lr, weight_decay=wd),
    "adamw": lambda params, lr, wd: AdamW(params, lr, weight_decay=wd),
}
OPTIMIZERS = tuple(_MAKE)
"""The names ``make`` knows: ``"sgd"``, ``"momentum"`` (SGD with momentum 0.9), ``"adam"``
and ``"adamw"`` (decoupled weight decay); each with the default hyperparameters otherwise."""


def make(name, params, lr, weight_decay=0.0):
    """The optimizer ``name`` (one of ``OPTIMIZERS``) over ``params`` with learning rate ``lr``
    and ``weight_decay`` (L2 for SGD and Adam, decoupled for AdamW)."""
    return _MAKE[validate.choice("optimizer", name, OPTIMIZERS)](params, lr, weight_decay)
