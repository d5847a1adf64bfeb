//! Percent-encoding as URLs carry it (RFC 3986): one decoder for what comes in
//! (a manifest URL's user info, a node log path) and the path encoder for the
//! links oxlet writes.

/// `%XX` sequences decoded; anything else, a malformed `%` included, kept as it is.
/// Bytes that are not UTF-8 after decoding become U+FFFD.
pub(crate) fn decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| char::from(c).to_digit(16);
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A path with every byte but the unreserved ones and `/` encoded.
pub(crate) fn encoded_path(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_and_encoding_round_trip() {
        assert_eq!(decoded("a%20b%2Fc"), "a b/c");
        assert_eq!(decoded("p%40ss%3a"), "p@ss:");
        // Malformed or cut-short escapes stay as they are.
        assert_eq!(decoded("100%"), "100%");
        assert_eq!(decoded("%2"), "%2");
        assert_eq!(decoded("%zz"), "%zz");
        assert_eq!(decoded("%ff"), "\u{fffd}");
        assert_eq!(encoded_path("pods/a b?c#d"), "pods/a%20b%3Fc%23d");
        for s in ["x y/z", "ünï", "a%b", "~-_."] {
            assert_eq!(decoded(&encoded_path(s)), s);
        }
    }
}
