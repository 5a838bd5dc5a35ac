//! Scripted replies: `[{"match": "substring", "reply": "text"}, …]`.

use serde_json::Value;
use std::path::Path;

#[derive(Debug)]
pub(crate) struct Script {
    /// `(match, reply)` in file order; the first match wins.
    entries: Vec<(String, String)>,
}

impl Script {
    /// Reads and checks the file; the error is the text after `E rkllm: `.
    pub fn load(path: &Path) -> Result<Script, String> {
        let shown = path.display();
        let text = std::fs::read_to_string(path).map_err(|e| format!("simulator: cannot read script {shown}: {e}"))?;
        let json: Value =
            serde_json::from_str(&text).map_err(|e| format!("simulator: script {shown} is not JSON: {e}"))?;
        let Value::Array(items) = json else {
            return Err(format!("simulator: script {shown} must be an array of {{\"match\", \"reply\"}} objects"));
        };
        let entries = items
            .iter()
            .enumerate()
            .map(|(i, item)| match (item.get("match"), item.get("reply")) {
                (Some(Value::String(m)), Some(Value::String(r))) => Ok((m.clone(), r.clone())),
                _ => Err(format!("simulator: script {shown} entry {i} needs string fields \"match\" and \"reply\"")),
            })
            .collect::<Result<_, _>>()?;
        Ok(Script { entries })
    }

    /// The reply of the first entry whose `match` occurs in the prompt.
    pub fn reply_for(&self, prompt: &str) -> Option<&str> {
        self.entries.iter().find(|(m, _)| prompt.contains(m.as_str())).map(|(_, r)| r.as_str())
    }
}
