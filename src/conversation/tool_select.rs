//! Which tools matter most to a conversation, for a request whose tool
//! definitions do not all fit the model's context (`tools_overflow =
//! "select"`; docs/api.md, "Tools that do not fit").
//!
//! The ranking is a bag-of-words match, cheap and deterministic: the same
//! request always keeps the same tools.
//! * A tool's words: its name split at `_`, `-` and case changes (counted
//!   twice: a name is the tool's most telling text), its description, and
//!   its parameters' names and descriptions.
//! * The conversation's words: the user turns and tool results, the last
//!   user turn counted three times (it is what the reply answers).
//! * A tool scores the sum, over the words it shares with the conversation,
//!   of its weight × the conversation's weight × the word's rarity among the
//!   tools (`ln(1 + tools / tools_with_the_word)`), so that "search", which
//!   half of a tool list has, counts less than "image".
//! * A tool the conversation has already called comes first: the model needs
//!   its definition to read its own earlier call.
//! * Then the tools the conversation names (a system prompt saying "use the
//!   Bash tool", a user asking for `get_weather`): an agent's instructions
//!   name its core tools, which matter more than any word match.
//!
//! Words are lowercased ASCII-alphanumeric runs of 3+ characters less a few
//! English function words, with a plural `s`/`ies` folded.

use super::{ChatInput, Role};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What happens to a request whose tools would overflow the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolsOverflow {
    /// Send the most relevant tools that fit; say which were dropped.
    #[default]
    Select,
    /// Refuse the request (400 `context_length_exceeded`, naming the tools' share).
    Refuse,
}

impl ToolsOverflow {
    pub const ALL: [ToolsOverflow; 2] = [ToolsOverflow::Select, ToolsOverflow::Refuse];

    pub fn name(self) -> &'static str {
        match self {
            ToolsOverflow::Select => "select",
            ToolsOverflow::Refuse => "refuse",
        }
    }
}

impl std::str::FromStr for ToolsOverflow {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        super::by_name(&Self::ALL, Self::name, "tools overflow policy", s)
    }
}

const STOP_WORDS: [&str; 24] = [
    "the", "and", "for", "with", "that", "this", "from", "are", "was", "you", "your", "can", "not", "but", "has",
    "have", "what", "which", "will", "its", "into", "use", "when", "all",
];

/// Weight of the last user turn's words against the rest of the conversation's.
const LAST_TURN: f64 = 3.0;
/// Weight of a tool's name words against its other words.
const NAME: f64 = 2.0;

/// The tools' indices, most relevant first (ties in the client's order).
pub fn rank(chat: &ChatInput) -> Vec<usize> {
    let query = conversation_words(chat);
    let tools: Vec<BTreeMap<String, f64>> = chat.tools.iter().map(tool_words).collect();
    let mut with_word: BTreeMap<&str, usize> = BTreeMap::new();
    for words in &tools {
        for w in words.keys() {
            *with_word.entry(w.as_str()).or_default() += 1;
        }
    }
    let n = tools.len() as f64;
    let called: BTreeSet<&str> = chat.messages.iter().flat_map(|m| &m.tool_calls).map(|c| c.name.as_str()).collect();
    let named = named_words(chat);
    // (tier, score): called 2, named 1, others 0; then the word match.
    let score = |i: usize| -> (u8, f64) {
        let name = tool_name(&chat.tools[i]);
        let tier = match name {
            Some(name) if called.contains(name) => 2,
            Some(name) if named.contains(name) => 1,
            _ => 0,
        };
        let matched = tools[i]
            .iter()
            .filter_map(|(w, weight)| {
                let q = query.get(w)?;
                let rarity = (1.0 + n / with_word[w.as_str()] as f64).ln();
                Some(weight * q * rarity)
            })
            .sum();
        (tier, matched)
    };
    let scores: Vec<(u8, f64)> = (0..tools.len()).map(score).collect();
    let mut order: Vec<usize> = (0..tools.len()).collect();
    // A stable sort keeps the client's order among equal scores.
    order.sort_by(|&a, &b| scores[b].0.cmp(&scores[a].0).then(scores[b].1.total_cmp(&scores[a].1)));
    order
}

/// Every identifier-like word of the conversation's messages, as written
/// (`Bash`, `get_weather`): a tool's exact name among them names it.
fn named_words(chat: &ChatInput) -> BTreeSet<&str> {
    let identifier = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    chat.messages
        .iter()
        .filter_map(|m| m.content.as_deref())
        .flat_map(|text| text.split(|c: char| !identifier(c)))
        .filter(|w| !w.is_empty())
        .collect()
}

fn tool_name(tool: &Value) -> Option<&str> {
    tool.pointer("/function/name")?.as_str()
}

/// A tool's words and their weights (the highest where a word recurs).
fn tool_words(tool: &Value) -> BTreeMap<String, f64> {
    let mut words = BTreeMap::new();
    let mut add = |text: &str, weight: f64| {
        for w in split(text) {
            let entry = words.entry(w).or_insert(weight);
            *entry = f64::max(*entry, weight);
        }
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    add(&text(tool.pointer("/function/name")), NAME);
    add(&text(tool.pointer("/function/description")), 1.0);
    if let Some(properties) = tool.pointer("/function/parameters/properties").and_then(Value::as_object) {
        for (name, schema) in properties {
            add(name, 1.0);
            add(&text(schema.get("description")), 1.0);
        }
    }
    words
}

/// The conversation's words: user turns and tool results, the last user turn weighted most.
fn conversation_words(chat: &ChatInput) -> BTreeMap<String, f64> {
    let last_user = chat.messages.iter().rposition(|m| m.role == Role::User);
    let mut words = BTreeMap::new();
    for (i, m) in chat.messages.iter().enumerate() {
        if !matches!(m.role, Role::User | Role::Tool) {
            continue;
        }
        let weight = if Some(i) == last_user { LAST_TURN } else { 1.0 };
        for w in split(m.content.as_deref().unwrap_or_default()) {
            let entry = words.entry(w).or_insert(weight);
            *entry = f64::max(*entry, weight);
        }
    }
    words
}

/// `searchWebPages` / `search_web_pages` / "Search web pages." → search, web, page.
fn split(text: &str) -> impl Iterator<Item = String> + '_ {
    let mut spaced = String::with_capacity(text.len() + 8);
    let mut previous_lower = false;
    for c in text.chars() {
        if c.is_ascii_uppercase() && previous_lower {
            spaced.push(' ');
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        spaced.push(if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { ' ' });
    }
    spaced
        .split_whitespace()
        .filter(|w| w.len() >= 3 && !STOP_WORDS.contains(w))
        .map(singular)
        .collect::<Vec<_>>()
        .into_iter()
}

fn singular(word: &str) -> String {
    if let Some(stem) = word.strip_suffix("ies").filter(|s| s.len() >= 2) {
        return format!("{stem}y");
    }
    match word.strip_suffix('s') {
        Some(stem) if stem.len() >= 3 && !stem.ends_with('s') => stem.to_owned(),
        _ => word.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{Message, ToolCall};
    use serde_json::json;

    fn tool(name: &str, description: &str) -> Value {
        json!({"type": "function", "function": {"name": name, "description": description,
               "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "What to look for"}}}}})
    }

    fn user(text: &str) -> Message {
        Message { role: Role::User, content: Some(text.into()), ..Default::default() }
    }

    fn tools() -> Vec<Value> {
        vec![
            tool("get_current_timestamp", "Get the current date and time."),
            tool("search_web", "Search the public web for pages."),
            tool("generate_image", "Generate an image from a prompt."),
            tool("search_memories", "Search the user's stored memories."),
        ]
    }

    #[test]
    fn the_last_question_decides_and_ties_keep_the_clients_order() {
        let chat = |text: &str| ChatInput { messages: vec![user(text)], tools: tools(), ..Default::default() };
        assert_eq!(rank(&chat("Draw me an image of a cat")), vec![2, 0, 1, 3]);
        assert_eq!(rank(&chat("What do you remember about my memories?"))[0], 3);
        assert_eq!(rank(&chat("Search the web for Paris pages")), vec![1, 3, 0, 2]);
        // Nothing shared: the client's order.
        assert_eq!(rank(&chat("Bonjour")), vec![0, 1, 2, 3]);
        // An earlier question weighs less than the last one.
        let mut c = chat("Now draw an image");
        c.messages.insert(0, user("search the web"));
        assert_eq!(rank(&c)[0], 2);
    }

    #[test]
    fn a_tool_already_called_comes_first() {
        let called = Message {
            role: Role::Assistant,
            content: None,
            tool_calls: vec![ToolCall { id: "c".into(), name: "search_memories".into(), arguments: "{}".into() }],
            ..Default::default()
        };
        let chat = ChatInput {
            messages: vec![user("Draw an image"), called, user("and an image of a dog")],
            tools: tools(),
            ..Default::default()
        };
        assert_eq!(rank(&chat)[..2], [3, 2]);
    }

    #[test]
    fn a_tool_the_conversation_names_comes_before_word_matches() {
        let system = Message {
            role: Role::System,
            content: Some("Use search_memories to recall.".into()),
            ..Default::default()
        };
        let chat = ChatInput { messages: vec![system, user("Draw an image")], tools: tools(), ..Default::default() };
        assert_eq!(rank(&chat)[..2], [3, 2]);
        // A word inside another is no name.
        let system = Message { role: Role::System, content: Some("research_memories_x".into()), ..Default::default() };
        let chat = ChatInput { messages: vec![system, user("Draw an image")], tools: tools(), ..Default::default() };
        assert_eq!(rank(&chat)[0], 2);
    }

    #[test]
    fn words_are_split_and_folded() {
        let words: Vec<String> = split("searchWebPages list_memories: the Queries, class").collect();
        assert_eq!(words, ["search", "web", "page", "list", "memory", "query", "class"]);
    }
}
