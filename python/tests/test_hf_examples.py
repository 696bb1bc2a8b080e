"""The Hugging Face examples run end to end (small: a slice of the data, a tiny Llama) and
refuse bad input in one line with a non-zero exit."""
import json
import os
import subprocess
import sys

from conftest import ROOT, zoff_exe

EXAMPLES = os.path.join(ROOT, "examples", "python")


def run(cmd, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path + [EXAMPLES]))
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def bert_cmd(config, *extra):
    return [sys.executable, os.path.join(EXAMPLES, "bert_classify.py"),
            "--config", os.path.join(ROOT, "examples", "configs", config), *extra]


def test_bert_classify_trains_at_stage3_on_nvme_and_prints_the_confusion_table(tmp_path):
    cmd = [zoff_exe(), "launch", "-n", "2", "--threads-per-rank", "1", "--",
           *bert_cmd("bert_classify_stage3_nvme.json", "--epochs", "1", "--limit-train", "96",
                     "--nvme-path", str(tmp_path / "nvme"), "--save", str(tmp_path / "model"))]
    p = run(cmd)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "epoch 1: train loss" in p.stdout and "test accuracy" in p.stdout
    assert "confusion (rows: true category" in p.stdout
    assert os.path.isfile(tmp_path / "model" / "model.safetensors")
    assert os.path.isfile(tmp_path / "model" / "tokenizer.json")


def test_bert_classify_bad_config_is_one_line():
    p = run(bert_cmd("no_such.json"))
    assert p.returncode != 0
    assert p.stderr.strip().splitlines()[-1].startswith("bert_classify: cannot read config")


def test_llama_beyond_ram_tiny_trains_from_disk(tmp_path):
    p = run([sys.executable, os.path.join(EXAMPLES, "llama_beyond_ram.py"), "--layers", "2",
             "--hidden", "64", "--intermediate", "128", "--heads", "4", "--steps", "3", "--same-batch",
             "--lr", "1e-3",
             "--nvme-path", str(tmp_path / "nvme"), "--json-out", str(tmp_path / "f.json")])
    assert p.returncode == 0, p.stdout + p.stderr
    figures = json.load(open(tmp_path / "f.json"))
    losses = [s["loss"] for s in figures["steps"]]
    assert losses[-1] < losses[0]
    # The split master's extensions, the int8 states and the bf16 pieces: 6 bytes each.
    assert figures["disk_bytes"] > 6 * figures["parameters"] * 0.9


def test_llama_beyond_ram_bad_shape_is_one_line(tmp_path):
    p = run([sys.executable, os.path.join(EXAMPLES, "llama_beyond_ram.py"), "--hidden", "65",
             "--heads", "4", "--nvme-path", str(tmp_path)])
    assert p.returncode != 0
    assert "--hidden = 65 is not a multiple of --heads = 4" in p.stderr
