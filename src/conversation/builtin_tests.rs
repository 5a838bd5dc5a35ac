//! Each built-in renders what the family's published Hugging Face template
//! (tests/fixtures/templates) renders, and a hand-written expectation pins
//! one conversation per family so a wrong fixture cannot hide.

use super::super::prompter::Prompter;
use super::super::template::{ChatTemplate, TemplateSource};
use super::super::{ChatInput, Message, Role, ToolCall, ToolChoice, ToolSyntax};
use super::TemplateFamily;
use serde_json::json;

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/templates/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn prompter(source: TemplateSource) -> Prompter {
    Prompter::bare(Some(ChatTemplate::compile(source).unwrap()))
}

fn builtin(family: TemplateFamily) -> Prompter {
    prompter(family.source())
}

/// The published template with the family's special tokens.
fn published(family: TemplateFamily, file: &str) -> Prompter {
    prompter(TemplateSource { default: fixture(file), ..family.source() })
}

fn msg(role: Role, content: &str) -> Message {
    Message { role, content: Some(content.into()), ..Default::default() }
}

fn weather_tool() -> serde_json::Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }})
}

const TOOL_JSON: &str = r#"{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}"#;

/// System prompt, tools, a tool call and its result, an answer, a new question.
fn with_tools(call_content: Option<&str>) -> ChatInput {
    let call = Message {
        role: Role::Assistant,
        content: call_content.map(str::to_owned),
        tool_calls: vec![ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: r#"{"city": "Paris"}"#.into(),
        }],
        ..Default::default()
    };
    let result = Message { tool_call_id: Some("call_1".into()), ..msg(Role::Tool, r#"{"temp_c": 18}"#) };
    ChatInput {
        messages: vec![
            msg(Role::System, "You are terse."),
            msg(Role::User, "Weather in Paris?"),
            call,
            result,
            msg(Role::Assistant, "18 °C in Paris."),
            msg(Role::User, "And in Oslo?"),
        ],
        tools: vec![weather_tool()],
        tool_choice: ToolChoice::Auto,
        ..Default::default()
    }
}

/// For families without tool turns: strict user/assistant alternation.
fn plain(system: bool) -> ChatInput {
    let mut messages = vec![
        msg(Role::User, "Weather in Paris?"),
        msg(Role::Assistant, "It is 18 °C."),
        msg(Role::User, "And in Oslo?"),
    ];
    if system {
        messages.insert(0, msg(Role::System, "You are terse."));
    }
    ChatInput { messages, tools: vec![weather_tool()], tool_choice: ToolChoice::Auto, ..Default::default() }
}

fn same(family: TemplateFamily, file: &str, chat: &ChatInput) -> String {
    let ours = builtin(family).render(chat).unwrap();
    let theirs = published(family, file).render(chat).unwrap();
    assert_eq!(ours, theirs, "{family:?} differs from {file}");
    ours.prompt
}

const QWEN_TOOLS_SYSTEM: &str = "<|im_start|>system\nYou are terse.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n";
const QWEN_TOOLS_END: &str = "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
const QWEN_TURNS: &str = "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp_c\": 18}\n</tool_response><|im_end|>\n<|im_start|>assistant\n18 °C in Paris.<|im_end|>\n<|im_start|>user\nAnd in Oslo?<|im_end|>\n<|im_start|>assistant\n";

#[test]
fn chatml_is_qwen25() {
    let prompt = same(TemplateFamily::Chatml, "qwen2.5.jinja", &with_tools(None));
    assert_eq!(prompt, format!("{QWEN_TOOLS_SYSTEM}{TOOL_JSON}{QWEN_TOOLS_END}{QWEN_TURNS}"));
    let r = builtin(TemplateFamily::Chatml).render(&with_tools(None)).unwrap();
    assert_eq!((r.starts_in_thinking, r.tool_syntax), (false, Some(ToolSyntax::Hermes)));
    // Without tools and without a system message: Qwen's default system prompt.
    let mut chat = plain(false);
    chat.tool_choice = ToolChoice::None;
    let prompt = same(TemplateFamily::Chatml, "qwen2.5.jinja", &chat);
    assert!(prompt.starts_with("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n"), "{prompt}");
}

#[test]
fn qwen3_matches_and_handles_thinking() {
    // The published template needs a string content on tool-call turns.
    let prompt = same(TemplateFamily::Qwen3, "qwen3.jinja", &with_tools(Some("")));
    assert_eq!(prompt, format!("{QWEN_TOOLS_SYSTEM}{TOOL_JSON}{QWEN_TOOLS_END}{QWEN_TURNS}"));
    // OpenAI clients send null there; the built-in takes it as empty.
    assert_eq!(builtin(TemplateFamily::Qwen3).render(&with_tools(None)).unwrap().prompt, prompt);

    let mut chat = plain(true);
    chat.tool_choice = ToolChoice::None;
    chat.variables.insert("enable_thinking".into(), json!(false));
    let prompt = same(TemplateFamily::Qwen3, "qwen3.jinja", &chat);
    assert!(prompt.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"), "{prompt}");
    assert!(!builtin(TemplateFamily::Qwen3).render(&chat).unwrap().starts_in_thinking, "the block is closed");

    // Reasoning after the last query is kept; a turn's own <think> text is split off.
    chat.variables.clear();
    chat.messages = vec![
        msg(Role::User, "2+2?"),
        msg(Role::Assistant, "<think>\nadd\n</think>\n\n4"),
        msg(Role::User, "Again?"),
        msg(Role::Assistant, "<think>\nsame\n</think>\n\nStill 4"),
    ];
    let prompt = same(TemplateFamily::Qwen3, "qwen3.jinja", &chat);
    assert_eq!(
        prompt,
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\nAgain?<|im_end|>\n<|im_start|>assistant\n<think>\nsame\n</think>\n\nStill 4<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn llama3_matches_llama32() {
    let chat = with_tools(None);
    let prompt = same(TemplateFamily::Llama3, "llama3.2.jinja", &chat);
    let today = jiff::fmt::strtime::format("%d %b %Y", &jiff::Zoned::now()).unwrap();
    let tool = "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        \"description\": \"Current weather in a city\",\n        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n                    \"type\": \"string\"\n                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}";
    let expected = format!(
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: {today}\n\nYou are terse.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n\
         Respond in the format {{\"name\": function name, \"parameters\": dictionary of argument name and its value}}.Do not use variables.\n\n{tool}\n\nWeather in Paris?<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n{{\"name\": \"get_weather\", \"parameters\": {{\"city\": \"Paris\"}}}}<|eot_id|>\
         <|start_header_id|>ipython<|end_header_id|>\n\n\"{{\\\"temp_c\\\": 18}}\"<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n18 °C in Paris.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nAnd in Oslo?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    assert_eq!(prompt, expected);
    assert_eq!(builtin(TemplateFamily::Llama3).render(&chat).unwrap().tool_syntax, Some(ToolSyntax::Llama3Json));
}

#[test]
fn gemma_matches_gemma3_and_gemma2() {
    let prompt = same(TemplateFamily::Gemma, "gemma3.jinja", &plain(true));
    assert_eq!(
        prompt,
        "<bos><start_of_turn>user\nYou are terse.\n\nWeather in Paris?<end_of_turn>\n<start_of_turn>model\nIt is 18 °C.<end_of_turn>\n<start_of_turn>user\nAnd in Oslo?<end_of_turn>\n<start_of_turn>model\n"
    );
    // Gemma 2 refuses system messages; without one the formats agree.
    same(TemplateFamily::Gemma, "gemma2.jinja", &plain(false));
    // Both refuse a conversation that does not alternate, with the template's message.
    let mut chat = plain(false);
    chat.messages.push(msg(Role::User, "Hello?"));
    for p in [builtin(TemplateFamily::Gemma), published(TemplateFamily::Gemma, "gemma3.jinja")] {
        let err = p.render(&chat).unwrap_err().to_string();
        assert_eq!(err, "Conversation roles must alternate user/assistant/user/assistant/...");
    }
}

#[test]
fn phi3_matches_phi35() {
    let prompt = same(TemplateFamily::Phi3, "phi3.5.jinja", &plain(true));
    assert_eq!(
        prompt,
        "<|system|>\nYou are terse.<|end|>\n<|user|>\nWeather in Paris?<|end|>\n<|assistant|>\nIt is 18 °C.<|end|>\n<|user|>\nAnd in Oslo?<|end|>\n<|assistant|>\n"
    );
}

#[test]
fn deepseek_r1_matches_and_starts_in_thinking() {
    let chat = with_tools(None);
    let prompt = same(TemplateFamily::DeepseekR1, "deepseek-r1-distill.jinja", &chat);
    assert_eq!(
        prompt,
        "<｜begin▁of▁sentence｜>You are terse.<｜User｜>Weather in Paris?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\
         <｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{\"temp_c\": 18}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>18 °C in Paris.<｜end▁of▁sentence｜>\
         <｜User｜>And in Oslo?<｜Assistant｜><think>\n"
    );
    assert!(builtin(TemplateFamily::DeepseekR1).render(&chat).unwrap().starts_in_thinking);
    // Earlier replies lose their reasoning.
    let chat = ChatInput {
        messages: vec![
            msg(Role::User, "Hi"),
            msg(Role::Assistant, "<think>\nhm\n</think>\n\nHello"),
            msg(Role::User, "Bye"),
        ],
        ..Default::default()
    };
    let prompt = same(TemplateFamily::DeepseekR1, "deepseek-r1-distill.jinja", &chat);
    assert_eq!(prompt, "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>\n\nHello<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜><think>\n");
}
