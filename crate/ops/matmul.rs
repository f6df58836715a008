//! A matmul that names the cubecl routine it runs on the GPU.
//!
//! burn built without `autotune` runs every matmul on cubek's `SimpleUnit` routine (the
//! fallback after the tensor-core routines, which no WebGPU adapter offers), and has no
//! switch for another. Autotune would choose, but in the browser it can choose a kernel
//! whose WGSL failed to compile (docs/backends.md, "Autotune"). This op launches the named routine
//! through cubek itself, forward and backward; `headroom bench matmul` measures them side
//! by side on the adapter. CPU backends ignore the routine and run their own matmul.
//!
//! Measured with `headroom bench matmul` on the MLP's and the GPT's shapes: on
//! SwiftShader, the software adapter headless Chromium offers, `Naive` (one output per
//! invocation) and `CpuGemm` took about half of `SimpleUnit`'s time on every shape; on
//! lavapipe `SimpleUnit` stays the fastest. `Naive` copies any operand not laid out as it
//! reads (a weight gradient's transposed input), so it reserves more, where `CpuGemm`
//! reads transposed operands in place and reserves what burn's routine does
//! (docs/benchmarks.md, "the matmul routine, per adapter"). Headroom's own `RegisterTile`
//! kernel (crate/ops/tile_matmul.rs) then ran the MLP's and the GPT's large products on
//! SwiftShader several times faster than `CpuGemm`, reading transposed operands in place
//! too; on lavapipe burn's routine still won most shapes
//! (docs/benchmarks.md, "Headroom's own matmul kernel for SwiftShader"). So the GPU's
//! matmuls take `RegisterTile` on SwiftShader and burn's own routine elsewhere.

// burn marks ndarray deprecated in favour of flex; natively it is an opt-in CPU backend.
#![allow(deprecated)]

#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
use burn::backend::NdArray;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::backend::DType;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, binary};
#[cfg(feature = "fusion")]
use burn::backend::calculate_matmul_output;
use burn::backend::ops::FloatTensorOps;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend, Dispatch, Flex};
use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::wgpu::wgpu;
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;

use super::tile_matmul::register_tile_matmul_launch;
use cubek::matmul::definition::{MatmulElems, MatmulGlobalElems};
use cubek::matmul::multi_level::Strategy as MultiLevel;
use cubek::matmul::multi_level::routines::TileSizeSelection;
use cubek::matmul::multi_level::routines::batch::double_unit::DoubleUnitSelectionArgs;
use cubek::matmul::multi_level::routines::batch::simple_unit::SimpleUnitSelectionArgs;
use cubek::matmul::multi_level::routines::gemm::GemmStrategy;
use cubek::matmul::routine::BlueprintStrategy;
use cubek::matmul::strategy::Strategy;
use cubek::matmul::tiled::Strategy as Tiled;
use cubek::matmul::tiled::cpu_gemm::CpuGemmStrategy;
use cubek::std::InputBinding;

/// cubek's matmul routines that need neither subgroups nor tensor cores, so any WebGPU
/// adapter can run them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "wasm32"), derive(clap::ValueEnum))]
pub enum MatmulRoutine {
    /// What burn runs without autotune: tensor cores where offered, else `SimpleUnit`
    /// with the largest tiles.
    Burn,
    SimpleUnitMaxTile,
    SimpleUnitMinTile,
    DoubleUnitMaxTile,
    DoubleUnitMinTile,
    /// One output element per invocation.
    Naive,
    Gemm,
    /// The register-blocked routine cubek tuned for its CPU runtime.
    CpuGemm,
    /// Headroom's own kernel: a register tile per invocation, no shared memory
    /// (crate/ops/tile_matmul.rs).
    RegisterTile,
}

impl MatmulRoutine {
    pub const ALL: [MatmulRoutine; 9] = [
        MatmulRoutine::Burn,
        MatmulRoutine::SimpleUnitMaxTile,
        MatmulRoutine::SimpleUnitMinTile,
        MatmulRoutine::DoubleUnitMaxTile,
        MatmulRoutine::DoubleUnitMinTile,
        MatmulRoutine::Naive,
        MatmulRoutine::Gemm,
        MatmulRoutine::CpuGemm,
        MatmulRoutine::RegisterTile,
    ];

    /// cubek's strategy for the routine; `None` for Headroom's own kernel.
    fn strategy(self) -> Option<Strategy> {
        let simple_unit = |tile_size| {
            Strategy::MultiLevel(MultiLevel::SimpleUnit(BlueprintStrategy::Inferred(
                SimpleUnitSelectionArgs { tile_size },
            )))
        };
        let double_unit = |tile_size| {
            Strategy::MultiLevel(MultiLevel::DoubleUnit(BlueprintStrategy::Inferred(
                DoubleUnitSelectionArgs { tile_size },
            )))
        };
        Some(match self {
            MatmulRoutine::RegisterTile => return None,
            MatmulRoutine::Burn => Strategy::default(),
            MatmulRoutine::SimpleUnitMaxTile => simple_unit(TileSizeSelection::MaxTileSize),
            MatmulRoutine::SimpleUnitMinTile => simple_unit(TileSizeSelection::MinTileSize),
            MatmulRoutine::DoubleUnitMaxTile => double_unit(TileSizeSelection::MaxTileSize),
            MatmulRoutine::DoubleUnitMinTile => double_unit(TileSizeSelection::MinTileSize),
            MatmulRoutine::Naive => Strategy::MultiLevel(MultiLevel::Naive),
            MatmulRoutine::Gemm => {
                Strategy::MultiLevel(MultiLevel::Gemm(BlueprintStrategy::Inferred(GemmStrategy {
                    target_num_planes: None,
                })))
            }
            MatmulRoutine::CpuGemm => Strategy::Tiled(Tiled::CpuGemm(BlueprintStrategy::Inferred(
                CpuGemmStrategy::default(),
            ))),
        })
    }
}

headroom_backend_extension! {
pub trait RoutedMatmul: Backend {
    /// `lhs @ rhs` on `routine` where the backend runs cubecl kernels, and on the backend's
    /// own matmul where the routine refuses the problem (its shapes, its layout, or the
    /// adapter; [`routine_refusals`] counts those). Never refused outright: under fusion the
    /// product is registered before its operands exist, so its shape must be known then.
    // burn's own shape rule for a matmul, as its fusion registers one; callers pass operands
    // whose shapes burn's matmul accepts (`matmul_with` checks, backward's are the forward's).
    #[fusion(dtype = lhs, shape = calculate_matmul_output(lhs, rhs).expect("matmul operands"))]
    fn matmul_on_routine(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        routine: MatmulRoutine,
    ) -> FloatTensor<Self> {
        let _ = routine;
        Self::float_matmul(lhs, rhs)
    }
}
}

/// Products handed a routine that refused them (see [`routine_refusals`]). Process-wide:
/// under fusion the product runs on whichever thread drains the queue, not the caller's.
static REFUSALS: AtomicUsize = AtomicUsize::new(0);

/// How many products the routine refused in this process so far: burn's matmul ran them
/// instead. The result is the same either way, which is why tests read this to tell
/// whether the routine ran.
pub fn routine_refusals() -> usize {
    REFUSALS.load(Ordering::Relaxed)
}

impl RoutedMatmul for CubeBackend {
    fn matmul_on_routine(lhs: CubeTensor, rhs: CubeTensor, routine: MatmulRoutine) -> CubeTensor {
        match cube_matmul_on_routine(lhs.clone(), rhs.clone(), routine) {
            Some(product) => product,
            None => {
                REFUSALS.fetch_add(1, Ordering::Relaxed);
                Self::float_matmul(lhs, rhs)
            }
        }
    }
}

/// `lhs @ rhs` on `routine`'s kernel; `None` where it refuses.
fn cube_matmul_on_routine(lhs: CubeTensor, rhs: CubeTensor, routine: MatmulRoutine) -> Option<CubeTensor> {
    let dtype = lhs.dtype;
    // Plain floats of one type only: a quantized operand needs burn's dequantizing path.
    let plain_float = matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
    if !plain_float || rhs.dtype != dtype || lhs.qparams.is_some() || rhs.qparams.is_some() {
        return None;
    }
    let out = burn_cubecl::kernel::matmul::init_matmul_output(&lhs, &rhs, dtype);
    let Some(strategy) = routine.strategy() else {
        return register_tile_matmul_launch(lhs, rhs, out);
    };
    let storage = burn::backend::cubecl::dtype_to_storage_type(dtype);
    let mut dtypes = MatmulElems::from_globals(&MatmulGlobalElems {
        lhs: storage,
        rhs: storage,
        out: storage,
    });
    cubek::matmul::launch::launch_ref(
        &strategy,
        &out.client,
        InputBinding::new(lhs.binding(), storage),
        InputBinding::new(rhs.binding(), storage),
        out.clone().binding(),
        &mut dtypes,
    )
    .ok()?;
    Some(out)
}

impl RoutedMatmul for Flex {}
#[cfg(all(not(target_arch = "wasm32"), feature = "ndarray"))]
impl RoutedMatmul for NdArray {}

/// burn's matmul backward (it keeps the same operands, checkpointed the same way), with
/// the two gradient products on the routine too: they are two thirds of a layer's work.
impl<B: RoutedMatmul, C: CheckpointStrategy> RoutedMatmul for Autodiff<B, C> {
    fn matmul_on_routine(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
        routine: MatmulRoutine,
    ) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct RoutedMatmulBackward;

        impl<B: RoutedMatmul> Backward<B, 2> for RoutedMatmulBackward {
            type State = (Option<NodeId>, Option<NodeId>, MatmulRoutine);

            fn backward(
                self,
                ops: Ops<Self::State, 2>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let (lhs, rhs, routine) = ops.state;
                let lhs = lhs.map(|lhs| checkpointer.retrieve_node_output(lhs));
                let rhs = rhs.map(|rhs| checkpointer.retrieve_node_output(rhs));
                binary::<B, _, _>(
                    ops.parents,
                    ops.node,
                    grads,
                    |grad| {
                        B::matmul_on_routine(
                            grad,
                            B::float_transpose(rhs.expect("kept when lhs is tracked")),
                            routine,
                        )
                    },
                    |grad| {
                        B::matmul_on_routine(
                            B::float_transpose(lhs.expect("kept when rhs is tracked")),
                            grad,
                            routine,
                        )
                    },
                );
            }
        }

        let output = B::matmul_on_routine(lhs.primitive().clone(), rhs.primitive().clone(), routine);
        let (lhs_tracked, rhs_tracked) = (lhs.is_tracked(), rhs.is_tracked());
        match RoutedMatmulBackward
            .prepare::<C>([lhs.node(), rhs.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let lhs_state = rhs_tracked.then(|| prep.checkpoint(&lhs));
                let rhs_state = lhs_tracked.then(|| prep.checkpoint(&rhs));
                prep.finish((lhs_state, rhs_state, routine), output)
            }
            OpsKind::UnTracked(prep) => prep.finish(output),
        }
    }
}

/// `lhs @ rhs` on `routine` (see the module's docs), or on burn's matmul where the routine
/// refuses it ([`routine_refusals`]).
pub fn matmul_on_routine<const D: usize>(
    lhs: Tensor<D>,
    rhs: Tensor<D>,
    routine: MatmulRoutine,
) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as RoutedMatmul>::matmul_on_routine(
        lhs.into_dispatch(),
        rhs.into_dispatch(),
        routine,
    ))
}

/// Index into `MatmulRoutine::ALL` of the routine the GPU's matmuls take; 0 (burn's).
static GPU_ROUTINE: AtomicUsize = AtomicUsize::new(0);

/// The routine this process's (or worker's) GPU matmuls take from now on: one GPU device
/// is acquired per process, when a run starts on it.
pub fn set_gpu_routine(routine: MatmulRoutine) {
    let index = MatmulRoutine::ALL.iter().position(|r| *r == routine).unwrap_or(0);
    GPU_ROUTINE.store(index, Ordering::Relaxed);
}

pub fn gpu_routine() -> MatmulRoutine {
    MatmulRoutine::ALL[GPU_ROUTINE.load(Ordering::Relaxed) % MatmulRoutine::ALL.len()]
}

/// `RegisterTile` on SwiftShader (see the module's docs), burn's routine on any other adapter.
/// In the browser the adapter's name is often withheld, so a software adapter behind the
/// browser's WebGPU counts as SwiftShader: Chromium's is.
pub fn routine_for_adapter(info: &wgpu::AdapterInfo) -> MatmulRoutine {
    routine_for(&info.name, info.device_type, info.backend)
}

fn routine_for(name: &str, device_type: wgpu::DeviceType, backend: wgpu::Backend) -> MatmulRoutine {
    let software = device_type == wgpu::DeviceType::Cpu;
    let swiftshader = name.to_lowercase().contains("swiftshader") || backend == wgpu::Backend::BrowserWebGpu;
    match software && swiftshader {
        true => MatmulRoutine::RegisterTile,
        false => MatmulRoutine::Burn,
    }
}

/// `x @ weight + bias` for `x` of [rows, in]: burn's `Linear::forward`, with the matmul on
/// the GPU's routine.
pub fn linear(layer: &Linear, x: Tensor<2>) -> Tensor<2> {
    let routine = gpu_routine();
    if routine == MatmulRoutine::Burn {
        return layer.forward(x);
    }
    let product = matmul_with(x, layer.weight.val(), routine);
    match &layer.bias {
        Some(bias) => product + bias.val().unsqueeze(),
        None => product,
    }
}

/// `linear` for `x` of [batch, positions, in]: the positions folded into the rows.
pub fn linear_3d(layer: &Linear, x: Tensor<3>) -> Tensor<3> {
    if gpu_routine() == MatmulRoutine::Burn {
        return layer.forward(x);
    }
    let [batch, positions, inputs] = x.dims();
    let out = linear(layer, x.reshape([batch * positions, inputs]));
    let [_, outputs] = out.dims();
    out.reshape([batch, positions, outputs])
}

/// `lhs @ rhs` on the GPU's routine (`matmul_with`).
pub fn matmul<const D: usize>(lhs: Tensor<D>, rhs: Tensor<D>) -> Tensor<D> {
    matmul_with(lhs, rhs, gpu_routine())
}

/// `lhs @ rhs` on `routine`, a batch dim of 1 broadcast as in burn's matmul (as an expanded
/// view: the expand's backward sums its gradient back); burn's matmul where the routine is
/// burn's or refuses.
fn matmul_with<const D: usize>(lhs: Tensor<D>, rhs: Tensor<D>, routine: MatmulRoutine) -> Tensor<D> {
    if routine == MatmulRoutine::Burn {
        return lhs.matmul(rhs);
    }
    let (mut lhs_dims, mut rhs_dims) = (lhs.dims(), rhs.dims());
    for dim in 0..D.saturating_sub(2) {
        match (lhs_dims[dim], rhs_dims[dim]) {
            (a, b) if a == b => {}
            (1, b) => lhs_dims[dim] = b,
            (a, 1) => rhs_dims[dim] = a,
            // Not broadcastable: burn's matmul says so.
            _ => return lhs.matmul(rhs),
        }
    }
    matmul_on_routine(lhs.expand(lhs_dims), rhs.expand(rhs_dims), routine)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use burn::tensor::{Distribution, Tolerance};

    use super::*;
    use crate::ops::backend::BackendKind;

    /// Held by each test that reads [`routine_refusals`], so that no other test's refusal
    /// lands between its two readings (the count is process-wide, tests run in parallel).
    static REFUSAL_COUNT: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn counting_refusals() -> std::sync::MutexGuard<'static, ()> {
        REFUSAL_COUNT
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Each routine's product and both gradients equal burn's matmul on the GPU, with a
    /// transposed operand (a weight gradient's layout), on shapes no tile divides and on
    /// shapes every tile and vector width divides.
    #[test]
    fn routed_matmul_equals_burns_forward_and_backward_on_wgpu() {
        let _counting = counting_refusals();
        let device = BackendKind::Wgpu.device().autodiff();
        for [rows, depth, cols] in [[37, 50, 29], [64, 48, 32]] {
            let lhs = Tensor::<2>::random([rows, depth], Distribution::Normal(0.0, 1.0), &device);
            let rhs = Tensor::<2>::random([cols, depth], Distribution::Normal(0.0, 1.0), &device).transpose();
            let weights = Tensor::<2>::random([rows, cols], Distribution::Normal(0.0, 1.0), &device);
            let run = |multiply: &dyn Fn(Tensor<2>, Tensor<2>) -> Tensor<2>| {
                let (lhs, rhs) = (
                    lhs.clone().detach().require_grad(),
                    rhs.clone().detach().require_grad(),
                );
                let product = multiply(lhs.clone(), rhs.clone());
                let grads = (product.clone() * weights.clone()).sum().backward();
                [
                    product.inner(),
                    lhs.grad(&grads).unwrap(),
                    rhs.grad(&grads).unwrap(),
                ]
                .map(|t| t.into_data())
            };
            let burns = run(&|l, r| l.matmul(r));
            for routine in [
                MatmulRoutine::Naive,
                MatmulRoutine::SimpleUnitMinTile,
                MatmulRoutine::CpuGemm,
                MatmulRoutine::RegisterTile,
            ] {
                let refused = routine_refusals();
                let ours = run(&|l, r| matmul_on_routine(l, r, routine));
                // Forward and both gradients ran on the routine, none on burn's fallback.
                assert_eq!(routine_refusals(), refused, "{routine:?} refused a product");
                for (ours, burns) in ours.iter().zip(&burns) {
                    ours.assert_approx_eq::<f32>(burns, Tolerance::rel_abs(1e-4, 1e-4));
                }
            }
        }
    }

    /// The im2col conv's product: a kernel of batch 1 against every image's patches gives
    /// burn's broadcast matmul, its values and both gradients (the kernel's summed over
    /// the batch).
    #[test]
    fn a_broadcast_batch_gives_burns_product_and_gradients() {
        let device = BackendKind::Wgpu.device().autodiff();
        let kernel = Tensor::<3>::random([1, 6, 18], Distribution::Normal(0.0, 1.0), &device);
        let patches = Tensor::<3>::random([5, 18, 49], Distribution::Normal(0.0, 1.0), &device);
        let weights = Tensor::<3>::random([5, 6, 49], Distribution::Normal(0.0, 1.0), &device);
        let run = |routine| {
            let (kernel, patches) = (
                kernel.clone().detach().require_grad(),
                patches.clone().detach().require_grad(),
            );
            let product = matmul_with(kernel.clone(), patches.clone(), routine);
            let grads = (product.clone() * weights.clone()).sum().backward();
            [
                product.inner(),
                kernel.grad(&grads).unwrap(),
                patches.grad(&grads).unwrap(),
            ]
            .map(|t| t.into_data())
        };
        let burns = run(MatmulRoutine::Burn);
        for routine in [MatmulRoutine::CpuGemm, MatmulRoutine::RegisterTile] {
            for (ours, burns) in run(routine).iter().zip(&burns) {
                ours.assert_approx_eq::<f32>(burns, Tolerance::rel_abs(1e-4, 1e-4));
            }
        }
    }

    /// A product the routine refuses (`RegisterTile` takes ranks 2 and 3 only) runs on
    /// burn's matmul, with burn's values, and is counted: the count the two tests around
    /// this one read to say that the routine ran.
    #[test]
    fn a_refused_product_gets_burns_values_and_is_counted() {
        let _counting = counting_refusals();
        let device = BackendKind::Wgpu.device();
        let normal = |dims: [usize; 4]| Tensor::<4>::random(dims, Distribution::Normal(0.0, 1.0), &device);
        let (lhs, rhs) = (normal([2, 3, 5, 7]), normal([2, 3, 7, 4]));
        let refused = routine_refusals();
        let ours = matmul_on_routine(lhs.clone(), rhs.clone(), MatmulRoutine::RegisterTile).into_data();
        assert_eq!(
            routine_refusals(),
            refused + 1,
            "the rank-4 product was not counted as refused"
        );
        ours.assert_approx_eq::<f32>(&lhs.matmul(rhs).into_data(), Tolerance::rel_abs(1e-4, 1e-4));
    }

    /// The backward products and the broadcast product fall back to burn's matmul where
    /// the routine refuses, so a refusal would give the right values unseen: each layout they
    /// hand the routine (transposed views, a stride-0 batch) must run on it, with burn's values.
    #[test]
    fn the_routine_runs_every_layout_the_backward_and_the_broadcast_give_it() {
        let _counting = counting_refusals();
        let device = BackendKind::Wgpu.device();
        let normal = |dims: [usize; 3]| Tensor::<3>::random(dims, Distribution::Normal(0.0, 1.0), &device);
        let (lhs, weight) = (normal([1, 37, 50]), normal([1, 29, 50]).transpose());
        let grad = normal([1, 37, 29]);
        let kernel = normal([1, 6, 18]).expand([5, 6, 18]);
        let (patches, conv_grad) = (normal([5, 18, 49]), normal([5, 6, 49]));
        let layouts = [
            ("forward, transposed weight", lhs.clone(), weight.clone()),
            ("lhs gradient", grad.clone(), weight.transpose()),
            ("weight gradient", lhs.transpose(), grad),
            ("broadcast kernel", kernel.clone(), patches.clone()),
            (
                "broadcast kernel's gradient",
                conv_grad.clone(),
                patches.transpose(),
            ),
            ("patches' gradient", kernel.transpose(), conv_grad),
            (
                "a batch every tile divides",
                normal([3, 8, 12]),
                normal([3, 12, 16]),
            ),
            (
                "its rhs transposed",
                normal([3, 8, 12]),
                normal([3, 16, 12]).swap_dims(1, 2),
            ),
        ];
        let routines = [
            MatmulRoutine::SimpleUnitMinTile,
            MatmulRoutine::CpuGemm,
            MatmulRoutine::RegisterTile,
        ];
        for routine in routines {
            for (layout, lhs, rhs) in &layouts {
                let refused = routine_refusals();
                let ours = matmul_on_routine(lhs.clone(), rhs.clone(), routine);
                let ours = ours.into_data();
                assert_eq!(
                    routine_refusals(),
                    refused,
                    "{routine:?} refused the {layout} layout"
                );
                ours.assert_approx_eq::<f32>(
                    &lhs.clone().matmul(rhs.clone()).into_data(),
                    Tolerance::rel_abs(1e-4, 1e-4),
                );
            }
        }
    }

    #[test]
    fn swiftshader_gets_the_register_tile_and_other_adapters_burns_routine() {
        use wgpu::{Backend, DeviceType};
        let cases = [
            (
                "SwiftShader Device (Subzero)",
                DeviceType::Cpu,
                Backend::Vulkan,
                MatmulRoutine::RegisterTile,
            ),
            (
                "",
                DeviceType::Cpu,
                Backend::BrowserWebGpu,
                MatmulRoutine::RegisterTile,
            ),
            (
                "llvmpipe (LLVM 15.0.6, 256 bits)",
                DeviceType::Cpu,
                Backend::Vulkan,
                MatmulRoutine::Burn,
            ),
            (
                "",
                DeviceType::DiscreteGpu,
                Backend::BrowserWebGpu,
                MatmulRoutine::Burn,
            ),
        ];
        for (name, device_type, backend, expected) in cases {
            assert_eq!(
                routine_for(name, device_type, backend),
                expected,
                "{name} {device_type:?} {backend:?}"
            );
        }
    }
}
