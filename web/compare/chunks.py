"""Headroom's chunk datasets read with NumPy alone, each chunk checked as Headroom checks it:
the PyTorch peers and tests/python/check_export.py share these."""

import hashlib
import json
import zlib
from pathlib import Path

import numpy as np


def load_samples(folder: Path, split: str, count: int):
    """The first `count` samples of `split`, checked as Headroom checks its chunks."""
    manifest = json.loads((folder / "manifest.json").read_text())
    pixels = int(np.prod(manifest["sample_shape"]))
    if count > manifest["counts"].get(split, 0):
        raise SystemExit(f"{split} has {manifest['counts'].get(split, 0)} samples, {count} asked")
    images, labels, filled = [], [], 0
    for chunk in (c for c in manifest["chunks"] if c["split"] == split):
        if filled == count:
            break
        compressed = (folder / chunk["file"]).read_bytes()
        if hashlib.sha256(compressed).hexdigest() != chunk["sha256"]:
            raise SystemExit(f"{chunk['file']}: sha256 mismatch")
        if chunk["codec"] != "deflate":
            raise SystemExit(f"{chunk['file']}: codec {chunk['codec']}; this peer reads deflate chunks only")
        raw = np.frombuffer(zlib.decompress(compressed, -15), dtype=np.uint8)
        if raw.size != chunk["raw_bytes"]:
            raise SystemExit(f"{chunk['file']}: decodes to {raw.size} bytes, not {chunk['raw_bytes']}")
        n, take = chunk["samples"], min(chunk["samples"], count - filled)
        labels.append(raw[:take].astype(np.int64))
        images.append(raw[n : n + take * pixels].reshape(take, pixels).astype(np.float32) / 255)
        filled += take
    side = int(pixels**0.5)
    return np.concatenate(images).reshape(-1, 1, side, side), np.concatenate(labels), len(manifest["class_names"])


def windows(folder: Path, window: int, count: int):
    """The first `count` training windows, each chunk cut into consecutive windows as the
    unshuffled stream cuts it, chunks checked as Headroom checks them."""
    manifest = json.loads((folder / "manifest.json").read_text())
    found = []
    for chunk in (c for c in manifest["chunks"] if c["split"] == "train"):
        compressed = (folder / chunk["file"]).read_bytes()
        if hashlib.sha256(compressed).hexdigest() != chunk["sha256"]:
            raise SystemExit(f"{chunk['file']}: sha256 mismatch")
        tokens = np.frombuffer(zlib.decompress(compressed, -15), dtype=np.uint8)
        for start in range(0, len(tokens) - window + 1, window):
            found.append(tokens[start : start + window].astype(np.int64))
            if len(found) == count:
                return np.stack(found), len(manifest["vocabulary"])
    raise SystemExit(f"the training split holds {len(found)} windows of {window}, {count} asked")
