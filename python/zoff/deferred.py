"""Models larger than RAM from Python: parameters built without memory (zoff.init_empty),
valued by the engine unit by unit (param_init), as DeepSpeed's zero.Init and FSDP's meta
device with param_init_fn do."""
import contextlib
import copy
import weakref

import torch


def is_deferred(t):
    """A placeholder init_empty made: more elements than its storage holds (as in C++)."""
    return t.numel() > 1 and t.untyped_storage().nbytes() < t.numel() * t.element_size()


def placeholder(p):
    """A Parameter of p's shape, dtype and requires_grad holding one element, expanded."""
    values = torch.zeros((), dtype=p.dtype).expand(p.shape)
    return torch.nn.Parameter(values, requires_grad=p.requires_grad)


@contextlib.contextmanager
def init_empty():
    """Parameters registered inside are built on the meta device (their initialisation is a
    no-op there) and leave the block as placeholders without memory on the CPU: a model of
    any size is built in a few MB. Buffers are built as usual (rotary frequencies, position
    ids keep their values). zoff.initialize then gives each trainable parameter its values,
    unit by unit, with param_init (a Hugging Face model's own _init_weights by default), so
    at most one unit's values are whole at once. Tied parameters stay tied. Frozen
    parameters cannot be deferred (the engine keeps them whole on every rank): freeze them
    after zoff.initialize, or build them outside this block.

        with zoff.init_empty():
            model = LlamaForCausalLM(config)
        engine = zoff.initialize(model=model, config=ds_config)
    """
    original = torch.nn.Module.register_parameter
    owners = []  # modules that registered a parameter inside the block (weak)

    def register(module, name, param):
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.detach().to("meta"), requires_grad=param.requires_grad)
        original(module, name, param)
        owners.append(weakref.ref(module))

    torch.nn.Module.register_parameter = register
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original
        made = {}  # id(meta parameter) -> its placeholder: ties stay ties
        for ref in owners:
            module = ref()
            if module is None:
                continue
            for name, p in list(module._parameters.items()):
                if p is not None and p.device.type == "meta":
                    if id(p) not in made:
                        made[id(p)] = (p, placeholder(p))
                    module._parameters[name] = made[id(p)][1]


def hf_param_init(model):
    """param_init for a transformers PreTrainedModel: a parameter's values are what the
    model's own _init_weights gives its module (materialized alone, on the CPU, for the
    call), so each architecture keeps its initialisation (normal(0, initializer_range) for
    Llama's projections and embeddings, ones for its norms...). Rank 0's values are used."""
    if not callable(getattr(model, "_init_weights", None)):
        raise ValueError(f"zoff: {type(model).__name__} has no _init_weights; pass param_init")

    def init(name, values):
        owner_name, _, attr = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        # The owner's class and settings (a shallow copy), its own parameters fresh and
        # whole, no children: only what _init_weights(owner) writes is made.
        alone = copy.copy(owner)
        alone._parameters = {k: None if p is None else torch.nn.Parameter(
            torch.empty(p.shape, dtype=p.dtype), requires_grad=p.requires_grad)
            for k, p in owner._parameters.items()}
        alone._buffers = dict(owner._buffers)
        alone._modules = dict.fromkeys(owner._modules)
        with torch.no_grad():
            model._init_weights(alone)
            values.copy_(getattr(alone, attr))

    return init


def resolve_param_init(model, param_init):
    """initialize's param_init: the one given, the model's own (hf_param_init) when some
    parameter is deferred, else None. Raises ValueError when one is needed and none fits."""
    deferred = [n for n, p in model.named_parameters() if is_deferred(p)]
    if param_init is not None:
        if not callable(param_init):
            raise ValueError(f"zoff.initialize: param_init must be callable (name, tensor), "
                             f"got {type(param_init).__name__}")
        return param_init
    if not deferred:
        return None
    if callable(getattr(model, "_init_weights", None)):
        return hf_param_init(model)
    raise ValueError(f"zoff.initialize: parameter {deferred[0]} was built without values "
                     "(zoff.init_empty) and the model has no _init_weights: pass "
                     "param_init=fn(name, tensor)")
