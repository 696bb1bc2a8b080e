"""The GPU path through `import zoff`: the examples' GPT on a CUDA device, ZeRO stages 1-3
with the optimizer offloaded to the CPU, against torch.optim.AdamW on the GPU (fp32: within
1e-5 per step). Skipped where no GPU is visible."""
import os

import pytest
import torch

import tiny_gpt
import zoff
from gpt import batch_windows, gpt_loss

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU visible")

STEPS = 20
# Only the optimizer's rounding differs (zoff's CPU AdamW against torch's fused GPU AdamW).
FP32_LOSS_REL_TOL = 1e-5


def readme_tokens(steps):
    """Windows of this repository's README (real text that travels to a GPU machine)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "README.md"), "rb") as f:
        text = torch.tensor(list(f.read()), dtype=torch.int64)
    return [batch_windows(text, s, tiny_gpt.GLOBAL_BATCH, tiny_gpt.TINY["block_size"], 3).cuda()
            for s in range(steps)]


def zoff_losses(stage, data):
    model = tiny_gpt.model().cuda()
    engine = zoff.initialize(model=model, config=tiny_gpt.config(stage, offload="cpu"))
    micro, accum = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    losses = []
    for batch in data:
        total = 0.0
        for k in range(accum):
            x = batch[k * micro:(k + 1) * micro]
            loss = gpt_loss(engine(x[:, :-1]), x[:, 1:])
            engine.backward(loss)
            total += loss.item() / accum
        engine.step()
        losses.append(total)
    return losses


def reference_losses(data):
    model = tiny_gpt.model().cuda()
    cfg = tiny_gpt.config(0)["optimizer"]["params"]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=cfg["betas"], eps=cfg["eps"],
                            weight_decay=cfg["weight_decay"], fused=True)
    losses = []
    for batch in data:
        loss = gpt_loss(model(batch[:, :-1]), batch[:, 1:])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_cuda_gpt_with_cpu_offload_matches_torch_adamw(stage):
    data = readme_tokens(STEPS)
    want = reference_losses(data)
    got = zoff_losses(stage, data)
    rel = max(abs(a - b) / abs(b) for a, b in zip(got, want))
    print(f"stage {stage}: loss {got[0]:.4f} -> {got[-1]:.4f}, max rel diff {rel:.2e}")
    assert rel < FP32_LOSS_REL_TOL
    assert got[-1] < got[0] - 0.1
