//! Checks an image reference with the grammar of `distribution/reference`, which
//! kubelet's `applyDefaultImageTag` parses every image with before it pulls: a bad
//! reference is `InvalidImageName` at once, never a pull the runtime refuses.

/// Why an image reference does not parse; the text is the parser's own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("couldn't parse image name {image:?}: {reason}")]
pub(crate) struct InvalidImageRef {
    pub image: String,
    pub reason: &'static str,
}

const FORMAT: &str = "invalid reference format";
const LOWERCASE: &str = "invalid reference format: repository name must be lowercase";
const TOO_LONG: &str = "repository name must not be more than 255 characters";
const HEX: &str = "invalid repository name (64-hex), cannot specify 64-byte hexadecimal strings";

/// The longest name (domain and path) the reference grammar accepts.
const NAME_MAX: usize = 255;

/// Checks `image` as `ParseNormalizedNamed` does: `[domain/]path[:tag][@digest]`.
pub(crate) fn check(image: &str) -> Result<(), InvalidImageRef> {
    let fail = |reason| {
        Err(InvalidImageRef {
            image: image.to_string(),
            reason,
        })
    };
    // A bare 64-hex string is an image ID, not a name.
    if image.len() == 64
        && image
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return fail(HEX);
    }
    let Parts { name, tag, digest } = split(image);
    if digest.is_some_and(|d| !is_digest(d)) {
        return fail(FORMAT);
    }
    if tag.is_some_and(|t| !is_tag(t)) {
        return fail(FORMAT);
    }
    if name.is_empty() {
        return fail(FORMAT);
    }
    if name.len() > NAME_MAX {
        return fail(TOO_LONG);
    }
    let (domain, path) = split_domain(name);
    if domain.is_some_and(|d| !is_domain(d)) {
        return fail(FORMAT);
    }
    for component in path.split('/') {
        if !is_path_component(component) {
            let lowered = component.to_lowercase();
            return if lowered != component && is_path_component(&lowered) {
                fail(LOWERCASE)
            } else {
                fail(FORMAT)
            };
        }
    }
    Ok(())
}

/// The registry Docker Hub names are pulled from.
const DEFAULT_DOMAIN: &str = "docker.io";

/// The repository a reference pulls from, normalized as `ParseNormalizedNamed` does
/// (kubelet's `parsers.ParseImageName` gives this to the credential lookup): tag and
/// digest dropped, Docker Hub's domain and `library/` filled in, `index.docker.io`
/// spelled `docker.io`. For a reference [`check`] accepts.
pub(crate) fn repository(image: &str) -> String {
    let (domain, path) = split_domain(split(image).name);
    let domain = match domain {
        None | Some("index.docker.io") => DEFAULT_DOMAIN,
        Some(d) => d,
    };
    if domain == DEFAULT_DOMAIN && !path.contains('/') {
        format!("{domain}/library/{path}")
    } else {
        format!("{domain}/{path}")
    }
}

/// A reference's name, tag and digest, as written (not yet checked).
struct Parts<'a> {
    name: &'a str,
    tag: Option<&'a str>,
    digest: Option<&'a str>,
}

/// `name[:tag][@digest]`: a tag follows the last ':' that comes after the last '/' (a
/// ':' before it is a port).
fn split(image: &str) -> Parts<'_> {
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    Parts { name, tag, digest }
}

/// The name's domain and path: the first component is a domain when it has '.' or ':',
/// is localhost, or has upper case (docker's `splitDockerDomain`).
fn split_domain(name: &str) -> (Option<&str>, &str) {
    match name.split_once('/') {
        Some((d, p)) if d.contains(['.', ':']) || d == "localhost" || d.to_lowercase() != d => {
            (Some(d), p)
        }
        _ => (None, name),
    }
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`.
fn is_path_component(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &s[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// `host[:port]`: DNS-like components joined by '.', an IPv4 address, or `[ipv6]`.
fn is_domain(d: &str) -> bool {
    let (host, port) = if let Some(rest) = d.strip_prefix('[') {
        match rest.split_once(']') {
            Some((v6, tail)) => {
                if v6.parse::<std::net::Ipv6Addr>().is_err() {
                    return false;
                }
                match tail {
                    "" => return true,
                    t => ("", t.strip_prefix(':').unwrap_or("x")),
                }
            }
            None => return false,
        }
    } else {
        match d.split_once(':') {
            Some((h, p)) => (h, p),
            None => (d, "0"),
        }
    };
    if port.is_empty() || !port.bytes().all(|c| c.is_ascii_digit()) {
        return false;
    }
    host.is_empty() && d.starts_with('[')
        || host.split('.').all(|c| {
            let b = c.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|&x| x.is_ascii_alphanumeric() || x == b'-')
        })
}

/// `[\w][\w.-]{0,127}`.
fn is_tag(t: &str) -> bool {
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && word(b[0])
        && b.iter().all(|&c| word(c) || c == b'.' || c == b'-')
}

/// `algorithm:hex`, the algorithm `[A-Za-z][A-Za-z0-9]*` joined by `+._-`, at
/// least 32 hex digits.
fn is_digest(d: &str) -> bool {
    let Some((alg, hex)) = d.split_once(':') else {
        return false;
    };
    let alg_ok = alg.split(['+', '.', '_', '-']).all(|c| {
        c.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
            && c.bytes().all(|x| x.is_ascii_alphanumeric())
    });
    alg_ok && hex.len() >= 32 && hex.bytes().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_are_normalized_as_the_credential_lookup_sees_them() {
        for (image, repo) in [
            ("busybox", "docker.io/library/busybox"),
            ("busybox:1.36", "docker.io/library/busybox"),
            ("user/app:v1", "docker.io/user/app"),
            ("index.docker.io/user/app", "docker.io/user/app"),
            ("docker.io/busybox", "docker.io/library/busybox"),
            ("127.0.0.1:5000/team/app:1", "127.0.0.1:5000/team/app"),
            ("localhost/oxlet/busybox:1", "localhost/oxlet/busybox"),
            (
                "registry.example.com:443/a/b/c",
                "registry.example.com:443/a/b/c",
            ),
            ("quay.io/coreos/etcd@sha256:abc", "quay.io/coreos/etcd"),
        ] {
            assert_eq!(repository(image), repo, "{image}");
        }
    }

    #[test]
    fn valid_references() {
        for image in [
            "busybox",
            "busybox:1.36",
            "library/busybox:latest",
            "docker.io/library/busybox",
            "localhost/oxlet-test/busybox:1",
            "localhost:5000/a/b_c__d.e---f:v1.2-rc_3",
            "127.0.0.1:1/x:1",
            "[::1]:5000/x",
            "Registry.Example/x",
            "registry.k8s.io/pause:3.9@sha256:7031c1b283388d2c2e09b57badb803c05ebed362dc88d84b480cc47f72a21097",
            "x@sha256:7031c1b283388d2c2e09b57badb803c05ebed362dc88d84b480cc47f72a21097",
        ] {
            assert_eq!(check(image), Ok(()), "{image}");
        }
    }

    #[test]
    fn invalid_references_with_the_parsers_reason() {
        for (image, reason) in [
            ("", FORMAT),
            ("Busybox", LOWERCASE),
            ("library/BusyBox:1", LOWERCASE),
            ("busybox:", FORMAT),
            ("busybox:-x", FORMAT),
            ("busy box", FORMAT),
            ("busybox::1", FORMAT),
            ("-busybox", FORMAT),
            ("busybox-", FORMAT),
            ("a//b", FORMAT),
            ("busybox@sha256:abc", FORMAT),
            ("busybox@", FORMAT),
            ("localhost:port/x", FORMAT),
            ("bad_domain.com/x", FORMAT),
            (
                "7031c1b283388d2c2e09b57badb803c05ebed362dc88d84b480cc47f72a21097",
                HEX,
            ),
        ] {
            let err = check(image).unwrap_err();
            assert_eq!(err.reason, reason, "{image:?}");
            assert!(err.to_string().contains(&format!("{image:?}")), "{err}");
        }
        let long = format!("a/{}", "b".repeat(260));
        assert_eq!(check(&long).unwrap_err().reason, TOO_LONG);
        let long_tag = format!("a:{}", "t".repeat(129));
        assert_eq!(check(&long_tag).unwrap_err().reason, FORMAT);
    }
}
