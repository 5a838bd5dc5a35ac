//! A conversation body's size as chat's rule counts it (`size.rs`), read in
//! one pass over its JSON before the request is built. Building it is the
//! expensive part of an oversized body: `#[serde(flatten)]` and untagged
//! content buffer every member, the conversion copies the texts again, and
//! the model is leased. This pass keeps no text: a string is only measured
//! (serde_json hands it over borrowed or in its scratch buffer), every other
//! member is skipped, so an 8 MB message costs one scan of the bytes already
//! read.
//!
//! It reads the shapes of the Messages API and of Ollama's chat (and
//! OpenAI's parts): `messages` of `{role, content}` whose content is a text
//! or blocks (`text` blocks, and `tool_result` blocks with their own
//! content), Anthropic's `system`, and `tools`. Every count is at most what
//! the request's own check counts once built (a lower bound: the texts'
//! decoded bytes, a tool's strings without its JSON punctuation), so the
//! early refusal never refuses what chat would take; a value of an
//! unexpected type counts nothing and is left to the typed parse to refuse.

use super::size::{refuse_tool_bytes, refuse_tool_count, refuse_unfittable, MAX_TOOLS};
use crate::api::error::ApiError;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// Whether a system text block's text is client metadata, not instruction:
/// Claude Code's first one, `x-anthropic-billing-header: cc_version=…;
/// cc_entrypoint=…; cch=…`, differs per conversation. The Messages API
/// leaves it out of the prompt (`messages/convert.rs`), so it is not
/// counted here either.
pub fn is_client_metadata(text: &str) -> bool {
    const PREFIXES: [&str; 1] = ["x-anthropic-billing-header:"];
    let text = text.trim_start();
    PREFIXES.iter().any(|p| text.starts_with(p))
}

/// What a body weighs, as far as the size rule counts.
#[derive(Debug, Default)]
pub struct BodySize {
    /// The model the body names.
    pub model: Option<String>,
    /// How many messages it has.
    pub turns: usize,
    /// The text every template renders verbatim: the system prompt and every turn but the assistant's.
    pub verbatim: usize,
    /// How many tools the body offers.
    pub tools: usize,
    /// The bytes of each of the first [`MAX_TOOLS`] tools, at least.
    pub tool_bytes: Vec<usize>,
}

impl BodySize {
    /// The body's size; `None` when it is not a JSON object (the typed parse says why).
    pub fn of(body: &[u8]) -> Option<BodySize> {
        serde_json::from_slice(body).ok()
    }

    /// Refuses as chat's `refuse_oversized` would (the same errors, in the
    /// same order), with what is known before the request is built: the
    /// tools' count always, the bytes only against a known `context`; the
    /// tools and messages together when `all_tools_sent` (no selection may
    /// drop a tool) and there are messages (a request without only loads
    /// the model on Ollama's routes).
    pub fn refuse(&self, context: Option<usize>, all_tools_sent: bool) -> Result<(), ApiError> {
        if let Some(context) = context {
            refuse_unfittable("messages", self.verbatim, context)?;
        }
        refuse_tool_count(self.tools)?;
        let Some(context) = context else { return Ok(()) };
        refuse_tool_bytes(self.tool_bytes.iter().copied(), self.verbatim, context, all_tools_sent && self.turns > 0)
    }
}

impl crate::api::named::NamesModel for BodySize {
    fn model(&self) -> &str {
        self.model.as_deref().unwrap_or_default()
    }
}

impl<'de> Deserialize<'de> for BodySize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(BodyVisitor)
    }
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = BodySize;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<BodySize, A::Error> {
        let mut size = BodySize::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Model => size.model = map.next_value::<Name>()?.0,
                Key::Messages => {
                    let turns = map.next_value::<Turns>()?;
                    (size.turns, size.verbatim) = (size.turns + turns.count, size.verbatim + turns.verbatim);
                }
                Key::System => size.verbatim += map.next_value::<Text>()?.system(),
                Key::Tools => {
                    let tools = map.next_value::<Tools>()?;
                    size.tools += tools.count;
                    size.tool_bytes.extend(tools.bytes);
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(size)
    }
}

#[derive(serde::Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Key {
    Model,
    Messages,
    System,
    Tools,
    #[serde(other)]
    Other,
}

/// Values of an unexpected type count nothing (the typed parse refuses
/// them): the scalars, and the kinds named (`str`, `seq`, `map`), skipped.
macro_rules! count_nothing_else {
    ($de:lifetime, $value:ty $(, $kind:ident)*) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<$value, E> {
            Ok(<$value>::default())
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<$value, E> {
            Ok(<$value>::default())
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<$value, E> {
            Ok(<$value>::default())
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<$value, E> {
            Ok(<$value>::default())
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<$value, E> {
            Ok(<$value>::default())
        }
        $(count_nothing_else!(@ $kind $de, $value);)*
    };
    (@ str $de:lifetime, $value:ty) => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<$value, E> {
            Ok(<$value>::default())
        }
    };
    (@ seq $de:lifetime, $value:ty) => {
        fn visit_seq<A: SeqAccess<$de>>(self, mut seq: A) -> Result<$value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(<$value>::default())
        }
    };
    (@ map $de:lifetime, $value:ty) => {
        fn visit_map<A: MapAccess<$de>>(self, mut map: A) -> Result<$value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(<$value>::default())
        }
    };
}

/// The model's name, when it is a string.
#[derive(Default)]
struct Name(Option<String>);

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a model's name")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Name, E> {
                Ok(Name(Some(s.to_owned())))
            }
            count_nothing_else!('de, Name, seq, map);
        }
        d.deserialize_any(V)
    }
}

/// `messages`: how many, and their verbatim text (every turn's but the assistant's).
#[derive(Default)]
struct Turns {
    count: usize,
    verbatim: usize,
}

impl<'de> Deserialize<'de> for Turns {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Turns;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("messages")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Turns, A::Error> {
                let mut turns = Turns::default();
                while let Some(turn) = seq.next_element::<Turn>()? {
                    (turns.count, turns.verbatim) = (turns.count + 1, turns.verbatim + turn.verbatim());
                }
                Ok(turns)
            }
            count_nothing_else!('de, Turns, map, str);
        }
        d.deserialize_any(V)
    }
}

#[derive(Clone, Copy, Default, PartialEq)]
enum Role {
    Assistant,
    System,
    /// The user's, a tool's, or one the typed parse refuses.
    #[default]
    Other,
}

/// One message: its role and its content's text.
#[derive(Default)]
struct Turn {
    role: Role,
    content: Text,
}

impl Turn {
    fn verbatim(&self) -> usize {
        match self.role {
            Role::Assistant => 0,
            Role::System => self.content.system(),
            Role::Other => self.content.all(),
        }
    }
}

impl<'de> Deserialize<'de> for Turn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Turn;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a message")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Turn, A::Error> {
                let mut turn = Turn::default();
                while let Some(key) = map.next_key::<TurnKey>()? {
                    match key {
                        TurnKey::Role => turn.role = map.next_value::<Word>()?.role,
                        TurnKey::Content => turn.content.add(&map.next_value::<Text>()?),
                        TurnKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(turn)
            }
            count_nothing_else!('de, Turn, seq, str);
        }
        d.deserialize_any(V)
    }
}

#[derive(serde::Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum TurnKey {
    Role,
    Content,
    #[serde(other)]
    Other,
}

/// A short string's meaning (a role, a block's type), without keeping it.
#[derive(Default)]
struct Word {
    role: Role,
    block: BlockKind,
}

impl<'de> Deserialize<'de> for Word {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Word;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a name")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Word, E> {
                let role = match s {
                    "assistant" => Role::Assistant,
                    "system" => Role::System,
                    _ => Role::Other,
                };
                let block = match s {
                    "text" => BlockKind::Text,
                    "tool_result" => BlockKind::ToolResult,
                    _ => BlockKind::Other,
                };
                Ok(Word { role, block })
            }
            count_nothing_else!('de, Word, seq, map);
        }
        d.deserialize_any(V)
    }
}

#[derive(Clone, Copy, Default, PartialEq)]
enum BlockKind {
    Text,
    ToolResult,
    #[default]
    Other,
}

/// A content's text: a string, or blocks (`text` blocks' text, the text of
/// `tool_result` blocks' content).
#[derive(Default)]
struct Text {
    /// A string, and text blocks that are not client metadata.
    text: usize,
    /// Text blocks that are client metadata ([`is_client_metadata`]).
    metadata: usize,
    /// `tool_result` blocks' text.
    results: usize,
}

impl Text {
    /// All of it (a user's turn: its text blocks and tool results).
    fn all(&self) -> usize {
        self.text + self.metadata + self.results
    }

    /// As a system prompt (only text, client metadata left out).
    fn system(&self) -> usize {
        self.text
    }

    fn add(&mut self, other: &Text) {
        self.text += other.text;
        self.metadata += other.metadata;
        self.results += other.results;
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("text or blocks")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Text, E> {
                Ok(Text { text: s.len(), ..Text::default() })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text, A::Error> {
                let mut text = Text::default();
                while let Some(block) = seq.next_element::<Block>()? {
                    match block.kind {
                        BlockKind::Text if block.text.metadata => text.metadata += block.text.len,
                        BlockKind::Text => text.text += block.text.len,
                        // Its content's text blocks (a block of another type there is refused).
                        BlockKind::ToolResult => text.results += block.content.text + block.content.metadata,
                        BlockKind::Other => {}
                    }
                }
                Ok(text)
            }
            count_nothing_else!('de, Text, map);
        }
        d.deserialize_any(V)
    }
}

/// A content block: its type, its `text`, and (a tool result) its `content`.
#[derive(Default)]
struct Block {
    kind: BlockKind,
    text: BlockText,
    content: Text,
}

impl<'de> Deserialize<'de> for Block {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Block;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a block")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Block, A::Error> {
                let mut block = Block::default();
                while let Some(key) = map.next_key::<BlockKey>()? {
                    match key {
                        BlockKey::Type => block.kind = map.next_value::<Word>()?.block,
                        BlockKey::Text => block.text = map.next_value()?,
                        BlockKey::Content => block.content = map.next_value()?,
                        BlockKey::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(block)
            }
            count_nothing_else!('de, Block, seq, str);
        }
        d.deserialize_any(V)
    }
}

#[derive(serde::Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum BlockKey {
    Type,
    Text,
    Content,
    #[serde(other)]
    Other,
}

/// A text block's `text`: its bytes, and whether it is client metadata.
#[derive(Default)]
struct BlockText {
    len: usize,
    metadata: bool,
}

impl<'de> Deserialize<'de> for BlockText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = BlockText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("text")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<BlockText, E> {
                Ok(BlockText { len: s.len(), metadata: is_client_metadata(s) })
            }
            count_nothing_else!('de, BlockText, seq, map);
        }
        d.deserialize_any(V)
    }
}

/// `tools`: how many, and the first [`MAX_TOOLS`] ones' bytes.
#[derive(Default)]
struct Tools {
    count: usize,
    bytes: Vec<usize>,
}

impl<'de> Deserialize<'de> for Tools {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Tools;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("tools")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tools, A::Error> {
                let mut tools = Tools::default();
                while let Some(StringBytes(bytes)) = seq.next_element()? {
                    tools.count += 1;
                    if tools.bytes.len() < MAX_TOOLS {
                        tools.bytes.push(bytes);
                    }
                }
                Ok(tools)
            }
            count_nothing_else!('de, Tools, map, str);
        }
        d.deserialize_any(V)
    }
}

/// The decoded bytes of every string in a value, its keys included: at most
/// what the value takes written as JSON, under any name a conversion gives
/// its members (a tool's JSON adds its punctuation, and Anthropic's
/// `{"name", "input_schema"}` becomes the longer `{"type": "function",
/// "function": {"name", "parameters"}}`).
#[derive(Default)]
struct StringBytes(usize);

impl<'de> Deserialize<'de> for StringBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StringBytes;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<StringBytes, E> {
                Ok(StringBytes(s.len()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StringBytes, A::Error> {
                let mut total = 0;
                while let Some(StringBytes(n)) = seq.next_element()? {
                    total += n;
                }
                Ok(StringBytes(total))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StringBytes, A::Error> {
                let mut total = 0;
                while let Some((StringBytes(k), StringBytes(v))) = map.next_entry()? {
                    total += k + v;
                }
                Ok(StringBytes(total))
            }
            count_nothing_else!('de, StringBytes);
        }
        d.deserialize_any(V)
    }
}
