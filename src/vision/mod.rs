//! Images for vision-language models, below the api and beside
//! `conversation`: the bounds on what a request may send, image URLs where
//! the operator allows fetching them (`fetch`), and the preprocessing of
//! one image into what the encoder takes (`preprocess`).
//! Pure CPU work: the api runs it on the blocking pool (`api::request::prepare`).

mod budget;
mod fetch;
mod jpeg_dc;
mod png_rows;
mod preprocess;

pub use budget::DECODE_BUDGET;
pub use fetch::{FetchError, UrlFetch};
pub use preprocess::preprocess;

/// Bounds on the images of one request (`max_images`, `max_image_bytes`,
/// `max_image_pixels`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    pub max_images: usize,
    /// Encoded size of one image (after base64 decoding).
    pub max_bytes: usize,
    /// Width × height of one image as its header states, checked before decoding.
    pub max_pixels: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Not an image this server decodes, or a corrupt one.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    TooLarge(String),
}

/// One image, ready for the encoder.
#[derive(Clone, PartialEq, Eq)]
pub struct Prepared {
    /// `height × width × 3` bytes, RGB, NHWC.
    pub pixels: Vec<u8>,
    /// A 128-bit hash of `pixels` with per-process random keys: the key of
    /// the embedding cache (two encodings of the same picture share it).
    pub hash: u128,
    /// The decoded image's size, after EXIF orientation (a large JPEG's at
    /// the DCT scale it was decoded at, a large PNG's shrunk as it was).
    pub source: (u32, u32),
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Prepared({:032x}, {}×{})", self.hash, self.source.0, self.source.1)
    }
}

/// Two independently keyed SipHash-1-3 halves. The keys are random per
/// process, so a client cannot craft two images that share an entry.
pub fn content_hash(bytes: &[u8]) -> u128 {
    use std::hash::{BuildHasher, Hasher, RandomState};
    use std::sync::OnceLock;
    static KEYS: OnceLock<(RandomState, RandomState)> = OnceLock::new();
    let (a, b) = KEYS.get_or_init(|| (RandomState::new(), RandomState::new()));
    let half = |state: &RandomState| {
        let mut h = state.build_hasher();
        h.write(bytes);
        h.finish()
    };
    (u128::from(half(a)) << 64) | u128::from(half(b))
}
