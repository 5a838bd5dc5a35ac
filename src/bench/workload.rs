//! What is sent and when: prompts (synthetic or from a JSONL file), and one
//! level of load — a fixed number of concurrent clients, or Poisson arrivals
//! at a rate — limited by a request count or a duration.

use super::client::{run_one, Prompt, RequestRecord, Target};
use indicatif::ProgressBar;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// splitmix64: a seeded, reproducible source for prompts and arrival gaps.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// An exponential gap with mean 1/rate: the spacing of Poisson arrivals.
    pub fn exp_gap(&mut self, rate: f64) -> Duration {
        Duration::from_secs_f64(-self.unit().ln() / rate)
    }
}

/// Common English words: about one token each (with the leading space) in BPE vocabularies.
const WORDS: [&str; 32] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he",
    "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were", "their",
];

pub enum Prompts {
    Synthetic {
        tokens: usize,
        max_tokens: u32,
        seed: u64,
    },
    File(Vec<Arc<Prompt>>),
    /// The prompts of `prompts`, each with this image (a data URL) before the first user text.
    WithImage {
        prompts: Box<Prompts>,
        url: String,
    },
}

impl Prompts {
    /// The prompt of request number `i` (file prompts are used in turn).
    pub fn get(&self, i: usize) -> Arc<Prompt> {
        match self {
            Prompts::File(list) => list[i % list.len()].clone(),
            Prompts::WithImage { prompts, url } => {
                let prompt = prompts.get(i);
                let mut messages = prompt.messages.clone();
                let first_user = messages.as_array_mut().and_then(|m| m.iter_mut().find(|m| m["role"] == "user"));
                if let Some(message) = first_user {
                    let text = message["content"].take();
                    let image = json!({"type": "image_url", "image_url": {"url": url}});
                    message["content"] = match text {
                        Value::Array(mut parts) => {
                            parts.insert(0, image);
                            Value::Array(parts)
                        }
                        text => json!([image, {"type": "text", "text": text}]),
                    };
                }
                Arc::new(Prompt { messages, max_tokens: prompt.max_tokens })
            }
            Prompts::Synthetic { tokens, max_tokens, seed } => {
                // A distinct opening per request defeats servers' prefix caches.
                let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
                let mut text = format!("Request {i}: repeat these words.");
                for _ in 0..tokens.saturating_sub(8) {
                    text.push(' ');
                    text.push_str(WORDS[(rng.next_u64() % WORDS.len() as u64) as usize]);
                }
                Arc::new(Prompt { messages: json!([{"role": "user", "content": text}]), max_tokens: *max_tokens })
            }
        }
    }

    /// Lines of `{"prompt": "…"}` or `{"messages": […]}`, optionally with `"max_tokens"`.
    pub fn load(path: &Path, default_max_tokens: u32) -> Result<Prompts, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut list = Vec::new();
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let bad = |why: &str| format!("{}:{}: {why}", path.display(), n + 1);
            let v: Value = serde_json::from_str(line).map_err(|e| bad(&e.to_string()))?;
            let messages = match (v.get("messages"), v["prompt"].as_str()) {
                (Some(m), _) if m.is_array() => m.clone(),
                (_, Some(p)) => json!([{"role": "user", "content": p}]),
                _ => return Err(bad("expected a \"prompt\" string or a \"messages\" array")),
            };
            let max_tokens = match v.get("max_tokens") {
                None => default_max_tokens,
                Some(m) => m.as_u64().and_then(|m| u32::try_from(m).ok()).ok_or_else(|| bad("bad max_tokens"))?,
            };
            list.push(Arc::new(Prompt { messages, max_tokens }));
        }
        if list.is_empty() {
            return Err(format!("{}: no prompts", path.display()));
        }
        Ok(Prompts::File(list))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    Concurrency(usize),
    /// Requests per second, Poisson arrivals, no cap on concurrency.
    Rate(f64),
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub requests: Option<usize>,
    pub duration: Option<Duration>,
}

impl Limits {
    fn allows(&self, i: usize, start: Instant) -> bool {
        self.requests.is_none_or(|n| i < n) && self.duration.is_none_or(|d| start.elapsed() < d)
    }
}

pub struct LevelRun {
    /// (prompt number, turn, record), in order of completion.
    pub records: Vec<(usize, usize, RequestRecord)>,
    /// First request sent → last stream ended.
    pub wall_s: f64,
}

/// What every request task of a level shares.
struct Shared {
    target: Arc<Target>,
    prompts: Arc<Prompts>,
    first_prompt: usize,
    turns: usize,
    done: Mutex<Vec<(usize, usize, RequestRecord)>>,
    progress: ProgressBar,
}

impl Shared {
    /// Request `i`: one prompt, or with several turns one conversation
    /// that resends its history with the server's own replies each turn.
    async fn request(&self, i: usize) {
        let n = self.first_prompt + i;
        let first = self.prompts.get(n);
        let mut messages = first.messages.as_array().cloned().unwrap_or_default();
        for turn in 0..self.turns {
            if turn > 0 {
                messages.push(json!({"role": "user", "content": follow_up(turn)}));
            }
            let prompt = Arc::new(Prompt { messages: Value::Array(messages.clone()), max_tokens: first.max_tokens });
            let record = run_one(&self.target, prompt).await;
            // Resent as the openai SDK and chat UIs do: its content, not its reasoning.
            let reply = super::measure::figures(&record).content;
            let failed = record.failure.is_some() || record.status != Some(200);
            self.done.lock().unwrap_or_else(|e| e.into_inner()).push((n, turn, record));
            if failed {
                break;
            }
            messages.push(json!({"role": "assistant", "content": reply}));
        }
        self.progress.inc(1);
    }
}

/// The user message of a conversation's later turn.
fn follow_up(turn: usize) -> String {
    const ASKS: [&str; 4] = ["Go on.", "Can you say more about that?", "Why is that?", "Summarise it in one line."];
    format!("Turn {}: {}", turn + 1, ASKS[turn % ASKS.len()])
}

/// Runs one level; request `i` gets prompt `first_prompt + i`.
/// The shape of one level: how requests arrive, when it ends, turns per conversation.
#[derive(Debug, Clone, Copy)]
pub struct Level {
    pub load: Load,
    pub limits: Limits,
    pub turns: usize,
}

pub async fn run_level(
    target: Arc<Target>,
    prompts: Arc<Prompts>,
    first_prompt: usize,
    level: Level,
    rng: &mut Rng,
    progress: ProgressBar,
) -> LevelRun {
    let Level { load, limits, turns } = level;
    let shared = Arc::new(Shared { target, prompts, first_prompt, turns, done: Mutex::new(Vec::new()), progress });
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    match load {
        Load::Concurrency(c) => {
            let next = Arc::new(AtomicUsize::new(0));
            for _ in 0..c {
                let (shared, next) = (shared.clone(), next.clone());
                tasks.spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if !limits.allows(i, start) {
                            break;
                        }
                        shared.request(i).await;
                    }
                });
            }
        }
        Load::Rate(rate) => {
            let mut due = start;
            for i in 0.. {
                due += rng.exp_gap(rate);
                tokio::time::sleep_until(due.into()).await;
                if !limits.allows(i, start) {
                    break;
                }
                let shared = shared.clone();
                tasks.spawn(async move { shared.request(i).await });
            }
        }
    }
    while tasks.join_next().await.is_some() {}
    let wall_s = start.elapsed().as_secs_f64();
    let records = std::mem::take(&mut *shared.done.lock().unwrap_or_else(|e| e.into_inner()));
    LevelRun { records, wall_s }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_gaps_have_the_asked_mean() {
        let mut rng = Rng::new(7);
        let n = 20_000;
        let mean = (0..n).map(|_| rng.exp_gap(4.0).as_secs_f64()).sum::<f64>() / n as f64;
        assert!((mean - 0.25).abs() < 0.01, "mean gap {mean}");
    }

    #[test]
    fn synthetic_prompts_are_distinct_reproducible_and_about_the_asked_length() {
        let p = Prompts::Synthetic { tokens: 100, max_tokens: 5, seed: 1 };
        let text = |i| p.get(i).messages[0]["content"].as_str().unwrap().to_owned();
        assert_eq!(text(3), text(3));
        assert_ne!(text(3), text(4));
        let words = text(3).split_whitespace().count();
        assert!((95..=100).contains(&words), "{words} words");
        assert_eq!(p.get(0).max_tokens, 5);
    }
}
