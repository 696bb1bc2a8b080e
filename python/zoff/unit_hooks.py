"""ZeRO stage 3 from Python: forward hooks that gather a unit around its module's forward.

The C++ engine's unit gatherer needs three calls per unit computation (what zoff::with_unit
does in C++): before it (gather), after it (may release), and when backward reaches its
output (gather again before the unit's own backward). Python modules have forward hooks,
so a model needs no change: the pre-hook and the hook call the first two, and the hook
registers a gradient hook on every output tensor for the third.
"""
import re

import torch

CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)


def default_unit_modules(model):
    """The modules the engine makes units of by default. A Hugging Face model names the
    blocks it must not split (`_no_split_modules`: its transformer layers, embeddings):
    each of those is a unit, as FSDP's transformer wrap policy does. Otherwise as in C++:
    each child of the root, each element of a child container (recursively)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    if names:
        units = wrap_units(model, lambda m: type(m).__name__ in names)
        if units:
            return units
    out, seen = [], set()

    def walk(module):
        for child in module.children():
            if isinstance(child, CONTAINERS):
                walk(child)
            elif id(child) not in seen and any(True for _ in child.parameters()):
                seen.add(id(child))
                out.append(child)

    walk(model)
    return out


def wrap_units(model, is_unit):
    """The outermost modules for which is_unit(module) holds, and every largest subtree
    holding parameters and none of them (an embedding, a final norm, a head beside the
    decoder layers): together they cover every parameter not registered on an ancestor of
    a unit. Modules in tree order, each once."""
    out, seen = [], set()

    def holds_unit(module):
        return any(is_unit(m) for m in module.modules())

    def walk(module):
        for child in module.children():
            if id(child) in seen:
                continue
            if is_unit(child) or (not holds_unit(child) and any(True for _ in child.parameters())):
                seen.add(id(child))
                out.append(child)
            elif holds_unit(child):
                walk(child)

    walk(model)
    return out


def check_not_nested(model, modules):
    """Raises ValueError naming a listed module (ids in `modules`) inside another."""
    listed = [(n, m) for n, m in model.named_modules() if id(m) in modules]
    for outer_name, outer in listed:
        for inner_name, inner in outer.named_modules(prefix=outer_name):
            if inner is not outer and id(inner) in modules:
                raise ValueError(f"zoff.initialize: unit module {inner_name} is inside unit "
                                 f"module {outer_name}; units cannot nest")


def resolve_unit_modules(model, spec):
    """zoff.initialize's unit_modules: None (default_unit_modules), or modules of the model
    and/or module classes (every outermost instance), completed with the largest subtrees
    outside them (wrap_units). Raises ValueError naming what is not part of the model."""
    if spec is None:
        return default_unit_modules(model)
    if isinstance(spec, (torch.nn.Module, type)):
        spec = [spec]
    classes, modules = [], set()
    members = {id(m) for m in model.modules()}
    for item in spec:
        if isinstance(item, type) and issubclass(item, torch.nn.Module):
            classes.append(item)
        elif isinstance(item, torch.nn.Module):
            if id(item) not in members:
                raise ValueError(f"zoff.initialize: unit module {type(item).__name__} is not "
                                 "part of the model")
            if item is model:
                raise ValueError("zoff.initialize: the model itself cannot be a unit module; "
                                 "list its children")
            modules.add(id(item))
        else:
            raise ValueError(f"zoff.initialize: unit_modules holds a {type(item).__name__}, "
                             "expected modules of the model or module classes")
    check_not_nested(model, modules)
    classes = tuple(classes)
    units = wrap_units(model, lambda m: id(m) in modules or (bool(classes) and isinstance(m, classes)))
    if classes and not any(isinstance(m, classes) for m in units):
        names = ", ".join(c.__name__ for c in classes)
        raise ValueError(f"zoff.initialize: unit_modules class(es) {names} match no module of "
                         f"the model ({type(model).__name__})")
    return units


def hook_outputs(output, before_backward):
    """Registers before_backward on every output tensor that requires grad; returns the
    output (a leaf, e.g. a parameter returned as is, is replaced by a view: a hook on a
    leaf would stay for good)."""
    if torch.is_tensor(output):
        if not output.requires_grad:
            return output
        if output.is_leaf:
            output = output.view_as(output)

        def hook(grad):
            before_backward()

        output.register_hook(hook)
        return output
    if isinstance(output, tuple) and hasattr(output, "_fields"):  # a namedtuple
        return type(output)(*(hook_outputs(o, before_backward) for o in output))
    if isinstance(output, (tuple, list)):
        return type(output)(hook_outputs(o, before_backward) for o in output)
    if isinstance(output, dict):
        return type(output)((k, hook_outputs(v, before_backward)) for k, v in output.items())
    return output


class UnitScopes:
    """Forward hooks on the unit modules, and the scopes they opened (a forward that raises
    skips the post-hook: close_all() ends what it left open)."""

    def __init__(self, native, modules):
        self._native = native
        self._open = []
        self._handles = []
        for m in modules:
            self._handles.append(m.register_forward_pre_hook(self._pre))
            self._handles.append(m.register_forward_hook(self._post))

    def _pre(self, module, inputs):
        self._native.before_forward(module)
        self._open.append(module)

    def _post(self, module, inputs, output):
        self._close(module)
        native = self._native
        return hook_outputs(output, lambda: native.before_backward(module))

    def _close(self, module):
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i] is module:
                del self._open[i]
                break
        self._native.after_forward(module)

    def run(self, module, fn):
        """fn() as a computation of module's parameters (zoff.with_unit)."""
        self._pre(module, ())
        try:
            out = fn()
        except BaseException:
            self._close(module)
            raise
        return self._post(module, (), out)

    def close_all(self):
        while self._open:
            self._close(self._open[-1])

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []


_RELEASED_READ = re.compile(r"sizes \[([0-9, ]*)\], strides \[[0-9, ]*\], storage offset (\d+).*"
                            r"storage of size 0")


def explain_released_read(model, message):
    """For LibTorch's error on reading a tensor whose storage was freed (a stage-3 unit
    released): one line naming the parameters of a released unit that the view read could
    be (its sizes and offset match), and their modules; None when the message is another
    one or no parameter matches."""
    m = _RELEASED_READ.search(message)
    if not m:
        return None
    shape = [int(v) for v in m.group(1).split(",") if v.strip()]
    offset = int(m.group(2))
    # The view read may be the parameter transposed or permuted (x @ w.t()): same sizes in
    # some order, same offset.
    names = [n for n, p in model.named_parameters()
             if sorted(p.shape) == sorted(shape) and p.storage_offset() == offset
             and p.untyped_storage().nbytes() == 0]
    if not names:
        return None
    owners = sorted({n.rpartition(".")[0] or "(the model itself)" for n in names})
    return (f"zoff stage 3: parameter {' or '.join(names)} was read outside the forward of a "
            f"unit module holding it ({', '.join(owners)}), while its unit was released; read "
            f"it inside engine.with_unit(module, fn), or pass unit_modules so that one unit "
            f"module's forward covers the read")
