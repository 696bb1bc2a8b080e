"""fp32: a Python GPT through zoff equals the same loop with torch.optim.AdamW (stages 0-3,
worlds 1 and 2, 30 steps, gradient accumulation, clipping): the examples' GPT, and a user's
GPT built from nn.MultiheadAttention and nn.LayerNorm with a tied head (mha_gpt.py)."""
import re
import subprocess

import pytest
from conftest import run_ranks, zoff_exe
from gpt import GPT, PRESETS


@pytest.mark.parametrize("model", ["gpt", "mha"])
@pytest.mark.parametrize("world", [1, 2])
def test_python_gpt_matches_torch_adamw(model, world, tmp_path):
    results = run_ranks(world, "gpt_exact_worker.py", ["--model", model, "--steps", "30"], tmp_path)
    for stage in "0123":
        r = results[stage]
        print(f"{model} world {world} stage {stage}: loss rel {r['loss_rel']:.2e}, "
              f"params rel {r['param_rel']:.2e}, loss {r['first_loss']:.4f} -> {r['last_loss']:.4f}")
        assert r["loss_rel"] < 1e-5
        assert r["param_rel"] < 1e-5
        assert r["last_loss"] < r["first_loss"] - 0.1  # it trained


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_python_presets_have_the_cpp_presets_shapes(preset):
    """The examples' GPT presets are the C++ presets: the same parameter count as the one
    `zoff estimate` gives for the C++ gpt of that name (the tied head counted once)."""
    out = subprocess.run([zoff_exe(), "estimate", "--model", "gpt", "--preset", preset],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cpp = int(re.search(r"params \((\d+)\)", out.stdout).group(1))
    model = GPT(**PRESETS[preset])
    assert sum(p.numel() for p in model.parameters()) == cpp
