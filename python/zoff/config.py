"""zoff's config argument: a path to a DeepSpeed-style JSON file, a dict, or JSON text."""
import json
import os


def config_json(config):
    """The config as JSON text for the engine, which validates every key and value."""
    if isinstance(config, dict):
        try:
            return json.dumps(config)
        except (TypeError, ValueError) as e:
            raise ValueError(f"config: not JSON-serializable: {e}") from None
    if isinstance(config, (str, os.PathLike)):
        text = os.fspath(config)
        if text.lstrip().startswith("{"):
            return text
        try:
            with open(text, encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            raise ValueError(f"config: cannot read {text}: {e.strerror}") from None
    raise ValueError(f"config: expected a path, a dict or JSON text, got {type(config).__name__}")
