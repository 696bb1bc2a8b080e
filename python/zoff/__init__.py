"""zoff: ZeRO-Offload for PyTorch modules, in DeepSpeed's shape.

    engine = zoff.initialize(model=model, config="ds_config.json")
    loss = loss_fn(engine(x), y); engine.backward(loss); engine.step()

Distributed runs use torchrun's variables (`zoff launch -n N -- python3 train.py` sets them);
zoff's rendezvous uses ZOFF_MASTER_PORT, else MASTER_PORT + 1, so a torch.distributed
process group of the user's own on MASTER_PORT does not collide with it.
"""
import weakref

import torch

from . import _zoff
from .config import config_json
from .engine import ConfigWarning, Engine, StepStats
from . import deferred, nn
from .deferred import init_empty
from .op_profile import OpProfile
from .unit_hooks import resolve_unit_modules

__all__ = ["initialize", "init_empty", "export", "world", "Engine", "StepStats", "ConfigWarning", "OpProfile", "nn"]

_engines = weakref.WeakKeyDictionary()  # model -> its engine: one engine per model


def initialize(model=None, config=None, unit_modules=None, comm_timeout=300.0, param_init=None,
               **unused):
    """Builds the engine for `model` (a torch.nn.Module with fp32 parameters on the CPU).

    config: a DeepSpeed-style JSON file path, a dict or JSON text (keys: see the README).
    unit_modules: the modules whose parameters each form one unit (at ZeRO stage 3 gathered
        around their forward), given as modules of the model and/or module classes (every
        outermost instance), completed with the largest parameter-holding subtrees outside
        them. Default: a Hugging Face model's `_no_split_modules` classes (its transformer
        layers), else each child of the model, each element of a child container.
    comm_timeout: seconds any collective may wait (first engine of the process only).
    param_init: fn(name, values) filling an fp32 tensor in place with the initial values of
        the parameter called `name`, for a model built under zoff.init_empty(); called once
        per parameter, unit by unit. Default: the model's own _init_weights (transformers).
    Every rank calls it. Bad config or arguments raise ValueError naming the key.
    """
    if unused:
        raise ValueError(f"zoff.initialize: unsupported argument(s) {sorted(unused)} "
                         "(zoff builds the optimizer and scheduler from the config)")
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"zoff.initialize: model must be a torch.nn.Module, got {type(model).__name__}")
    if config is None:
        raise ValueError("zoff.initialize: config is required (a path, a dict or JSON text)")
    if model in _engines and _engines[model]() is not None:
        raise ValueError("zoff.initialize: this model already has a zoff engine (one engine per model)")
    units = resolve_unit_modules(model, unit_modules)
    init = deferred.resolve_param_init(model, param_init)
    native = _zoff.Engine(model, config_json(config), float(comm_timeout), units, init)
    engine = Engine(model, native, units)
    _engines[model] = weakref.ref(engine)
    return engine


def export(checkpoint_dir, out):
    """Writes the parameters of a zoff checkpoint (a step dir, or a root with `latest`) to one
    .safetensors file, tensor by tensor; returns a summary dict."""
    return _zoff.export(str(checkpoint_dir), str(out))


def world():
    """This process's rank, world size and zoff rendezvous port, from the environment."""
    return _zoff.world()
