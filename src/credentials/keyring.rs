//! kubelet's `BasicDockerKeyring`: registry keys indexed so that the most specific
//! match comes first, and matched against an image's repository by host (with globs per
//! domain part), port and path prefix.

use std::collections::BTreeMap;

use super::docker_config::{DockerConfig, Login, LoginSource};

/// The key Docker Hub's credentials are filed under (`https://index.docker.io/v1/`).
const DOCKER_HUB_KEY: &str = "index.docker.io";

/// Credentials by registry key; iterated in reverse key order, as kubelet's index is
/// sorted, so `quay.io/coreos` is tried before `quay.io`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Keyring {
    creds: BTreeMap<String, Vec<Login>>,
}

impl Keyring {
    /// Files every entry of `cfg` under its key: scheme dropped, a `/v1/` or `/v2/`
    /// path counted as the bare host (docker's `ResolveAuthConfig` does the same).
    /// Each login remembers `source`, for the image pull records.
    pub(crate) fn add(&mut self, cfg: &DockerConfig, source: &LoginSource) {
        for (location, cred) in cfg {
            let Some(key) = key_of(location) else {
                continue;
            };
            self.creds.entry(key).or_default().push(Login {
                credential: cred.clone(),
                source: source.clone(),
            });
        }
    }

    /// Every credential whose key matches `repository` (a normalized repository, as
    /// `crate::pod::image_repository` gives it), most specific key first; Docker Hub's
    /// own key serves Docker Hub images when nothing else matched.
    pub(crate) fn lookup(&self, repository: &str) -> Vec<Login> {
        let Some(target) = Url::parse(repository) else {
            return Vec::new();
        };
        let found: Vec<Login> = self
            .creds
            .iter()
            .rev()
            .filter(|(key, _)| Url::parse(key).is_some_and(|glob| glob.matches(&target)))
            .flat_map(|(_, c)| c.iter().cloned())
            .collect();
        if !found.is_empty() {
            return found;
        }
        match self.creds.get(DOCKER_HUB_KEY) {
            Some(c) if is_docker_hub(repository) => c.clone(),
            _ => Vec::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.creds.is_empty()
    }
}

/// kubelet's `URLsMatchStr`: whether the glob `pattern` (a `matchImages` entry) covers
/// `target` (an image's repository), by the same rules as the keyring's keys.
pub(super) fn urls_match(pattern: &str, target: &str) -> bool {
    match (Url::parse(pattern), Url::parse(target)) {
        (Some(glob), Some(t)) => glob.matches(&t),
        _ => false,
    }
}

/// The index key of a config entry's location; `None` for one that is no URL.
fn key_of(location: &str) -> Option<String> {
    let rest = location
        .strip_prefix("https://")
        .or_else(|| location.strip_prefix("http://"))
        .unwrap_or(location);
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return None;
    }
    let path = match path
        .strip_prefix("/v1/")
        .or_else(|| path.strip_prefix("/v2/"))
    {
        Some(p) => &path[path.len() - p.len() - 1..],
        None => path,
    };
    if path.is_empty() || path == "/" {
        Some(host.to_string())
    } else {
        Some(format!("{host}{path}"))
    }
}

/// kubelet's `isDefaultRegistryMatch`: a repository Docker Hub serves.
fn is_docker_hub(repository: &str) -> bool {
    match repository.split_once('/') {
        None => true,
        Some(("docker.io", _)) => true,
        Some((first, _)) => !first.contains(['.', ':']),
    }
}

/// A schemeless URL split as kubelet's `ParseSchemelessURL` and `splitURL` do.
struct Url<'a> {
    host_parts: Vec<&'a str>,
    port: &'a str,
    path: &'a str,
}

impl<'a> Url<'a> {
    fn parse(text: &'a str) -> Option<Url<'a>> {
        let (authority, path) = match text.find('/') {
            Some(i) => (&text[..i], &text[i..]),
            None => (text, ""),
        };
        if authority.is_empty() {
            return None;
        }
        let (host, port) = split_host_port(authority);
        Some(Url {
            host_parts: host.split('.').collect(),
            port,
            path,
        })
    }

    /// kubelet's `URLsMatch`: same port, same number of domain parts, each matching
    /// as a glob, and the glob's path a prefix of the target's.
    fn matches(&self, target: &Url<'_>) -> bool {
        self.port == target.port
            && self.host_parts.len() == target.host_parts.len()
            && target.path.starts_with(self.path)
            && self
                .host_parts
                .iter()
                .zip(&target.host_parts)
                .all(|(g, t)| glob_match(g.as_bytes(), t.as_bytes()))
    }
}

/// Go's `net.SplitHostPort`, falling back to "all host, no port" as kubelet does.
fn split_host_port(authority: &str) -> (&str, &str) {
    if let Some(rest) = authority.strip_prefix('[') {
        return match rest.split_once("]:") {
            Some((h, p)) if !p.contains(':') => (h, p),
            _ => (authority, ""),
        };
    }
    match authority.split_once(':') {
        Some((h, p)) if !p.contains(':') => (h, p),
        _ => (authority, ""),
    }
}

/// Go's `filepath.Match` on one domain part: `*`, `?` and `[...]` classes (with `^`
/// and ranges). A malformed class matches nothing, as Go's error means no match.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some(b'*') => (0..=text.len()).any(|skip| glob_match(&pattern[1..], &text[skip..])),
        Some(b'?') => !text.is_empty() && glob_match(&pattern[1..], &text[1..]),
        Some(b'[') => {
            let Some((first, rest)) = text.split_first() else {
                return false;
            };
            match class_match(&pattern[1..], *first) {
                Some((true, after)) => glob_match(after, rest),
                _ => false,
            }
        }
        Some(b'\\') if pattern.len() > 1 => {
            text.first() == Some(&pattern[1]) && glob_match(&pattern[2..], &text[1..])
        }
        Some(&c) => text.first() == Some(&c) && glob_match(&pattern[1..], &text[1..]),
    }
}

/// Matches `c` against the class starting after `[`; returns whether it matched and
/// the pattern after `]`, or `None` when the class never closes.
fn class_match(class: &[u8], c: u8) -> Option<(bool, &[u8])> {
    let (negated, mut rest) = match class.first() {
        Some(b'^') => (true, &class[1..]),
        _ => (false, class),
    };
    let mut matched = false;
    let mut first = true;
    loop {
        match rest {
            [] => return None,
            [b']', tail @ ..] if !first => return Some((matched != negated, tail)),
            [lo, b'-', hi, tail @ ..] if *hi != b']' => {
                matched |= (*lo..=*hi).contains(&c);
                rest = tail;
            }
            [x, tail @ ..] => {
                matched |= *x == c;
                rest = tail;
            }
        }
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::Credential;

    fn cred(u: &str) -> Credential {
        Credential {
            username: u.into(),
            password: format!("{u}-pw"),
        }
    }

    fn ring(entries: &[(&str, &str)]) -> Keyring {
        let mut k = Keyring::default();
        let cfg: DockerConfig = entries
            .iter()
            .map(|(loc, u)| (loc.to_string(), cred(u)))
            .collect();
        k.add(&cfg, &LoginSource::Node);
        k
    }

    fn users(k: &Keyring, repo: &str) -> Vec<String> {
        k.lookup(repo)
            .into_iter()
            .map(|l| l.credential.username)
            .collect()
    }

    #[test]
    fn the_most_specific_key_comes_first() {
        let k = ring(&[
            ("quay.io", "host"),
            ("quay.io/coreos", "team"),
            ("https://quay.io/coreos/etcd", "repo"),
            ("other.io", "other"),
        ]);
        assert_eq!(users(&k, "quay.io/coreos/etcd"), ["repo", "team", "host"]);
        assert_eq!(users(&k, "quay.io/coreos/flannel"), ["team", "host"]);
        assert_eq!(users(&k, "quay.io/prometheus/x"), ["host"]);
        assert!(users(&k, "gcr.io/coreos/etcd").is_empty());
    }

    #[test]
    fn ports_must_match_and_paths_are_string_prefixes() {
        let k = ring(&[("127.0.0.1:5000", "five"), ("reg.io/foo", "foo")]);
        assert_eq!(users(&k, "127.0.0.1:5000/a/b"), ["five"]);
        assert!(users(&k, "127.0.0.1:5001/a/b").is_empty());
        assert!(users(&k, "127.0.0.1/a/b").is_empty());
        // kubelet's check is a plain string prefix, so "foo" covers "foobar".
        assert_eq!(users(&k, "reg.io/foobar/x"), ["foo"]);
        assert!(users(&k, "reg.io/bar").is_empty());
    }

    #[test]
    fn host_globs_match_one_domain_part_each() {
        let k = ring(&[
            ("*.azurecr.io", "star"),
            ("k8s.*.io", "mid"),
            ("app?.io", "q"),
        ]);
        assert_eq!(users(&k, "team.azurecr.io/x"), ["star"]);
        assert!(users(&k, "a.team.azurecr.io/x").is_empty());
        assert_eq!(users(&k, "k8s.gcr.io/pause"), ["mid"]);
        assert_eq!(users(&k, "app1.io/x"), ["q"]);
        assert!(users(&k, "app12.io/x").is_empty());
        let k = ring(&[
            ("reg[0-9].io", "class"),
            ("[^a]x.io", "neg"),
            ("bad[.io", "bad"),
        ]);
        assert_eq!(users(&k, "reg7.io/x"), ["class"]);
        assert!(users(&k, "rega.io/x").is_empty());
        assert_eq!(users(&k, "bx.io/x"), ["neg"]);
        assert!(users(&k, "ax.io/x").is_empty());
        assert!(users(&k, "bad[.io/x").is_empty());
    }

    #[test]
    fn docker_hub_keys_serve_docker_hub_repositories() {
        let k = ring(&[("https://index.docker.io/v1/", "hub")]);
        assert_eq!(users(&k, "docker.io/library/busybox"), ["hub"]);
        assert_eq!(users(&k, "docker.io/user/app"), ["hub"]);
        assert!(users(&k, "quay.io/user/app").is_empty());
        assert!(users(&k, "localhost:5000/app").is_empty());
    }

    #[test]
    fn v1_and_v2_paths_are_the_bare_host_and_bad_keys_are_skipped() {
        let k = ring(&[
            ("https://reg.io/v2/", "v2"),
            ("", "empty"),
            ("a b", "space"),
        ]);
        assert_eq!(users(&k, "reg.io/any/thing"), ["v2"]);
        assert_eq!(k.creds.len(), 1);
        assert_eq!(key_of("reg.io/v1/team"), Some("reg.io/team".to_string()));
        assert_eq!(key_of("http://reg.io:80/"), Some("reg.io:80".to_string()));
    }

    #[test]
    fn two_logins_for_one_key_are_both_offered() {
        let mut k = ring(&[("reg.io", "first")]);
        k.add(
            &[("https://reg.io".to_string(), cred("second"))]
                .into_iter()
                .collect(),
            &LoginSource::Node,
        );
        assert_eq!(users(&k, "reg.io/x"), ["first", "second"]);
    }
}
