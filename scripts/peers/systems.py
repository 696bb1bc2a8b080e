"""The training systems scripts/bench_peers.sh compares, each behind the same two calls:
`System(model, config, args)` wraps a freshly initialised fp32 GPT, and `step(x)` trains one
global batch's slice `x` [micro, block + 1] (one optimizer step, no accumulation) and returns
the loss, the learning rate used, the gradient norm before clipping, and the milliseconds of
forward (with the loss), backward and step, timed around each system's own calls.

Every system gets the same model code (examples/python/gpt.py, whose bf16 products and
kernels are zoff.nn's wherever zoff imports, so no system is slowed by the CPU's generic bf16
GEMM), the same AdamW hyper-parameters, gradient clipping and DeepSpeed's linear WarmupLR.
"""
import math
import time

import torch

from gpt import gpt_loss  # examples/python/gpt.py (peer_train.py puts it on the path)


def warmup_lr(config, done):
    """DeepSpeed's WarmupLR (warmup_type linear) for the optimizer step after `done` steps:
    the rate DeepSpeed and zoff use, for the systems whose loop sets it by hand. DeepSpeed's
    first two steps both take warmup_min_lr (its scheduler starts at iteration -1)."""
    p = config["scheduler"]["params"]
    i = done - 1  # DeepSpeed's last_batch_iteration while the step runs
    warmup = max(2, p["warmup_num_steps"])
    if i < 0:
        return p["warmup_min_lr"]
    gamma = min(1.0, i / warmup)
    return p["warmup_min_lr"] + (p["warmup_max_lr"] - p["warmup_min_lr"]) * gamma


def adamw(params, config, fused):
    o = config["optimizer"]["params"]
    kw = dict(lr=1.0, betas=tuple(o["betas"]), eps=o["eps"], weight_decay=o["weight_decay"])
    return torch.optim.AdamW(params, fused=fused, **kw) if fused else torch.optim.AdamW(params, **kw)


class TorchLoop:
    """The loop a PyTorch user writes: forward (under autocast for DDP), backward, clip, step;
    the learning rate set per step from DeepSpeed's WarmupLR."""

    autocast = False

    def __init__(self, config):
        self.config = config
        self.steps = 0

    def step(self, x):
        lr = warmup_lr(self.config, self.steps)
        self.steps += 1
        for group in self.opt.param_groups:
            group["lr"] = lr
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
            loss = gpt_loss(self.model(x[:, :-1]), x[:, 1:])
        t1 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config["gradient_clipping"])
        if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor
            norm = norm.full_tensor()
        self.opt.step()
        t3 = time.perf_counter()
        return loss.item(), lr, float(norm), {"forward": (t1 - t0) * 1e3, "backward": (t2 - t1) * 1e3,
                                              "step": (t3 - t2) * 1e3}


class Reference(TorchLoop):
    """One process, fp32, torch.optim.AdamW (its default implementation), the whole global
    batch: what every system's first steps are checked against."""

    def __init__(self, model, config, args):
        super().__init__(config)
        self.model = model
        self.opt = adamw(model.parameters(), config, fused=False)
        self.implementation = "torch.optim.AdamW (foreach), fp32, one process"


class Ddp(TorchLoop):
    """DDP on gloo, torch.autocast("cpu", bfloat16), fused torch.optim.AdamW (the fastest of
    2.x's CPU implementations: scripts/bench_optim_torch.py)."""

    autocast = True

    def __init__(self, model, config, args):
        super().__init__(config)
        import torch.distributed as dist
        dist.init_process_group("gloo")
        self.model = torch.nn.parallel.DistributedDataParallel(model)
        self.opt = adamw(self.model.parameters(), config, fused=True)
        self.implementation = "DDP + autocast bf16, torch.optim.AdamW(fused=True)"


class Fsdp2(TorchLoop):
    """FSDP2: fully_shard on each block and on the root over a CPU mesh (gloo), bf16
    parameters and fp32 gradient reduction; with args.fsdp_offload, CPUOffloadPolicy too."""

    def __init__(self, model, config, args):
        super().__init__(config)
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
        dist.init_process_group("gloo")
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        kw = dict(mesh=mesh, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                            reduce_dtype=torch.float32))
        if args.fsdp_offload:
            kw["offload_policy"] = CPUOffloadPolicy()
        for block in model.blocks:
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        self.model = model
        # DTensor parameters: torch.optim.AdamW's default (foreach) implementation.
        self.opt = adamw(model.parameters(), config, fused=False)
        self.implementation = ("FSDP2 fully_shard per block + root, MixedPrecisionPolicy(bf16, "
                               "reduce fp32)" + (", CPUOffloadPolicy" if args.fsdp_offload else "") +
                               ", torch.optim.AdamW (foreach)")


class EngineLoop:
    """zoff and DeepSpeed: forward through the engine, engine.backward, engine.step."""

    def step(self, x):
        t0 = time.perf_counter()
        loss = gpt_loss(self.engine(x[:, :-1]), x[:, 1:])
        t1 = time.perf_counter()
        self.engine.backward(loss)
        t2 = time.perf_counter()
        lr, norm, extra = self.finish_step()
        t3 = time.perf_counter()
        times = {"forward": (t1 - t0) * 1e3, "backward": (t2 - t1) * 1e3, "step": (t3 - t2) * 1e3}
        return loss.item(), lr, norm, {**times, **extra}


class Zoff(EngineLoop):
    """zoff's Python engine (import zoff) with the config as given."""

    def __init__(self, model, config, args):
        import zoff
        self.engine = zoff.initialize(model=model, config=config)
        self.implementation = "zoff (import zoff), its fused CPU AdamW"

    def finish_step(self):
        stats = self.engine.step()
        # zoff's own timers: the wait for the last gradient collectives, the parameter
        # publish (all-gather or shared copy), the optimizer (with its NVMe I/O).
        own = self.engine.step_times()
        extra = {f"zoff_{k}": own[k] for k in ("backward_reduce", "optimizer", "allgather") if k in own}
        return stats.lr, stats.grad_norm, extra


class DeepSpeed(EngineLoop):
    """DeepSpeed's engine on its CPU accelerator over gloo, the config as given (its
    DeepSpeedCPUAdam where the optimizer is offloaded)."""

    def __init__(self, model, config, args):
        import deepspeed
        deepspeed.init_distributed(dist_backend="gloo")
        self.engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                    config=config)
        self.implementation = f"DeepSpeed {deepspeed.__version__}, {type(self.engine.optimizer).__name__}"
        # Under zero.Init a parameter's own numel is its partition's; ds_numel is the whole.
        self.param_count = sum(getattr(t, "ds_numel", t.numel()) for t in model.parameters())

    @staticmethod
    def construct(build, config):
        """The model built inside deepspeed.zero.Init: each module's parameters partitioned
        (with offload_param on nvme, written to disk) as soon as the module is constructed,
        never whole in RAM: how DeepSpeed builds a model larger than memory (ZeRO-Infinity).
        GPT's own initialisation finds its blocks' parameters partitioned (a no-op on them):
        init_gathered does it again, a module at a time."""
        import deepspeed
        deepspeed.init_distributed(dist_backend="gloo")
        with deepspeed.zero.Init(config_dict_or_path=config):
            model = build()
        init_gathered(model)
        return model

    def finish_step(self):
        lr = self.engine.get_lr()[0]  # the rate this step uses (the scheduler moves after it)
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        norm = float(norm) if norm is not None else math.nan
        return lr, norm, {}


def init_gathered(model):
    """GPT's initialisation (examples/python/gpt.py: normal(0.02), residual projections
    scaled by 1/sqrt(2 n_layer), zero biases) for a model whose parameters zero.Init
    partitioned: one module's parameters gathered at a time, set on rank 0, partitioned again."""
    import deepspeed
    n_layer = len(model.blocks)
    residual = {id(m) for b in model.blocks for m in (b.attn.proj, b.mlp_proj)}
    for module in model.modules():
        own = list(module.parameters(recurse=False))
        if not own or isinstance(module, torch.nn.LayerNorm):
            continue
        with deepspeed.zero.GatheredParameters(own, modifier_rank=0), torch.no_grad():
            if isinstance(module, torch.nn.Embedding):
                torch.nn.init.normal_(module.weight, 0.0, 0.02)
            elif isinstance(module, torch.nn.Linear) and module is not model.lm_head:  # tied
                std = 0.02 / math.sqrt(2.0 * n_layer) if id(module) in residual else 0.02
                torch.nn.init.normal_(module.weight, 0.0, std)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)


SYSTEMS = {"reference": Reference, "ddp": Ddp, "fsdp2": Fsdp2, "zoff": Zoff, "deepspeed": DeepSpeed}
