//! A vision-language model's image encoder (`rknn-sys`): opening it beside
//! the LLM, the tags and token count its prompts use, and the embeddings of
//! a job's images, each computed once per model and kept in a bounded LRU
//! keyed by the image's content hash. The encoder runs on its own thread
//! (`rknn_sys::Encoder`), inside the job's queue turn, which holds the one
//! NPU turn, so it takes turns with every model's LLM runs.

use super::backend::BackendKind;
use super::prompt::ImageInput;
use super::queue::Turn;
use crate::metrics::ImageTimings;
use crate::vision::{ImageLimits, UrlFetch};
use rkllm_sys::{ImageTags, Images};
use rknn_sys::{Encoder, EncoderInfo};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The prompt's placeholder for one image, which the runtime replaces with
/// the image's tags and tokens (`rkllm.h`).
pub const IMAGE_MARKER: &str = rkllm_sys::IMAGE_MARKER;

/// Where a model's encoder comes from (`vision_encoder`, `vision_lib`).
#[derive(Debug, Clone, PartialEq)]
pub struct VisionSettings {
    /// The `.rknn` file, or the model's own `sim:` spec (the simulated encoder).
    pub encoder: String,
    /// `librknnrt.so`; `None`: the usual directories, else the simulated
    /// encoder when the LLM itself is simulated.
    pub lib: Option<PathBuf>,
    /// Overrides the family table ([`tags_for`]).
    pub tags: Option<ImageTags>,
    /// Embeddings kept per model.
    pub cache_entries: usize,
    /// What a request may send (checked by the api with [`VisionInfo::limits`]).
    pub limits: ImageLimits,
    /// Where image URLs may be fetched from (the api's, [`VisionInfo::fetch`]).
    pub fetch: Arc<UrlFetch>,
}

/// What a model's encoder is (for validation, `/api/show`, `doctor`).
#[derive(Debug, Clone, PartialEq)]
pub struct VisionInfo {
    pub encoder: EncoderInfo,
    pub tags: ImageTags,
    /// Library path or the in-process simulator.
    pub origin: String,
    pub limits: ImageLimits,
    pub fetch: Arc<UrlFetch>,
}

impl VisionInfo {
    /// Prompt tokens one image takes: its tokens and its start and end tags
    /// (one token each in the families of [`tags_for`]).
    pub fn tokens_per_image(&self) -> usize {
        self.encoder.n_image_tokens + 2
    }
}

/// A simulated model's own encoder: its `sim:` spec, when the profile has
/// one (`sim:qwen2.5-vl-3b`); the simulated encoder reads the same spec.
pub fn builtin_encoder(model_path: &str) -> Option<String> {
    rknn_sim::has_encoder(model_path).then(|| model_path.to_owned())
}

/// The tags of the families Rockchip's demo serves, by the model file's
/// name (rknn-llm `examples/multimodal_model_demo`); `None`: unknown.
pub fn tags_for(model: &str) -> Option<ImageTags> {
    let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    let tags = |start: &str, end: &str, content: &str| ImageTags {
        start: start.into(),
        end: end.into(),
        content: content.into(),
    };
    if name.contains("internvl") {
        Some(tags("<img>", "</img>", "<IMG_CONTEXT>"))
    } else if name.contains("minicpm") {
        Some(tags("<image>", "</image>", "<unk>"))
    } else if name.contains("qwen") && name.contains("vl") {
        Some(tags("<|vision_start|>", "<|vision_end|>", "<|image_pad|>"))
    } else {
        None
    }
}

pub struct Vision {
    encoder: Arc<Encoder>,
    info: VisionInfo,
    cache: Mutex<Lru>,
    /// Encoder runs in progress (0 or 1: a run holds the NPU turn), for
    /// `rkllmd_image_encoder_running`.
    running: Arc<AtomicUsize>,
}

impl Vision {
    /// Opens the encoder (blocks while `rknn_init` runs). The simulated
    /// encoder serves only a simulated LLM: a real model is never paired
    /// with made-up embeddings.
    pub fn open(settings: &VisionSettings, llm: BackendKind, model_path: &str) -> Result<Vision, String> {
        let runtime = match (&settings.lib, rknn_sys::find_library()) {
            (Some(path), _) => rknn_sys::Runtime::load(path).map_err(|e| e.to_string())?,
            (None, Some(found)) if llm == BackendKind::Rkllm => {
                rknn_sys::Runtime::load(&found).map_err(|e| e.to_string())?
            }
            (None, _) if llm == BackendKind::Sim => rknn_sim::runtime(),
            (None, _) => {
                return Err(format!(
                    "no {} found for the vision encoder (pass --vision-lib PATH or set RKLLMD_VISION_LIB)",
                    rknn_sys::LIBRARY_NAME
                ))
            }
        };
        let origin = runtime.origin().to_string();
        let tags = settings.tags.clone().or_else(|| tags_for(model_path)).ok_or_else(|| {
            format!(
                "the image tags of {model_path} are unknown (families known by name: Qwen2/2.5/3-VL, InternVL, \
                 MiniCPM-V); set vision_tags = [START, END, CONTENT] for it"
            )
        })?;
        let encoder = Encoder::open(Arc::new(runtime), &settings.encoder, rknn_sys::types::RKNN_NPU_CORE_ALL)
            .map_err(|e| format!("vision encoder {}: {e}", settings.encoder))?;
        let (limits, fetch) = (settings.limits, settings.fetch.clone());
        let info = VisionInfo { encoder: encoder.info().clone(), tags, origin, limits, fetch };
        Ok(Vision {
            encoder: Arc::new(encoder),
            info,
            cache: Mutex::new(Lru::new(settings.cache_entries)),
            running: Arc::default(),
        })
    }

    pub fn info(&self) -> &VisionInfo {
        &self.info
    }

    /// Encoder runs in progress now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Opens the encoder as a model load would, tells what it is, and
    /// closes it (`rkllmd doctor`).
    pub fn probe(settings: &VisionSettings, llm: BackendKind, model_path: &str) -> Result<VisionInfo, String> {
        Vision::open(settings, llm, model_path).map(|v| v.info)
    }

    /// The embeddings of `images` in order, from the cache or the encoder
    /// (on a blocking thread). The caller's NPU `turn` goes with each encoder
    /// run and comes back after it: if the caller is dropped meanwhile (the
    /// client left), the turn is released when the encoder returns, not
    /// while it still uses the NPU.
    pub async fn encode(
        &self,
        images: &[&ImageInput],
        mut timings: ImageTimings,
        turn: &mut Option<Turn>,
    ) -> Result<(Images, ImageTimings), String> {
        let per_image = self.info.encoder.embedding_len();
        let mut embeddings = Vec::with_capacity(per_image * images.len());
        let mut encoder_ms = 0.0;
        for image in images {
            let cached = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(image.hash);
            let embedding = match cached {
                Some(e) => {
                    timings.cache_hits += 1;
                    e
                }
                None => {
                    let encoder = self.encoder.clone();
                    let pixels = image.pixels.as_ref().clone();
                    let ran = Instant::now();
                    let held = turn.take();
                    tracing::debug!(hash = image.hash, "vision encoder runs");
                    let running = Running::start(&self.running);
                    let run = move || {
                        let e = encoder.encode(pixels);
                        // Before the turn can go (with `held`, when the caller left).
                        drop(running);
                        tracing::debug!("vision encoder returned");
                        (e, held)
                    };
                    let (e, held) =
                        tokio::task::spawn_blocking(run).await.map_err(|e| format!("the encoder task failed: {e}"))?;
                    *turn = held;
                    let e = e.map_err(|e| format!("the vision encoder failed: {e}"))?;
                    encoder_ms += ran.elapsed().as_secs_f64() * 1000.0;
                    timings.encoder_runs += 1;
                    let e = Arc::new(e);
                    self.cache.lock().unwrap_or_else(|e| e.into_inner()).put(image.hash, e.clone());
                    e
                }
            };
            embeddings.extend_from_slice(&embedding);
        }
        // Null when every embedding came from the cache: the encoder did not run.
        timings.encoder_ms = (timings.encoder_runs > 0).then_some(encoder_ms);
        let e = &self.info.encoder;
        let images = Images {
            embeddings,
            n_image: images.len(),
            n_image_tokens: e.n_image_tokens,
            width: e.width as usize,
            height: e.height as usize,
            tags: self.info.tags.clone(),
        };
        Ok((images, timings))
    }
}

/// One encoder run counted in progress, until it is dropped (also when
/// the blocking task never runs).
struct Running(Arc<AtomicUsize>);

impl Running {
    fn start(count: &Arc<AtomicUsize>) -> Running {
        count.fetch_add(1, Ordering::SeqCst);
        Running(count.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A bounded least-recently-used map of embeddings (a handful of entries:
/// a linear scan of the use order is cheaper than a linked structure).
struct Lru {
    capacity: usize,
    entries: HashMap<u128, Arc<Vec<f32>>>,
    /// Least recently used first.
    order: Vec<u128>,
}

impl Lru {
    fn new(capacity: usize) -> Self {
        Lru { capacity, entries: HashMap::new(), order: Vec::new() }
    }

    fn touch(&mut self, key: u128) {
        self.order.retain(|k| *k != key);
        self.order.push(key);
    }

    fn get(&mut self, key: u128) -> Option<Arc<Vec<f32>>> {
        let hit = self.entries.get(&key).cloned()?;
        self.touch(key);
        Some(hit)
    }

    fn put(&mut self, key: u128, value: Arc<Vec<f32>>) {
        if self.capacity == 0 {
            return;
        }
        self.entries.insert(key, value);
        self.touch(key);
        while self.order.len() > self.capacity {
            let evicted = self.order.remove(0);
            self.entries.remove(&evicted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_keeps_the_most_recent() {
        let mut lru = Lru::new(2);
        lru.put(1, Arc::new(vec![1.0]));
        lru.put(2, Arc::new(vec![2.0]));
        assert!(lru.get(1).is_some());
        lru.put(3, Arc::new(vec![3.0]));
        assert!(lru.get(2).is_none(), "2 was the least recently used");
        assert!(lru.get(1).is_some() && lru.get(3).is_some());
    }

    #[test]
    fn family_tags() {
        assert_eq!(tags_for("/m/Qwen2.5-VL-3B-w8a8.rkllm").unwrap().content, "<|image_pad|>");
        assert_eq!(tags_for("sim:qwen2.5-vl-3b").unwrap().start, "<|vision_start|>");
        assert_eq!(tags_for("internvl3-1b.rkllm").unwrap().content, "<IMG_CONTEXT>");
        assert_eq!(tags_for("MiniCPM-V-2_6.rkllm").unwrap().end, "</image>");
        assert!(tags_for("qwen2.5-1.5b.rkllm").is_none());
    }
}
