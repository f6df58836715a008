//! A matmul kernel for software WebGPU adapters: each invocation computes a register tile of
//! the output (up to 4 rows by a vector of up to 4 columns) straight from global memory, with
//! no shared memory and no barriers.
//!
//! Why (the design's reasoning; the bench is the evidence): SwiftShader, headless Chromium's
//! adapter, runs a workgroup's invocations as the SIMD lanes of a CPU thread, where a
//! barrier is a switch of every invocation rather than a cheap wait. cubek's tiled routines
//! stage tiles through shared memory behind barriers; its `CpuGemm` computes one register
//! block per plane, so a plane's lanes repeat one lane's work. Here neighbouring invocations
//! take neighbouring column vectors and share their rows, so every lane does its own work
//! and a row's value is read once per tile. `headroom bench matmul` measures it beside
//! cubek's routines: several times `CpuGemm`'s speed on the MLP's and the GPT's large
//! products on SwiftShader, behind burn's routine on lavapipe (docs/benchmarks.md,
//! "Headroom's own matmul kernel for SwiftShader").

use burn::backend::cubecl::dtype_to_storage_type;
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::tensor::CubeTensor;

/// Rows of the tile: an accumulator vector each.
const MAX_TILE_ROWS: usize = 4;
/// Invocations per workgroup along the columns and the rows: 64 in all, within every
/// WebGPU adapter's limit.
const GROUP: (u32, u32) = (16, 4);

#[cube(launch_unchecked)]
fn register_tile_matmul<F: Float, N: Size>(
    lhs: &Tensor<F>,
    rhs: &Tensor<Vector<F, N>>,
    out: &mut Tensor<Vector<F, N>>,
    #[comptime] row_dim: usize,
    #[comptime] tile_rows: usize,
    #[define(F)] _dtype: ElemType,
) {
    let col_dim = comptime!(row_dim + 1);
    let width = out.vector_size();
    let col = ABSOLUTE_POS_X as usize;
    let first_row = ABSOLUTE_POS_Y as usize * tile_rows;
    if col >= out.shape(col_dim) / width || first_row >= out.shape(row_dim) {
        terminate!();
    }
    let depth = lhs.shape(col_dim);
    let (lhs_row, lhs_k) = (lhs.stride(row_dim), lhs.stride(col_dim));
    // rhs and out are indexed in vectors; their strides are in elements.
    let rhs_k = rhs.stride(row_dim) / width;
    let out_row = out.stride(row_dim) / width;
    let mut lhs_at = first_row * lhs_row;
    let mut rhs_at = col * rhs.stride(col_dim);
    let mut out_at = first_row * out_row + col;
    if comptime!(row_dim == 1) {
        let batch = ABSOLUTE_POS_Z as usize;
        lhs_at += batch * lhs.stride(0);
        rhs_at += batch * rhs.stride(0) / width;
        out_at += batch * out.stride(0) / width;
    }

    let mut acc = Array::<Vector<F, N>>::new(tile_rows);
    #[unroll]
    for row in 0..tile_rows {
        acc[row] = Vector::new(F::new(0.0));
    }
    for k in 0..depth {
        let b = rhs[rhs_at + k * rhs_k];
        #[unroll]
        for row in 0..tile_rows {
            let a = lhs[lhs_at + row * lhs_row + k * lhs_k];
            acc[row] += Vector::new(a) * b;
        }
    }
    #[unroll]
    for row in 0..tile_rows {
        out[out_at + row * out_row] = acc[row];
    }
}

/// `lhs @ rhs` into `out` for matrices or one batch dim of the same size on all three (a
/// size-1 batch expanded to it has stride 0, which the kernel reads as is); `None` for more
/// batch dims, a batch left to broadcast, or an empty output, which burn's matmul takes.
pub fn register_tile_matmul_launch(lhs: CubeTensor, rhs: CubeTensor, out: CubeTensor) -> Option<CubeTensor> {
    let rank = lhs.meta.num_dims();
    if !(rank == 2 || rank == 3) || rhs.meta.num_dims() != rank {
        return None;
    }
    let (row_dim, col_dim) = (rank - 2, rank - 1);
    let (rows, cols) = (out.meta.shape()[row_dim], out.meta.shape()[col_dim]);
    let batches = if rank == 3 { out.meta.shape()[0] } else { 1 };
    let same_batch = rank == 2 || (lhs.meta.shape()[0] == batches && rhs.meta.shape()[0] == batches);
    if !same_batch || rows == 0 || cols == 0 {
        return None;
    }
    let rhs_strides = rhs.meta.strides();
    let out_strides = out.meta.strides();
    // A column vector needs its columns contiguous and every vector's start aligned to it.
    let width = [4, 2, 1].into_iter().find(|&w| {
        let aligned = |strides: &[usize]| strides[..col_dim].iter().all(|s| s % w == 0);
        w == 1
            || (cols % w == 0
                && rhs_strides[col_dim] == 1
                && out_strides[col_dim] == 1
                && aligned(rhs_strides)
                && aligned(out_strides))
    })?;
    let tile_rows = (1..=MAX_TILE_ROWS).rev().find(|t| rows % t == 0)?;
    let cube_count = CubeCount::Static(
        (cols / width).div_ceil(GROUP.0 as usize) as u32,
        (rows / tile_rows).div_ceil(GROUP.1 as usize) as u32,
        batches as u32,
    );
    let dtype = out.dtype;
    unsafe {
        register_tile_matmul::launch_unchecked(
            &out.client,
            cube_count,
            CubeDim::new_2d(GROUP.0, GROUP.1),
            width,
            lhs.into_tensor_arg(),
            rhs.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            row_dim,
            tile_rows,
            dtype_to_storage_type(dtype),
        )
    };
    Some(out)
}
