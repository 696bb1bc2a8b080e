"""Labelled text that ships with Debian: the fortunes of the `fortunes` package, labelled by
the file they come from (computers, politics, ...), with a fixed train/test split.

Split: within each category file, fortune number i (0-based, in file order) is a test
example when i % 5 == 4, a training example otherwise (80/20, the same on every machine
and every run). A fortune is the text between two lines holding only "%", stripped of
surrounding whitespace; empty ones are dropped.
"""
import os

FORTUNES_DIR = "/usr/share/games/fortunes"
# The six categories bert_classify.py learns, in label order.
CATEGORIES = ("computers", "politics", "science", "work", "songs-poems", "people")
TEST_EVERY = 5  # fortune i of a file is a test example when i % TEST_EVERY == TEST_EVERY - 1


def read_fortunes(path):
    """The fortunes of one file, in file order."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"fortunes: cannot read {path} ({e.strerror}); "
                         "install Debian's `fortunes` package") from None
    out = []
    for chunk in text.split("\n%\n"):
        chunk = chunk.strip().strip("%").strip()
        if chunk:
            out.append(chunk)
    return out


def load_split(categories=CATEGORIES, directory=FORTUNES_DIR):
    """(train, test): lists of (text, label) with label = index in `categories`."""
    if len(set(categories)) != len(categories) or not categories:
        raise ValueError(f"fortunes: categories must be distinct and non-empty, got {categories}")
    train, test = [], []
    for label, name in enumerate(categories):
        if "/" in name or name.startswith("."):
            raise ValueError(f"fortunes: bad category name {name!r}")
        texts = read_fortunes(os.path.join(directory, name))
        if not texts:
            raise ValueError(f"fortunes: {name} holds no fortunes")
        for i, t in enumerate(texts):
            (test if i % TEST_EVERY == TEST_EVERY - 1 else train).append((t, label))
    return train, test


def majority_share(examples, n_labels):
    """The accuracy of always answering the most frequent label of `examples`."""
    counts = [0] * n_labels
    for _, y in examples:
        counts[y] += 1
    return max(counts) / len(examples)
