"""One process, world 1: a Hugging Face causal LM (Llama) built under zoff.init_empty() has
no parameter memory; zoff.initialize values it unit by unit (the model's own _init_weights,
or a param_init given) and trains it at stage 3 exactly as PyTorch trains the same values."""
import pytest
import torch

import zoff
from conftest import run_ranks
from transformers import LlamaConfig, LlamaForCausalLM

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=97, max_position_embeddings=64)
STEPS = 4
LOSS_TOL = 1e-5  # max relative difference of a step's loss against torch AdamW
STD_TOL = 0.15   # relative difference of an initialized weight's std from initializer_range


def one_line(excinfo):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    return msg


def llama_config(tie=False):
    return LlamaConfig(**TINY, tie_word_embeddings=tie)


def empty_llama(tie=False):
    with zoff.init_empty():
        return LlamaForCausalLM(llama_config(tie))


def config(stage=3, nvme=None):
    z = {"stage": stage, "stage3_param_persistence_threshold": 0}
    if nvme:
        z["offload_param"] = {"device": "nvme", "nvme_path": str(nvme)}
        z["offload_optimizer"] = {"device": "nvme", "nvme_path": str(nvme)}
    return {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
            "zero_optimization": z}


def tokens(step):
    return torch.randint(0, TINY["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(step))


def test_init_empty_builds_placeholders_keeps_buffers_and_ties():
    model = empty_llama(tie=True)
    params = dict(model.named_parameters())
    assert all(zoff.deferred.is_deferred(p) for p in params.values())
    assert all(p.untyped_storage().nbytes() <= 4 for p in params.values())
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied
    built = LlamaForCausalLM(llama_config())
    assert torch.equal(model.model.rotary_emb.inv_freq, built.model.rotary_emb.inv_freq)
    assert torch.nn.Linear(2, 2).weight.device.type == "cpu"  # the patch is gone


def test_default_param_init_is_the_models_own_and_it_trains(tmp_path):
    engine = zoff.initialize(model=empty_llama(), config=config(nvme=tmp_path))
    values = engine.full_parameters()
    std = llama_config().initializer_range
    for name, v in values.items():
        if name.endswith("norm.weight"):
            assert torch.equal(v, torch.ones_like(v)), name
        else:
            assert abs(v.std().item() / std - 1) < STD_TOL, (name, v.std().item())
    losses = []
    for s in range(STEPS):
        x = tokens(s % 2)
        out = engine(input_ids=x, labels=x)
        engine.backward(out.loss)
        engine.step()
        losses.append(out.loss.item())
    assert losses[-1] < losses[0]


def test_given_param_init_trains_exactly_like_torch_adamw():
    torch.manual_seed(4)
    reference = LlamaForCausalLM(llama_config())
    start = {k: v.detach().clone() for k, v in reference.named_parameters()}
    engine = zoff.initialize(model=empty_llama(), config=config(),
                             param_init=lambda name, values: values.copy_(start[name]))
    p = config()["optimizer"]["params"]
    opt = torch.optim.AdamW(reference.parameters(), lr=p["lr"], weight_decay=p["weight_decay"], fused=True)
    for s in range(STEPS):
        x = tokens(s)
        out = engine(input_ids=x, labels=x)
        engine.backward(out.loss)
        engine.step()
        ref = reference(input_ids=x, labels=x).loss
        opt.zero_grad()
        ref.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        opt.step()
        assert abs(out.loss.item() - ref.item()) <= LOSS_TOL * abs(ref.item()), s


def test_three_ranks_uneven_partitions_train_exactly_like_torch_adamw(tmp_path):
    """World 3 (units padded unevenly), grouped-query attention, tied embeddings, built under
    init_empty and valued by param_init: stages 1 and 3 against torch AdamW."""
    results = run_ranks(3, "hf_llama_exact_worker.py", ["--steps", "6"], tmp_path)
    for stage in ("1", "3"):
        r = results[stage]
        print(f"llama world 3 stage {stage}: loss rel {r['loss_rel']:.2e}, params rel {r['param_rel']:.2e}")
        assert r["loss_rel"] < LOSS_TOL and r["param_rel"] < LOSS_TOL
        assert r["last_loss"] < r["first_loss"]


def test_param_init_that_raises_is_one_line_naming_the_parameter():
    def broken(name, values):
        raise KeyError(name)

    with pytest.raises(ValueError) as e:
        zoff.initialize(model=empty_llama(), config=config(), param_init=broken)
    assert 'param_init("' in one_line(e) and "KeyError" in one_line(e)


def test_deferred_model_without_an_initializer_is_refused():
    with zoff.init_empty():
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    with pytest.raises(ValueError) as e:
        zoff.initialize(model=model, config=config())
    assert "parameter 0.weight was built without values" in one_line(e)
    with pytest.raises(ValueError) as e:
        zoff.initialize(model=model, config=config(), param_init="normal")
    assert "param_init must be callable" in one_line(e)


def test_a_frozen_deferred_parameter_is_refused_naming_it():
    model = empty_llama()
    model.model.norm.weight.requires_grad_(False)
    with pytest.raises(ValueError) as e:
        zoff.initialize(model=model, config=config())
    assert "model.norm.weight is frozen" in one_line(e)
