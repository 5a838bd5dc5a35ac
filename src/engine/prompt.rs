//! A job's prompt: its rendered text, and the one sequence of token ids and
//! images, in order, that the conversation cache's records (`kv.rs`,
//! `slots.rs`), the saved files (`saved.rs`, `batch_files.rs`) and usage
//! counting read through [`Prompt::ids`]. The api makes it once, where it
//! tokenizes the text around the images' markers.
//!
//! A multimodal run puts each image in the KV cache as its start tag, its
//! embedding positions and its end tag (the runtime replaces each `<image>`
//! marker so; *open* whether each tag is one position — the size check
//! after every run says, and a wrong guess switches reuse off for that run
//! with a WARN and `rkllmd_kv_cache_mismatch_total`). The sequence stands
//! for those positions with ids no tokenizer produces: negative ones, the
//! tags all `i32::MIN`, the embedding positions an id of the image's content
//! hash. The same image at the same place in a follow-up prompt gives the
//! same ids, so its prefix matches; another image does not. A saved file's
//! record holds these ids too (`saved.rs`): a prompt with the same image at
//! the same place continues it, and is restored by sending it whole, its
//! images as embeddings.

use rkllm_sys::IMAGE_MARKER;
use std::sync::{Arc, OnceLock};

const TAG: i32 = i32::MIN;

/// Whether an id of a sequence stands for an image position.
pub(super) fn is_image(id: i32) -> bool {
    id < 0
}

/// The id every embedding position of an image stands as: negative, from
/// its content hash, never `TAG`.
fn content_id(hash: u128) -> i32 {
    -1 - (hash % (1 << 30)) as i32
}

/// One image of a prompt, preprocessed by the api.
#[derive(Debug, Clone)]
pub struct ImageInput {
    /// The cache key (a content hash of `pixels`).
    pub hash: u128,
    /// `height × width × 3` bytes, RGB, NHWC.
    pub pixels: Arc<Vec<u8>>,
}

#[derive(Debug, Clone)]
enum Part {
    /// Token ids of the text between two images.
    Ids(Vec<i32>),
    /// An image, where its marker was in the text.
    Image(ImageInput),
}

/// A prompt: the rendered text (what the runtime is sent as text, each
/// image's marker where the image goes), and its sequence of ids and images.
#[derive(Debug, Clone, Default)]
pub struct Prompt {
    text: String,
    /// In order. Untokenized (no tokenizer, or a text too long to be worth
    /// it): the images alone.
    parts: Vec<Part>,
    tokenized: bool,
    /// The positions one image takes, its two tags included
    /// (`VisionInfo::tokens_per_image`).
    per_image: usize,
    /// [`Prompt::ids`], made once when first asked.
    ids: OnceLock<Option<Vec<i32>>>,
}

impl Prompt {
    /// A text prompt, not tokenized.
    pub fn new(text: impl Into<String>) -> Prompt {
        Prompt { text: text.into(), ..Prompt::default() }
    }

    /// The rendered text, with the images' markers.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text's bytes, the images' markers left out (the runtime
    /// replaces each with its image's positions).
    pub fn text_bytes(&self) -> usize {
        match self.image_count() {
            0 => self.text.len(),
            n => self.text.len() - n * IMAGE_MARKER.len(),
        }
    }

    /// Another rendering of the same images (tools left out): to be tokenized again.
    pub fn set_text(&mut self, text: String) {
        let images = self.parts.drain(..).filter(|p| matches!(p, Part::Image(_))).collect();
        *self = Prompt { text, parts: images, per_image: self.per_image, ..Prompt::default() };
    }

    /// The images, in the order of the text's markers (one marker each,
    /// checked by the api), each standing for `per_image` positions.
    pub fn set_images(&mut self, images: Vec<ImageInput>, per_image: usize) {
        let text = std::mem::take(&mut self.text);
        *self = Prompt { text, parts: images.into_iter().map(Part::Image).collect(), per_image, ..Prompt::default() };
    }

    /// Makes the sequence: the text's ids by `tokenize`, each piece between
    /// two markers tokenized by itself (as the runtime does, the markers
    /// splitting the text), each image in its marker's place. Not tokenized
    /// when `tokenize` gives `None` or an id beyond `i32` (vocabularies are
    /// far below 2^31: such an id is not sent).
    pub fn tokenize(&mut self, mut tokenize: impl FnMut(&str) -> Option<Vec<u32>>) {
        let images: Vec<ImageInput> = self.images().cloned().collect();
        let mut parts = Vec::with_capacity(2 * images.len() + 1);
        let pieces: Vec<&str> = match images.len() {
            0 => vec![self.text.as_str()],
            n => self.text.splitn(n + 1, IMAGE_MARKER).collect(),
        };
        let mut images = images.into_iter();
        let mut tokenized = true;
        for (i, piece) in pieces.iter().enumerate() {
            let ids = tokenize(piece).and_then(|ids| ids.into_iter().map(|id| i32::try_from(id).ok()).collect());
            match ids {
                Some(ids) if tokenized => parts.push(Part::Ids(ids)),
                _ => tokenized = false,
            }
            if i + 1 < pieces.len() {
                parts.extend(images.next().map(Part::Image));
            }
        }
        parts.extend(images.map(Part::Image));
        if !tokenized {
            parts.retain(|p| matches!(p, Part::Image(_)));
        }
        self.parts = parts;
        self.tokenized = tokenized;
        self.ids = OnceLock::new();
    }

    /// The sequence as ids: the text's token ids with each image's
    /// positions where its marker was (`None`: not tokenized). What the
    /// conversation cache keys, the batch slots hold, the saved files
    /// record and usage counts.
    pub fn ids(&self) -> Option<&[i32]> {
        self.ids.get_or_init(|| self.tokenized.then(|| self.expand())).as_deref()
    }

    fn expand(&self) -> Vec<i32> {
        let mut ids = Vec::new();
        for part in &self.parts {
            match part {
                Part::Ids(text) => ids.extend_from_slice(text),
                Part::Image(image) => {
                    ids.push(TAG);
                    ids.extend(std::iter::repeat_n(content_id(image.hash), self.per_image.saturating_sub(2)));
                    ids.push(TAG);
                }
            }
        }
        ids
    }

    /// The text's token ids alone (`None`: not tokenized).
    pub fn text_tokens(&self) -> Option<usize> {
        let text = self.parts.iter().map(|p| if let Part::Ids(ids) = p { ids.len() } else { 0 });
        self.tokenized.then(|| text.sum())
    }

    /// The images, in order (embedded for a run that sends them, `vision.rs`).
    pub fn images(&self) -> impl Iterator<Item = &ImageInput> {
        self.parts.iter().filter_map(|p| if let Part::Image(image) = p { Some(image) } else { None })
    }

    pub fn image_count(&self) -> usize {
        self.images().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(hash: u128) -> ImageInput {
        ImageInput { hash, pixels: Arc::new(Vec::new()) }
    }

    /// A tokenizer of one id per character (`a` is 10).
    fn chars(text: &str) -> Option<Vec<u32>> {
        Some(text.chars().map(|c| c as u32 - 'a' as u32 + 10).collect())
    }

    fn prompt(text: &str, images: Vec<ImageInput>, per_image: usize) -> Prompt {
        let mut prompt = Prompt::new(text.replace('|', IMAGE_MARKER));
        prompt.set_images(images, per_image);
        prompt.tokenize(chars);
        prompt
    }

    #[test]
    fn each_image_stands_where_its_marker_was() {
        let one = prompt("a|bc", vec![image(7)], 4);
        let ids = one.ids().unwrap().to_vec();
        assert_eq!(ids, vec![10, TAG, content_id(7), content_id(7), TAG, 11, 12]);
        assert_eq!(ids.iter().filter(|&&id| is_image(id)).count(), 4);
        assert_eq!((one.text_tokens(), one.text_bytes(), one.image_count()), (Some(3), 3, 1));
        // Another image at the same place gives other ids; the same image the same.
        assert_ne!(prompt("a|bc", vec![image(8)], 4).ids().unwrap(), &ids[..]);
        assert_eq!(prompt("a|bcd", vec![image(7)], 4).ids().unwrap()[..7], ids[..]);
        // Two images, the second at the end.
        let two = prompt("|ab|", vec![image(7), image(9)], 3);
        assert_eq!(two.ids().unwrap(), [TAG, content_id(7), TAG, 10, 11, TAG, content_id(9), TAG]);
    }

    #[test]
    fn a_reply_after_an_image_lies_past_its_positions() {
        // Text ids: [u0 u1 | reply r2 r3 | u4]; an image before u1 (3 positions):
        // the reply is at 5..7 of the one sequence, the prompt before it 5 long.
        let ids = prompt("a|bcde", vec![image(7)], 3).ids().unwrap().to_vec();
        assert_eq!((ids[5..7].to_vec(), ids[..5].iter().filter(|&&id| is_image(id)).count()), (vec![12, 13], 3));
        // An image at the reply's own start stands before it, after the prompt that asked for it.
        let at_start = prompt("ab|cde", vec![image(7)], 3).ids().unwrap().to_vec();
        assert_eq!((at_start[..2].to_vec(), at_start[5..7].to_vec()), (vec![10, 11], vec![12, 13]));
    }

    #[test]
    fn untokenized_prompts_keep_their_images_and_no_ids() {
        let mut p = prompt("a|b", vec![image(7)], 3);
        p.tokenize(|_| None);
        assert_eq!((p.ids(), p.text_tokens(), p.image_count()), (None, None, 1));
        // Another rendering of the same images is tokenized again.
        p.set_text(format!("xy{IMAGE_MARKER}"));
        assert_eq!(p.ids(), None);
        p.tokenize(chars);
        assert_eq!(p.ids().unwrap(), [33, 34, TAG, content_id(7), TAG]);
        // An id beyond i32 is not sent.
        p.tokenize(|_| Some(vec![u32::MAX]));
        assert_eq!(p.ids(), None);
        // A text prompt with a literal marker (a model without an encoder) is tokenized whole.
        let mut text = Prompt::new(format!("a{IMAGE_MARKER}"));
        text.tokenize(|t| Some(vec![t.len() as u32]));
        assert_eq!(text.ids().unwrap(), [1 + IMAGE_MARKER.len() as i32]);
    }
}
