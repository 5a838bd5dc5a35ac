//! The arithmetic of embeddings and reranking, on the plain numbers the
//! engine returns: pooling a hidden-layer matrix into one vector, L2
//! normalisation, the base64 wire encoding, and the reranker prompt
//! formats with their score. No HTTP, no runtime.

use crate::engine::{Matrix, Rows};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};

/// How a sequence's hidden states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The last token's state: right for causal embedders (Qwen3-Embedding).
    Last,
    /// The mean over every token.
    Mean,
}

impl Pooling {
    /// The rows the runtime's callback has to copy for this pooling.
    pub fn rows(self) -> Rows {
        match self {
            Pooling::Last => Rows::Last,
            Pooling::Mean => Rows::All,
        }
    }
}

/// `matrix` (the rows `rows()` asked for) pooled, then scaled to length 1.
pub fn embedding(matrix: &Matrix, pooling: Pooling) -> Vec<f32> {
    let mut v = pooled(matrix, pooling);
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    // An all-zero state has no direction: it stays zero rather than NaN.
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

/// `matrix` pooled into one vector, at its own length (Ollama's legacy
/// `/api/embeddings` returns vectors so).
pub fn pooled(matrix: &Matrix, pooling: Pooling) -> Vec<f32> {
    match pooling {
        Pooling::Last => matrix.row(matrix.rows - 1).to_vec(),
        Pooling::Mean => {
            let mut sum = vec![0.0f32; matrix.cols];
            for row in matrix.values.chunks_exact(matrix.cols) {
                sum.iter_mut().zip(row).for_each(|(s, x)| *s += x);
            }
            sum.iter_mut().for_each(|s| *s /= matrix.rows as f32);
            sum
        }
    }
}

/// OpenAI's `encoding_format: base64`: the floats as little-endian f32 bytes.
pub fn base64_f32(v: &[f32]) -> String {
    use base64::Engine as _;
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// How a reranker model is asked about one (query, document) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RerankFormat {
    /// Qwen3-Reranker: a ChatML prompt that asks for "yes" or "no"; the
    /// score is P(yes) from the next-token logits of the two.
    Qwen3,
}

/// The instruction Qwen3-Reranker was trained with when none is given.
pub const DEFAULT_INSTRUCTION: &str = "Given a web search query, retrieve relevant passages that answer the query";

impl RerankFormat {
    /// The whole prompt for one pair.
    pub fn prompt(self, instruction: &str, query: &str, document: &str) -> String {
        match self {
            RerankFormat::Qwen3 => format!(
                "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the \
                 Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n\
                 <|im_start|>user\n<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}<|im_end|>\n\
                 <|im_start|>assistant\n<think>\n\n</think>\n\n"
            ),
        }
    }

    /// The tokens whose logits are read, in the order [`Self::score`] takes them.
    pub fn answer_tokens(self) -> [&'static str; 2] {
        match self {
            RerankFormat::Qwen3 => ["yes", "no"],
        }
    }

    /// The relevance in 0..1 from the logits of [`Self::answer_tokens`]:
    /// softmax over the two, P(yes).
    pub fn score(self, logits: &[f32]) -> f32 {
        match (self, logits) {
            (RerankFormat::Qwen3, [yes, no]) => 1.0 / (1.0 + (no - yes).exp()),
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(rows: &[&[f32]]) -> Matrix {
        let cols = rows[0].len();
        Matrix { values: rows.concat(), rows: rows.len(), cols, width: cols, num_tokens: rows.len() }
    }

    #[test]
    fn pooling_and_normalisation() {
        let m = matrix(&[&[1.0, 0.0], &[3.0, 4.0]]);
        assert_eq!(embedding(&m, Pooling::Last), [0.6, 0.8]);
        assert_eq!(pooled(&m, Pooling::Last), [3.0, 4.0]);
        let mean = embedding(&m, Pooling::Mean);
        let expected = [2.0 / 8f32.sqrt(), 2.0 / 8f32.sqrt()];
        assert!(mean.iter().zip(expected).all(|(a, b)| (a - b).abs() < 1e-6), "{mean:?}");
        assert_eq!(embedding(&matrix(&[&[0.0, 0.0]]), Pooling::Last), [0.0, 0.0]);
    }

    #[test]
    fn base64_is_little_endian_f32() {
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
    }

    #[test]
    fn qwen3_score_is_p_yes() {
        let f = RerankFormat::Qwen3;
        assert!((f.score(&[2.0, 2.0]) - 0.5).abs() < 1e-6);
        assert!(f.score(&[5.0, 0.0]) > 0.99 && f.score(&[0.0, 5.0]) < 0.01);
        let p = f.prompt("I", "Q?", "D.");
        assert!(p.contains("<Query>: Q?\n<Document>: D.<|im_end|>") && p.ends_with("</think>\n\n"), "{p}");
    }
}

/// Per model: what `/v1/embeddings` and `/v1/rerank` do with it.
#[derive(Debug, Clone, Copy)]
pub struct EmbedSettings {
    pub pooling: Pooling,
    pub rerank_format: RerankFormat,
}
