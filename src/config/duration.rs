//! (temporary; replaced by the config-cli branch)
pub fn format_go_duration(d: std::time::Duration) -> String {
    format!("{}s", d.as_secs())
}
