//! Backend kernels and devices, below the models: Adam's step on 8-bit moments, and on f32
//! moments (an f32 parameter, or an f16 one without a master copy), as one kernel each
//! (`adam8`, `adam`), causal
//! attention that keeps nothing T×T (`attention`), which burn backend a run uses and how
//! its device is made (`backend`), a matmul on a named routine (`matmul`, `tile_matmul`),
//! a linear layer whose weight gradient stays off the activations' pages (`linear`), a ReLU
//! that keeps its output (`relu`), the CNN's conv and max-pool on flex (`conv_flex`,
//! `max_pool`), and the VJP seed recomputation starts from (`vjp`). Each registers as a
//! burn backend extension, so it runs under autodiff and fusion too.

pub mod adam;
pub mod adam8;
pub mod attention;
pub mod backend;
pub mod conv_flex;
pub mod linear;
pub mod matmul;
pub mod max_pool;
pub mod relu;
mod tile_matmul;
pub mod vjp;
