"""zoff.OpProfile: per-op times of a plain PyTorch loop (no engine needed), the table of zoff
train --profile, and misuse refused with one line."""
import pytest
import torch

import zoff


def linear_steps(n):
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    x = torch.randn(32, 64)
    for _ in range(n):
        model(x).square().mean().backward()


def test_records_the_ops_of_a_pytorch_loop(tmp_path):
    with zoff.OpProfile(steps=3) as prof:
        linear_steps(3)
    ops = {o["name"]: o for o in prof.ops()}
    assert ops["aten::addmm"]["calls"] == 3, sorted(ops)
    assert ops["aten::linear"]["total_us"] >= ops["aten::addmm"]["total_us"] > 0
    table = prof.table(top=10)
    assert table.startswith("3 steps, "), table
    assert "aten::addmm" in table and "(not in the ops above)" in table
    out = tmp_path / "profile.txt"
    prof.write(str(out))
    assert out.read_text() == prof.table()
    assert not (tmp_path / "profile.txt.tmp").exists()


def test_misuse_is_one_line():
    with pytest.raises(ValueError, match="steps = 0"):
        zoff.OpProfile(steps=0)
    with pytest.raises(RuntimeError, match="not started"):
        zoff.OpProfile().stop()
    with zoff.OpProfile():
        with pytest.raises(RuntimeError, match="already running") as e:
            zoff.OpProfile().start()
        assert "\n" not in str(e.value)
