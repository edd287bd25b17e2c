//! `migratory-replay view REC`: serves the browser viewer over a recording (`viewer`) until
//! SIGINT or SIGTERM, printing `viewing REC on http://ADDR/` once it listens.

use std::path::PathBuf;

use anyhow::Context as _;
use migratory_replay::viewer::{self, Compare};

#[derive(clap::Args, Debug)]
pub struct ViewArgs {
    rec: PathBuf,
    /// Address to serve the viewer on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7401", value_name = "ADDR")]
    listen: std::net::SocketAddr,
    /// Another recording of the same world: the viewer jumps to the first tick at which
    /// they diverge and highlights the entities that differ.
    #[arg(long, value_name = "OTHER.mrec", conflicts_with = "compare_shards")]
    compare: Option<PathBuf>,
    /// Replay the recording on 1 and N shards and show where they diverge, if they do.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    compare_shards: Option<u16>,
}

pub fn view(args: ViewArgs) -> anyhow::Result<()> {
    let compare = match (args.compare, args.compare_shards) {
        (Some(other), _) => Some(Compare::Recording(other)),
        (None, Some(n)) => Some(Compare::Shards(n.into())),
        (None, None) => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let rec = args.rec;
    runtime.block_on(async move {
        let handle = viewer::view(rec.clone(), args.listen, compare).await?;
        out!("viewing {} on http://{}/", rec.display(), handle.local_addr);
        wait_for_signal().await?;
        handle.task.abort();
        Ok(())
    })
}

/// Waits for SIGTERM or SIGINT.
async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
