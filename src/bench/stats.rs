//! Summary statistics of a sample: mean, percentiles, maximum, standard deviation.

use serde::Serialize;

/// `None` fields (JSON `null`) when the sample is empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
    /// Population standard deviation, sqrt(Σ(x − mean)² / n).
    pub std: Option<f64>,
}

/// How the figures are computed, printed with them.
pub const FORMULAS: &str =
    "mean = Σx/n; pXX = linear interpolation between the sorted values at rank XX/100 × (n − 1); \
std = sqrt(Σ(x − mean)²/n)";

impl Summary {
    /// Non-finite values are dropped: a figure that could not be measured is not a sample.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Summary {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Summary::default();
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        Summary {
            n,
            mean: Some(mean),
            p50: Some(percentile(&v, 50.0)),
            p90: Some(percentile(&v, 90.0)),
            p99: Some(percentile(&v, 99.0)),
            max: v.last().copied(),
            std: Some(var.sqrt()),
        }
    }
}

/// The `p`th percentile of sorted, non-empty `v`, interpolating linearly
/// between closest ranks (numpy's default).
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let rank = p / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let s = Summary::of((1..=10).map(f64::from).rev());
        assert!(close(s.p50, 5.5), "{s:?}");
        assert!(close(s.p90, 9.1), "{s:?}");
        assert!(close(s.p99, 9.91), "{s:?}");
        assert!(close(s.max, 10.0));
        assert!(close(s.mean, 5.5));
        assert_eq!(s.n, 10);
    }

    #[test]
    fn population_standard_deviation() {
        let s = Summary::of([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert!(close(s.std, 2.0), "{s:?}");
        assert!(close(s.mean, 5.0));
        assert!(close(Summary::of([3.0]).std, 0.0));
    }

    #[test]
    fn one_value_is_every_percentile_and_empty_is_null() {
        let s = Summary::of([7.0]);
        assert!(close(s.p50, 7.0) && close(s.p99, 7.0) && close(s.max, 7.0));
        let e = Summary::of([f64::NAN]);
        assert_eq!(e, Summary::default());
        assert_eq!(serde_json::to_value(&e).unwrap()["p50"], serde_json::Value::Null);
    }
}
