"""One process, world 1, a Hugging Face BERT: engine.save_pretrained writes what
from_pretrained loads back unchanged (the same logits, bitwise in fp32); the units follow
`_no_split_modules` or the unit_modules given; bad input is one line."""
import os

import pytest
import torch

import fortunes_text
import pretrained
import zoff
from transformers import AutoTokenizer, BertForSequenceClassification
from transformers.models.bert.modeling_bert import BertLayer

N_LABELS = len(fortunes_text.CATEGORIES)
TEST_ROWS = 16  # test-set fortunes whose logits are compared


def one_line(excinfo):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    return msg


def bert(seed=0):
    torch.manual_seed(seed)
    return BertForSequenceClassification.from_pretrained(pretrained.minilm_dir(), num_labels=N_LABELS)


def config(stage, bf16=False):
    z = {"stage": stage, "reduce_bucket_size": 2000000}
    if stage == 3:
        z.update(stage3_param_persistence_threshold=0)
    return {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
            "zero_optimization": z, "bf16": {"enabled": bf16}}


def encoded(split, lo, hi):
    tok = AutoTokenizer.from_pretrained(pretrained.minilm_dir())
    rows = split[lo:hi]
    b = dict(tok([t for t, _ in rows], padding=True, truncation=True, max_length=48,
                 return_tensors="pt"))
    return b, torch.tensor([y for _, y in rows])


def trained_engine(stage, bf16=False, steps=3):
    train, _ = fortunes_text.load_split()
    engine = zoff.initialize(model=bert(), config=config(stage, bf16))
    for s in range(steps):
        b, y = encoded(train, 4 * s * 37, 4 * s * 37 + 4)
        engine.backward(engine(**b, labels=y).loss)
        engine.step()
    return engine


@pytest.mark.parametrize("stage", [2, 3])
def test_save_pretrained_loads_back_with_bitwise_equal_logits(stage, tmp_path):
    engine = trained_engine(stage)
    out = tmp_path / "fine-tuned"
    assert engine.save_pretrained(out) == str(out)
    reloaded = BertForSequenceClassification.from_pretrained(out).eval()
    assert reloaded.dtype == torch.float32
    _, test = fortunes_text.load_split()
    b, _ = encoded(test, 0, TEST_ROWS)
    engine.eval()
    with torch.no_grad():
        mine = engine(**b).logits
        theirs = reloaded(**b).logits
    assert torch.equal(mine, theirs)
    # The weights are the master, names as the model's own, buffers included.
    master = engine.full_parameters()
    for name, p in reloaded.named_parameters():
        assert torch.equal(p, master[name]), name
    assert torch.equal(reloaded.bert.embeddings.position_ids,
                       engine.module.bert.embeddings.position_ids)


def test_bf16_training_saves_the_fp32_master(tmp_path):
    engine = trained_engine(2, bf16=True, steps=2)
    engine.save_pretrained(tmp_path / "m")
    reloaded = BertForSequenceClassification.from_pretrained(tmp_path / "m")
    assert reloaded.dtype == torch.float32
    master = engine.full_parameters()
    assert all(torch.equal(p, master[n]) for n, p in reloaded.named_parameters())


def test_save_pretrained_keeps_other_files_and_refuses_to_replace_without_overwrite(tmp_path):
    engine = trained_engine(2, steps=1)
    out = tmp_path / "m"
    engine.save_pretrained(out)
    (out / "tokenizer.json").write_text("{}")  # not the model's: never touched
    with pytest.raises(ValueError) as e:
        engine.save_pretrained(out)
    assert "config.json exists" in one_line(e)
    engine.save_pretrained(out, overwrite=True)
    assert (out / "tokenizer.json").read_text() == "{}"
    assert not [n for n in os.listdir(tmp_path) if "zoff-tmp" in n]  # no temporary left


def test_save_pretrained_refuses_a_model_that_is_not_a_transformers_one(tmp_path):
    import tiny_gpt
    cfg = tiny_gpt.config(1)
    cfg["train_batch_size"] = tiny_gpt.MICRO
    engine = zoff.initialize(model=tiny_gpt.model(), config=cfg)
    with pytest.raises(ValueError) as e:
        engine.save_pretrained(tmp_path / "x")
    assert "not a transformers PreTrainedModel" in one_line(e)


def unit_names(model, units):
    names = {id(m): n for n, m in model.named_modules()}
    return [names[id(u)] for u in units]


def test_default_units_are_the_no_split_modules_and_the_rest():
    model = bert()
    units = zoff.unit_hooks.default_unit_modules(model)
    assert unit_names(model, units) == (
        ["bert.embeddings"] + [f"bert.encoder.layer.{i}" for i in range(6)] +
        ["bert.pooler", "classifier"])


def test_unit_modules_given_as_a_class_wraps_every_instance():
    model = bert()
    units = zoff.unit_hooks.resolve_unit_modules(model, [BertLayer])
    assert unit_names(model, units) == (
        ["bert.embeddings"] + [f"bert.encoder.layer.{i}" for i in range(6)] +
        ["bert.pooler", "classifier"])


@pytest.mark.parametrize("spec,says", [
    (["bert.encoder"], "unit_modules holds a str"),
    ([torch.nn.Linear(2, 2)], "unit module Linear is not part of the model"),
    ([torch.nn.Conv2d], "Conv2d match no module"),
])
def test_bad_unit_modules_are_one_line_value_errors(spec, says):
    with pytest.raises(ValueError) as e:
        zoff.initialize(model=bert(), config=config(3), unit_modules=spec)
    assert says in one_line(e)


def test_nested_unit_modules_are_refused_naming_them():
    model = bert()
    with pytest.raises(ValueError) as e:
        zoff.initialize(model=model, config=config(3),
                        unit_modules=[model.bert.encoder, model.bert.encoder.layer[0]])
    assert "bert.encoder.layer.0 is inside unit module bert.encoder" in one_line(e)


def test_fp16_config_trains_with_dynamic_loss_scaling():
    """A DeepSpeed fp16 config on a transformers model: a scale too high at first overflows,
    the step is skipped and the scale halves, then training goes on."""
    cfg = config(2)
    cfg["fp16"] = {"enabled": True, "initial_scale_power": 18, "hysteresis": 1}
    model = bert()
    zoff.nn.use_fused_kernels(model)
    engine = zoff.initialize(model=model, config=cfg)
    train, _ = fortunes_text.load_split()
    stats, losses = [], []
    for s in range(10):
        b, y = encoded(train, 4 * s, 4 * s + 4)
        out = engine(**b, labels=y)
        engine.backward(out.loss)
        stats.append(engine.step())
        losses.append(out.loss.item())
    assert stats[0].skipped and stats[0].loss_scale == 2.0 ** 18
    assert not stats[-1].skipped and stats[-1].loss_scale < 2.0 ** 18
    done = [l for l, st in zip(losses, stats) if not st.skipped]
    assert len(done) >= 3 and all(torch.isfinite(torch.tensor(done)))
