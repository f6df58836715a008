// flex allocates each step's activations afresh and frees them; glibc hands the big ones
// back to the kernel and faults them in again next step (~15% of a CNN step in page faults
// and memset under perf). mimalloc keeps them: the CNN trains ~30% faster on flex, RSS
// +10 MB (README, "Against PyTorch natively"); jemalloc was slower here.
#[cfg(not(target_arch = "wasm32"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    headroom::cli::main()
}

// The wasm32 build is a library loaded by the page; this binary only exists natively.
#[cfg(target_arch = "wasm32")]
fn main() {}
