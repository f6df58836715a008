"""PyTorch on the GPU check's rows (tests/gpu-check): the same networks and shapes as
`headroom bench train`, random inputs, Adam, eager mode, optionally under bf16 autocast
(the peer of Headroom's f16 storage). Prints one JSON object: the median step after the
warm-up, items per second (samples, or tokens for the GPT) and the peak memory reserved."""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_peer import Gpt  # noqa: E402
from pytorch_peer import build  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["mlp", "cnn", "gpt"], required=True)
    parser.add_argument("--layers", default="", help="MLP widths or CNN channels, comma-separated")
    parser.add_argument("--gpt", default="", help="layers,heads,width,context")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    if args.model == "gpt":
        layers, heads, width, context = (int(x) for x in args.gpt.split(","))
        vocabulary = 65
        model = Gpt(vocabulary, layers, heads, width, context)
        tokens = torch.randint(0, vocabulary, (args.batch, context + 1), device=device)
        inputs, targets = tokens[:, :-1], tokens[:, 1:].reshape(-1)
        items = args.batch * context
    else:
        model = build(args.model, [int(x) for x in args.layers.split(",")], 10)
        inputs = torch.rand(args.batch, 1, 28, 28, device=device)
        targets = torch.randint(0, 10, (args.batch,), device=device)
        items = args.batch
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    seconds = []
    for _ in range(args.warmup + args.steps):
        synchronize(device)
        started = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(targets.shape[0], -1).float(), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        synchronize(device)
        seconds.append(time.perf_counter() - started)
    median = statistics.median(seconds[args.warmup :])
    reserved = torch.cuda.max_memory_reserved(device) if device.type == "cuda" else None
    print(json.dumps({"per_second": items / median, "median_step_s": median, "reserved_bytes": reserved,
                      "loss": loss.item(), "torch": torch.__version__}))


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
