"""bf16 + cpu offload: the Python GPT through zoff against zoff's C++ gpt through the C++
engine, same weights and micro-batches, stages 2 and 3: the losses and the fp32 master
shards are bitwise equal.

The two GPTs run the same ATen ops in the same order. One detail made them differ from the
second step on: LibTorch's C++ torch::nn::Linear adds the bias after the GEMM for 3-D
input (a second bf16 rounding), where PyTorch's nn.Linear (ATen's linear) fuses it into
the GEMM; with the zero biases of the first step the two agree. The C++ gpt now calls
ATen's linear.

Both GPTs take their bf16 products from the same choice (ZOFF_BF16_PRODUCTS, read by the C++
gpt and by zoff.nn, which the Python GPT calls): both LibTorch's own bf16 GEMM (native), or
both zoff's widened products (the fp32 GEMM rounded once, the same C++ functions)."""
import pytest

from conftest import run_ranks


@pytest.mark.parametrize("products", ["native", "widened"])
@pytest.mark.parametrize("world", [1, 2])
def test_python_bf16_offload_equals_cpp_engine(world, products, tmp_path, monkeypatch):
    monkeypatch.setenv("ZOFF_BF16_PRODUCTS", products)
    results = run_ranks(world, "bf16_vs_cpp_worker.py", ["--steps", "10"], tmp_path)
    for stage in "23":
        r = results[stage]
        print(f"world {world} {products} stage {stage}: {r}")
        assert r["losses_equal"] and r["master_equal"], r
