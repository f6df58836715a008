"""`headroom export`'s safetensors file checked outside Headroom, with NumPy and Hugging Face's
safetensors alone: its MLP's logits on the first test samples computed here against the ones
`headroom eval --logits` wrote, and the loss of its weights on the first training batch
against the first step's loss of a run started from it (`headroom train --init`). With
PyTorch importable it also loads the file into web/compare's definitions of the network,
strictly. Exits non-zero, saying why, on any difference."""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from safetensors import safe_open

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "web" / "compare"))
from chunks import load_samples  # noqa: E402


def read(path: Path):
    with safe_open(str(path), "np") as f:
        metadata = f.metadata()
        weights = {name: f.get_tensor(name) for name in f.keys()}
    return weights, json.loads(metadata["headroom.model"]), json.loads(metadata["headroom.input"])


def expected_shapes(config, shape):
    """The state dict of web/compare's PyTorch definition of the network: name -> shape."""
    kind = config["kind"]
    if kind == "gpt":
        d, vocabulary = config["width"], shape["classes"]
        out = {"token.weight": (vocabulary, d), "position.weight": (config["context"], d)}
        for b in range(config["layers"]):
            for norm in ("attention_norm", "mlp_norm"):
                out.update({f"blocks.{b}.{norm}.weight": (d,), f"blocks.{b}.{norm}.bias": (d,)})
            for name, (rows, columns) in {"qkv": (3 * d, d), "output": (d, d), "expand": (4 * d, d), "project": (d, 4 * d)}.items():
                out.update({f"blocks.{b}.{name}.weight": (rows, columns), f"blocks.{b}.{name}.bias": (rows,)})
        out.update({"norm.weight": (d,), "norm.bias": (d,), "head.weight": (vocabulary, d), "head.bias": (vocabulary,)})
        return out
    if kind == "mlp":
        widths = [shape["height"] * shape["width"], *config["hidden"], shape["classes"]]
        return {
            f"{1 + 2 * i}.{p}": s
            for i, (a, b) in enumerate(zip(widths, widths[1:]))
            for p, s in (("weight", (b, a)), ("bias", (b,)))
        }
    out, channels, (height, width) = {}, 1, (shape["height"], shape["width"])
    for i, c in enumerate(config["channels"]):
        out.update({f"{3 * i}.weight": (c, channels, 3, 3), f"{3 * i}.bias": (c,)})
        channels, height, width = c, height // 2, width // 2
    head = 3 * len(config["channels"]) + 1
    out.update({f"{head}.weight": (shape["classes"], channels * height * width), f"{head}.bias": (shape["classes"],)})
    return out


def mlp_logits(weights, config, images):
    """PyTorch's nn.Sequential(Flatten, Linear, ReLU, ..., Linear), in f64."""
    x = images.reshape(len(images), -1).astype(np.float64)
    layers = len(config["hidden"]) + 1
    for i in range(layers):
        name = 1 + 2 * i
        x = x @ weights[f"{name}.weight"].astype(np.float64).T + weights[f"{name}.bias"]
        if i + 1 < layers:
            x = np.maximum(x, 0)
    return x


def cross_entropy(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    return float(np.mean(np.log(np.exp(shifted).sum(axis=1)) - shifted[np.arange(len(labels)), labels]))


def torch_load(path: Path, config, shape):
    """load_state_dict, strict, into the network web/compare's peers build; returns it."""
    import torch  # noqa: F401
    from safetensors.torch import load_file

    if config["kind"] == "gpt":
        from gpt_peer import Gpt

        net = Gpt(shape["classes"], config["layers"], config["heads"], config["width"], config["context"])
    else:
        from pytorch_peer import build

        net = build(config["kind"], config.get("hidden") or config["channels"], shape["classes"])
    net.load_state_dict(load_file(str(path)))
    print(f"PyTorch: {config['kind']} load_state_dict(strict=True) took all {len(net.state_dict())} tensors")
    return net


def torch_first_loss(net, config, data: Path, batch: int):
    """PyTorch's loss on the first `batch` training samples (windows of text), in file order."""
    import torch
    from torch.nn import functional as F

    with torch.no_grad():
        if config["kind"] == "gpt":
            from chunks import windows

            tokens = torch.from_numpy(windows(data, config["context"] + 1, batch)[0])
            logits = net(tokens[:, :-1])
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)).item()
        images, labels, _ = load_samples(data, "train", batch)
        return F.cross_entropy(net(torch.from_numpy(images)), torch.from_numpy(labels)).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--file", type=Path, required=True)
    parser.add_argument("--data", type=Path, help="the dataset folder the model trained on")
    parser.add_argument("--logits", type=Path, help="headroom eval --logits's .npy of the test split's first samples")
    parser.add_argument("--first-loss", type=float, help="the first step's loss of a run --init from the file")
    parser.add_argument("--batch", type=int, help="that run's batch (unshuffled: the split's first samples)")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--torch", action="store_true", help="also load it into PyTorch (must import), and with --first-loss compare PyTorch's loss")
    args = parser.parse_args()
    weights, config, shape = read(args.file)
    found = {name: tuple(w.shape) for name, w in weights.items()}
    expected = expected_shapes(config, shape)
    if found != expected:
        missing = sorted(set(expected) - set(found))
        extra = sorted(set(found) - set(expected))
        wrong = sorted(n for n in set(found) & set(expected) if found[n] != expected[n])
        raise SystemExit(f"not PyTorch's state dict: missing {missing}, extra {extra}, other shapes {wrong}")
    print(f"{config['kind']}: all {len(found)} tensors have PyTorch's names and shapes")
    failed = False
    if args.logits:
        if config["kind"] != "mlp":
            raise SystemExit("logits are computed here for the MLP only")
        theirs = np.load(args.logits)
        images, _, _ = load_samples(args.data, "test", len(theirs))
        mine = mlp_logits(weights, config, images)
        worst = float(np.abs(mine - theirs).max())
        print(f"logits of {len(theirs)} test samples: largest difference {worst:.2e} (tolerance {args.tolerance:.0e})")
        failed |= not worst <= args.tolerance
    if args.first_loss is not None and config["kind"] == "mlp":
        images, labels, _ = load_samples(args.data, "train", args.batch)
        mine = cross_entropy(mlp_logits(weights, config, images), labels)
        gap = abs(mine - args.first_loss)
        print(f"first-batch loss: numpy {mine:.7f}, headroom --init {args.first_loss:.7f}, difference {gap:.2e}")
        failed |= not gap <= args.tolerance
    if args.torch:
        net = torch_load(args.file, config, shape)
        if args.first_loss is not None:
            mine = torch_first_loss(net, config, args.data, args.batch)
            gap = abs(mine - args.first_loss)
            print(f"first-batch loss: PyTorch {mine:.7f}, headroom --init {args.first_loss:.7f}, difference {gap:.2e}")
            failed |= not gap <= args.tolerance
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
