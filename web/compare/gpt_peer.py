"""PyTorch on the GPT work `headroom train --model gpt --no-shuffle` does: the same windows
of a Headroom text dataset in file order, the same model (pre-norm blocks, 4x GELU MLP,
N(0, 0.02) weights), Adam at a constant rate. Prints one JSON object: the steps (loss,
seconds)."""

import argparse
import json
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from chunks import windows


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.attention_norm, self.mlp_norm = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.output = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.expand, self.project = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.attention_norm(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.output(attended.transpose(1, 2).reshape(b, t, d))
        return x + self.project(F.gelu(self.expand(self.mlp_norm(x))))


class Gpt(nn.Module):
    def __init__(self, vocabulary, layers, heads, width, context):
        super().__init__()
        self.token, self.position = nn.Embedding(vocabulary, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocabulary)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, 0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, tokens):
        x = self.token(tokens) + self.position(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main():
    parser = argparse.ArgumentParser()
    for name in ("layers", "heads", "width", "context", "batch", "steps"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=0, help="0: PyTorch's default")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data, vocabulary = windows(Path(args.data), args.context + 1, args.batch * args.steps)
    model = Gpt(vocabulary, args.layers, args.heads, args.width, args.context)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, eps=1e-8)
    steps = []
    for step in range(args.steps):
        batch = torch.from_numpy(data[step * args.batch : (step + 1) * args.batch])
        started = time.perf_counter()
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocabulary), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        steps.append({"loss": loss.item(), "seconds": time.perf_counter() - started})
    print(json.dumps({"framework": "pytorch", "backend": "cpu", "threads": torch.get_num_threads(), "steps": steps}))


if __name__ == "__main__":
    main()
