//! Multimodal runs (`RKLLM_INPUT_MULTIMODAL`): what the simulated model
//! "sees". The simulated encoder (`rknn-sim`) writes each image's mean
//! colour, divided by 255, into features 0–2 of every image token; this
//! reads them back from each image's first token, so the reply names, in
//! order, the colour of every image as the encoder received it:
//! `I see 2 images: image 1 is #ff0000 (392x392), image 2 is #0000ff (392x392).`
//! A wrong offset, a wrong image count or a wrong embedding width shows up
//! as a wrong colour.

use crate::call::ImageInput;
use crate::template::ChatTemplate;
use crate::vocab::SPECIAL_TOKENS;

/// The prompt's placeholder for one image (`rkllm.h`: "one `<image>` per image").
const MARKER: &str = "<image>";

/// The id standing for each image token (and its start and end tags) in
/// the simulated KV cache: `<|endoftext|>`, which no reply produces.
fn image_token_id() -> u32 {
    let special = crate::vocab_size() - SPECIAL_TOKENS.len();
    (special + SPECIAL_TOKENS.iter().position(|t| *t == "<|endoftext|>").unwrap_or(0)) as u32
}

/// Reads the images of a multimodal input.
///
/// # Safety
/// `embed` is NULL or holds `n_image × n_image_tokens × embed_width` floats
/// (`embed_width`: the simulated model's hidden size).
pub(crate) unsafe fn read(
    embed_width: usize,
    embed: *const f32,
    n_image: usize,
    n_image_tokens: usize,
    width: usize,
    height: usize,
    tags: Option<[Option<String>; 3]>,
) -> ImageInput {
    let colours = if embed.is_null() || n_image_tokens == 0 {
        Vec::new()
    } else {
        (0..n_image)
            .map(|i| {
                // SAFETY: within the caller's buffer (the contract above).
                let first = unsafe { std::slice::from_raw_parts(embed.add(i * n_image_tokens * embed_width), 3) };
                [0, 1, 2].map(|c| (first[c] * 255.0).round().clamp(0.0, 255.0) as u8)
            })
            .collect()
    };
    ImageInput { colours, n_image_tokens, width, height, tags }
}

/// An image as the model saw it: its colour and the encoder's input size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Seen {
    pub colour: [u8; 3],
    pub width: usize,
    pub height: usize,
}

impl ImageInput {
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.colours.iter().map(|&colour| Seen { colour, width: self.width, height: self.height }).collect()
    }
}

/// What the model says about the images in its context, in order.
pub(crate) fn describe(images: &[Seen]) -> String {
    let each: Vec<String> = images
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let [r, g, b] = s.colour;
            format!("image {} is #{r:02x}{g:02x}{b:02x} ({}x{})", i + 1, s.width, s.height)
        })
        .collect();
    let n = images.len();
    format!("I see {n} image{}: {}.", if n == 1 { "" } else { "s" }, each.join(", "))
}

/// An image a slot's KV cache holds (a multimodal run that kept its
/// history): the position of its first token there.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub slot: usize,
    pub at: usize,
    pub seen: Seen,
}

/// The images `kv` (slot `slot`'s cache) still holds, in order: those
/// whose positions a clear or a truncation has not taken.
pub(crate) fn held(all: &[Held], slot: usize, kv: &[u32]) -> Vec<Seen> {
    all.iter().filter(|h| h.slot == slot && kv.get(h.at) == Some(&image_token_id())).map(|h| h.seen).collect()
}

/// Forgets the images no slot holds any more (cleared or overwritten).
pub(crate) fn prune(all: &mut Vec<Held>, kv: &[Vec<u32>]) {
    all.retain(|h| kv.get(h.slot).and_then(|slot| slot.get(h.at)) == Some(&image_token_id()));
}

/// Where each image of an input (`images`, its first positions `at` within
/// the input) lands in slot `slot`'s cache, prefilled after `cached` ids.
pub(crate) fn placed(images: &ImageInput, at: &[usize], slot: usize, cached: usize) -> Vec<Held> {
    images.seen().into_iter().zip(at).map(|(seen, at)| Held { slot, at: cached + at, seen }).collect()
}

/// A checked multimodal input: the text the model reads (the prompt
/// without its markers), the ids it prefills, its images and where each
/// starts among the ids.
pub(crate) struct Checked {
    pub text: String,
    pub ids: Vec<u32>,
    pub images: ImageInput,
    pub at: Vec<usize>,
}

/// Checks a multimodal input and what it prefills: `system`, the turn
/// without the markers, then per image its start tag, `n_image_tokens`
/// image tokens and its end tag. The error is the line to print.
pub(crate) fn check(
    prompt: &str,
    images: &ImageInput,
    init_tags: Option<&[Option<String>; 3]>,
    template: &ChatTemplate,
    system: &[u32],
) -> Result<Checked, String> {
    let tags = images.tags.as_ref().or(init_tags);
    if !tags.is_some_and(|t| t.iter().all(|tag| tag.as_deref().is_some_and(|s| !s.is_empty()))) {
        return Err("E rkllm: multimodal input without image start/end/content tags (ABI 1.3: in the input; \
                    1.2: img_start/img_end/img_content at init)"
            .into());
    }
    let markers = prompt.matches(MARKER).count();
    if images.colours.is_empty() || markers != images.colours.len() {
        return Err(format!(
            "E rkllm: the prompt has {markers} {MARKER} markers for {} images (image_embed NULL or n_image 0 counts as none)",
            images.colours.len()
        ));
    }
    if images.width == 0 || images.height == 0 {
        return Err("E rkllm: multimodal input with image_width or image_height 0".into());
    }
    let text = prompt.replace(MARKER, "");
    // Each image stands where its marker was, as `rkllm.h` describes the
    // prompt; the text between markers is tokenized piece by piece (the
    // markers split it), the template's prefix with the first piece and its
    // postfix with the last. A follow-up that resends an image at the same
    // place so starts with the same ids: what a loaded prompt-cache file of
    // the earlier turn is matched against (`adapters.rs`).
    let per_image = images.n_image_tokens + 2;
    let pieces: Vec<&str> = prompt.split(MARKER).collect();
    let mut ids = system.to_vec();
    let mut at = Vec::with_capacity(images.colours.len());
    for (i, piece) in pieces.iter().enumerate() {
        let first = if i == 0 { template.prefix() } else { "" };
        let last = if i + 1 == pieces.len() { template.postfix() } else { "" };
        ids.extend(crate::token_ids(&format!("{first}{piece}{last}")));
        if i + 1 < pieces.len() {
            at.push(ids.len());
            ids.extend(std::iter::repeat_n(image_token_id(), per_image));
        }
    }
    Ok(Checked { text, ids, images: images.clone(), at })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_images_first_token() {
        let mut embed = [0.0f32; 2 * 3 * 8];
        embed[..3].copy_from_slice(&[1.0, 0.0, 0.0]);
        embed[3 * 8..3 * 8 + 3].copy_from_slice(&[0.0, 0.5, 1.0]);
        let images = unsafe { read(8, embed.as_ptr(), 2, 3, 392, 392, None) };
        assert_eq!(images.colours, vec![[255, 0, 0], [0, 128, 255]]);
        assert_eq!(
            describe(&images.seen()),
            "I see 2 images: image 1 is #ff0000 (392x392), image 2 is #0080ff (392x392)."
        );
    }

    #[test]
    fn each_image_stands_where_its_marker_was() {
        let template = ChatTemplate::new("", "", "");
        let images = ImageInput { colours: vec![[1, 2, 3]], n_image_tokens: 3, width: 4, height: 4, tags: None };
        let one = check(
            "ab<image>cd",
            &images,
            Some(&[Some("s".into()), Some("e".into()), Some("c".into())]),
            &template,
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let text = |t: &str| crate::token_ids(t);
        let image = vec![image_token_id(); 5];
        assert_eq!(one.ids, [text("ab"), image, text("cd")].concat());
        assert_eq!(one.at, vec![text("ab").len()]);
        assert_eq!(placed(&one.images, &one.at, 0, 7)[0].at, 7 + text("ab").len());
    }
}
