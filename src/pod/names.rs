//! The API's DNS-1123 name rules, which pod names, namespaces, container and volume
//! names, node names, host names and DNS search domains all follow.

/// The longest DNS-1123 label.
const MAX_LABEL_LEN: usize = 63;
/// The longest DNS-1123 subdomain.
const MAX_SUBDOMAIN_LEN: usize = 253;

/// A DNS-1123 label: at most 63 lower-case letters, digits and `-`, alphanumeric at
/// both ends.
pub(crate) fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL_LEN
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS-1123 subdomain: labels joined by `.`, at most 253 characters.
pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= MAX_SUBDOMAIN_LEN && s.split('.').all(is_dns1123_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        for ok in ["a", "web-0", "0a", &"x".repeat(63)] {
            assert!(is_dns1123_label(ok), "{ok:?}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"x".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad:?}");
        }
        assert!(is_dns1123_subdomain("node-1.example"));
        // Four 63-character labels: 255 characters in all.
        let too_long = vec!["x".repeat(63); 4].join(".");
        assert!(is_dns1123_subdomain(&vec!["x".repeat(63); 3].join(".")));
        for bad in ["node_1", "a..b", ".a", "a.", &too_long] {
            assert!(!is_dns1123_subdomain(bad), "{bad:?}");
        }
    }
}
