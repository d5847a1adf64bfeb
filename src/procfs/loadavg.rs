//! `/proc/loadavg`.

/// The number of scheduling entities (threads) from `/proc/loadavg`'s fourth field
/// (`running/total`), kubelet's "running processes" (its `sysinfo.procs`).
pub(crate) fn parse_loadavg_tasks(text: &str) -> Option<u64> {
    let field = text.split_whitespace().nth(3)?;
    field.split_once('/')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_count_is_the_fourth_fields_total() {
        assert_eq!(
            parse_loadavg_tasks("0.52 0.58 0.59 3/1204 98765\n"),
            Some(1204)
        );
        assert_eq!(parse_loadavg_tasks("0.52 0.58 0.59\n"), None);
        assert_eq!(parse_loadavg_tasks("0.52 0.58 0.59 3 98765\n"), None);
    }
}
