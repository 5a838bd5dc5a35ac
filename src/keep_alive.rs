//! How long an idle model stays loaded: the value and its parser (Ollama's
//! forms). It sits below every layer that takes it — the config checks the
//! daemon's `keep_alive`, the registry applies it, the api reads a
//! request's — so that none of them imports another for it.

use std::time::{Duration, Instant};

/// How long an idle model stays loaded (Ollama's `keep_alive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    Forever,
    /// `For(ZERO)`: unload as soon as the model is idle.
    For(Duration),
}

impl KeepAlive {
    /// When an idle model expires; `None` = never.
    pub fn deadline(self, from: Instant) -> Option<Instant> {
        match self {
            KeepAlive::Forever => None,
            KeepAlive::For(d) => Some(from + d),
        }
    }

    pub fn is_zero(self) -> bool {
        self == KeepAlive::For(Duration::ZERO)
    }

    /// Seconds (a number) as Ollama takes them: negative = forever.
    pub fn from_secs(secs: f64) -> Result<KeepAlive, String> {
        if secs.is_nan() {
            return Err("keep_alive must be a number of seconds or a duration like \"5m\"".into());
        }
        if secs < 0.0 {
            return Ok(KeepAlive::Forever);
        }
        // Longer than a Duration holds (~585 billion years): forever.
        Ok(Duration::try_from_secs_f64(secs).map_or(KeepAlive::Forever, KeepAlive::For))
    }

    /// Ollama's forms: a Go duration (`"5m"`, `"1h30m"`, `"300ms"`, `"-1m"`)
    /// or a number of seconds (`"300"`, `"-1"`); negative = forever.
    pub fn parse(text: &str) -> Result<KeepAlive, String> {
        let text = text.trim();
        if let Ok(secs) = text.parse::<f64>() {
            return Self::from_secs(secs);
        }
        let bad = || format!("keep_alive `{text}` is not a duration (e.g. \"5m\", \"1h30m\", \"30s\", \"-1\")");
        let (negative, mut rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        if rest.is_empty() {
            return Err(bad());
        }
        let mut secs = 0.0;
        while !rest.is_empty() {
            let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
            let number: f64 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
            let scale = match &rest[..unit_len] {
                "ns" => 1e-9,
                "us" | "µs" => 1e-6,
                "ms" => 1e-3,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                _ => return Err(bad()),
            };
            secs += number * scale;
            rest = &rest[unit_len..];
        }
        if negative {
            return Ok(KeepAlive::Forever);
        }
        Self::from_secs(secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alive_takes_ollamas_forms() {
        let d = |s| KeepAlive::For(Duration::from_secs(s));
        assert_eq!(KeepAlive::parse("5m"), Ok(d(300)));
        assert_eq!(KeepAlive::parse("1h30m"), Ok(d(5400)));
        assert_eq!(KeepAlive::parse("300"), Ok(d(300)));
        assert_eq!(KeepAlive::parse("0"), Ok(d(0)));
        assert_eq!(KeepAlive::parse("-1"), Ok(KeepAlive::Forever));
        assert_eq!(KeepAlive::parse("-1m"), Ok(KeepAlive::Forever));
        assert_eq!(KeepAlive::parse("1.5s"), Ok(KeepAlive::For(Duration::from_millis(1500))));
        assert!(KeepAlive::parse("5 minutes").is_err());
        assert!(KeepAlive::parse("").is_err());
        assert!(KeepAlive::parse("m").is_err());
        assert!(KeepAlive::For(Duration::ZERO).is_zero());
    }
}
