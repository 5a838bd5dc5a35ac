//! Image content parts → the job's images: data URLs decoded, bounded,
//! preprocessed for the model's encoder (`crate::vision`), and the prompt's
//! markers checked against them. Runs inside `prepare`, on the blocking pool.

use crate::api::error::ApiError;
use crate::engine::ImageInput;
use crate::engine::Job;
use crate::registry::Loaded;
use crate::vision::{preprocess, FetchError, ImageError, ImageLimits, UrlFetch};
use base64::Engine as _;
use std::sync::Arc;
use std::time::Instant;

/// Where the runtime puts an image's tokens (`rkllm.h`: one per image).
pub use crate::engine::IMAGE_MARKER as MARKER;

/// One image part as the client sent it, in prompt order.
#[derive(Debug, Clone)]
pub struct ImageRef {
    /// `messages[i].content[j]` or `images[k]`: named in errors.
    pub param: String,
    /// A `data:` URL (Ollama's bare base64 arrives as `data:;base64,…`).
    pub url: String,
}

/// The model's vision encoder, or the refusal of the image `param` names.
pub fn vision_encoder<'m>(model: &'m Loaded, param: &str) -> Result<&'m crate::engine::VisionInfo, ApiError> {
    model.engine.vision().ok_or_else(|| {
        ApiError::image(
            param,
            "images_not_supported",
            format!("The model `{}` has no vision encoder, so it cannot take images.", model.model_id),
        )
    })
}

/// Decodes, bounds and preprocesses `refs` into the job's prompt (each
/// standing for the encoder's positions, in its marker's place once the
/// prompt is tokenized) and fills the image figures; `prompt_markers` is how many markers the rendered
/// prompt holds (each image must have its own, in order).
pub fn attach(job: &mut Job, refs: &[ImageRef], prompt_markers: usize, model: &Loaded) -> Result<(), ApiError> {
    if refs.is_empty() {
        return match prompt_markers {
            0 => Ok(()),
            // A literal marker would be expanded into image tokens that do not exist.
            _ if model.engine.vision().is_some() => Err(reserved()),
            _ => Ok(()),
        };
    }
    let vision = vision_encoder(model, &refs[0].param)?;
    let limits = vision.limits;
    if refs.len() > limits.max_images {
        return Err(ApiError::image(
            &refs[limits.max_images].param,
            "too_many_images",
            format!(
                "The request has {} images; this server takes at most {} (max_images).",
                refs.len(),
                limits.max_images
            ),
        ));
    }
    if prompt_markers != refs.len() {
        return Err(reserved());
    }
    let started = Instant::now();
    let (width, height) = (vision.encoder.width, vision.encoder.height);
    let mut images = Vec::with_capacity(refs.len());
    for r in refs {
        let bytes = decode(r, &limits, &vision.fetch)?;
        let prepared = preprocess(&bytes, width, height, &limits).map_err(|e| match e {
            ImageError::Invalid(m) => ApiError::image(&r.param, "invalid_image", m),
            ImageError::TooLarge(m) => ApiError::image(&r.param, "image_too_large", m),
        })?;
        images.push(ImageInput { hash: prepared.hash, pixels: Arc::new(prepared.pixels) });
    }
    job.image_timings.count = images.len() as u32;
    job.image_timings.tokens = (images.len() * vision.tokens_per_image()) as u32;
    job.image_timings.preprocess_ms = started.elapsed().as_secs_f64() * 1000.0;
    job.prompt.set_images(images, vision.tokens_per_image());
    Ok(())
}

fn reserved() -> ApiError {
    ApiError::invalid_value(
        "messages",
        format!("The text `{MARKER}` is reserved on this model for where an image goes; send images as image parts."),
    )
}

/// The bytes of a `data:[type];base64,…` URL, or of an `http(s)` URL where
/// the operator allows fetching it (`vision/fetch.rs`: otherwise a client
/// could reach the board's network through the daemon, SSRF).
fn decode(r: &ImageRef, limits: &ImageLimits, fetch: &UrlFetch) -> Result<Vec<u8>, ApiError> {
    let invalid = |m: &str| ApiError::image(&r.param, "invalid_image", m.to_owned());
    let url = r.url.trim();
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        if !fetch.is_on() {
            return Err(invalid(
                "Image URLs are not fetched by this server (its image_url_hosts is empty); send the image inline as \
                 a base64 `data:` URL.",
            ));
        }
        // On the blocking pool (`prepare`): the fetch runs on the runtime it belongs to.
        let fetched = super::prepare::off_the_gate(fetch.get(url, limits.max_bytes));
        return fetched.map_err(|e| match e {
            FetchError::NotAllowed(m) => ApiError::image(&r.param, "image_url_not_allowed", m),
            FetchError::TooLarge(m) => ApiError::image(&r.param, "image_too_large", m),
            FetchError::Failed(m) => invalid(&m),
        });
    }
    let Some((header, data)) = url.strip_prefix("data:").and_then(|rest| rest.split_once(',')) else {
        return Err(invalid("An image must be a `data:image/…;base64,…` URL."));
    };
    if !header.to_ascii_lowercase().ends_with(";base64") {
        return Err(invalid("The image's data URL must be base64 (`data:image/…;base64,…`)."));
    }
    // Bounded before decoding: 4 base64 characters are 3 bytes.
    if data.len() / 4 * 3 > limits.max_bytes + 3 {
        return Err(ApiError::image(
            &r.param,
            "image_too_large",
            format!(
                "The image is over {} bytes; this server takes at most {} (max_image_bytes).",
                limits.max_bytes, limits.max_bytes
            ),
        ));
    }
    // Line breaks (MIME-style base64) are dropped; a copy only when there
    // are any (a 12-megapixel photo's URL is ~4 MB).
    let data = data.as_bytes();
    let compact: std::borrow::Cow<[u8]> = if data.iter().any(u8::is_ascii_whitespace) {
        data.iter().copied().filter(|b| !b.is_ascii_whitespace()).collect::<Vec<u8>>().into()
    } else {
        data.into()
    };
    base64::engine::general_purpose::STANDARD
        .decode(&compact)
        .map_err(|e| invalid(&format!("The image's base64 data is invalid: {e}.")))
}
