// flex allocates each step's activations afresh and frees them; glibc hands the big ones
// back to the kernel and faults them in again next step (page faults and memset were ~15%
// of a CNN step under perf). mimalloc keeps them: the CNN on flex trains 1.44x as fast, at
// ~35 MiB more peak RSS (README, "Side by side"); jemalloc was slower here.
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
