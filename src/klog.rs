//! klog's text forms, which the log lines and the timelines share.

/// A value as klog writes it in a `key=value` pair: as it is when it is one word,
/// else in double quotes with `"` and `\` escaped and line breaks spelled `\n`, so a
/// reader (or a parser) always knows where a value ends.
pub(crate) fn quote(rendered: &str) -> std::borrow::Cow<'_, str> {
    let already_quoted =
        rendered.len() >= 2 && rendered.starts_with('"') && rendered.ends_with('"');
    let plain = !rendered.is_empty()
        && !rendered
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '=' || c.is_control());
    if already_quoted || plain {
        return std::borrow::Cow::Borrowed(rendered);
    }
    let mut out = String::with_capacity(rendered.len() + 2);
    out.push('"');
    for c in rendered.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    std::borrow::Cow::Owned(out)
}

/// A message on one line: trailing breaks dropped, inner ones spelled `\\n`, so text a
/// container controls (a probe's output) can never start a log line of its own.
pub(crate) fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    let trimmed = s.trim_end();
    if !trimmed.contains(['\n', '\r']) {
        return std::borrow::Cow::Borrowed(trimmed);
    }
    std::borrow::Cow::Owned(trimmed.replace('\n', "\\n").replace('\r', "\\r"))
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn one_word_stays_and_anything_else_is_quoted() {
        assert_eq!(quote("default/web"), "default/web");
        assert_eq!(quote("connection refused"), "\"connection refused\"");
        assert_eq!(quote("tab\there"), "\"tab\\there\"");
    }

    #[test]
    fn messages_stay_on_one_line() {
        assert_eq!(super::one_line("a\nb\n"), "a\\nb");
        assert_eq!(super::one_line("plain "), "plain");
    }
}
