//! `headroom bench matmul`: cubek's subgroup-free matmul routines side by side on the
//! adapter, on the shapes the MLP's and the GPT's steps multiply (forward and backward,
//! with the transposed operands backward reads as they are laid out).

use clap::Args;
use web_time::Instant;

use super::train::median;
use crate::ops::matmul::{MatmulRoutine, matmul_on_routine, routine_refusals};
use crate::train::BackendKind;
use burn::prelude::*;
use burn::tensor::Distribution;

#[derive(Args)]
pub struct MatmulBenchArgs {
    #[arg(long, value_enum, default_value = "wgpu")]
    backend: BackendKind,
    /// Launches timed per routine and shape in a round (after one that compiles it).
    #[arg(long, default_value_t = 10)]
    launches: usize,
    /// Rounds, each running every routine once per shape in turn.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Only these routines (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    routines: Vec<MatmulRoutine>,
}

/// `[m, k] @ [k, n]`; `transposed_lhs` stores the lhs as `[k, m]` and multiplies its
/// transpose, as a weight gradient (`input^T @ grad`) does.
struct Shape {
    name: &'static str,
    m: usize,
    k: usize,
    n: usize,
    transposed_lhs: bool,
    transposed_rhs: bool,
}

const fn shape(name: &'static str, m: usize, k: usize, n: usize, lhs_t: bool, rhs_t: bool) -> Shape {
    Shape {
        name,
        m,
        k,
        n,
        transposed_lhs: lhs_t,
        transposed_rhs: rhs_t,
    }
}

/// The MLP of `web/compare` (784-128-10, batch 256) and the GPT's default block (width
/// 128, 64 tokens, 8 windows per micro-batch).
const SHAPES: [Shape; 9] = [
    shape("MLP layer 1 forward", 256, 784, 128, false, false),
    shape("MLP layer 1 weight grad", 784, 256, 128, true, false),
    shape("MLP layer 2 forward", 256, 128, 10, false, false),
    shape("MLP layer 2 input grad", 256, 10, 128, false, true),
    shape("MLP layer 2 weight grad", 128, 256, 10, true, false),
    shape("GPT qkv forward", 512, 128, 384, false, false),
    shape("GPT expand forward", 512, 128, 512, false, false),
    shape("GPT project input grad", 512, 128, 512, false, true),
    shape("GPT expand weight grad", 128, 512, 512, true, false),
];

pub fn bench_matmul(args: MatmulBenchArgs) -> anyhow::Result<()> {
    if let Some(why) = args.backend.unavailable() {
        anyhow::bail!("{why}");
    }
    let device = args.backend.device();
    let routines = if args.routines.is_empty() {
        MatmulRoutine::ALL.to_vec()
    } else {
        args.routines.clone()
    };
    println!(
        "matmul routines on {} ({} launches per round, {} rounds; ms per launch: median (range))",
        args.backend.name(),
        args.launches,
        args.rounds
    );
    for shape in &SHAPES {
        bench_shape(shape, &routines, &args, &device)?;
    }
    Ok(())
}

fn operands(shape: &Shape, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let random = |dims: [usize; 2]| Tensor::<2>::random(dims, Distribution::Normal(0.0, 1.0), device);
    let lhs = match shape.transposed_lhs {
        true => random([shape.k, shape.m]).transpose(),
        false => random([shape.m, shape.k]),
    };
    let rhs = match shape.transposed_rhs {
        true => random([shape.n, shape.k]).transpose(),
        false => random([shape.k, shape.n]),
    };
    (lhs, rhs)
}

fn sync(device: &Device) -> anyhow::Result<()> {
    device
        .sync()
        .map_err(|error| anyhow::anyhow!("the device failed: {error:?}"))
}

fn bench_shape(
    shape: &Shape,
    routines: &[MatmulRoutine],
    args: &MatmulBenchArgs,
    device: &Device,
) -> anyhow::Result<()> {
    let (lhs, rhs) = operands(shape, device);
    let expected = values(lhs.clone().matmul(rhs.clone()));
    // A routine that refuses, or computes something else, is left out of the timing.
    let mut timed = Vec::new();
    for &routine in routines {
        let refused = routine_refusals();
        let got = values(matmul_on_routine(lhs.clone(), rhs.clone(), routine));
        match (routine_refusals() > refused, agrees(&got, &expected)) {
            (true, _) => println!("  {:<26} {routine:?}: refused", shape.name),
            (false, true) => timed.push((routine, Vec::new())),
            (false, false) => println!("  {:<26} {routine:?}: WRONG PRODUCT", shape.name),
        }
    }
    for _ in 0..args.rounds {
        for (routine, samples) in &mut timed {
            // Waits for what came before, so the time is these launches' alone.
            sync(device)?;
            let started = Instant::now();
            for _ in 0..args.launches {
                drop(matmul_on_routine(lhs.clone(), rhs.clone(), *routine));
            }
            sync(device)?;
            samples.push(started.elapsed().as_secs_f64() * 1e3 / args.launches as f64);
        }
    }
    let flops = 2.0 * (shape.m * shape.k * shape.n) as f64;
    for (routine, samples) in timed {
        let (fastest, slowest) = samples
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), &ms| (lo.min(ms), hi.max(ms)));
        let median = median(samples);
        println!(
            "  {:<26} {:<18} {:>8.3} ms ({fastest:.3}-{slowest:.3})  {:>6.2} GFLOP/s",
            shape.name,
            format!("{routine:?}"),
            median,
            flops / median / 1e6
        );
    }
    Ok(())
}

fn values(tensor: Tensor<2>) -> Vec<f32> {
    tensor.into_data().try_into_vec::<f32>().unwrap_or_default()
}

/// Within 1e-3 of the largest magnitude: the routines sum in different orders.
fn agrees(got: &[f32], expected: &[f32]) -> bool {
    let scale = expected.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    got.len() == expected.len()
        && got
            .iter()
            .zip(expected)
            .all(|(g, e)| (g - e).abs() <= 1e-3 * scale)
}
