"""PyTorch-style stateful optimizers around the pure ``init``/``update`` rules.

>>> from minigrad.engine.tensor import Parameter
>>> w = Parameter([1.0])
>>> opt = SGD([w], lr=0.25, momentum=0.5)
>>> (w * 4.0).sum().backward()
>>> opt.step()
>>> w.data, opt.step_count
(array([0.]), 1)
"""

from fractions import Fraction

from minigrad.engine import backend
from minigrad.engine.tensor import Tensor
from minigrad.optim import _checks, adam, adamw, in_place, sgd


class Optimizer:
    """Holds ``params``, ``lr``, the other ``hyperparams`` and one state record per parameter.

    ``step()`` reads ``p.grad`` of every parameter and updates ``p.data`` and the state in
    place, as ``torch.optim`` does. As there the state is per parameter: a parameter whose
    ``grad`` is None is skipped and its state (its ``count`` too) is left as it was.
    Everything that can fail is checked and computed before anything is written (``plan``),
    then the writes happen with Ctrl-C held until they end (``minigrad.optim.in_place``), so
    an error or an interrupt changes nothing, or all of it.
    ``lr`` may be set between updates (that is what a ``Scheduler`` does).
    ``step_count`` is the number of completed ``step()`` calls.
    """

    def __init__(self, params, rule, lr, **hyperparams):
        self.params = _parameter_list(params)
        self._rule = rule
        checked = rule.check_hyperparams(lr=lr, **hyperparams)
        self._lr = checked.pop("lr")
        self.hyperparams = checked
        self._exact_hyperparams()  # refuses Adam and float hyperparameters in exact mode
        self.state = [rule.init([p.data]) for p in self.params]
        self.step_count = 0
        self.workspace = in_place.Workspace()

    @property
    def lr(self):
        return self._lr

    @lr.setter
    def lr(self, value):
        self._lr = self.check_lr(value)

    def check_lr(self, value):
        """``value`` checked as a learning rate for this optimizer: what ``lr = value`` stores.

        A scheduler calls this before it changes anything.
        """
        lr = _checks.real("lr", value)
        return _exact_number("lr", lr) if self._is_exact() else float(lr)

    def step(self):
        """One update of every parameter that has a gradient: ``plan``, then ``commit``."""
        in_place.commit(self, self.plan())

    def plan(self, scale=1, coef=None):
        """Everything one update needs, checked and computed; nothing written
        (``minigrad.optim.in_place``). The gradients are the parameters' ``.grad``, seen
        divided by ``scale`` and multiplied by ``coef`` (a 0-d array, cast to each gradient's
        dtype, or None): an accumulator's item count and clipping coefficient."""
        active = [i for i, p in enumerate(self.params) if p.grad is not None]
        grads = [self.params[i].grad for i in active]
        datas = [self.params[i].data for i in active]
        _checks.check_like(grads, datas, "params[{}].grad", active)
        lr, hyperparams = self._exact_hyperparams()
        # The gradients were checked above and the hyperparameters when they were set, so the
        # rule's unchecked ``apply`` and ``write`` (``update`` would repeat both checks).
        return in_place.plan(self, self._rule, active, grads, lr, hyperparams, scale=scale,
                             coef=coef)

    def _is_exact(self):
        return any(backend.is_exact(p.data) for p in self.params)

    def _exact_hyperparams(self):
        """``(lr, hyperparams)`` as this step uses them.

        In exact mode (``Fraction`` parameters) every number must be exact: a float that is
        an integer (the defaults 0.0 and 1.0) becomes a ``Fraction``; any other float raises
        ``TypeError``, since ``Fraction * float`` would silently turn the parameters into
        floats. Adam and AdamW need square roots, so they refuse exact parameters.
        """
        if not self._is_exact():
            # A Fraction next to float parameters would make object arrays: use its float.
            if type(self._lr) is not float:
                self._lr = float(self._lr)
            if any(map(_has_fraction, self.hyperparams.values())):
                self.hyperparams = {k: _inexact(v) for k, v in self.hyperparams.items()}
            return self._lr, self.hyperparams
        if self._rule is not sgd:
            raise TypeError(f"{type(self).__name__} needs square roots, which are not exact: "
                            "exact (Fraction) parameters support optim.SGD only")
        exact = {name: _exact_number(name, value) for name, value in self.hyperparams.items()}
        self._lr, self.hyperparams = _exact_number("lr", self._lr), exact
        return self._lr, exact

    def zero_grad(self):
        """Forget every gradient: ``p.grad = None``."""
        for p in self.params:
            p.grad = None

    def state_dict(self):
        """A snapshot ``{"lr", "hyperparams", "step_count", "count": [...], "mu": [...], ...}``.

        Each state field is a list with one entry per parameter (None where torch would have
        no buffer yet). The arrays are copies: updates write the state in place, and a
        snapshot must not move with them.
        """
        snapshot = {"lr": self.lr, "hyperparams": dict(self.hyperparams),
                    "step_count": self.step_count}
        for name in self._fresh()._fields:
            values = [getattr(s, name) for s in self.state]
            snapshot[name] = values if name == "count" else [_copy(_single(v)) for v in values]
        return snapshot

    def load_state_dict(self, state_dict):
        """Restore a ``state_dict()``; everything is checked first, so a mismatch changes nothing.

        Arrays must have their parameter's shape; they are moved to its namespace and device
        and cast to its dtype.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict must be a dict (from Optimizer.state_dict()), got "
                            f"{type(state_dict).__name__}")
        fresh = self._fresh()
        missing = {"lr", "hyperparams", "step_count", *fresh._fields} - set(state_dict)
        if missing:
            raise ValueError(f"state_dict is missing {sorted(missing)}")
        if not isinstance(state_dict["hyperparams"], dict):
            raise TypeError(f"state_dict['hyperparams'] must be a dict, got "
                            f"{type(state_dict['hyperparams']).__name__}")
        if set(state_dict["hyperparams"]) != set(self.hyperparams):
            raise ValueError(f"state_dict has hyperparameters {sorted(state_dict['hyperparams'])}"
                             f", this optimizer has {sorted(self.hyperparams)}")
        checked = self._rule.check_hyperparams(lr=state_dict["lr"], **state_dict["hyperparams"])
        step_count = _checks.integer("step_count", state_dict["step_count"], low=0)
        fields = {name: self._loaded_field(state_dict, name, fresh) for name in fresh._fields}
        lr = checked.pop("lr")
        if self._is_exact():
            lr = _exact_number("lr", lr)
            checked = {name: _exact_number(name, value) for name, value in checked.items()}
        state = [fresh._replace(**{name: values[i] for name, values in fields.items()})
                 for i in range(len(self.params))]
        # One statement, after everything is built: an interrupt lands before or after it.
        self._lr, self.hyperparams, self.step_count, self.state = lr, checked, step_count, state

    def _fresh(self):
        """An empty state record: its type, field names, and which fields start as None."""
        return self._rule.init([])

    def _loaded_field(self, state_dict, name, fresh):
        """Field ``name`` of ``state_dict`` checked and in record form (per parameter)."""
        values = state_dict[name]
        if not isinstance(values, (list, tuple)):
            raise TypeError(f"state_dict[{name!r}] must be a list with one entry per "
                            f"parameter, got {type(values).__name__}")
        values = list(values)
        if len(values) != len(self.params):
            raise ValueError(f"state_dict[{name!r}] has {len(values)} entries "
                             f"for {len(self.params)} parameters")
        if name == "count":
            return [_checks.integer(f"state_dict['count'][{i}]", c, low=0)
                    for i, c in enumerate(values)]
        if getattr(fresh, name) is not None and any(v is None for v in values):
            raise ValueError(f"state_dict[{name!r}] needs an array for every parameter")
        return [None if v is None else (backend.like(v, p.data, f"state_dict[{name!r}][{i}]"),)
                for i, (v, p) in enumerate(zip(values, self.params))]


class SGD(Optimizer):
    """``torch.optim.SGD``; the formulas are in ``minigrad.optim.sgd``.

    >>> import numpy as np
    >>> from minigrad import Parameter
    >>> w = Parameter([1.0, -2.0])
    >>> w.grad = np.array([0.5, 0.5])
    >>> SGD([w], lr=0.5).step()  # w - lr * g
    >>> w.data.tolist()
    [0.75, -2.25]
    """

    def __init__(self, params, lr, momentum=0.0, dampening=0.0, nesterov=False,
                 weight_decay=0.0):
        super().__init__(params, sgd, lr, momentum=momentum, dampening=dampening,
                         nesterov=nesterov, weight_decay=weight_decay)


class Adam(Optimizer):
    """``torch.optim.Adam``; the formulas are in ``minigrad.optim.adam``."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, adam, lr, betas=betas, eps=eps, weight_decay=weight_decay)


class AdamW(Optimizer):
    """``torch.optim.AdamW``; the formulas are in ``minigrad.optim.adamw``."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, adamw, lr, betas=betas, eps=eps, weight_decay=weight_decay)


def _has_fraction(value):
    """Whether ``value`` is a Fraction or a tuple holding one (``_inexact`` would change it)."""
    return isinstance(value, Fraction) or (isinstance(value, tuple)
                                           and any(map(_has_fraction, value)))


def _inexact(value):
    """A Fraction (or a tuple of them) as Python floats; anything else unchanged."""
    if isinstance(value, tuple):
        return tuple(_inexact(v) for v in value)
    return float(value) if isinstance(value, Fraction) else value


def _exact_number(name, value):
    """``value`` unchanged if exact (a Fraction, an int or a bool); an integral float as a
    Fraction; any other float raises ``TypeError`` naming ``name``."""
    if isinstance(value, (Fraction, int, bool)):
        return value
    if isinstance(value, tuple):
        return tuple(_exact_number(f"{name}[{i}]", v) for i, v in enumerate(value))
    if float(value).is_integer():
        return Fraction(int(value))
    f = Fraction(value).limit_denominator(10**6)
    raise TypeError(f"{name}={value!r} is a float, but the parameters are exact Fractions: "
                    f"pass a Fraction, e.g. {name}=Fraction({f.numerator}, {f.denominator})")


def _copy(array):
    """A copy of ``array`` in its own namespace (None stays None)."""
    return None if array is None else backend.get_namespace(array).asarray(array, copy=True)


def _single(value):
    """The one array of a one-parameter state field (None stays None)."""
    return None if value is None else value[0]


def _parameter_list(params):
    if isinstance(params, Tensor):
        raise TypeError("params must be an iterable of Tensors (e.g. model.parameters()), "
                        "got a single Tensor; wrap it in a list")
    if not hasattr(params, "__iter__") or isinstance(params, (str, bytes)):
        raise TypeError(f"params must be an iterable of Tensors (e.g. model.parameters()), "
                        f"got {type(params).__name__}")
    params = list(params)
    if not params:
        raise ValueError("optimizer got an empty parameter list")
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"params[{i}] must be a Tensor, got {type(p).__name__}")
        if not p.is_leaf:
            raise ValueError(f"params[{i}] is not a leaf tensor: it was computed from others")
    if len({id(p) for p in params}) != len(params):
        raise ValueError("a parameter appears more than once in params; it would be updated twice")
    return params
