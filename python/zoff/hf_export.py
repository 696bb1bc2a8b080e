"""engine.save_pretrained: a zoff-trained Hugging Face model written in the format
transformers' from_pretrained reads, from the fp32 master values, without touching files
that are not the model's."""
import os
import shutil
import tempfile

import torch

# What a transformers save_pretrained writes: the files an existing save_dir may only hold
# with overwrite=True (they would be replaced), and the stale shards a new save removes.
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors",
               "model.safetensors.index.json")


def is_model_file(name):
    return name in MODEL_FILES or (name.startswith("model-") and name.endswith(".safetensors"))


def check_target(save_dir, overwrite):
    if os.path.exists(save_dir) and not os.path.isdir(save_dir):
        raise ValueError(f"save_pretrained: {save_dir} exists and is not a directory")
    if overwrite or not os.path.isdir(save_dir):
        return
    present = sorted(n for n in os.listdir(save_dir) if is_model_file(n))
    if present:
        raise ValueError(f"save_pretrained: {os.path.join(save_dir, present[0])} exists; "
                         "pass overwrite=True to replace the model files of that folder")


def master_state_dict(module, params):
    """module.state_dict()'s keys and order, parameters from `params` (name -> fp32 master,
    one name per tensor), a tied weight's second name mapped to the same tensor object (so
    transformers sees the tie and writes it once), buffers as the module holds them."""
    named = dict(module.named_parameters(remove_duplicate=False))
    by_tensor = {id(named[k]): v for k, v in params.items()}
    out = {}
    for key, value in module.state_dict().items():
        out[key] = by_tensor[id(named[key])] if key in named else value.detach().clone()
    return out


def write_model(module, state, folder, kwargs):
    module.save_pretrained(folder, state_dict=state, safe_serialization=True, **kwargs)
    # transformers records the module's parameter dtype (bf16 when training in bf16); the
    # weights written are the fp32 master, and from_pretrained must build fp32 parameters.
    config = type(module.config).from_pretrained(folder)
    config.dtype = torch.float32
    config.save_pretrained(folder)


def move_in(tmp, save_dir):
    """Each new file replaces its namesake atomically (os.replace); model shards of an earlier
    save that the new one does not have go; other files of save_dir stay."""
    os.makedirs(save_dir, exist_ok=True)
    written = set(os.listdir(tmp))
    for name in sorted(written):
        os.replace(os.path.join(tmp, name), os.path.join(save_dir, name))
    for name in os.listdir(save_dir):
        if is_model_file(name) and name not in written:
            os.remove(os.path.join(save_dir, name))


def save_pretrained(engine, save_dir, overwrite, kwargs):
    module = engine.module
    if not (hasattr(module, "save_pretrained") and hasattr(module, "config")):
        raise ValueError(f"save_pretrained: the model ({type(module).__name__}) is not a "
                         "transformers PreTrainedModel; use engine.save_checkpoint or zoff.export")
    save_dir = os.path.abspath(os.fspath(save_dir))
    check_target(save_dir, overwrite)  # every rank: all refuse alike, before the collective
    params = engine.full_parameters()  # collective
    if engine.rank != 0:
        return None
    parent = os.path.dirname(save_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(save_dir)}.zoff-tmp-", dir=parent)
    try:
        write_model(module, master_state_dict(module, params), tmp, kwargs)
        move_in(tmp, save_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return save_dir
