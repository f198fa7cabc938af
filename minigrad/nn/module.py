"""Module: parameters, buffers and sub-modules registered by attribute assignment.

>>> from minigrad import nn
>>> class Affine(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.scale = nn.Parameter([2.0])
...     def forward(self, x):
...         return x * self.scale
>>> [name for name, _ in Affine().named_parameters()]
['scale']
"""

from minigrad.engine import backend, interrupts, validate
from minigrad.engine.tensor import Parameter, Tensor

_buffers_seen = False  # whether any Module has registered a buffer (see Module.__call__)


class Module:
    """Base class: assigning a ``Parameter`` or ``Module`` to an attribute registers it."""

    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("call super().__init__() before assigning attributes of a Module")
        if isinstance(value, (Parameter, Module)):
            self._replace(name, value,
                          self._parameters if isinstance(value, Parameter) else self._modules)
        elif name in self._parameters:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} to parameter {name!r} "
                                "(expected a Parameter or None)")
            self._parameters[name] = None
        elif name in self._buffers:
            self._buffers[name] = value
        elif name in self._modules:  # a sub-module replaced by a plain value
            with interrupts.deferred():  # Ctrl-C leaves the module or the value, never neither
                object.__setattr__(self, name, value)
                del self._modules[name]
        else:
            object.__setattr__(self, name, value)  # one step (Dropout.calls += 1)

    def _replace(self, name, value, table):
        """``table[name] = value``, ``name`` dropped from the other tables, in one step as
        far as Ctrl-C goes; a replaced entry keeps its place, as in torch."""
        stale = [t for t in (self._parameters, self._buffers, self._modules, self.__dict__)
                 if t is not table and name in t]
        with interrupts.deferred():
            for t in stale:
                del t[name]
            table[name] = value

    def __getattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(table, {})
            if name in entries:
                return entries[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def register_buffer(self, name, array):
        """Register a non-trained array (e.g. running statistics) saved in ``state_dict``."""
        global _buffers_seen
        _buffers_seen = True  # first: early it costs a look, late it would skip one
        self._replace(name, array, self._buffers)

    def __setstate__(self, state):
        # copy.deepcopy (analysis.memory's copy of a model) restores without register_buffer
        global _buffers_seen
        self.__dict__.update(state)
        _buffers_seen = _buffers_seen or bool(state.get("_buffers"))

    def __call__(self, *args, **kwargs):
        """``forward``; if it raises, buffers it moved (BatchNorm's running statistics) are
        put back, so a failed forward pass changes nothing.

        The buffers are looked up only once some module of this process has registered one
        (``_buffers_seen``): an MLP's forward then skips the walk over its sub-modules. A
        subclass that defines ``__setstate__`` must call this class's, which notes buffers
        that a copy brings without ``register_buffer``.
        """
        buffers = dict(self.named_buffers()) if _buffers_seen and (
            self._buffers or self._modules) else None
        try:
            return self.forward(*args, **kwargs)
        except BaseException:
            if buffers:
                self.set_buffers(buffers)
            raise

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    # ----- traversal -------------------------------------------------------------------
    def named_modules(self, prefix=""):
        """``(dotted name, module)`` for this module and every descendant, depth first.

        A child registered under the empty name (``nn.Recompute`` registers the module it
        wraps so) has its parent's name: wrapping changes no parameter's name."""
        stack = [(prefix, self)]
        seen = set()
        while stack:
            name, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            children = list(module._modules.items())
            for child_name, child in reversed(children):
                # A child registered under "" (nn.Recompute's) adds nothing to the names.
                joined = f"{name}.{child_name}" if name and child_name else name or child_name
                stack.append((joined, child))

    def children(self):
        return iter(self._modules.values())

    def named_children(self):
        """``(name, module)`` for each direct sub-module, as torch's; ``setattr(self, name,
        other)`` puts ``other`` in its place."""
        return iter(list(self._modules.items()))

    def _named(self, table):
        seen = set()
        for prefix, module in self.named_modules():
            for name, value in getattr(module, table).items():
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                yield (f"{prefix}.{name}" if prefix else name), value

    def named_parameters(self):
        """``(dotted name, Parameter)`` pairs in registration order, e.g. ``"0.weight"``."""
        return self._named("_parameters")

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def named_buffers(self):
        return self._named("_buffers")

    # ----- modes and gradients ------------------------------------------------------------
    def train(self, mode=True):
        """Set training mode on this module and every sub-module; returns ``self``."""
        mode = validate.boolean("mode", mode)
        for _, module in self.named_modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self):
        """Forget all gradients (``p.grad = None``), as ``torch``'s default ``set_to_none``."""
        for p in self.parameters():
            p.grad = None

    # ----- state ---------------------------------------------------------------------------
    def _entries(self):
        """``(dotted name, module, table, name)`` of every parameter and buffer: the one walk
        that ``state_dict``, ``load_state_dict``, ``set_buffers`` and ``to`` share."""
        for prefix, module in self.named_modules():
            for table in (module._parameters, module._buffers):
                for name in table:
                    yield (f"{prefix}.{name}" if prefix else name), module, table, name

    def _arrays(self):
        """Dotted name -> the array itself (parameters' data, buffers): ``state_dict``
        without its copies, for reading names, shapes and dtypes."""
        state = {}
        for key, _, table, name in self._entries():
            value = table[name]
            if value is not None:
                state[key] = value.data if isinstance(value, Tensor) else value
        return state

    def state_dict(self):
        """Dotted name -> array, parameters then buffers of each module, like ``torch``.

        The arrays are copies (torch's share storage): the optimizers update parameters in
        place, and a state dict kept to compare or restore later must not move with them."""
        state = {}
        for key, _, table, name in self._entries():
            value = table[name]
            if value is not None:
                value = value.data if isinstance(value, Tensor) else value
                state[key] = backend.get_namespace(value).asarray(value, copy=True) \
                    if backend.is_array(value) else value
        return state

    def set_buffers(self, buffers):
        """Replace buffers by dotted name (``{"1.running_mean": array, ...}``); others stay."""
        for key, module, table, name in self._entries():
            if key in buffers and table is module._buffers:
                table[name] = buffers[key]

    def load_state_dict(self, state):
        """Copy arrays from ``state`` into this module's parameters and buffers.

        Everything is checked before anything is written: missing or unexpected names and
        shape mismatches raise ``KeyError`` / ``ValueError`` and leave the module unchanged.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state_dict must be a dict of name -> array, got "
                            f"{type(state).__name__}")
        own = self._arrays()  # names, shapes and dtypes: no copy needed
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if missing or unexpected:
            raise KeyError(f"state_dict mismatch: missing {missing}, unexpected {unexpected}")
        staged = {}
        for name, target in own.items():
            staged[name] = backend.like(state[name], target, f"state_dict[{name!r}]")
        self._write(staged)

    def _write(self, staged, drop_grads=False):
        """Write ``{dotted name: array}`` into the parameters and buffers, all or nothing:
        an interruption half-way (Ctrl-C) puts the old arrays back."""
        old = []
        try:
            for key, _, table, name in self._entries():
                if key not in staged:
                    continue
                value = table[name]
                if isinstance(value, Tensor):
                    old.append((value, None, None, value.data, value.xp, value.grad))
                    value.data, value.xp = staged[key], backend.get_namespace(staged[key])
                    if drop_grads:
                        value.grad = None
                else:
                    old.append((None, table, name, value, None, None))
                    table[name] = staged[key]
        except BaseException:
            for tensor, table, name, data, xp, grad in reversed(old):
                if tensor is not None:
                    tensor.data, tensor.xp, tensor.grad = data, xp, grad
                else:
                    table[name] = data
            raise

    def to(self, xp=None, device=None, dtype=None):
        """Move every parameter and buffer to namespace ``xp`` / ``device`` / float ``dtype``.

        Gradients are dropped (they belong to the old arrays). Returns ``self``. Every array
        is converted before any is replaced, so a failure leaves the module as it was.
        """
        target = backend.resolve_namespace(xp) if xp is not None else None
        staged = {}
        for key, array in self.state_dict().items():
            ns = target or backend.get_namespace(array)
            array = backend.as_array(array, xp=ns, device=device)
            if dtype is not None and backend.is_floating(ns, array):
                array = ns.astype(array, backend.as_dtype(ns, dtype))
            staged[key] = array
        self._write(staged, drop_grads=True)
        return self

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self._modules.items():
            lines.append(f"  ({name}): " + repr(child).replace("\n", "\n  "))
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"

    def extra_repr(self):
        return ""
