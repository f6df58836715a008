//! `headroom bench inputs`: mutated manifests and chunks, counted by outcome; the figure
//! that matters is zero panics.

use clap::Args;

use super::mutate;

#[derive(Args)]
pub struct InputsBenchArgs {
    /// Mutated cases per dataset (an image set in each codec and a text set).
    #[arg(long, default_value_t = 100_000)]
    cases: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub fn bench_inputs(args: InputsBenchArgs) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    // The panics are counted below; their messages would bury the table.
    std::panic::set_hook(Box::new(|_| {}));
    println!(
        "{:<16} {:>10} {:>10} {:>10} {:>8}",
        "dataset", "cases", "valid", "refused", "panics"
    );
    let mut panics = Vec::new();
    for (name, dataset) in mutate::sample_datasets(work.path())? {
        let figures = mutate::run(&dataset, args.seed, args.cases);
        println!(
            "{:<16} {:>10} {:>10} {:>10} {:>8}",
            name, figures.cases, figures.valid, figures.refused, figures.panics
        );
        panics.extend(figures.panic_examples);
    }
    let _ = std::panic::take_hook();
    if !panics.is_empty() {
        anyhow::bail!("panics:\n{}", panics.join("\n"));
    }
    Ok(())
}
