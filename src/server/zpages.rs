//! kubelet's z-pages (component-base's `zpages`, ComponentStatusz and ComponentFlagz,
//! on by default in 1.36): `/statusz`, when the process started, how long it has
//! been up, its versions and the paths it serves; `/flagz`, every flag with the value
//! in force. Both are for people, not programs: kubelet picks one of four delimiters
//! at random per response so nobody scrapes them, and oxlet does the same. `/statusz`
//! also answers in JSON when asked for exactly
//! `application/json;v=v1alpha1;g=config.k8s.io;as=Statusz`.
//!
//! Installed on the secure port with the debugging handlers (kubelet's
//! `InstallAuthRequiredHandlers` ends with them), authorized as `nodes/statusz`
//! (then `nodes/proxy`) and `nodes/proxy`.

use std::time::SystemTime;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The component name both pages print.
const COMPONENT: &str = "kubelet";
/// kubelet's delimiters between a name and its value, one chosen per response.
const DELIMITERS: [&str; 4] = [":", ": ", "=", " "];
/// The warning both pages begin with, after the component's name.
const WARNING: &str = "Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.";

/// The top-level paths of the secure port, as `/statusz` lists them (kubelet lists
/// its registered paths by their first segment, sorted).
pub(crate) const LISTED_PATHS: &[&str] = &[
    "/attach",
    "/checkpoint",
    "/configz",
    "/containerLogs",
    "/debug",
    "/exec",
    "/flagz",
    "/healthz",
    "/logs",
    "/metrics",
    "/pods",
    "/portForward",
    "/run",
    "/runningpods",
    "/stats",
];

/// What the two pages show, fixed at start.
#[derive(Debug, Clone)]
pub(crate) struct Zpages {
    started: SystemTime,
    /// Every flag and its value in force, sorted by name.
    flags: Vec<(String, String)>,
}

impl Zpages {
    pub(crate) fn new(started: SystemTime, mut flags: Vec<(String, String)>) -> Zpages {
        flags.sort();
        Zpages { started, flags }
    }
}

fn delimiter() -> &'static str {
    DELIMITERS[fastrand::usize(..DELIMITERS.len())]
}

/// kubelet's `uptime`: `H hr MM min SS sec`.
fn uptime(started: SystemTime) -> String {
    let up = SystemTime::now()
        .duration_since(started)
        .unwrap_or_default()
        .as_secs();
    format!(
        "{} hr {:02} min {:02} sec",
        up / 3600,
        (up / 60) % 60,
        up % 60
    )
}

/// Go's `time.UnixDate` in the local zone: `Mon Jan  2 15:04:05 UTC 2006`.
fn unix_date(t: SystemTime) -> String {
    let Ok(ts) = jiff::Timestamp::try_from(t) else {
        return String::new();
    };
    ts.to_zoned(jiff::tz::TimeZone::system())
        .strftime("%a %b %e %H:%M:%S %Z %Y")
        .to_string()
}

/// The Rust compiler that built oxlet, where kubelet names its Go release.
fn compiler() -> &'static str {
    env!("OXLET_RUSTC_VERSION")
}

/// The Kubernetes version without its `v`, as component-base prints a binary version.
fn binary_version() -> &'static str {
    crate::version::KUBERNETES.trim_start_matches('v')
}

/// The emulation version: the minor itself (kubelet emulates its own release).
fn emulation_version() -> String {
    let mut parts = binary_version().split('.');
    format!(
        "{}.{}",
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default()
    )
}

/// What the client accepts (component-base's `NegotiateMediaType`): no header or
/// `*/*` is text; JSON only with the version, group and kind parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wanted {
    Text,
    Json,
}

fn negotiate(headers: &HeaderMap, kind: Option<&str>) -> Option<Wanted> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim();
    if accept.is_empty() || accept == "*/*" {
        return Some(Wanted::Text);
    }
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |name: &str| params.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
        match media.as_str() {
            "text/plain" | "text/*" | "*/*" => return Some(Wanted::Text),
            "application/json" => {
                let wanted = kind?;
                let exact = param("v") == Some("v1alpha1")
                    && param("g") == Some("config.k8s.io")
                    && param("as") == Some(wanted);
                return exact.then_some(Wanted::Json);
            }
            _ => {}
        }
    }
    None
}

fn not_acceptable() -> Response {
    (
        StatusCode::NOT_ACCEPTABLE,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "not acceptable\n",
    )
        .into_response()
}

fn text(body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// `GET /statusz`.
pub(crate) async fn statusz(
    State(z): State<std::sync::Arc<Zpages>>,
    headers: HeaderMap,
) -> Response {
    match negotiate(&headers, Some("Statusz")) {
        Some(Wanted::Text) => text(statusz_text(&z, delimiter())),
        Some(Wanted::Json) => (
            [(header::CONTENT_TYPE, "application/json")],
            statusz_json(&z).to_string(),
        )
            .into_response(),
        None => not_acceptable(),
    }
}

fn statusz_text(z: &Zpages, d: &str) -> String {
    format!(
        "\n{COMPONENT} statusz\n{WARNING}\n\nStarted{d} {}\nUp{d} {}\nGo version{d} {}\nBinary version{d} {}\nEmulation version{d} {}\nPaths{d} {}\n",
        unix_date(z.started),
        uptime(z.started),
        compiler(),
        binary_version(),
        emulation_version(),
        LISTED_PATHS.join(" "),
    )
}

fn statusz_json(z: &Zpages) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1alpha1",
        "componentName": COMPONENT,
        "startTime": unix_date(z.started),
        "upTime": uptime(z.started),
        "goVersion": compiler(),
        "binaryVersion": binary_version(),
        "emulationVersion": emulation_version(),
        "paths": LISTED_PATHS,
    })
}

/// `GET /flagz`.
pub(crate) async fn flagz(State(z): State<std::sync::Arc<Zpages>>, headers: HeaderMap) -> Response {
    match negotiate(&headers, None) {
        Some(_) => text(flagz_text(&z, delimiter())),
        None => not_acceptable(),
    }
}

fn flagz_text(z: &Zpages, d: &str) -> String {
    let mut out = format!("\n{COMPONENT} flags\n{WARNING}\n\n");
    for (name, value) in &z.flags {
        out.push_str(&format!("{name}{d}{value}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, v.parse().unwrap());
        h
    }

    #[test]
    fn media_types_are_negotiated_as_component_base() {
        assert_eq!(
            negotiate(&HeaderMap::new(), Some("Statusz")),
            Some(Wanted::Text)
        );
        assert_eq!(
            negotiate(&accept("*/*"), Some("Statusz")),
            Some(Wanted::Text)
        );
        assert_eq!(negotiate(&accept("text/plain"), None), Some(Wanted::Text));
        assert_eq!(
            negotiate(
                &accept("application/json;v=v1alpha1;g=config.k8s.io;as=Statusz"),
                Some("Statusz")
            ),
            Some(Wanted::Json)
        );
        assert_eq!(
            negotiate(&accept("application/json"), Some("Statusz")),
            None
        );
        assert_eq!(
            negotiate(
                &accept("application/json;v=v1alpha1;g=config.k8s.io;as=Statusz"),
                None
            ),
            None
        );
        assert_eq!(negotiate(&accept("image/png"), None), None);
    }

    #[test]
    fn the_pages_say_what_kubelets_say() {
        let started = SystemTime::now() - Duration::from_secs(3723);
        let z = Zpages::new(
            started,
            vec![
                ("v".into(), "2".into()),
                ("address".into(), "0.0.0.0".into()),
            ],
        );
        let s = statusz_text(&z, ":");
        assert!(
            s.starts_with("\nkubelet statusz\nWarning: This endpoint is not meant"),
            "{s}"
        );
        assert!(s.contains("\nUp: 1 hr 02 min 03 sec\n"), "{s}");
        assert!(
            s.contains("\nBinary version: 1.36.0\nEmulation version: 1.36\n"),
            "{s}"
        );
        assert!(s.contains("\nGo version: rustc "), "{s}");
        assert!(s.contains("\nPaths: /attach /checkpoint /configz"), "{s}");
        let f = flagz_text(&z, "=");
        assert!(f.ends_with("\n\naddress=0.0.0.0\nv=2\n"), "{f}");
        let j = statusz_json(&z);
        assert_eq!(j["binaryVersion"], "1.36.0");
        assert_eq!(j["componentName"], "kubelet");
        assert_eq!(j["upTime"], "1 hr 02 min 03 sec");
        // Go's UnixDate: a space-padded day and the zone's abbreviation.
        let date = unix_date(SystemTime::UNIX_EPOCH + Duration::from_secs(86_400 * 3));
        let parts: Vec<&str> = date.split_whitespace().collect();
        assert_eq!(parts.len(), 6, "{date}");
        assert!(date.contains("Jan  "), "{date}");
        assert_eq!(parts[5], "1970", "{date}");
    }
}
