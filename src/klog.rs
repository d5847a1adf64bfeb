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
    // Writing to a String cannot fail.
    let _ = write_go_quoted(&mut out, s);
    out
}

/// [`go_quote`] written straight to `w`, allocating nothing (the log formatter's
/// path, once per line).
pub(crate) fn write_go_quoted(w: &mut impl std::fmt::Write, s: &str) -> std::fmt::Result {
    w.write_char('"')?;
    // Runs of printable text are written whole; only what needs escaping is split out.
    let mut plain_from = 0;
    for (i, c) in s.char_indices() {
        let escape: Option<&str> = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\t' => Some("\\t"),
            '\r' => Some("\\r"),
            '\x07' => Some("\\a"),
            '\x08' => Some("\\b"),
            '\x0c' => Some("\\f"),
            '\x0b' => Some("\\v"),
            // Printable ASCII, most of any line, without the Unicode tables' checks.
            ' '..='~' => continue,
            c if go_printable(c) => continue,
            _ => None,
        };
        w.write_str(&s[plain_from..i])?;
        plain_from = i + c.len_utf8();
        match escape {
            Some(e) => w.write_str(e)?,
            None if (c as u32) < 0x20 || c as u32 == 0x7f => write!(w, "\\x{:02x}", c as u32)?,
            None if (c as u32) <= 0xffff => write!(w, "\\u{:04x}", c as u32)?,
            None => write!(w, "\\U{:08x}", c as u32)?,
        }
    }
    w.write_str(&s[plain_from..])?;
    w.write_char('"')
}

/// klog's text form of a string value after its key (`writeStringValue`): `="..."`,
/// Go-quoted, when it is one line; else `=<`, each line on its own indented by a tab,
/// and ` >` on a line of its own, so a multi-line value (a probe's output) stays
/// readable and no line of it can pass for the start of a log line.
pub(crate) fn write_string_value(w: &mut impl std::fmt::Write, s: &str) -> std::fmt::Result {
    if !s.contains('\n') {
        w.write_char('=')?;
        return write_go_quoted(w, s);
    }
    w.write_str("=<\n")?;
    let mut rest = s;
    while let Some(end) = rest.find('\n') {
        w.write_char('\t')?;
        w.write_str(&rest[..=end])?;
        rest = &rest[end + 1..];
    }
    if rest.is_empty() {
        // Ended with a line break: the closing line needs no other.
        w.write_str(" >")
    } else {
        w.write_char('\t')?;
        w.write_str(rest)?;
        w.write_str("\n >")
    }
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
        assert_eq!(quote(""), "\"\"");
        assert_eq!(quote("a=b"), "\"a=b\"");
        assert_eq!(quote("say \"hi\"\n"), "\"say \\\"hi\\\"\\n\"");
        // A Debug-rendered string is quoted already.
        assert_eq!(quote("\"x y\""), "\"x y\"");
    }

    /// klog's `writeStringValue`: one line Go-quoted, several as `=<`, tab-indented
    /// lines and ` >`, with or without a final line break.
    #[test]
    fn string_values_as_klog_writes_them() {
        let value = |s: &str| {
            let mut out = String::new();
            super::write_string_value(&mut out, s).unwrap();
            out
        };
        assert_eq!(value("default/web"), "=\"default/web\"");
        assert_eq!(value("a\tb \"c\" \\"), "=\"a\\tb \\\"c\\\" \\\\\"");
        assert_eq!(value("\u{1}\u{7f}\u{200b}"), "=\"\\x01\\x7f\\u200b\"");
        assert_eq!(value("line 1\nline 2"), "=<\n\tline 1\n\tline 2\n >");
        assert_eq!(value("line 1\nline 2\n"), "=<\n\tline 1\n\tline 2\n >");
        assert_eq!(super::go_quote("x\u{200b}y"), "\"x\\u200by\"");
    }

    #[test]
    fn messages_stay_on_one_line() {
        assert_eq!(super::one_line("a\nb\n"), "a\\nb");
        assert_eq!(super::one_line("plain "), "plain");
    }
}
