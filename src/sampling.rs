//! The sampling fields a request or the config may set over RKLLM's
//! defaults, declared once in [`with_sampling_fields!`]: the overrides
//! type, its field names, its ranges and the api's wire type are all made
//! from that one list.

use rkllm_sys::SamplingParams;

/// Calls `$m!` with the list of sampling fields: `name: type = lo..=hi`,
/// each with its doc text. The list is the one place a field is named.
#[macro_export]
macro_rules! with_sampling_fields {
    ($m:ident) => {
        $m! {
            /// 0..2; 0 = greedy.
            temperature: f32 = 0.0..=2.0,
            /// 0..1
            top_p: f32 = 0.0..=1.0,
            /// Extension: >= 0.
            top_k: i32 = 0.0..=2147483647.0,
            /// Extension: 0..10.
            repeat_penalty: f32 = 0.0..=10.0,
            /// -2..2
            frequency_penalty: f32 = -2.0..=2.0,
            /// -2..2
            presence_penalty: f32 = -2.0..=2.0,
            /// Extension: 0, 1 or 2.
            mirostat: i32 = 0.0..=2.0,
            /// Extension: 0..100.
            mirostat_tau: f32 = 0.0..=100.0,
            /// Extension: 0..1.
            mirostat_eta: f32 = 0.0..=1.0,
        }
    };
}

/// A sampling field outside its range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`{field}` must be between {lo} and {hi}, got {got}")]
pub struct OutOfRange {
    pub field: &'static str,
    pub lo: f64,
    pub hi: f64,
    pub got: f64,
}

macro_rules! declare_overrides {
    ($( $(#[doc = $doc:literal])* $name:ident : $ty:ty = $lo:literal ..= $hi:literal ),* $(,)?) => {
        /// Sampling fields laid over defaults: a request's fields (over the
        /// configured defaults) or the config's `[sampling]` table (over
        /// RKLLM's). Every `None` keeps the value underneath — never
        /// OpenAI's defaults.
        #[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        pub struct SamplingOverrides {
            $( $(#[doc = $doc])* pub $name: Option<$ty>, )*
        }

        impl SamplingOverrides {
            /// The field names, in declaration order.
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($name)),*];
            /// Each field's inclusive range, in declaration order.
            pub const RANGES: &'static [(&'static str, f64, f64)] = &[$((stringify!($name), $lo, $hi)),*];

            /// The names of the fields that are set, in declaration order.
            pub fn given(&self) -> Vec<&'static str> {
                let mut given = Vec::new();
                $( if self.$name.is_some() { given.push(stringify!($name)); } )*
                given
            }

            /// The first field that is set outside its range (NaN is outside every range).
            pub fn check(&self) -> Result<(), OutOfRange> {
                $(
                    if let Some(v) = self.$name {
                        let got = f64::from(v);
                        if !($lo..=$hi).contains(&got) {
                            return Err(OutOfRange { field: stringify!($name), lo: $lo, hi: $hi, got });
                        }
                    }
                )*
                Ok(())
            }

            fn lay_over(&self, s: &mut SamplingParams) {
                $( if let Some(v) = self.$name { s.$name = v; } )*
            }
        }

        /// Every sampling field of `s` by name, in declaration order (the
        /// `model loaded` line, Ollama's `show`).
        pub fn named(s: &SamplingParams) -> Vec<(&'static str, String)> {
            vec![$((stringify!($name), s.$name.to_string())),*]
        }
    };
}

with_sampling_fields!(declare_overrides);

impl SamplingOverrides {
    /// The defaults with these fields laid over them. Temperature 0 means
    /// greedy decoding, which RKLLM expresses as `top_k = 1`.
    pub fn apply(&self, defaults: SamplingParams) -> SamplingParams {
        let mut s = defaults;
        self.lay_over(&mut s);
        if self.temperature == Some(0.0) {
            s.top_k = 1;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn omitted_fields_keep_rkllm_defaults_not_openai_ones() {
        let d = SamplingParams::RKLLM_DEFAULTS;
        let r = SamplingOverrides { top_p: Some(0.5), ..Default::default() };
        let s = r.apply(d);
        assert_eq!(s.top_p, 0.5);
        assert_eq!(s.temperature, d.temperature, "OpenAI's default would be 1.0");
        assert_eq!(s.top_k, d.top_k);
        assert_eq!(r.given(), vec!["top_p"]);
    }

    #[test]
    fn every_field_is_named_with_its_value() {
        let s = SamplingOverrides { top_p: Some(0.5), ..Default::default() }.apply(SamplingParams::RKLLM_DEFAULTS);
        let named = named(&s);
        let names: Vec<&str> = named.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, SamplingOverrides::FIELDS);
        assert!(named.contains(&("top_p", "0.5".to_owned())), "{named:?}");
    }

    #[test]
    fn temperature_zero_is_greedy() {
        let r = SamplingOverrides { temperature: Some(0.0), top_k: Some(40), ..Default::default() };
        assert_eq!(r.apply(SamplingParams::RKLLM_DEFAULTS).top_k, 1);
        assert_eq!(r.given(), vec!["temperature", "top_k"]);
    }

    #[test]
    fn ranges_are_checked_and_name_the_field() {
        assert!(SamplingOverrides { frequency_penalty: Some(-2.0), ..Default::default() }.check().is_ok());
        let e = SamplingOverrides { top_p: Some(1.5), ..Default::default() }.check().unwrap_err();
        assert_eq!((e.field, e.got), ("top_p", 1.5));
        let e = SamplingOverrides { mirostat: Some(3), ..Default::default() }.check().unwrap_err();
        assert_eq!(e.field, "mirostat");
        assert!(SamplingOverrides { temperature: Some(f32::NAN), ..Default::default() }.check().is_err());
        assert_eq!(SamplingOverrides::FIELDS.len(), SamplingOverrides::RANGES.len());
    }
}
