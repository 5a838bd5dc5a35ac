//! The checks, each turning facts into report lines with a fix.

use super::{Check, Report};
use crate::config::{Backend, Config};
use crate::conversation::{PromptSettings, Prompter, TemplateFamily, TemplateMode};
use crate::engine::{runtime_tokenizer, BackendKind};
use crate::metrics::board::Board;
use crate::registry::ModelSpec;
use rkllm_sys::{loader, Runtime};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What the configuration will serve, as far as the checks need it.
pub struct Plan<'a> {
    pub config: &'a Config,
    /// The real runtime is required: `backend = "rkllm"`, or `auto` with a
    /// real model file (which is never served by the simulator).
    pub needs_npu: bool,
}

impl<'a> Plan<'a> {
    pub fn new(config: &'a Config) -> Self {
        let real_model = config.model.as_deref().is_some_and(|m| !m.starts_with("sim:"));
        let needs_npu = match config.backend {
            Backend::Rkllm => true,
            Backend::Auto => real_model,
            Backend::Sim => false,
        };
        Plan { config, needs_npu }
    }

    /// A missing board facility is a failure when the real runtime is
    /// required, a warning otherwise.
    fn missing(&self, title: &'static str, detail: String, fix: &str) -> Check {
        if self.needs_npu {
            Check::fail(title, detail, fix)
        } else {
            Check::warn(title, detail, fix)
        }
    }
}

const DRIVER_MIN: &str = "0.9.7";
const DRIVER_RECOMMENDED: &str = "0.9.8";
/// The runtime warns when fewer cores are online.
const CORES_EXPECTED: usize = 8;
const LIBRARY: &str = "runtime library";

/// Finds and loads the runtime library the way `serve` would, with the
/// system directories under the board's root.
pub fn library(board: &Board, plan: &Plan, report: &mut Report) -> Option<Runtime> {
    let config = plan.config;
    if config.backend == Backend::Sim {
        report.push(Check::ok(LIBRARY, "backend = \"sim\": the simulated runtime, no library needed".into()));
        return None;
    }
    let found = match (&config.lib, std::env::var_os("RKLLM_LIB").filter(|p| !p.is_empty())) {
        (Some(lib), _) => Ok(lib.clone()),
        (None, Some(env)) => Ok(PathBuf::from(env)),
        (None, None) => {
            let searched: Vec<PathBuf> =
                loader::search_paths().iter().map(|p| board.path(&p.to_string_lossy())).collect();
            searched.iter().find(|p| p.is_file()).cloned().ok_or(searched)
        }
    };
    let path = match found {
        Ok(path) => path,
        Err(searched) => {
            let shown: Vec<String> = searched.iter().map(|p| p.display().to_string()).collect();
            let fix = "install librkllmrt.so from airockchip/rknn-llm (rkllm-runtime/Linux/librkllm_api/aarch64) \
                       into /usr/lib, or set lib = \"/path/librkllmrt.so\" in the config";
            let detail = format!("no {} found (looked in {})", loader::LIBRARY_NAME, shown.join(", "));
            report.push(if plan.needs_npu {
                Check::fail(LIBRARY, detail, fix)
            } else {
                Check::warn(LIBRARY, format!("{detail}; rkllmd would serve the simulated runtime"), fix)
            });
            return None;
        }
    };
    match Runtime::load(&path, config.runtime_abi()) {
        Ok(runtime) => {
            let version = runtime.version().unwrap_or("unknown (set by runtime_abi)");
            report.push(Check::ok(LIBRARY, format!("{}: runtime {version}, ABI {}", path.display(), runtime.abi())));
            Some(runtime)
        }
        Err(e) => {
            let fix = format!(
                "install librkllmrt.so {} for this architecture; \
                 `strings librkllmrt.so | grep 'RKLLM SDK'` shows a library's version",
                rkllm_sys::Abi::supported()
            );
            report.push(plan.missing(LIBRARY, e.to_string(), &fix));
            None
        }
    }
}

pub fn driver(board: &Board, plan: &Plan, report: &mut Report) {
    const TITLE: &str = "NPU driver";
    let Some((version, file)) = board.npu_driver_version() else {
        let nodes = board.npu_nodes();
        if nodes.rknpu.is_some() || nodes.render.is_some() {
            report.push(Check::warn(
                TITLE,
                "the NPU device exists but its driver version is not readable here".into(),
                "sudo cat /sys/kernel/debug/rknpu/version (0.9.8 or later is recommended)",
            ));
            return;
        }
        report.push(plan.missing(
            TITLE,
            "no rknpu driver version (/sys/module/rknpu/version, debugfs rknpu/version)".into(),
            "boot a Rockchip vendor kernel (5.10/6.1 BSP) with the rknpu driver 0.9.8 or later",
        ));
        return;
    };
    let parts = version_parts(&version);
    let upgrade = "upgrade to a vendor kernel with rknpu 0.9.8 (the board vendor's latest BSP image)";
    if parts < version_parts(DRIVER_MIN) {
        report.push(Check::fail(
            TITLE,
            format!(
                "rknpu {version} ({file}): the runtime refuses it with \
                 \"Your rknpu driver version is too low, please upgrade to 0.9.7\""
            ),
            upgrade,
        ));
    } else if parts < version_parts(DRIVER_RECOMMENDED) {
        report.push(Check::warn(
            TITLE,
            format!("rknpu {version} ({file}): below the recommended {DRIVER_RECOMMENDED}; \"Your rknpu driver version is too low\" and NPU memory errors are reported with older drivers"),
            upgrade,
        ));
    } else {
        report.push(Check::ok(TITLE, format!("rknpu {version} ({file})")));
    }
}

pub fn devices(board: &Board, plan: &Plan, report: &mut Report) {
    const TITLE: &str = "NPU device";
    let nodes = board.npu_nodes();
    let mut wanted: Vec<PathBuf> = Vec::new();
    if let Some(render) = &nodes.render {
        wanted.push(render.clone());
    }
    if let Some(rknpu) = &nodes.rknpu {
        wanted.push(rknpu.clone());
        match nodes.heaps.first() {
            Some(heap) => wanted.push(heap.clone()),
            None => report.push(plan.missing(
                TITLE,
                format!("{} exists but {} is empty", rknpu.display(), board.path("/dev/dma_heap").display()),
                "the vendor kernel provides /dev/dma_heap/*; check that CONFIG_DMABUF_HEAPS is enabled",
            )),
        }
    }
    if wanted.is_empty() {
        report.push(plan.missing(
            TITLE,
            format!(
                "neither {} nor the NPU's DRM render node ({}) exists",
                board.path("/dev/rknpu").display(),
                board.path("/dev/dri/renderD129").display()
            ),
            "boot a Rockchip vendor kernel with the rknpu driver",
        ));
        return;
    }
    for node in wanted {
        report.push(open_check(board, &node));
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        report.push(Check::warn(
            "this user",
            "running as root, which can open any device; the service runs unprivileged".into(),
            "check as the service user: sudo -u rkllmd rkllmd --config /etc/rkllmd/config.toml doctor",
        ));
    }
}

/// Whether this process can open a node read-write, with its owner group.
fn open_check(board: &Board, node: &Path) -> Check {
    const TITLE: &str = "NPU device";
    let group = std::fs::metadata(node).ok().map(|m| {
        let name = board.group_name(m.gid()).unwrap_or_else(|| m.gid().to_string());
        format!("group {name}, mode {:o}", m.mode() & 0o777)
    });
    let group = group.unwrap_or_else(|| "unreadable".into());
    match std::fs::OpenOptions::new().read(true).write(true).open(node) {
        Ok(_) => Check::ok(TITLE, format!("{} ({group}): this user can open it", node.display())),
        Err(e) => Check::fail(
            TITLE,
            format!("{} ({group}): cannot open it: {e}", node.display()),
            "add the user to the render and video groups (sudo usermod -aG render,video USER, then log in again) \
             and install the udev rule /usr/lib/udev/rules.d/60-rkllmd-npu.rules (sudo udevadm trigger)",
        ),
    }
}

pub fn cpus(board: &Board, report: &mut Report) {
    const TITLE: &str = "CPU cores";
    match board.cpus_online() {
        Some(n) if n >= CORES_EXPECTED => report.push(Check::ok(TITLE, format!("{n} online"))),
        Some(n) => report.push(Check::warn(
            TITLE,
            format!("{n} online; the runtime warns below {CORES_EXPECTED} and runs slower"),
            "bring the cores online (echo 1 | sudo tee /sys/devices/system/cpu/cpuN/online) or check the kernel's maxcpus=",
        )),
        None => report.push(Check::warn(
            TITLE,
            "unknown (/sys/devices/system/cpu/online unreadable)".into(),
            "none needed off a board",
        )),
    }
}

/// Free memory against the model's size (the runtime maps the whole model).
pub fn memory(board: &Board, model_size: Option<u64>, report: &mut Report) {
    const TITLE: &str = "memory";
    let Some((total, available)) = board.memory() else {
        report.push(Check::warn(TITLE, "/proc/meminfo unreadable".into(), "none needed off a board"));
        return;
    };
    let shown = format!("{} available of {}", gib(available), gib(total));
    let fix = "stop other memory users, use a smaller or more quantized model, or a board with more RAM";
    match model_size {
        Some(size) if available < size => {
            report.push(Check::fail(TITLE, format!("{shown}; the model alone needs {}", gib(size)), fix))
        }
        // The KV cache and the runtime's buffers come on top of the weights.
        Some(size) if available < size + size / 4 => {
            report.push(Check::warn(TITLE, format!("{shown}; tight for a {} model plus its KV cache", gib(size)), fix))
        }
        Some(size) => report.push(Check::ok(TITLE, format!("{shown}; model {}", gib(size)))),
        None => report.push(Check::ok(TITLE, shown)),
    }
}

/// The chat template `serve` would render with, found, configured or
/// detected as it does, and why. Without one, conversations are folded into
/// the runtime template's one user message: served, but lossy.
pub fn chat_template(plan: &Plan, spec: &ModelSpec, root: &Path, report: &mut Report) {
    const TITLE: &str = "chat template";
    // Without a model the model check has failed already.
    if spec.runtime.model.is_none() && plan.needs_npu {
        return;
    }
    let id = &spec.id;
    let families: Vec<&str> = TemplateFamily::ALL.iter().map(|f| f.name()).collect();
    let configure = format!(
        "put the model's tokenizer_config.json (from its Hugging Face repo) next to the .rkllm file, \
         or set chat_template = \"/path/to/tokenizer_config.json\", or a built-in template = \"…\" ({}) in the config",
        families.join(", ")
    );
    let kind = if plan.needs_npu { BackendKind::Rkllm } else { BackendKind::Sim };
    let prompt = PromptSettings { runtime_tokenizer: runtime_tokenizer(kind), ..spec.prompt.clone() };
    match Prompter::load(&prompt, &spec.path) {
        Ok(prompter) => {
            let info = prompter.describe();
            let text = format!(
                "{id}: {} [{}]: {}; tokenizer: {}",
                info.origin,
                info.mode.as_str(),
                info.reason,
                info.tokenizer
            );
            if info.mode == TemplateMode::RuntimeFolded {
                let text = format!(
                    "{text}. A system prompt, earlier turns and tools reach the model only as a folded transcript"
                );
                report.push(Check::warn(TITLE, text, &configure));
            } else if info.warn {
                report.push(Check::warn(TITLE, text, &format!("if the guess is wrong, {configure}")));
            } else {
                report.push(Check::ok(TITLE, text));
            }
            let (slots, batch) = super::batch::slots(spec, &prompter, root);
            report.push(conversation_cache(spec.engine.conversation_cache, slots, &prompter));
            report.push(batch);
        }
        Err(e) => report.push(Check::fail(
            TITLE,
            format!("{id}: {e}"),
            "fix the file named (or point chat_template / tokenizer elsewhere); the model does not load with it",
        )),
    }
}

/// Whether follow-up turns will reuse the KV cache, as the registry's load decides.
fn conversation_cache(configured: bool, batch: u8, prompter: &Prompter) -> Check {
    const TITLE: &str = "conversation cache";
    match (configured, prompter.renders(), prompter.has_tokenizer()) {
        (false, ..) => Check::ok(TITLE, "off (conversation_cache = off): every request prefills its whole prompt".into()),
        (true, true, true) if batch > 1 => Check::ok(
            TITLE,
            format!("on, one conversation per batch slot ({batch}): a follow-up in its slot prefills only what is new"),
        ),
        (true, true, true) => Check::ok(TITLE, "on: a follow-up turn prefills only what is new".into()),
        (true, false, _) => Check::warn(
            TITLE,
            "off: the runtime's own template is in use, and token input bypasses it".into(),
            "give the model's chat template (see the chat template check)",
        ),
        (true, true, false) => Check::warn(
            TITLE,
            "off: no tokenizer.json, so the daemon cannot know what the KV cache holds; every turn prefills the whole conversation".into(),
            "put the model's tokenizer.json (from its Hugging Face repo) next to the .rkllm file, or set tokenizer = \"/path/to/tokenizer.json\"",
        ),
    }
}

/// The model file; returns its size when it is a readable file.
pub fn model(plan: &Plan, spec: &ModelSpec, report: &mut Report) -> Option<u64> {
    const TITLE: &str = "model";
    let Some(model) = spec.runtime.model.as_deref() else {
        if plan.needs_npu {
            report.push(Check::fail(
                TITLE,
                "no model configured".into(),
                "set model = \"/var/lib/rkllmd/models/NAME.rkllm\" in /etc/rkllmd/config.toml",
            ));
        } else {
            report.push(Check::ok(TITLE, format!("none configured: the simulator's sim:{}", plan.config.sim_profile)));
        }
        return None;
    };
    if model.starts_with("sim:") {
        report.push(Check::ok(TITLE, format!("{} = {model} (a simulated model)", spec.id)));
        return None;
    }
    let shown = format!("{} = {model}", spec.id);
    let model = shown.as_str();
    let path = Path::new(&spec.path);
    let fix_path = "convert the model with rkllm-toolkit for this SoC and put the .rkllm file where model = points";
    let meta = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m,
        Ok(_) => {
            report.push(Check::fail(TITLE, format!("{model} is not a file"), fix_path));
            return None;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let fix = "correct the path (model = in the config, --model, or the [[models]] table's path); \
                       `ls` the directory it names";
            report.push(Check::fail(TITLE, format!("{model}: no such file"), fix));
            return None;
        }
        Err(e) => {
            report.push(Check::fail(TITLE, format!("{model}: {e}"), fix_path));
            return None;
        }
    };
    let mut header = [0u8; 16];
    let readable = std::fs::File::open(path).and_then(|mut f| std::io::Read::read(&mut f, &mut header));
    match readable {
        Err(e) => report.push(Check::fail(
            TITLE,
            format!("{model}: cannot read it: {e}"),
            "make it readable by the service user (chmod o+r, or chgrp rkllmd) and its directories searchable",
        )),
        Ok(0) => report.push(Check::fail(TITLE, format!("{model} is empty"), fix_path)),
        Ok(_) if path.extension().is_none_or(|e| e != "rkllm") => report.push(Check::warn(
            TITLE,
            format!("{model} ({}) does not end in .rkllm", gib(meta.len())),
            "use a model converted with rkllm-toolkit (.rkllm); GGUF/safetensors files do not load",
        )),
        Ok(_) => report.push(Check::ok(
            TITLE,
            format!("{model}: {}, readable; toolkit version and loadability: --smoke", gib(meta.len())),
        )),
    }
    Some(meta.len())
}

pub fn frequencies(board: &Board, report: &mut Report) {
    const PIN: &str = "for steady speeds: sudo systemctl enable --now rkllmd-pin-freq.service";
    let describe = |governor: &Option<String>, cur: Option<u64>, max: Option<u64>, unit: u64| {
        let mhz = |v: Option<u64>| v.map_or("?".into(), |v| (v / unit).to_string());
        format!("{} MHz (max {} MHz), governor {}", mhz(cur), mhz(max), governor.as_deref().unwrap_or("?"))
    };
    for (title, devfreq) in [("NPU clock", board.npu_devfreq()), ("DDR clock", board.ddr_devfreq())] {
        match devfreq {
            Some(d) => {
                let text = format!("{}: {}", d.name, describe(&d.governor, d.cur_hz, d.max_hz, 1_000_000));
                report.push(governor_check(title, text, d.governor.as_deref(), PIN));
            }
            None => report.push(Check::warn(
                title,
                "no devfreq device in /sys/class/devfreq".into(),
                "none needed off a board; on a board the vendor kernel provides it",
            )),
        }
    }
    let policies = board.cpu_policies();
    if policies.is_empty() {
        report.push(Check::warn("CPU clock", "no cpufreq policies".into(), "none needed off a board"));
    }
    for p in policies {
        let text = format!("{} (cpus {}): {}", p.name, p.cpus, describe(&p.governor, p.cur_khz, p.max_khz, 1000));
        report.push(governor_check("CPU clock", text, p.governor.as_deref(), PIN));
    }
}

/// `powersave` holds the clock at its minimum: generation runs several times slower.
fn governor_check(title: &'static str, text: String, governor: Option<&str>, fix: &str) -> Check {
    if governor == Some("powersave") {
        Check::warn(title, format!("{text}: held at the lowest clock"), fix)
    } else {
        Check::ok(title, text)
    }
}

/// A size in GiB; below 0.01 GiB (where that would print `0.00 GiB`) in MiB, below 1 MiB in bytes.
fn gib(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    match bytes as f64 {
        b if b < MIB => format!("{bytes} bytes"),
        b if b < 0.01 * 1024.0 * MIB => format!("{:.1} MiB", b / MIB),
        b => format!("{:.2} GiB", b / (1024.0 * MIB)),
    }
}

/// A dotted version as numbers, for comparison (`0.9.8` → [0, 9, 8]).
pub fn version_parts(version: &str) -> Vec<u32> {
    version.split('.').map_while(|p| p.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert!(version_parts("0.9.10") > version_parts("0.9.8"));
        assert!(version_parts("0.9.7") < version_parts("0.9.8"));
        assert_eq!(version_parts("0.9.8"), vec![0, 9, 8]);
    }
}
