//! ChatML, the Qwen family's format (the most common RKLLM models).

use super::Message;

pub fn render(messages: &[Message]) -> String {
    let mut out = String::with_capacity(messages.iter().map(|m| m.content.len() + 32).sum::<usize>() + 32);
    for m in messages {
        out.push_str("<|im_start|>");
        out.push_str(m.role.as_str());
        out.push('\n');
        out.push_str(&m.content);
        out.push_str("<|im_end|>\n");
    }
    out.push_str("<|im_start|>assistant\n");
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Message, Role};
    use super::*;

    #[test]
    fn whole_transcript_with_generation_prompt() {
        let m = |role, content: &str| Message { role, content: content.into() };
        let prompt = render(&[
            m(Role::System, "Be brief."),
            m(Role::User, "Hi"),
            m(Role::Assistant, "Hello!"),
            m(Role::User, "2+2?"),
        ]);
        assert_eq!(
            prompt,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
        );
    }
}
