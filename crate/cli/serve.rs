//! `headroom serve`: the playground and the dataset chunks over HTTP on one address.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::server;

#[derive(Args)]
pub struct ServeArgs {
    #[arg(long, default_value = server::DEFAULT_ADDR)]
    addr: SocketAddr,
    /// Folder to serve.
    #[arg(long, default_value = "static")]
    root: PathBuf,
    /// The JS front end, served at /web/ (skipped when the folder is absent).
    #[arg(long, default_value = "web")]
    web: PathBuf,
    /// Allow an --addr other machines can reach: the server has no authentication, and
    /// serves every file under --root and --web to whoever asks.
    #[arg(long)]
    public: bool,
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    if !args.root.is_dir() {
        anyhow::bail!(
            "{} is not a folder (run from the repository root, or pass --root)",
            args.root.display()
        );
    }
    if !args.addr.ip().is_loopback() {
        if !args.public {
            anyhow::bail!(
                "{} can be reached from other machines, and the server has no authentication: pass --public to serve there anyway, or use 127.0.0.1",
                args.addr
            );
        }
        eprintln!(
            "warning: serving on {} without authentication: every file under {} is readable by whoever reaches it",
            args.addr,
            args.root.display()
        );
    }
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    let bound = listener.local_addr()?;
    println!(
        "serving {} on http://{bound}/ (Ctrl-C stops)",
        args.root.display()
    );
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let web = args.web.is_dir().then_some(args.web);
    server::serve(listener, server::router(args.root, web), shutdown).await?;
    Ok(())
}
