//! The reply pipeline fed every way a reply can be cut into tokens.

use super::*;
use crate::conversation::ToolSyntax;

fn rules(reasoning: ReasoningMode, starts_in_thinking: bool, tool_syntax: Option<ToolSyntax>) -> ReplyRules {
    ReplyRules { reasoning, starts_in_thinking, tool_syntax }
}

const SPLIT_HERMES: ReplyRules =
    ReplyRules { reasoning: ReasoningMode::Split, starts_in_thinking: false, tool_syntax: Some(ToolSyntax::Hermes) };

/// Feeds the tokens, then ends the reply; the deltas per token (the last one
/// is the end's) and the gathered reply, with call ids checked and blanked.
fn run(rules: ReplyRules, stops: &[&str], tokens: &[&str]) -> (Vec<Delta>, Reply, bool) {
    let mut p = ReplyParser::new(rules, stops.iter().map(|s| s.to_string()).collect());
    let mut deltas = Vec::new();
    let mut stopped = false;
    for t in tokens {
        let step = p.push(t);
        stopped |= step.stopped;
        deltas.push(step.delta);
    }
    deltas.push(p.finish(""));
    let mut reply = Reply::default();
    deltas.iter().cloned().for_each(|d| reply.absorb(d));
    let mut ids: Vec<&str> = reply.calls.iter().map(|c| c.id.as_str()).collect();
    assert!(ids.iter().all(|id| id.len() == 29 && id.starts_with("call_")), "{ids:?}");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), reply.calls.len(), "call ids are unique");
    let malformed = deltas.iter().flat_map(|d| &d.calls).any(|c| c.malformed.is_some());
    assert_eq!(p.called_tools(), !reply.calls.is_empty() && !malformed);
    reply.calls.iter_mut().for_each(|c| c.id.clear());
    (deltas, reply, stopped)
}

fn reply(content: &str, reasoning: &str, calls: &[(&str, &str)]) -> Reply {
    Reply {
        content: content.into(),
        reasoning: reasoning.into(),
        calls: calls
            .iter()
            .map(|(n, a)| ToolCall { id: String::new(), name: n.to_string(), arguments: a.to_string() })
            .collect(),
    }
}

/// The reply as one token, as every two-token cut and every three-token cut gives `want`.
fn every_split(rules: ReplyRules, text: &str, want: &Reply) {
    let cuts: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
    for &a in &cuts {
        for &b in cuts.iter().filter(|&&b| b >= a) {
            let tokens = [&text[..a], &text[a..b], &text[b..]];
            let (deltas, got, _) = run(rules, &[], &tokens);
            assert_eq!(&got, want, "tokens {tokens:?}");
            // A call's first delta carries its head; an index never goes back.
            let mut seen = Vec::new();
            for c in deltas.iter().flat_map(|d| &d.calls) {
                assert_eq!(c.head.is_some(), !seen.contains(&c.index), "{tokens:?}: {deltas:?}");
                seen.push(c.index);
            }
        }
    }
}

const CALL: &str =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"°C\"}}\n</tool_call>";
const ARGS: &str = "{\"city\": \"Paris\", \"unit\": \"°C\"}";

#[test]
fn hermes_call_after_text_at_every_split_point() {
    let text = format!("Let me check.\n{CALL}");
    every_split(SPLIT_HERMES, &text, &reply("Let me check.\n", "", &[("get_weather", ARGS)]));
}

#[test]
fn parallel_hermes_calls_get_indices_in_order_and_separators_are_dropped() {
    let text = format!("{CALL}\n{}\n", CALL.replace("get_weather", "get_time").replace("Paris", "Rome"));
    every_split(
        SPLIT_HERMES,
        &text,
        &reply("", "", &[("get_weather", ARGS), ("get_time", &ARGS.replace("Paris", "Rome"))]),
    );
    // Text after the last call is content.
    every_split(SPLIT_HERMES, &format!("{CALL}\nDone."), &reply("\nDone.", "", &[("get_weather", ARGS)]));
}

#[test]
fn malformed_hermes_blocks_fall_back_to_content_as_written() {
    for text in [
        "<tool_call>get_weather(city=\"Paris\")</tool_call> ok",
        "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
        "<tool_call></tool_call>",
        "<tool_call>{\"name\": \"f\", \"argu",
        "a <tool_c",
        "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"f\"",
    ] {
        every_split(SPLIT_HERMES, text, &reply(text, "", &[]));
    }
}

#[test]
fn hermes_calls_that_need_reading_whole() {
    // Other key order, string arguments, a block never closed: read whole when the block ends.
    let text = "<tool_call>{\"arguments\": {\"a\": [1, \"}\"]}, \"name\": \"f\"}</tool_call>";
    every_split(SPLIT_HERMES, text, &reply("", "", &[("f", "{\"a\":[1,\"}\"]}")]));
    let text = "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>";
    every_split(SPLIT_HERMES, text, &reply("", "", &[("f", "{\"a\": 1}")]));
    let text = "<tool_call>{\"arguments\": {}, \"name\": \"f\"}";
    every_split(SPLIT_HERMES, text, &reply("", "", &[("f", "{}")]));
}

#[test]
fn a_committed_call_with_valid_arguments_stays_a_call() {
    // Missing the outer "}" before the tag, with a closing tag inside a string.
    let text = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"</tool_call>\"}</tool_call>";
    every_split(SPLIT_HERMES, text, &reply("", "", &[("f", "{\"a\": \"</tool_call>\"}")]));
}

#[test]
fn a_call_without_valid_arguments_is_content_as_written() {
    // Closed before its arguments ended, cut off, broken JSON: no call, and
    // no finish reason `tool_calls`, though a stream has sent the call's steps.
    for text in [
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \n</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": tru}}</tool_call>",
    ] {
        every_split(SPLIT_HERMES, text, &reply(text, "", &[]));
        let (deltas, _, _) = run(SPLIT_HERMES, &[], &[text]);
        assert!(deltas[0].calls[0].head.is_some(), "{text}: the call's head was streamed");
    }
    // In its place among the text around it; an earlier good call stays.
    let bad = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1</tool_call>";
    let text = format!("Sure.\n{CALL}\n{bad} Done.");
    every_split(SPLIT_HERMES, &text, &reply(&format!("Sure.\n\n{bad} Done."), "", &[("get_weather", ARGS)]));
    // Llama 3: the object closes, the arguments are no JSON.
    let llama = rules(ReasoningMode::Split, false, Some(ToolSyntax::Llama3Json));
    let text = "{\"name\": \"f\", \"parameters\": {\"a\": }}";
    every_split(llama, text, &reply(text, "", &[]));
}

#[test]
fn a_stop_string_cutting_a_call_leaves_its_text() {
    let tokens = ["Ok <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ", "1 STOP", "}}</tool_call>"];
    let (_, got, stopped) = run(SPLIT_HERMES, &["STOP"], &tokens);
    assert!(stopped);
    assert_eq!(got, reply("Ok <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1 ", "", &[]));
}

#[test]
fn llama3_json_calls() {
    let llama = rules(ReasoningMode::Split, false, Some(ToolSyntax::Llama3Json));
    let one = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
    every_split(llama, one, &reply("", "", &[("get_weather", "{\"city\": \"Paris\"}")]));
    let two = format!("<|python_tag|>{one}; {}", one.replace("Paris", "Rome"));
    every_split(
        llama,
        &two,
        &reply("", "", &[("get_weather", "{\"city\": \"Paris\"}"), ("get_weather", "{\"city\": \"Rome\"}")]),
    );
    // Not a call: content as written.
    for text in ["{\"answer\": 42}", "Sure: {\"name\": \"f\", \"parameters\": {}}", " {\"name\": \"f\"", "<|py"] {
        every_split(llama, text, &reply(text, "", &[]));
    }
    every_split(llama, &format!("{one} Done"), &reply(" Done", "", &[("get_weather", "{\"city\": \"Paris\"}")]));
}

#[test]
fn thinking_then_a_call_in_each_mode() {
    let text = format!("<think>Maybe <tool_call> is needed.</think>\n\n{CALL}");
    every_split(SPLIT_HERMES, &text, &reply("", "Maybe <tool_call> is needed.", &[("get_weather", ARGS)]));
    let inline = rules(ReasoningMode::Inline, false, Some(ToolSyntax::Hermes));
    every_split(inline, &text, &reply("<think>Maybe <tool_call> is needed.</think>\n\n", "", &[("get_weather", ARGS)]));
    let hide = rules(ReasoningMode::Hide, false, Some(ToolSyntax::Hermes));
    every_split(hide, &text, &reply("", "", &[("get_weather", ARGS)]));
}

#[test]
fn thinking_without_tools_in_each_mode() {
    let text = "<think>\n2+2 is 4.\n</think>\n\nFour.";
    let split = rules(ReasoningMode::Split, false, None);
    every_split(split, text, &reply("Four.", "2+2 is 4.\n", &[]));
    every_split(rules(ReasoningMode::Inline, false, None), text, &reply(text, "", &[]));
    every_split(rules(ReasoningMode::Hide, false, None), text, &reply("Four.", "", &[]));
    // Starting inside the block, and never closing it.
    every_split(rules(ReasoningMode::Split, true, None), "a</think> b", &reply("b", "a", &[]));
    every_split(rules(ReasoningMode::Split, true, None), "a </thin", &reply("", "a </thin", &[]));
    every_split(rules(ReasoningMode::Hide, true, None), "a </thin", &reply("", "", &[]));
}

#[test]
fn tokens_that_cannot_start_a_pattern_pass_in_the_same_step() {
    let tokens = ["The", " answer", " is", " 4", "."];
    let (deltas, _, _) = run(SPLIT_HERMES, &["STOP"], &tokens);
    let contents: Vec<&str> = deltas.iter().map(|d| d.content.as_str()).collect();
    assert_eq!(contents, ["The", " answer", " is", " 4", ".", ""]);
    // Possible beginnings wait exactly until they are ruled out.
    let tokens =
        ["Hi", " <", "tool", "_c", "all>", "{\"name\": \"f\", ", "\"arguments\": {", "\"a\"", ": 1}}", "</tool_call>"];
    let (deltas, reply, _) = run(SPLIT_HERMES, &[], &tokens);
    let contents: Vec<&str> = deltas.iter().map(|d| d.content.as_str()).collect();
    assert_eq!(contents, ["Hi", " ", "", "", "", "", "", "", "", "", ""]);
    assert_eq!(
        deltas[6].calls,
        vec![CallDelta { index: 0, head: deltas[6].calls[0].head.clone(), arguments: "{".into(), malformed: None }]
    );
    assert_eq!(deltas[6].calls[0].head.as_ref().map(|h| h.name.as_str()), Some("f"));
    assert_eq!(deltas[7].calls[0].arguments, "\"a\"");
    assert_eq!(deltas[8].calls[0].arguments, ": 1}");
    assert_eq!(reply.calls[0].arguments, "{\"a\": 1}");
    // A `<` that is not the tag is released with the next token.
    let (deltas, _, _) = run(SPLIT_HERMES, &[], &["a <", "b"]);
    assert_eq!((deltas[0].content.as_str(), deltas[1].content.as_str()), ("a ", "<b"));
}

#[test]
fn stop_strings_apply_to_the_raw_text_before_splitting() {
    // Matched inside the thinking block: the reply ends there.
    let (_, got, stopped) =
        run(rules(ReasoningMode::Split, false, None), &["STOP"], &["<think>ab", "c ST", "OP</think>x"]);
    assert!(stopped);
    assert_eq!(got, reply("", "abc ", &[]));
    // Split across tokens in the answer, after a thinking block.
    let (deltas, got, stopped) =
        run(rules(ReasoningMode::Split, false, None), &["</end>"], &["<think>r</think>", "Hello </", "en", "d> tail"]);
    assert!(stopped);
    assert_eq!(got, reply("Hello ", "r", &[]));
    assert_eq!(deltas.iter().map(|d| d.content.as_str()).collect::<Vec<_>>(), ["", "Hello ", "", "", ""]);
    // Tokens after the match are ignored, and so is the runtime's tail.
    let mut p = ReplyParser::new(rules(ReasoningMode::Inline, false, None), vec!["x".into()]);
    assert!(p.push("axb").stopped);
    assert!(p.push("more").delta.is_empty());
    assert!(p.finish("\u{fffd}").is_empty());
}

#[test]
fn inline_without_tools_is_the_raw_text() {
    let (deltas, got, _) = run(rules(ReasoningMode::Inline, false, None), &[], &["<thi", "nk>", "a"]);
    assert_eq!(got, reply("<think>a", "", &[]));
    assert_eq!(deltas[0].content, "<thi", "nothing is held when nothing depends on the block");
}
