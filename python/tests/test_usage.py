"""One process, world 1: errors map to the right Python exception with one line; the model
shares its tensors with the engine; checkpoints and export."""
import json
import warnings

import pytest
import torch

import tiny_gpt
import zoff
from gpt import gpt_loss

X = tiny_gpt.tokens(1)[0][:2]


def one_line(excinfo):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    return msg


def micro_loss(engine):
    return gpt_loss(engine(X[:, :-1]), X[:, 1:])


def small_engine(stage=2, **kw):
    cfg = tiny_gpt.config(stage, **kw)
    cfg["train_batch_size"] = tiny_gpt.MICRO  # no accumulation
    return zoff.initialize(model=tiny_gpt.model(), config=cfg)


def test_bad_config_value_is_value_error_naming_the_key():
    cfg = tiny_gpt.config(2)
    cfg["zero_optimization"]["stage"] = 7
    with pytest.raises(ValueError) as e:
        zoff.initialize(model=tiny_gpt.model(), config=cfg)
    assert "zero_optimization.stage" in one_line(e)


def test_unknown_config_key_warns_naming_it():
    cfg = tiny_gpt.config(1)
    cfg["zero_optimisation"] = {"stage": 2}
    with pytest.warns(zoff.ConfigWarning, match="zero_optimisation"):
        zoff.initialize(model=tiny_gpt.model(), config=cfg)


def test_missing_config_file_is_value_error():
    with pytest.raises(ValueError) as e:
        zoff.initialize(model=tiny_gpt.model(), config="/nonexistent/ds.json")
    assert "/nonexistent/ds.json" in one_line(e)


def test_non_scalar_loss_is_value_error():
    engine = small_engine()
    logits = engine(X[:, :-1])
    with pytest.raises(ValueError) as e:
        engine.backward(logits.float().mean(-1))
    assert "scalar" in one_line(e)


def test_step_without_backward_is_value_error():
    engine = small_engine()
    with pytest.raises(ValueError) as e:
        engine.step()
    assert "engine.backward" in one_line(e)


def test_loss_backward_instead_of_engine_backward_is_runtime_error():
    engine = small_engine()
    with pytest.raises(RuntimeError) as e:
        micro_loss(engine).backward()
    assert "engine.backward(loss)" in str(e.value)


def test_second_engine_on_one_model_is_value_error():
    model = tiny_gpt.model()
    engine = zoff.initialize(model=model, config=tiny_gpt.config(0))
    with pytest.raises(ValueError):
        zoff.initialize(model=model, config=tiny_gpt.config(0))
    del engine


def test_parameters_are_views_of_the_engines_buffers_and_python_sees_updates():
    model = tiny_gpt.model()
    engine = zoff.initialize(model=model, config=dict(tiny_gpt.config(2, bf16=True), train_batch_size=2))
    assert model.wte.weight.dtype == torch.bfloat16  # the engine's set_data, seen by Python
    assert model.lm_head.weight is model.wte.weight
    before = model.blocks[0].fc.weight.detach().clone()
    engine.backward(micro_loss(engine))
    engine.step()
    assert not torch.equal(before, model.blocks[0].fc.weight)  # the step wrote in place
    with torch.no_grad():  # a plain Python forward computes with the engine's values
        assert torch.equal(model(X[:, :-1]), engine(X[:, :-1]))


def test_stage3_frees_unit_storage_between_uses_and_trains():
    model = tiny_gpt.model()
    engine = zoff.initialize(model=model, config=dict(tiny_gpt.config(3), train_batch_size=2))
    losses = []
    for _ in range(3):
        loss = micro_loss(engine)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
        assert model.blocks[0].fc.weight.storage().nbytes() == 0  # released
    assert losses[-1] < losses[0]
    assert engine.memory()["peak_live_bytes"] > 0
    full = engine.full_parameters()
    assert full["blocks.0.fc.weight"].shape == (128, 32)


def test_memory_reports_the_nvme_tier_on_disk(tmp_path):
    cfg = tiny_gpt.config(2, offload="cpu")
    cfg["train_batch_size"] = tiny_gpt.MICRO
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": str(tmp_path)}
    engine = zoff.initialize(model=tiny_gpt.model(), config=cfg)
    engine.backward(micro_loss(engine))
    engine.step()
    m = engine.memory()
    n = sum(p.numel() for p in tiny_gpt.model().parameters())
    # fp32 master and AdamW's m and v on disk: at least 12 bytes per parameter (padding aside).
    assert m["nvme"]["master"] >= 4 * n and m["nvme"]["optim"] >= 8 * n, m
    assert m["offload"]["master"] == 0 and m["offload"]["optim"] == 0, m
    cpu = small_engine(stage=2, offload="cpu").memory()
    assert all(v == 0 for v in cpu["nvme"].values()), cpu


def test_checkpoint_roundtrip_and_export(tmp_path):
    a = small_engine(stage=2, offload="cpu")
    for _ in range(2):
        a.backward(micro_loss(a))
        a.step()
    path = a.save_checkpoint(tmp_path / "ckpt")
    b = small_engine(stage=2, offload="cpu")
    assert b.load_checkpoint(tmp_path / "ckpt") == path
    for e in (a, b):
        e.backward(micro_loss(e))
    assert a.step() == b.step()
    s = zoff.export(path, tmp_path / "model.safetensors")
    assert s["tensors"] == len(dict(tiny_gpt.model().named_parameters()))
    with open(tmp_path / "model.safetensors", "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    assert header["wte.weight"]["shape"] == [256, 32]


def test_step_times_name_every_phase_and_parts_fit_their_whole():
    cfg = tiny_gpt.config(2)
    cfg["train_batch_size"] = tiny_gpt.MICRO
    cfg["wall_clock_breakdown"] = True  # DeepSpeed's key: known, so no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine = zoff.initialize(model=tiny_gpt.model(), config=cfg)
    assert engine.step_times() == {}
    engine.backward(micro_loss(engine))
    engine.step()
    t = engine.step_times()
    assert set(t) == {"forward", "backward", "backward_reduce", "step", "grad_norm",
                      "optimizer", "allgather"}
    assert t["forward"] > 0 and t["backward"] > 0 and t["step"] > 0 and t["optimizer"] > 0
    assert t["backward_reduce"] <= t["backward"]
    assert t["grad_norm"] + t["optimizer"] + t["allgather"] <= t["step"]


class _ReadsAChildWeight(torch.nn.Module):
    """Reads a's weight in its own forward, outside a's: at stage 3 a is released then."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 6), torch.nn.Linear(6, 8)

    def forward(self, x):
        return (self.b(self.a(x)) @ self.a.weight.t()).sum()


def test_stage3_read_of_a_released_parameter_is_one_line_naming_it():
    cfg = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
    engine = zoff.initialize(model=_ReadsAChildWeight(), config=cfg)
    with pytest.raises(ValueError) as e:
        engine(torch.randn(2, 8))
    assert "parameter a.weight was read outside the forward" in one_line(e)
    assert "(a)" in one_line(e)
