//! `--smoke`: load the model exactly as `serve` does and generate one token.
//! A runtime that accepts a model at init and then cannot run it (runtime
//! 1.1.x returned 0 from a failed init) is caught only this way.

use super::checks::version_parts;
use super::{Check, Report};
use crate::config::Config;
use crate::engine::{GenEvent, Job};
use futures_util::StreamExt;
use std::time::Instant;

const TITLE: &str = "smoke run";

pub async fn run(config: &Config, report: &mut Report) {
    let load_config = config.clone();
    let started = Instant::now();
    let loaded = tokio::task::spawn_blocking(move || crate::app::load_model(&load_config, |_| {})).await;
    let engine = match loaded {
        Ok(Ok(loaded)) => loaded.engine,
        Ok(Err(e)) => {
            let text = e.to_string();
            report.push(Check::fail(TITLE, format!("loading failed: {text}"), fix_for(&text)));
            return;
        }
        Err(e) => {
            report.push(Check::fail(TITLE, format!("loading crashed: {e}"), "report this with the log"));
            return;
        }
    };
    let info = engine.info().clone();
    report.push(Check::ok(
        TITLE,
        format!(
            "loaded {} in {:.1} s ({} runtime {}, ABI {})",
            info.model_path,
            started.elapsed().as_secs_f64(),
            info.backend.as_str(),
            info.version.as_deref().unwrap_or("unknown"),
            info.abi
        ),
    ));
    toolkit(config, info.version.as_deref(), engine.init_log(), report);
    let job = Job { max_new_tokens: Some(1), ..Job::new("doctor-smoke", "Hello") };
    let mut generation = match engine.reserve() {
        Ok(place) => engine.submit(place, job),
        Err(e) => {
            report.push(Check::fail(TITLE, format!("cannot submit a run: {e}"), "report this with the log"));
            return;
        }
    };
    let asked = Instant::now();
    let mut event = generation.next().await;
    if matches!(event, Some(GenEvent::Started)) {
        event = generation.next().await;
    }
    let check = match event {
        Some(GenEvent::Token { .. }) => {
            Check::ok(TITLE, format!("first token after {:.0} ms", asked.elapsed().as_secs_f64() * 1000.0))
        }
        Some(GenEvent::Done(outcome)) => Check::fail(
            TITLE,
            format!("the run ended without a token: {:?}", outcome.reason),
            "run rkllmd with RKLLMD_LOG=debug and read the runtime's lines",
        ),
        Some(GenEvent::Started) | None => {
            Check::fail(TITLE, "the run ended without a result".into(), "report this with the log")
        }
    };
    report.push(check);
}

/// The toolkit version and context limit the runtime printed at init
/// (`I rkllm: rkllm-toolkit version: 1.2.1, max_context_limit: 4096, …`).
fn toolkit(config: &Config, runtime: Option<&str>, init_log: &str, report: &mut Report) {
    const MODEL: &str = "model toolkit";
    let field = |key: &str| {
        init_log
            .lines()
            .find_map(|l| l.split(key).nth(1))
            .map(|rest| rest.split(',').next().unwrap_or_default().trim().to_owned())
    };
    let Some(toolkit) = field("rkllm-toolkit version:") else {
        report.push(Check::ok(MODEL, "the runtime did not print the model's toolkit version".into()));
        return;
    };
    let (tk, rt) = (version_parts(&toolkit), runtime.map(version_parts).unwrap_or_default());
    if tk.len() >= 2 && rt.len() >= 2 && tk[..2] != rt[..2] {
        report.push(Check::warn(
            MODEL,
            format!("converted with rkllm-toolkit {toolkit}, served by runtime {}: mixed releases (runtime 1.3.0 has a reported EOS bug with older model files)", runtime.unwrap_or("?")),
            "convert the model with the toolkit of the runtime's release",
        ));
    } else {
        report.push(Check::ok(MODEL, format!("rkllm-toolkit {toolkit}")));
    }
    if let Some(limit) = field("max_context_limit:").and_then(|v| v.parse::<u32>().ok()) {
        if let Some(configured) = config.max_context_len.filter(|&c| c > limit) {
            report.push(Check::warn(
                MODEL,
                format!("max_context_len {configured} exceeds the model's max_context_limit {limit}"),
                &format!("set max_context_len = {limit} (or convert the model with a larger context)"),
            ));
        }
    }
}

/// The fix for the runtime's known init failures (docs/runtime.md, "What `rkllm_init` prints").
fn fix_for(error: &str) -> &'static str {
    if error.contains("failed to malloc npu memory") {
        "set base_domain_id = 1 in the config"
    } else if error.contains("driver version is too low") {
        "upgrade to a vendor kernel with rknpu 0.9.8"
    } else if error.contains("Platform error") {
        "this runtime does not support this SoC: use an RK3588/RK3576 board and a model converted for it"
    } else if error.contains("invalid rkllm model")
        || error.contains("model magic")
        || error.contains("number of tensors")
    {
        "re-convert the model with the rkllm-toolkit of the runtime's release, for this SoC (target_platform)"
    } else {
        "read the runtime's lines above; docs/deploy.md lists the common failures"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn levels(init_log: &str, runtime: &str, max_context_len: u32) -> String {
        let config = Config { max_context_len: Some(max_context_len), ..Config::default() };
        let mut report = Report::default();
        toolkit(&config, Some(runtime), init_log, &mut report);
        report.render()
    }

    // The lines runtime 1.2.1+ prints at init (docs/runtime.md).
    const LOG: &str = "I rkllm: rkllm-runtime version: 1.3.0, rknpu driver version: 0.9.8, platform: RK3588\n\
                       I rkllm: rkllm-toolkit version: 1.2.1, max_context_limit: 4096, npu_core_num: 3, target_platform: RK3588, model_dtype: W8A8\n";

    #[test]
    fn toolkit_of_another_release_and_a_context_beyond_the_limit_warn() {
        let out = levels(LOG, "1.3.0", 8192);
        assert!(
            out.contains("WARN  model toolkit    converted with rkllm-toolkit 1.2.1, served by runtime 1.3.0"),
            "{out}"
        );
        assert!(out.contains("max_context_len 8192 exceeds the model's max_context_limit 4096"), "{out}");
        assert!(out.contains("fix: set max_context_len = 4096"), "{out}");
    }

    #[test]
    fn a_matching_toolkit_within_its_limit_is_ok() {
        let out = levels(&LOG.replace("1.3.0", "1.2.1"), "1.2.1", 4096);
        assert!(out.contains("OK    model toolkit    rkllm-toolkit 1.2.1"), "{out}");
        assert!(out.contains("0 failed, 0 warnings"), "{out}");
    }

    #[test]
    fn known_init_failures_get_their_fix() {
        assert_eq!(fix_for("… E rkllm: failed to malloc npu memory!"), "set base_domain_id = 1 in the config");
        assert!(fix_for("E rkllm: invalid rkllm model!").contains("re-convert"));
        assert!(fix_for("Your rknpu driver version is too low, please upgrade to 0.9.7").contains("0.9.8"));
    }
}
