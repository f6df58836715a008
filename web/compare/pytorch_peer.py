"""PyTorch on the work `headroom train` does in the comparison: the first samples of a
Headroom chunk dataset in file order, the same models, initialisation and optimizer.
Prints one JSON object: the steps (loss, seconds) and the evaluation."""

import argparse
import json
import time
from pathlib import Path

import torch
from torch import nn

from chunks import load_samples


def build(model: str, layers: list[int], classes: int) -> nn.Module:
    if model == "mlp":
        widths = [784, *layers]
        body = [m for a, b in zip(widths, widths[1:]) for m in (nn.Linear(a, b), nn.ReLU())]
        net = nn.Sequential(nn.Flatten(), *body, nn.Linear(widths[-1], classes))
    else:
        body, channels, side = [], 1, 28
        for out in layers:
            body += [nn.Conv2d(channels, out, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
            channels, side = out, side // 2
        net = nn.Sequential(*body, nn.Flatten(), nn.Linear(channels * side * side, classes))
    for module in net.modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            nn.init.xavier_uniform_(module.weight)
            nn.init.zeros_(module.bias)
    return net


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--model", choices=["mlp", "cnn"], required=True)
    parser.add_argument("--layers", required=True, help="hidden widths or channels, comma-separated")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--eval-samples", type=int, required=True)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epsilon", type=float, default=1e-8)
    args = parser.parse_args()

    torch.manual_seed(0)
    images, labels, classes = load_samples(args.data, "train", args.steps * args.batch)
    test_images, test_labels, _ = load_samples(args.data, "test", args.eval_samples)
    net = build(args.model, [int(v) for v in args.layers.split(",")], classes)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr, eps=args.epsilon)
    loss_fn = nn.CrossEntropyLoss()
    steps = []
    for step in range(args.steps):
        started = time.perf_counter()
        rows = slice(step * args.batch, (step + 1) * args.batch)
        x, y = torch.from_numpy(images[rows]), torch.from_numpy(labels[rows])
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        optimizer.step()
        steps.append({"loss": loss.item(), "seconds": time.perf_counter() - started})

    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(test_labels), args.batch):
            x = torch.from_numpy(test_images[start : start + args.batch])
            y = torch.from_numpy(test_labels[start : start + args.batch])
            logits = net(x)
            loss_sum += loss_fn(logits, y).item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
    evaluation = {"loss": loss_sum / len(test_labels), "accuracy": correct / len(test_labels), "samples": len(test_labels)}
    print(json.dumps({"framework": "pytorch", "backend": f"cpu (torch {torch.__version__})", "threads": torch.get_num_threads(), "steps": steps, "eval": evaluation}))


if __name__ == "__main__":
    main()
