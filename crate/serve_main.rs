//! `headroom-serve`: the same command line, built without the trainer by web/play so the
//! page is served before (or without) a native build of burn.
#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    headroom::cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
