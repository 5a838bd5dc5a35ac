//! What a hidden-layer or logits run returns: the callback copies the rows
//! and columns the caller asked for ([`Capture`]) out of the runtime's
//! buffer, and then tells the runtime to release it (returns 2), so a large
//! buffer never outlives the callback.

use crate::common::RKLLMResult;
use crate::params::{Capture, Rows};

/// The copy: `rows` × `cols` values, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    pub values: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
    /// The runtime's row length (`embd_size` or `vocab_size`); `cols` is
    /// smaller when only some columns were asked for.
    pub width: usize,
    /// The runtime's row count (`num_tokens`): the tokens the run read.
    pub num_tokens: usize,
}

impl Matrix {
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.cols..(i + 1) * self.cols]
    }
}

/// Why a buffer could not be copied (reported as the run's error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    #[error("the runtime returned a {rows}×{width} matrix: nothing to read")]
    Empty { rows: i64, width: i64 },
    #[error("token id {column} is outside the runtime's vocabulary of {width}")]
    Column { column: u32, width: usize },
}

/// Copies what `capture` asks for from `result`, or `None` when the result
/// carries no buffer of that kind (e.g. the FINISH callback).
pub(crate) fn copy(capture: &Capture, result: &RKLLMResult) -> Option<Result<Matrix, CaptureError>> {
    let (ptr, width, num_tokens, rows, columns) = match capture {
        Capture::HiddenLayer { rows } => {
            let h = &result.last_hidden_layer;
            (h.hidden_states, h.embd_size, h.num_tokens, *rows, &[][..])
        }
        Capture::Logits { rows, columns } => {
            let l = &result.logits;
            (l.logits, l.vocab_size, l.num_tokens, *rows, columns.as_slice())
        }
    };
    if ptr.is_null() {
        return None;
    }
    let (Ok(w), Ok(n)) = (usize::try_from(width), usize::try_from(num_tokens)) else {
        return Some(Err(CaptureError::Empty { rows: num_tokens.into(), width: width.into() }));
    };
    if w == 0 || n == 0 {
        return Some(Err(CaptureError::Empty { rows: n as i64, width: w as i64 }));
    }
    if let Some(&column) = columns.iter().find(|&&c| c as usize >= w) {
        return Some(Err(CaptureError::Column { column, width: w }));
    }
    // SAFETY: the runtime passes `num_tokens × width` floats, valid for the
    // duration of the callback.
    let all = unsafe { std::slice::from_raw_parts(ptr, n * w) };
    let first = match rows {
        Rows::Last => n - 1,
        Rows::All => 0,
    };
    let source = &all[first * w..];
    let values: Vec<f32> = if columns.is_empty() {
        source.to_vec()
    } else {
        source.chunks_exact(w).flat_map(|row| columns.iter().map(move |&c| row[c as usize])).collect()
    };
    let cols = if columns.is_empty() { w } else { columns.len() };
    Some(Ok(Matrix { values, rows: n - first, cols, width: w, num_tokens: n }))
}
