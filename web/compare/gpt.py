"""The GPT side by side: `headroom train --model gpt` on flex, ndarray and wgpu against the same
GPT in PyTorch on the CPU (gpt_peer.py), the same windows in the same order, each run its
own process with its peak RSS read from the kernel. Prints a table and one JSON line."""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from native import run_process

SIZE = ("layers", "heads", "width", "context")


def headroom(args, backend):
    with tempfile.TemporaryDirectory() as folder:
        metrics = Path(folder) / "run.jsonl"
        command = [args.headroom, "train", "--data", args.data, "--backend", backend, "--model", "gpt"]
        for name in SIZE:
            command += [f"--{name}", str(getattr(args, name))]
        command += [
            "--effective-batch", str(args.batch), "--micro-batch", str(args.batch), "--steps", str(args.steps),
            "--lr", str(args.lr), "--final-lr-fraction", "1", "--no-shuffle", "--no-eval", "--sample-chars", "0",
            "--metrics", str(metrics),
        ]
        _, rss = run_process(command)
        events = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [{"loss": e["loss"], "seconds": args.batch / e["samples_per_sec"]} for e in events if e["event"] == "step"]
    return {"framework": "headroom", "backend": backend, "steps": steps, "peak_rss": rss}


def pytorch(args):
    command = [args.torch_python, str(Path(__file__).with_name("gpt_peer.py")), "--data", args.data]
    for name in SIZE + ("batch", "steps"):
        command += [f"--{name}", str(getattr(args, name))]
    out, rss = run_process(command + ["--lr", str(args.lr)])
    return {**json.loads(out), "peak_rss": rss}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--headroom", required=True)
    parser.add_argument("--torch-python", required=True)
    parser.add_argument("--data", required=True, help="a text dataset folder (web/scripts/prepare-shakespeare)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--backends", default="flex,ndarray,wgpu")
    args = parser.parse_args()
    runs = []
    for run in range(args.runs):
        # Interleaved, so that a noisy minute burdens every framework alike.
        for backend in args.backends.split(","):
            runs.append(headroom(args, backend))
            print(f"  gpt: headroom {backend} run {run + 1}", file=sys.stderr)
        runs.append(pytorch(args))
        print(f"  gpt: pytorch run {run + 1}", file=sys.stderr)
    tokens = args.batch * args.context
    print(
        f"GPT {args.layers} layers x {args.width} wide, {args.heads} heads, context {args.context}, batch {args.batch}: "
        f"{args.steps} steps ({args.warmup} warm-up left out), {args.runs} runs each"
    )
    print(f"{'framework':<22} {'tokens/s':>9} {'range':>13} {'peak RSS':>10} {'loss at the end':>16}")
    for label in dict.fromkeys(f"{r['framework']} {r['backend']}" for r in runs):
        mine = [r for r in runs if f"{r['framework']} {r['backend']}" == label]
        rates = [tokens / statistics.median(s["seconds"] for s in r["steps"][args.warmup :]) for r in mine]
        rss = statistics.median(r["peak_rss"] for r in mine) / 2**20
        print(
            f"{label:<22} {statistics.median(rates):>9.0f} {f'{min(rates):.0f}-{max(rates):.0f}':>13} "
            f"{rss:>7.0f} MiB {mine[-1]['steps'][-1]['loss']:>16.4f}"
        )
    print(json.dumps({"settings": vars(args), "runs": runs}))


if __name__ == "__main__":
    main()
