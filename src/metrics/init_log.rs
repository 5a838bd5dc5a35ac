//! Facts the runtime states only in the lines `rkllm_init` prints:
//! `I rkllm: rkllm-runtime version: 1.2.1, rknpu driver version: 0.9.8, platform: RK3588`
//! and (from 1.2.1) `I rkllm: rkllm-toolkit version: …, max_context_limit: 4096, npu_core_num: 3, …`.
//! The simulated runtime prints the same lines with `rkllm-runtime version:
//! X (simulated)`: its platform, driver and core count describe no board.

#[derive(Debug, Clone, Default, PartialEq)]
pub struct InitFacts {
    pub driver_version: Option<String>,
    pub platform: Option<String>,
    pub npu_cores: Option<u32>,
    /// The context the model was converted for (`max_context_limit`).
    pub max_context_limit: Option<u32>,
    /// The runtime said it is the simulator.
    pub simulated: bool,
}

impl InitFacts {
    pub fn parse(init_log: &str) -> InitFacts {
        InitFacts {
            driver_version: value(init_log, "rknpu driver version:"),
            platform: value(init_log, "platform:").or_else(|| value(init_log, "target_platform:")),
            npu_cores: value(init_log, "npu_core_num:").and_then(|n| n.parse().ok()),
            max_context_limit: value(init_log, "max_context_limit:").and_then(|n| n.parse().ok()),
            simulated: value(init_log, "rkllm-runtime version:").is_some_and(|v| v.ends_with("(simulated)")),
        }
    }
}

/// The text after `key` up to the next comma or line end, trimmed; `None` if absent or empty.
fn value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = &line[line.find(key)? + key.len()..];
        let v = rest.split(',').next().unwrap_or("").trim();
        (!v.is_empty()).then(|| v.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_vendor_lines() {
        let log = "I rkllm: rkllm-runtime version: 1.2.1, rknpu driver version: 0.9.8, platform: RK3588\n\
                   I rkllm: rkllm-toolkit version: 1.2.1, max_context_limit: 4096, npu_core_num: 3, target_platform: RK3588, model_dtype: W8A8\n";
        let f = InitFacts::parse(log);
        assert_eq!(f.driver_version.as_deref(), Some("0.9.8"));
        assert_eq!(f.platform.as_deref(), Some("RK3588"));
        assert_eq!(f.npu_cores, Some(3));
        assert_eq!(f.max_context_limit, Some(4096));
        assert!(!f.simulated);
        assert!(InitFacts::parse("I rkllm: rkllm-runtime version: 1.3.0 (simulated), platform: RK3588\n").simulated);
        assert_eq!(InitFacts::parse("E rkllm: invalid rkllm model!\n"), InitFacts::default());
    }
}
