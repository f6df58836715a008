"""The native half of the comparison: `headroom train` on flex, ndarray and wgpu against PyTorch
on the CPU, each run its own process (fresh device, fresh allocator), its peak RSS read
from the kernel when it exits. Prints one JSON object of raw runs; run.mjs summarises."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def run_process(command):
    """Runs `command`; returns (stdout, peak RSS in bytes)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(command, stdout=out, stderr=err)
        # wait4 reaps the child and gives its rusage; telling Popen spares it a second wait.
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(map(str, command))} failed:\n{err.read().decode(errors='replace')[-2000:]}")
        out.seek(0)
        return out.read().decode(), usage.ru_maxrss * 1024


def case_flags(case):
    """`headroom train`'s flags for a comparison case: its model, layers and batch."""
    layers_flag = "--hidden" if case["model"] == "mlp" else "--channels"
    return ["--model", case["model"], layers_flag, case["layers"],
            "--effective-batch", str(case["batch"]), "--micro-batch", str(case["batch"])]


def headroom(args, case, backend):
    with tempfile.TemporaryDirectory() as folder:
        metrics = Path(folder) / "run.jsonl"
        _, rss = run_process([
            args.headroom, "train", "--data", args.data, "--backend", backend, *case_flags(case),
            "--steps", str(args.steps), "--lr", str(args.lr), "--final-lr-fraction", "1",
            "--no-shuffle", "--eval-samples", str(args.eval_samples), "--metrics", str(metrics),
        ])
        events = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [
        {"loss": e["loss"], "seconds": case["batch"] / e["samples_per_sec"],
         "memory": {"reserved": e["memory"].get("gpu_bytes_reserved"), "in_use": e["memory"].get("gpu_bytes_in_use")}}
        for e in events if e["event"] == "step"
    ]
    evaluation = next(e for e in reversed(events) if e["event"] == "eval")
    return {"framework": "headroom", "backend": backend, "steps": steps, "peak_rss": rss,
            "eval": {k: evaluation[k] for k in ("loss", "accuracy", "samples")}}


def pytorch(args, case):
    out, rss = run_process([
        args.torch_python, str(Path(__file__).with_name("pytorch_peer.py")), "--data", args.data,
        "--model", case["model"], "--layers", case["layers"], "--batch", str(case["batch"]),
        "--steps", str(args.steps), "--eval-samples", str(args.eval_samples), "--lr", str(args.lr),
    ])
    return {**json.loads(out), "peak_rss": rss}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--headroom", required=True)
    parser.add_argument("--torch-python", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--cases", required=True, help="JSON list of {name, model, layers, batch}")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--eval-samples", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--backends", default="flex,ndarray,wgpu")
    args = parser.parse_args()
    runs = []
    for case in json.loads(args.cases):
        for run in range(args.runs):
            # Interleaved, so that a noisy minute burdens every framework alike.
            for backend in args.backends.split(","):
                runs.append({"case": case["name"], "run": run, **headroom(args, case, backend)})
                print(f"  {case['name']}: headroom {backend} run {run + 1}", file=sys.stderr)
            runs.append({"case": case["name"], "run": run, **pytorch(args, case)})
            print(f"  {case['name']}: pytorch run {run + 1}", file=sys.stderr)
    print(json.dumps(runs))


if __name__ == "__main__":
    main()
