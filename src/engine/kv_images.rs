//! Images in the conversation cache's record of the KV cache (`kv.rs`).
//!
//! A multimodal run puts each image in the KV cache as its start tag, its
//! `n` embedding positions and its end tag (the runtime replaces each
//! `<image>` marker so; *open* whether each tag is one position — the size
//! check after every run says, and a wrong guess switches reuse off for
//! that run with a WARN and `rkllmd_kv_cache_mismatch_total`). The record
//! stands for those positions with ids no tokenizer produces: negative
//! ones, the tags all `i32::MIN`, the embedding positions an id of the
//! image's content hash. The same image at the same place in a follow-up
//! prompt gives the same ids, so its prefix matches; another image does not.
//! A saved file's record holds these ids too (`saved.rs`): a prompt with
//! the same image at the same place continues it, and is restored by
//! sending it whole, its images as embeddings.

use super::job::{ImageInput, Resent};

const TAG: i32 = i32::MIN;

/// Whether an id in a record stands for an image position.
pub(super) fn is_image(id: i32) -> bool {
    id < 0
}

/// The id every embedding position of an image stands as: negative, from
/// its content hash, never `TAG`.
fn content_id(hash: u128) -> i32 {
    -1 - (hash % (1 << 30)) as i32
}

/// The prompt's ids with each image's positions where its marker was
/// (`ImageInput::at`: before the text id of that index). `per_image`:
/// the positions one image takes, its two tags included
/// (`VisionInfo::tokens_per_image`).
pub(super) fn with_images(tokens: &[i32], images: &[ImageInput], per_image: usize) -> Vec<i32> {
    let mut ids = Vec::with_capacity(tokens.len() + images.len() * per_image);
    let mut from = 0;
    for image in images {
        let at = image.at.clamp(from, tokens.len());
        ids.extend_from_slice(&tokens[from..at]);
        ids.push(TAG);
        ids.extend(std::iter::repeat_n(content_id(image.hash), per_image.saturating_sub(2)));
        ids.push(TAG);
        from = at;
    }
    ids.extend_from_slice(&tokens[from..]);
    ids
}

/// `resent` (indices into the text's ids) as indices into the ids
/// [`with_images`] makes: an index moves by the spans of the images
/// placed before it.
pub(super) fn shift_resent(resent: &Resent, images: &[ImageInput], per_image: usize) -> Resent {
    let span = per_image;
    // An image at index i stands before the text id i: an index (the
    // resent message's first id) moves past it, an end (exclusive) does not.
    let index = |i: usize| i + span * images.iter().filter(|im| im.at <= i).count();
    let end = |e: usize| e + span * images.iter().filter(|im| im.at < e).count();
    Resent { start: index(resent.start), end: end(resent.end), before: end(resent.before), view: resent.view.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn image(hash: u128, at: usize) -> ImageInput {
        ImageInput { hash, pixels: Arc::new(Vec::new()), at }
    }

    #[test]
    fn each_image_stands_where_its_marker_was() {
        let red = image(7, 1);
        let ids = with_images(&[10, 11, 12], std::slice::from_ref(&red), 4);
        assert_eq!(ids, vec![10, TAG, content_id(7), content_id(7), TAG, 11, 12]);
        assert_eq!(ids.iter().filter(|&&id| is_image(id)).count(), 4);
        // Another image at the same place gives other ids; the same image the same.
        assert_ne!(with_images(&[10, 11, 12], &[image(8, 1)], 4), ids);
        assert_eq!(with_images(&[10, 11, 12, 13], &[image(7, 1)], 4)[..7], ids[..]);
        // Two images, the second at the end.
        let two = with_images(&[10, 11], &[image(7, 0), image(9, 2)], 3);
        assert_eq!(two, vec![TAG, content_id(7), TAG, 10, 11, TAG, content_id(9), TAG]);
    }

    #[test]
    fn a_resent_reply_moves_by_the_images_before_it() {
        // Text ids: [u0 u1 | reply r2 r3 | u4]; an image before u1 (3 positions).
        let resent = Resent { start: 2, end: 4, view: "r".into(), before: 2 };
        let shifted = shift_resent(&resent, &[image(7, 1)], 3);
        assert_eq!((shifted.start, shifted.end, shifted.before), (5, 7, 5));
        // An image at the reply's own start stands before it.
        let at_start = shift_resent(&resent, &[image(7, 2)], 3);
        assert_eq!((at_start.start, at_start.end, at_start.before), (5, 7, 2));
    }
}
