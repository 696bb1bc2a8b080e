"""ZeRO stage 3 from Python: forward hooks that gather a unit around its module's forward.

The C++ engine's unit gatherer needs three calls per unit computation (what zoff::with_unit
does in C++): before it (gather), after it (may release), and when backward reaches its
output (gather again before the unit's own backward). Python modules have forward hooks,
so a model needs no change: the pre-hook and the hook call the first two, and the hook
registers a gradient hook on every output tensor for the third.
"""
import torch

CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)


def default_unit_modules(model):
    """The modules the engine makes units of by default (as in C++): each child of the root,
    each element of a child container (recursively), when it holds parameters."""
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
