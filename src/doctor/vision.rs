//! A vision-language model's encoder: loaded as `serve` loads it, and what
//! it says about itself (input size, tokens per image, embedding size).

use super::checks::Plan;
use super::{Check, Report};
use crate::engine::{BackendKind, Vision};
use crate::registry::ModelSpec;

const TITLE: &str = "vision encoder";

pub fn encoder(plan: &Plan, spec: &ModelSpec, report: &mut Report) {
    let Some(settings) = &spec.engine.vision else { return };
    // The LLM's runtime decides whether the simulated encoder may stand in.
    let llm = if plan.needs_npu || !spec.path.starts_with("sim:") { BackendKind::Rkllm } else { BackendKind::Sim };
    match Vision::probe(settings, llm, &spec.path) {
        Ok(v) => {
            let e = &v.encoder;
            report.push(Check::ok(
                TITLE,
                format!(
                    "{}: {} on {} (rknn api {}, driver {}): input {}×{} ({}), {} tokens per image ({} + start/end tags {} {}), embedding {} floats per token",
                    spec.id,
                    settings.encoder,
                    v.origin,
                    e.api_version,
                    e.driver_version,
                    e.width,
                    e.height,
                    e.input_format,
                    v.tokens_per_image(),
                    e.n_image_tokens,
                    v.tags.start,
                    v.tags.end,
                    e.embed_size
                ),
            ))
        }
        Err(e) => report.push(Check::fail(
            TITLE,
            format!("{}: {e}", spec.id),
            "install Rockchip's librknnrt.so (rknn-toolkit2 rknpu2/runtime) or pass --vision-lib, and point vision_encoder at the model's .rknn vision encoder",
        )),
    }
}
