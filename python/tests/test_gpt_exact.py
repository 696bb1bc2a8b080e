"""fp32: a Python GPT through zoff equals the same loop with torch.optim.AdamW (stages 0-3,
worlds 1 and 2, 30 steps, gradient accumulation, clipping): the examples' GPT, and a user's
GPT built from nn.MultiheadAttention and nn.LayerNorm with a tied head (mha_gpt.py)."""
import pytest

from conftest import run_ranks


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
