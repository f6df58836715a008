"""Two or more builds of headroom side by side, natively, on the comparison's work (the MLP
and the CNN of web/compare), with PyTorch on the CPU in the same rounds: how a change to
the build (burn's features, a profile) moves samples/s and the peak reservation.

    python3 web/compare/builds.py --builds before=/tmp/headroom-old,after=target/debug/headroom

`--env VAR=a,b,c` runs each build once per value of an environment variable instead (a
runtime setting rather than a build: `--env CUBECL_WGPU_MAX_TASKS=8,32,128`).

Runs are interleaved (every build and PyTorch once per round), so a noisy minute burdens
all of them alike; the table gives the median and the range over the rounds (peak RSS: the median)."""

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
    """samples/s of the median step after warm-up, the peak reservation and the peak RSS in
    MiB (a CPU backend's memory, and what an allocator trades for speed)."""
    seconds = [step["seconds"] for step in run["steps"]]
    # PyTorch's steps carry no memory figure.
    reserved = [step["memory"]["reserved"] or 0 for step in run["steps"] if "memory" in step]
    return batch / statistics.median(seconds[WARMUP_STEPS:]), max(reserved, default=0) / 2**20, run["peak_rss"] / 2**20


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--builds", required=True, help="label=path[,label=path...]")
    parser.add_argument("--backend", default="wgpu", help="one or more, comma-separated: each build runs on each")
    parser.add_argument("--cases", default="mlp,cnn")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--data", default="static/data/fashion-mnist")
    parser.add_argument("--env", help="VAR=value[,value...]: each build once per value")
    peers = os.environ.get("HEADROOM_PEERS_DIR", str(Path.home() / ".cache/headroom/peers"))
    parser.add_argument("--torch-python", default=f"{peers}/venv/bin/python",
                        help="a Python with torch; 'none' leaves PyTorch out")
    args = parser.parse_args()
    builds = [spec.split("=", 1) for spec in args.builds.split(",")]
    # (label suffix, value) per variant; one variant with no variable set by default.
    variable, values = args.env.split("=", 1) if args.env else (None, "")
    variants = [(f" {variable}={value}", value) for value in values.split(",")] if variable else [("", None)]
    run_args = argparse.Namespace(data=args.data, steps=args.steps, lr=1e-3, eval_samples=1000,
                                  torch_python=args.torch_python)
    table = {}
    for key in args.cases.split(","):
        case = CASES[key]
        for round_index in range(args.rounds):
            runs = ((b, v, backend) for b in builds for v in variants for backend in args.backend.split(","))
            for (label, path), (suffix, value), backend in runs:
                if variable:
                    os.environ[variable] = value
                run = native.headroom(argparse.Namespace(**vars(run_args), headroom=path), case, backend)
                table.setdefault((case["name"], f"{label}{suffix} ({backend})"), []).append(summarise(case["batch"], run))
            if variable:
                os.environ.pop(variable)
            if args.torch_python != "none":
                run = native.pytorch(run_args, case)
                table.setdefault((case["name"], "PyTorch CPU"), []).append(summarise(case["batch"], run))
            print(f"  {case['name']}: round {round_index + 1} of {args.rounds}", file=sys.stderr)
    print(f"{'model':16} {'build':40} {'samples/s':>10} {'range':>17} {'peak reserved':>14} {'peak RSS':>10}")
    for (model, build), runs in table.items():
        speeds = [speed for speed, _, _ in runs]
        reserved = max(mib for _, mib, _ in runs)
        rss = statistics.median(mib for _, _, mib in runs)
        print(f"{model:16} {build:40} {statistics.median(speeds):10,.0f} "
              f"{min(speeds):8,.0f}-{max(speeds):<8,.0f} {reserved:10.1f} MiB {rss:6.1f} MiB")


if __name__ == "__main__":
    main()
