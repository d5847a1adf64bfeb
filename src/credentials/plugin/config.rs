//! kubelet's `CredentialProviderConfig` (`--image-credential-provider-config`): read from
//! a file, or from every `*.json`, `*.yaml` and `*.yml` file of a directory in name
//! order, decoded strictly (an unknown field is an error, as kubelet's strict decoder
//! makes it) and validated with kubelet's field errors.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The config's own API versions kubelet 1.36 decodes (`kubelet.config.k8s.io`).
const CONFIG_API_VERSIONS: [&str; 3] = [
    "kubelet.config.k8s.io/v1",
    "kubelet.config.k8s.io/v1beta1",
    "kubelet.config.k8s.io/v1alpha1",
];
/// The plugin protocol versions a provider may speak, sorted as kubelet lists them.
pub(crate) const PLUGIN_API_VERSIONS: [&str; 3] = [
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
];
/// The only protocol version with service account tokens.
pub(crate) const PLUGIN_V1: &str = "credentialprovider.kubelet.k8s.io/v1";
/// The largest config file read, and the most files of a config directory.
const MAX_CONFIG_BYTES: u64 = 1 << 20;
const MAX_CONFIG_FILES: usize = 64;

/// Why the config cannot be used; every variant names the file or the field.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("unable to access path {path:?}: {source}")]
    Access {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no configuration files found in directory {0:?}")]
    EmptyDir(PathBuf),
    #[error("error decoding config {path:?}: {reason}")]
    Decode { path: PathBuf, reason: String },
    #[error("duplicate provider name {0:?} found in configuration file(s)")]
    DuplicateAcrossFiles(String),
    #[error("failed to validate credential provider config {path:?}: {}", aggregate(.errors))]
    Invalid { path: PathBuf, errors: Vec<String> },
}

/// `field.ErrorList.ToAggregate()`'s text: one error bare, several in brackets.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// How a token-mode provider's cached credentials are keyed beside the service account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenCacheType {
    /// Per service account (its namespace, name, UID and the annotations passed).
    ServiceAccount,
    /// Per token as well: the credentials are only good while the token is.
    Token,
}

/// `tokenAttributes`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenAttributes {
    pub audience: String,
    pub cache_type: TokenCacheType,
    pub require_service_account: bool,
    pub required_annotations: Vec<String>,
    pub optional_annotations: Vec<String>,
}

/// One provider, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProviderConfig {
    pub name: String,
    pub match_images: Vec<String>,
    pub default_cache_duration: Duration,
    pub api_version: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub token_attributes: Option<TokenAttributes>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    kind: Option<String>,
    api_version: Option<String>,
    #[serde(default)]
    providers: Vec<RawProvider>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawProvider {
    #[serde(default)]
    name: String,
    #[serde(default)]
    match_images: Vec<String>,
    default_cache_duration: Option<String>,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<RawEnv>,
    token_attributes: Option<RawTokenAttributes>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnv {
    name: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTokenAttributes {
    #[serde(default)]
    service_account_token_audience: String,
    #[serde(default)]
    cache_type: String,
    require_service_account: Option<bool>,
    #[serde(default)]
    required_service_account_annotation_keys: Vec<String>,
    #[serde(default)]
    optional_service_account_annotation_keys: Vec<String>,
}

/// kubelet's `readCredentialProviderConfig` and `validateCredentialProviderConfig`.
pub(crate) fn read(path: &Path) -> Result<Vec<ProviderConfig>, ConfigError> {
    let access = |source| ConfigError::Access {
        path: path.to_path_buf(),
        source,
    };
    let files = if std::fs::metadata(path).map_err(access)?.is_dir() {
        config_files(path)?
    } else {
        vec![path.to_path_buf()]
    };
    let mut providers: Vec<ProviderConfig> = Vec::new();
    for file in files {
        for p in read_file(&file)? {
            if providers.iter().any(|q| q.name == p.name) {
                return Err(ConfigError::DuplicateAcrossFiles(p.name));
            }
            providers.push(p);
        }
    }
    Ok(providers)
}

fn config_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let access = |source| ConfigError::Access {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(access)? {
        let path = entry.map_err(access)?.path();
        let ext = path.extension().and_then(|e| e.to_str());
        if matches!(ext, Some("json" | "yaml" | "yml")) && !path.is_dir() {
            files.push(path);
        }
        if files.len() > MAX_CONFIG_FILES {
            return Err(ConfigError::Decode {
                path: dir.to_path_buf(),
                reason: format!("more than {MAX_CONFIG_FILES} configuration files"),
            });
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(ConfigError::EmptyDir(dir.to_path_buf()));
    }
    Ok(files)
}

fn read_file(path: &Path) -> Result<Vec<ProviderConfig>, ConfigError> {
    use std::io::Read as _;
    let decode = |reason: String| ConfigError::Decode {
        path: path.to_path_buf(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|source| ConfigError::Access {
        path: path.to_path_buf(),
        source,
    })?;
    let mut text = String::new();
    (file.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| decode(e.to_string()))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(decode(format!("larger than {MAX_CONFIG_BYTES} bytes")));
    }
    let raw = parse(&text).map_err(|e| decode(e.to_string()))?;
    validate(raw).map_err(|errors| ConfigError::Invalid {
        path: path.to_path_buf(),
        errors,
    })
}

/// Why a config file's text, or a value in it, does not hold: kubelet's words (the
/// decoder's, and Go's `url.Parse` and apimachinery's for the values it checks).
#[derive(Debug, thiserror::Error)]
enum ConfigTextError {
    #[error(transparent)]
    Yaml(#[from] crate::yaml::YamlError),
    #[error("strict decoding error: {at}: {reason}")]
    Strict {
        at: String,
        reason: serde_json::Error,
    },
    #[error("failed to decode {0:?} (wrong Kind)")]
    WrongKind(String),
    #[error(
        "no kind \"CredentialProviderConfig\" is registered for version {0:?} (supported: {supported})",
        supported = CONFIG_API_VERSIONS.join(", ")
    )]
    Version(String),
    #[error("parse {url:?}: net/url: invalid control character in URL ({c:?})")]
    UrlControl { url: String, c: char },
    #[error("parse {url:?}: invalid port \":{port}\" after host")]
    UrlPort { url: String, port: String },
    #[error("parse {url:?}: invalid character {c:?} in host name")]
    UrlHost { url: String, c: String },
    #[error(
        "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
    )]
    NamePrefix,
    #[error(
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
    )]
    NamePart,
}

/// YAML or JSON (JSON is YAML) to the typed config, with kubelet's kind and group checks.
fn parse(text: &str) -> Result<RawConfig, ConfigTextError> {
    let doc = crate::yaml::single(text, &crate::yaml::CONFIG_LIMITS)?;
    let raw: RawConfig =
        serde_path_to_error::deserialize(doc).map_err(|e| ConfigTextError::Strict {
            at: e.path().to_string(),
            reason: e.into_inner(),
        })?;
    let api_version = raw.api_version.as_deref().unwrap_or_default();
    if raw.kind.as_deref() != Some("CredentialProviderConfig") {
        let kind = raw.kind.unwrap_or_default();
        return Err(ConfigTextError::WrongKind(kind));
    }
    if !CONFIG_API_VERSIONS.contains(&api_version) {
        return Err(ConfigTextError::Version(api_version.to_string()));
    }
    Ok(raw)
}

/// kubelet's field errors, in its words, or the validated providers.
fn validate(raw: RawConfig) -> Result<Vec<ProviderConfig>, Vec<String>> {
    let mut errors = Vec::new();
    if raw.providers.is_empty() {
        errors.push("providers: Required value: at least 1 item in plugins is required".into());
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for p in raw.providers {
        check_name(&p.name, &mut seen, &mut errors);
        if p.api_version.is_empty() {
            errors.push("providers.apiVersion: Required value".into());
        } else if !PLUGIN_API_VERSIONS.contains(&p.api_version.as_str()) {
            errors.push(format!(
                "providers.apiVersion: Unsupported value: {:?}: supported values: {}",
                p.api_version,
                quoted_list(&PLUGIN_API_VERSIONS)
            ));
        }
        if p.match_images.is_empty() {
            errors.push(
                "providers.matchImages: Required value: at least 1 item in matchImages is required"
                    .into(),
            );
        }
        for m in &p.match_images {
            if let Err(reason) = check_match_image(m) {
                errors.push(format!(
                    "providers.matchImages: Invalid value: {m:?}: match image is invalid: {reason}"
                ));
            }
        }
        let cache = cache_duration(p.default_cache_duration.as_deref(), &mut errors);
        let token = p
            .token_attributes
            .as_ref()
            .and_then(|t| token_attributes(t, &p.api_version, &mut errors));
        out.push(ProviderConfig {
            name: p.name,
            match_images: p.match_images,
            default_cache_duration: cache,
            api_version: p.api_version,
            args: p.args,
            env: p.env.into_iter().map(|e| (e.name, e.value)).collect(),
            token_attributes: token,
        });
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn quoted_list(values: &[&str]) -> String {
    let q: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    q.join(", ")
}

/// The name is the plugin's file name in the bin dir: one plain path segment.
fn check_name(name: &str, seen: &mut BTreeSet<String>, errors: &mut Vec<String>) {
    let invalid = |why: &str| format!("providers.name: Invalid value: {name:?}: {why}");
    if name.contains('/') {
        errors.push(invalid("provider name cannot contain '/'"));
    }
    if name.contains(' ') {
        errors.push(invalid("provider name cannot contain spaces"));
    }
    if name == "." || name == ".." {
        errors.push(invalid(&format!("provider name cannot be '{name}'")));
    }
    if name.is_empty() || name.contains('\0') {
        errors.push(invalid("provider name must be a file name"));
    }
    if !seen.insert(name.to_string()) {
        errors.push(format!("providers.name: Duplicate value: {name:?}"));
    }
}

/// `defaultCacheDuration`: required, a Go duration, not negative.
fn cache_duration(text: Option<&str>, errors: &mut Vec<String>) -> Duration {
    let Some(text) = text else {
        errors.push("providers.defaultCacheDuration: Required value".into());
        return Duration::ZERO;
    };
    match crate::duration::parse_go_duration(text) {
        Ok(d) if d.as_nanos() < 0 => {
            errors.push(format!("providers.defaultCacheDuration: Invalid value: {text:?}: defaultCacheDuration must be greater than or equal to 0"));
            Duration::ZERO
        }
        Ok(d) => d.to_std().unwrap_or_default(),
        Err(e) => {
            errors.push(format!(
                "providers.defaultCacheDuration: Invalid value: {text:?}: {e}"
            ));
            Duration::ZERO
        }
    }
}

/// kubelet's `ParseSchemelessURL` refusals, as Go's `url.Parse("https://" + m)` makes them.
fn check_match_image(m: &str) -> Result<(), ConfigTextError> {
    let url = format!("https://{m}");
    if let Some(c) = m.chars().find(|c| c.is_control()) {
        return Err(ConfigTextError::UrlControl { url, c });
    }
    let authority = m.split(['/', '?', '#']).next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.contains(']') || h.ends_with(']') => (h, Some(p)),
        _ => (authority, None),
    };
    if let Some(p) = port
        && !p.chars().all(|c| c.is_ascii_digit())
    {
        let port = p.to_string();
        return Err(ConfigTextError::UrlPort { url, port });
    }
    if let Some(c) = host.chars().find(|c| " <>\"{}|\\^`%".contains(*c)) {
        let c = c.to_string();
        return Err(ConfigTextError::UrlHost { url, c });
    }
    Ok(())
}

fn token_attributes(
    t: &RawTokenAttributes,
    api_version: &str,
    errors: &mut Vec<String>,
) -> Option<TokenAttributes> {
    const AT: &str = "providers.tokenAttributes";
    let before = errors.len();
    if t.service_account_token_audience.is_empty() {
        errors.push(format!("{AT}.serviceAccountTokenAudience: Required value"));
    }
    if t.require_service_account.is_none() {
        errors.push(format!("{AT}.requireServiceAccount: Required value"));
    }
    if api_version != PLUGIN_V1 {
        errors.push(format!(
            "{AT}: Forbidden: tokenAttributes is only supported for {PLUGIN_V1} API version"
        ));
    }
    if t.require_service_account == Some(false)
        && !t.required_service_account_annotation_keys.is_empty()
    {
        errors.push(format!("{AT}.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"));
    }
    let required = &t.required_service_account_annotation_keys;
    let optional = &t.optional_service_account_annotation_keys;
    check_annotation_keys(
        &format!("{AT}.requiredServiceAccountAnnotationKeys"),
        required,
        errors,
    );
    check_annotation_keys(
        &format!("{AT}.optionalServiceAccountAnnotationKeys"),
        optional,
        errors,
    );
    let both: BTreeSet<&String> = required.iter().filter(|k| optional.contains(k)).collect();
    if !both.is_empty() {
        errors.push(format!(
            "{AT}: Invalid value: {both:?}: annotation keys cannot be both required and optional"
        ));
    }
    let cache_type = match t.cache_type.as_str() {
        "ServiceAccount" => Some(TokenCacheType::ServiceAccount),
        "Token" => Some(TokenCacheType::Token),
        "" => {
            errors.push(format!("{AT}.cacheType: Required value: cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token"));
            None
        }
        other => {
            errors.push(format!("{AT}.cacheType: Unsupported value: {other:?}: supported values: \"ServiceAccount\", \"Token\""));
            None
        }
    };
    if errors.len() > before {
        return None;
    }
    Some(TokenAttributes {
        audience: t.service_account_token_audience.clone(),
        cache_type: cache_type?,
        require_service_account: t.require_service_account?,
        required_annotations: required.clone(),
        optional_annotations: optional.clone(),
    })
}

/// Annotation keys as the API checks them: a qualified name (case ignored), once each.
fn check_annotation_keys(at: &str, keys: &[String], errors: &mut Vec<String>) {
    let mut seen = BTreeMap::new();
    for k in keys {
        if let Err(why) = qualified_name(&k.to_ascii_lowercase()) {
            errors.push(format!("{at}: Invalid value: {k:?}: {why}"));
        }
        if seen.insert(k.as_str(), ()).is_some() {
            errors.push(format!("{at}: Duplicate value: {k:?}"));
        }
    }
}

/// apimachinery's `IsQualifiedName`: `[prefix/]name`, the prefix a DNS subdomain, the
/// name at most 63 alphanumerics, `-`, `_` or `.`, starting and ending alphanumeric.
fn qualified_name(key: &str) -> Result<(), ConfigTextError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if p.is_empty() || p.len() > 253 || !p.split('.').all(label_ok) {
            return Err(ConfigTextError::NamePrefix);
        }
    }
    let edge = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && edge(name.bytes().next())
        && edge(name.bytes().last());
    if ok {
        Ok(())
    } else {
        Err(ConfigTextError::NamePart)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors_of(text: &str) -> String {
        match parse(text).map(validate) {
            Ok(Ok(_)) => String::new(),
            Ok(Err(e)) => aggregate(&e),
            Err(e) => e.to_string(),
        }
    }

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n";

    #[test]
    fn a_valid_config_reads_in_yaml_and_json() {
        let yaml = format!(
            "{HEAD}providers:\n- name: ecr\n  matchImages: [\"*.dkr.ecr.*.amazonaws.com\", \"127.0.0.1:5000/team\"]\n  defaultCacheDuration: 12h\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  args: [get-credentials]\n  env:\n  - name: AWS_PROFILE\n    value: node\n"
        );
        let p = validate(parse(&yaml).unwrap()).unwrap();
        assert_eq!(p[0].name, "ecr");
        assert_eq!(p[0].default_cache_duration, Duration::from_secs(12 * 3600));
        assert_eq!(p[0].env, [("AWS_PROFILE".to_string(), "node".to_string())]);
        let json = r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"CredentialProviderConfig","providers":[{"name":"p","matchImages":["r.io"],"defaultCacheDuration":"0s","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1"}]}"#;
        assert_eq!(
            validate(parse(json).unwrap()).unwrap()[0].default_cache_duration,
            Duration::ZERO
        );
    }

    #[test]
    fn kubelets_field_errors_are_reported_together() {
        let text = format!(
            "{HEAD}providers:\n- name: ../evil\n  matchImages: []\n  apiVersion: credentialprovider.kubelet.k8s.io/v2\n- name: a b\n  matchImages: [\"r.io:port\"]\n  defaultCacheDuration: -1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n- name: a b\n  matchImages: [r.io]\n  defaultCacheDuration: 1m\n  apiVersion: \"\"\n"
        );
        let e = errors_of(&text);
        for want in [
            "providers.name: Invalid value: \"../evil\": provider name cannot contain '/'",
            "providers.apiVersion: Unsupported value: \"credentialprovider.kubelet.k8s.io/v2\": supported values: \"credentialprovider.kubelet.k8s.io/v1\", \"credentialprovider.kubelet.k8s.io/v1alpha1\", \"credentialprovider.kubelet.k8s.io/v1beta1\"",
            "providers.matchImages: Required value: at least 1 item in matchImages is required",
            "providers.defaultCacheDuration: Required value",
            "providers.name: Invalid value: \"a b\": provider name cannot contain spaces",
            "match image is invalid: parse \"https://r.io:port\": invalid port \":port\" after host",
            "defaultCacheDuration must be greater than or equal to 0",
            "providers.name: Duplicate value: \"a b\"",
            "providers.apiVersion: Required value",
        ] {
            assert!(e.contains(want), "missing {want:?} in {e}");
        }
        assert!(e.starts_with('[') && e.ends_with(']'), "{e}");
        assert_eq!(
            errors_of(&format!("{HEAD}providers: []\n")),
            "providers: Required value: at least 1 item in plugins is required"
        );
    }

    #[test]
    fn kind_version_and_unknown_fields_are_refused() {
        assert!(
            errors_of("apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n")
                .contains("wrong Kind")
        );
        assert!(
            errors_of("apiVersion: kubelet.config.k8s.io/v2\nkind: CredentialProviderConfig\n")
                .contains("kubelet.config.k8s.io/v2")
        );
        let e = errors_of(&format!(
            "{HEAD}providers:\n- name: p\n  matchImage: [r.io]\n"
        ));
        assert!(
            e.contains("strict decoding error: providers[0]") && e.contains("matchImage"),
            "{e}"
        );
    }

    #[test]
    fn token_attributes_follow_kubelets_rules() {
        let provider = |attrs: &str, api: &str| {
            format!(
                "{HEAD}providers:\n- name: p\n  matchImages: [r.io]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/{api}\n  tokenAttributes:\n{attrs}"
            )
        };
        let ok = provider(
            "    serviceAccountTokenAudience: reg\n    cacheType: ServiceAccount\n    requireServiceAccount: true\n    requiredServiceAccountAnnotationKeys: [example.com/role]\n    optionalServiceAccountAnnotationKeys: [example.com/team]\n",
            "v1",
        );
        let p = validate(parse(&ok).unwrap()).unwrap();
        let t = p[0].token_attributes.as_ref().unwrap();
        assert_eq!(
            (t.audience.as_str(), t.cache_type),
            ("reg", TokenCacheType::ServiceAccount)
        );
        let e = errors_of(&provider(
            "    requireServiceAccount: false\n    requiredServiceAccountAnnotationKeys: [example.com/x, Bad_/x]\n    optionalServiceAccountAnnotationKeys: [example.com/x]\n",
            "v1beta1",
        ));
        for want in [
            "providers.tokenAttributes.serviceAccountTokenAudience: Required value",
            "providers.tokenAttributes: Forbidden: tokenAttributes is only supported for credentialprovider.kubelet.k8s.io/v1 API version",
            "providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set",
            "providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Invalid value: \"Bad_/x\"",
            "annotation keys cannot be both required and optional",
            "providers.tokenAttributes.cacheType: Required value",
        ] {
            assert!(e.contains(want), "missing {want:?} in {e}");
        }
        let e = errors_of(&provider(
            "    serviceAccountTokenAudience: a\n    cacheType: Pod\n",
            "v1",
        ));
        assert!(
            e.contains("providers.tokenAttributes.requireServiceAccount: Required value"),
            "{e}"
        );
        assert!(e.contains("cacheType: Unsupported value: \"Pod\""), "{e}");
    }

    #[test]
    fn a_directory_is_read_in_name_order_and_names_are_unique_across_files() {
        let dir = tempfile::tempdir().unwrap();
        let one = |name: &str| {
            format!(
                "{HEAD}providers:\n- name: {name}\n  matchImages: [r.io]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
            )
        };
        std::fs::write(dir.path().join("b.yaml"), one("second")).unwrap();
        std::fs::write(dir.path().join("a.json"), one("first")).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let names: Vec<String> = read(dir.path())
            .unwrap()
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["first", "second"]);
        std::fs::write(dir.path().join("c.yml"), one("first")).unwrap();
        let e = read(dir.path()).unwrap_err().to_string();
        assert_eq!(
            e,
            "duplicate provider name \"first\" found in configuration file(s)"
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(
            read(empty.path())
                .unwrap_err()
                .to_string()
                .contains("no configuration files found")
        );
        let bad = dir.path().join("bad.conf");
        std::fs::write(&bad, format!("{HEAD}providers: []\n")).unwrap();
        let e = read(&bad).unwrap_err().to_string();
        assert!(
            e.contains("bad.conf") && e.contains("providers: Required value"),
            "{e}"
        );
    }
}
