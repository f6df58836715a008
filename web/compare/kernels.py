"""Kernel launches per training step, and each kernel family's share of the device time, of
the comparison's MLP and CNN on wgpu: what fusion or a faster matmul could save.

    python3 web/compare/kernels.py --build target/release/headroom
    VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json python3 web/compare/kernels.py ...

cubecl logs every kernel it runs (its profiling logger, `level = "basic"`: each launch
timed, which syncs the device after it, so samples/s here are not the training speed). Two
runs of `headroom train`, `--steps` and `--steps` + 10, differ by ten steps: launches per
step is that difference over ten; the time shares are over the longer run, evaluation
included."""

import argparse
import collections
import re
import subprocess
import tempfile
from pathlib import Path

from builds import CASES
from native import case_flags

UNITS = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
LINE = re.compile(r"\|\s*([\d.]+)(ns|µs|ms|s)\s*\|\s*(.*)")


def family(kernel):
    """A kernel's name without the hash of its specialisation: `KernelBinop | AddOp`."""
    parts = [re.sub(r"_[0-9a-f]{8}$", "", part.strip()) for part in kernel.split("|")[:2]]
    return " | ".join(parts)


def profile(build, case, data, steps):
    """[(family, seconds)] of every kernel one run of `steps` steps launched."""
    with tempfile.TemporaryDirectory() as work:
        log = Path(work) / "kernels.log"
        # cubecl reads cubecl.toml from the working directory.
        (Path(work) / "cubecl.toml").write_text(
            f'[profiling.logger]\nlevel = "basic"\nfile = "{log}"\nappend = false\n')
        subprocess.run([str(Path(build).resolve()), "train", "--data", str(Path(data).resolve()),
                        "--backend", "wgpu", *case_flags(case), "--steps", str(steps)],
                       cwd=work, check=True, stdout=subprocess.DEVNULL)
        launches = []
        for line in log.read_text().splitlines():
            match = LINE.match(line)
            if match:
                launches.append((family(match.group(3)), float(match.group(1)) * UNITS[match.group(2)]))
        return launches


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="target/release/headroom")
    parser.add_argument("--cases", default="mlp,cnn")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--data", default="static/data/fashion-mnist")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    for key in args.cases.split(","):
        case = CASES[key]
        short = profile(args.build, case, args.data, args.steps)
        long = profile(args.build, case, args.data, args.steps + 10)
        per_step = collections.Counter(name for name, _ in long)
        per_step.subtract(name for name, _ in short)
        seconds = collections.Counter()
        for name, duration in long:
            seconds[name] += duration
        total = sum(seconds.values())
        print(f"{case['name']}: {(len(long) - len(short)) / 10:.0f} kernel launches per step")
        for name, duration in seconds.most_common(args.top):
            print(f"  {100 * duration / total:5.1f}% of device time  {per_step[name] / 10:4.1f} per step  {name}")


if __name__ == "__main__":
    main()
