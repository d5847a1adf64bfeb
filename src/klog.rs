//! klog's text forms, which the log lines and the timelines share, and Go's `%q`.

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

/// Go's `strconv.Quote` (`%q`), which kubelet's messages use for values (labels,
/// annotations, a query's parameters):
/// quotes, backslashes and control characters escaped, printable text kept.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if !go_printable(c) && (c as u32) <= 0xffff => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if !go_printable(c) => out.push_str(&format!("\\U{:08x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `unicode.IsPrint` (letters, marks, numbers, punctuation, symbols and the ASCII
/// space), short of unassigned code points, which need Unicode's tables: controls,
/// spaces and separators other than ' ', format characters, private use and
/// noncharacters are not printable and are escaped by `%q`.
fn go_printable(c: char) -> bool {
    let u = c as u32;
    let format = matches!(
        u,
        0xad | 0x600..=0x605
            | 0x61c
            | 0x6dd
            | 0x70f
            | 0x890..=0x891
            | 0x8e2
            | 0x180e
            | 0x200b..=0x200f
            | 0x202a..=0x202e
            | 0x2060..=0x2064
            | 0x2066..=0x206f
            | 0xfeff
            | 0xfff9..=0xfffb
            | 0x110bd
            | 0x110cd
            | 0x13430..=0x1343f
            | 0x1bca0..=0x1bca3
            | 0x1d173..=0x1d17a
            | 0xe0001
            | 0xe0020..=0xe007f
    );
    let private_use = matches!(u, 0xe000..=0xf8ff | 0xf0000..=0xffffd | 0x100000..=0x10fffd);
    let nonchar = matches!(u, 0xfdd0..=0xfdef) || (u & 0xfffe) == 0xfffe;
    !(c.is_control() || (c.is_whitespace() && c != ' ') || format || private_use || nonchar)
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
