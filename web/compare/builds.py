"""Two or more builds of headroom side by side, natively, on the comparison's work (the MLP
and the CNN of web/compare), with PyTorch on the CPU in the same rounds: how a change to
the build (burn's features, a profile) moves samples/s and the peak reservation.

    python3 web/compare/builds.py --builds before=/tmp/headroom-old,after=target/debug/headroom

Runs are interleaved (every build and PyTorch once per round), so a noisy minute burdens
all of them alike; the table gives the median and the range over the rounds."""

import argparse
import os
import statistics
import sys
from pathlib import Path

import native

CASES = {
    "mlp": {"name": "MLP 784-128-10", "model": "mlp", "layers": "128", "batch": 256},
    "cnn": {"name": "CNN 8,16 ch", "model": "cnn", "layers": "8,16", "batch": 64},
}
WARMUP_STEPS = 3


def summarise(batch, run):
    """samples/s of the median step after warm-up, and the peak reservation in MiB."""
    seconds = [step["seconds"] for step in run["steps"]]
    # PyTorch's steps carry no memory figure.
    reserved = [step["memory"]["reserved"] or 0 for step in run["steps"] if "memory" in step]
    return batch / statistics.median(seconds[WARMUP_STEPS:]), max(reserved, default=0) / 2**20


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--builds", required=True, help="label=path[,label=path...]")
    parser.add_argument("--backend", default="wgpu")
    parser.add_argument("--cases", default="mlp,cnn")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--data", default="static/data/fashion-mnist")
    peers = os.environ.get("HEADROOM_PEERS_DIR", str(Path.home() / ".cache/headroom/peers"))
    parser.add_argument("--torch-python", default=f"{peers}/venv/bin/python",
                        help="a Python with torch; 'none' leaves PyTorch out")
    args = parser.parse_args()
    builds = [spec.split("=", 1) for spec in args.builds.split(",")]
    run_args = argparse.Namespace(data=args.data, steps=args.steps, lr=1e-3, eval_samples=1000,
                                  torch_python=args.torch_python)
    table = {}
    for key in args.cases.split(","):
        case = CASES[key]
        for round_index in range(args.rounds):
            for label, path in builds:
                run = native.headroom(argparse.Namespace(**vars(run_args), headroom=path), case, args.backend)
                table.setdefault((case["name"], f"{label} ({args.backend})"), []).append(summarise(case["batch"], run))
            if args.torch_python != "none":
                run = native.pytorch(run_args, case)
                table.setdefault((case["name"], "PyTorch CPU"), []).append(summarise(case["batch"], run))
            print(f"  {case['name']}: round {round_index + 1} of {args.rounds}", file=sys.stderr)
    print(f"{'model':16} {'build':24} {'samples/s':>10} {'range':>17} {'peak reserved':>14}")
    for (model, build), runs in table.items():
        speeds = [speed for speed, _ in runs]
        reserved = max(mib for _, mib in runs)
        print(f"{model:16} {build:24} {statistics.median(speeds):10,.0f} "
              f"{min(speeds):8,.0f}-{max(speeds):<8,.0f} {reserved:10.1f} MiB")


if __name__ == "__main__":
    main()
