"""zoff.Engine: what zoff.initialize returns (DeepSpeed's engine shape)."""
import collections
import time
import warnings

import torch

from . import hf_export, unit_hooks

StepStats = collections.namedtuple(
    "StepStats", ["step", "lr", "grad_norm", "clipped", "skipped", "loss_scale"])
StepStats.__doc__ = """One optimizer step: steps done (skipped ones included), the learning
rate used, the global L2 gradient norm before clipping, whether it clipped, whether fp16
overflow skipped it, and the fp16 loss scale used (0 otherwise)."""

_DTYPES = {"Float": torch.float32, "BFloat16": torch.bfloat16, "Half": torch.float16}


def _cast(value, dtype):
    if torch.is_tensor(value):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_cast(v, dtype) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_cast(v, dtype) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _cast(v, dtype)) for k, v in value.items())
    return value


class Engine:
    """Trains `module` with ZeRO: its parameters are views into the engine's buffers (the
    compute dtype: fp32, bf16 or fp16), the fp32 master and optimizer states are sharded
    across ranks (and offloaded), and at stage 3 each unit's parameters are whole only
    around its forward and backward.

    Per micro-batch: loss = f(engine(inputs)); engine.backward(loss). Per step:
    engine.step(). Every rank makes the same calls."""

    def __init__(self, module, native, unit_modules):
        self.module = module
        self._native = native
        self.compute_dtype = _DTYPES[native.compute_dtype]
        stage3 = native.zero_stage == 3
        self._scopes = unit_hooks.UnitScopes(native, unit_modules if stage3 else [])
        self._forward_ms = 0.0  # this step's forward calls so far
        self._step_times = {}
        for w in native.config_warnings:
            warnings.warn(f"zoff config: {w}", ConfigWarning, stacklevel=3)

    def __call__(self, *args, **kwargs):
        """The module's forward, floating inputs cast to the compute dtype."""
        start = time.perf_counter()
        args = _cast(args, self.compute_dtype)
        kwargs = _cast(kwargs, self.compute_dtype)
        try:
            return self.module(*args, **kwargs)
        except RuntimeError as e:
            self._scopes.close_all()
            explained = unit_hooks.explain_released_read(self.module, str(e))
            if explained:
                raise ValueError(explained) from None
            raise
        except BaseException:
            self._scopes.close_all()
            raise
        finally:
            self._forward_ms += (time.perf_counter() - start) * 1e3

    forward = __call__

    def backward(self, loss):
        """Backpropagates one micro-batch's scalar loss (divided by the accumulation steps,
        times the fp16 loss scale) and reduces gradients as the stage requires."""
        if not torch.is_tensor(loss):
            raise ValueError(f"engine.backward: loss is a {type(loss).__name__}, expected a tensor")
        self._native.backward(loss)

    def step(self):
        """The optimizer step after gradient_accumulation_steps backward calls."""
        stats = self._native.step()
        self._step_times = {"forward": self._forward_ms, **stats.pop("times_ms")}
        self._forward_ms = 0.0
        return StepStats(**stats)

    def step_times(self):
        """Milliseconds this rank spent in the last step's phases (DeepSpeed's
        wall_clock_breakdown): forward (this engine's calls), backward, backward_reduce (the
        wait for the last gradient collectives, part of backward), step, and step's parts
        grad_norm, optimizer and allgather. Empty before the first step."""
        return dict(self._step_times)

    def synchronize(self):
        """Lands a delayed parameter update still running, before evaluating or saving."""
        self._native.synchronize()

    def memory(self):
        """Bytes of model states on this rank, per category and tier (and activations)."""
        return self._native.memory()

    def save_checkpoint(self, save_dir):
        """Collective: writes save_dir/step_<n>/ and save_dir/latest; returns the step dir."""
        return self._native.save_checkpoint(str(save_dir))

    def load_checkpoint(self, load_dir):
        """Collective: resumes from save_dir (its latest) or a step dir; returns the step dir."""
        return self._native.load_checkpoint(str(load_dir))

    def with_unit(self, module, fn):
        """fn() as a computation of module's parameters: at stage 3 they are gathered around
        it and before its backward. For reads outside module's own forward (a tied head
        reading an embedding's weight in the parent's forward)."""
        return self._scopes.run(module, fn)

    def full_parameters(self):
        """Collective: {name: fp32 copy} of every parameter, whole (gathered at stage 3)."""
        self.synchronize()

        def copies():
            with torch.no_grad():
                return {k: v.detach().float().clone() for k, v in self.module.named_parameters()}

        return self._scopes.run(self.module, copies) if self.zero_stage == 3 else copies()

    def save_pretrained(self, save_dir, overwrite=False, **kwargs):
        """Collective: writes the model in Hugging Face's format, which
        `<ModelClass>.from_pretrained(save_dir)` loads back: safetensors with the model's own
        parameter names (the fp32 master values; persistent buffers as the module holds them;
        tied weights once) and config.json (dtype float32). The module must be a transformers
        PreTrainedModel; kwargs go to its save_pretrained (max_shard_size, ...). Rank 0
        writes into a temporary folder beside save_dir and moves the files in; a config.json
        or weights file already in save_dir is replaced only with overwrite=True. Returns
        save_dir on rank 0, None elsewhere."""
        return hf_export.save_pretrained(self, save_dir, overwrite, kwargs)

    def train(self, mode=True):
        self.module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def parameters(self, recurse=True):
        return self.module.parameters(recurse)

    def named_parameters(self, prefix="", recurse=True):
        return self.module.named_parameters(prefix, recurse)

    @property
    def global_steps(self):
        return self._native.global_step

    @property
    def rank(self):
        return self._native.rank

    @property
    def world_size(self):
        return self._native.world_size

    @property
    def zero_stage(self):
        return self._native.zero_stage

    def train_batch_size(self):
        return self._native.train_batch_size

    def train_micro_batch_size_per_gpu(self):
        return self._native.train_micro_batch_size_per_gpu

    def gradient_accumulation_steps(self):
        return self._native.gradient_accumulation_steps


class ConfigWarning(UserWarning):
    """A config key zoff does not use (unknown, or a DeepSpeed key it handles otherwise)."""
