//! `rkllmd pull NAME`: the pull with a progress bar per file on a
//! terminal, a log line per file elsewhere (journald, CI).

use super::{pull, Event, Hub, Options, Wanted};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::Path;

#[derive(clap::Args, Debug, Clone)]
pub struct PullArgs {
    /// The Hugging Face repository: OWNER/NAME, hf.co/OWNER/NAME, with :QUANTIZATION (w8a8, w4a16_g128, …) or :FILE_NAME to choose among its .rkllm files.
    pub name: String,
    /// Take the files converted for this chip (default: the board's, from the device tree).
    #[arg(long, value_parser = ["rk3588", "rk3576", "rk3562"])]
    pub chip: Option<String>,
    /// The repository's branch, tag or commit.
    #[arg(long, default_value = "main")]
    pub revision: String,
}

/// `models_dir` is the configured one (`main` hands it over: the pull reads no other setting).
pub async fn run(models_dir: Option<&Path>, args: &PullArgs) -> Result<(), String> {
    let models_dir = models_dir
        .ok_or("rkllmd pull needs --models-dir (RKLLMD_MODELS_DIR, models_dir): the folder pulled models go into")?;
    let wanted = Wanted::parse(&args.name).map_err(|e| e.to_string())?;
    let options = Options { revision: args.revision.clone(), chip: args.chip.clone().or_else(super::board_chip) };
    let hub = Hub::from_env().map_err(|e| e.to_string())?;
    let terminal = std::io::stderr().is_terminal();
    let bars = MultiProgress::with_draw_target(if terminal {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let style =
        ProgressStyle::with_template("{msg:40!} {bytes:>10}/{total_bytes:<10} {bar:30} {bytes_per_sec:>12} {eta}")
            .expect("a valid template");
    let mut shown: Vec<ProgressBar> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut on = |event: Event| match event {
        Event::Chosen(choice) => {
            for (entry, local) in &choice.files {
                let bar = bars.add(ProgressBar::new(entry.size).with_style(style.clone()).with_message(local.clone()));
                shown.push(bar);
                names.push(local.clone());
            }
            tracing::info!(repo = %wanted.repo, model = %choice.id, files = choice.files.len(), "pulling");
        }
        Event::Bytes { index, completed } => shown[index].set_position(completed),
        Event::Placed { index, fetched } => {
            shown[index].finish();
            if !terminal {
                let how = if fetched { "downloaded and verified" } else { "already there, verified" };
                tracing::info!(file = %names[index], "{how}");
            }
        }
    };
    let pulled = pull(&hub, &wanted, &options, models_dir, &mut on).await.map_err(|e| e.to_string())?;
    tracing::info!(
        model = %pulled.id,
        path = %pulled.model.display(),
        fetched = pulled.fetched,
        "pulled; a daemon with models_dir = {} serves it as `{}` once told (SIGHUP: systemctl reload rkllmd) or restarted",
        models_dir.display(),
        pulled.id
    );
    Ok(())
}
