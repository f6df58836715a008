//! `headroom`: the command line (crate/cli).
#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    headroom::cli::main()
}

// The wasm32 build is a library loaded by the page; this binary only exists natively.
#[cfg(target_arch = "wasm32")]
fn main() {}
