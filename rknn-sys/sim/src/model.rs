//! The simulated encoders and the embedding they compute.

/// A simulated vision encoder's geometry and speed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EncoderProfile {
    /// The LLM profile (`sim:NAME`) it belongs to.
    pub name: &'static str,
    /// Input width and height.
    pub size: u32,
    pub tokens: u32,
    /// The simulated LLM's hidden size (`rkllm-sim`'s `EMBD_SIZE`).
    pub width: u32,
    /// Rockchip's published encoder time on RK3588 (benchmark.md, w8a8).
    pub encoder_ms: f64,
}

/// Qwen2.5-VL-3B: a 392×392 input gives 196 tokens; 2.93 s on RK3588.
pub const ENCODERS: [EncoderProfile; 1] =
    [EncoderProfile { name: "qwen2.5-vl-3b", size: 392, tokens: 196, width: 256, encoder_ms: 2930.0 }];

/// A parsed model path: the encoder and its time scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spec {
    pub profile: EncoderProfile,
    pub time_scale: f64,
}

/// The encoder a `sim:` spec names; the error is the line to print.
pub fn encoder_for(spec: &str) -> Result<EncoderProfile, String> {
    let rest = spec.strip_prefix("sim:").ok_or_else(|| format!("{spec} is not a sim: spec"))?;
    let name = rest.split('?').next().unwrap_or_default();
    ENCODERS.iter().find(|e| e.name.eq_ignore_ascii_case(name)).copied().ok_or_else(|| {
        format!("E RKNN: simulated model {name:?} has no vision encoder (profiles with one: qwen2.5-vl-3b)")
    })
}

pub(crate) fn parse(path: &str) -> Result<Spec, String> {
    let env_scale = std::env::var("RKLLM_SIM_TIME_SCALE").ok().filter(|v| !v.is_empty());
    let (profile, key_scale) = if path.starts_with("sim:") {
        let profile = encoder_for(path)?;
        let query = path.split_once('?').map(|(_, q)| q).unwrap_or_default();
        let scale = query.split('&').find_map(|kv| kv.strip_prefix("time_scale=")).map(str::to_owned);
        (profile, scale)
    } else if std::path::Path::new(path).is_file() {
        (ENCODERS[0], None)
    } else {
        return Err(format!("E RKNN: failed to open rknn model file: {path}"));
    };
    let time_scale = match key_scale.or(env_scale) {
        None => 1.0,
        Some(text) => text
            .parse::<f64>()
            .ok()
            .filter(|s| (0.0..=1000.0).contains(s))
            .ok_or_else(|| format!("E RKNN: time_scale {text:?} is not a number in 0..=1000"))?,
    };
    Ok(Spec { profile, time_scale })
}

/// The embedding of one H×W×3 RGB image (see the crate docs).
pub(crate) fn embed(pixels: &[u8], size: usize, tokens: usize, width: usize) -> Vec<f32> {
    let row = size * 3;
    let mean = |bytes: &[u8]| -> [f32; 3] {
        let mut sum = [0u64; 3];
        for px in bytes.chunks_exact(3) {
            for c in 0..3 {
                sum[c] += u64::from(px[c]);
            }
        }
        let n = (bytes.len() / 3).max(1) as f64;
        sum.map(|s| (s as f64 / n / 255.0) as f32)
    };
    let whole = mean(pixels);
    let mut out = Vec::with_capacity(tokens * width);
    for t in 0..tokens {
        let band = &pixels[t * size / tokens * row..(t + 1) * size / tokens * row];
        let band_mean = if band.is_empty() { whole } else { mean(band) };
        let band_sum: u64 = band.iter().map(|b| u64::from(*b)).sum();
        out.extend_from_slice(&whole);
        out.extend_from_slice(&band_mean);
        out.extend((6..width).map(|k| ((k as u64 * 31 + t as u64 * 17 + band_sum) % 251) as f32 / 251.0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_three_features_are_the_mean_colour() {
        // 4×4: top half red, bottom half blue.
        let mut pixels = Vec::new();
        for y in 0..4 {
            for _ in 0..4 {
                pixels.extend_from_slice(if y < 2 { &[255, 0, 0] } else { &[0, 0, 255] });
            }
        }
        let e = embed(&pixels, 4, 2, 8);
        assert_eq!(e.len(), 16);
        assert_eq!(&e[0..3], &[0.5, 0.0, 0.5]);
        assert_eq!(&e[3..6], &[1.0, 0.0, 0.0], "token 0's band is the red half");
        assert_eq!(&e[8 + 3..8 + 6], &[0.0, 0.0, 1.0], "token 1's band is the blue half");
    }

    #[test]
    fn specs() {
        assert_eq!(parse("sim:qwen2.5-vl-3b?time_scale=0&reply_tokens=3").unwrap().time_scale, 0.0);
        assert!(parse("sim:qwen2.5-1.5b").unwrap_err().contains("no vision encoder"));
        assert!(parse("/nonexistent.rknn").unwrap_err().contains("failed to open"));
        assert!(parse("sim:qwen2.5-vl-3b?time_scale=x").is_err());
    }
}
