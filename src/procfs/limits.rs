//! `/proc/<pid>/limits`: a resource's soft limit.

/// A soft limit: a number in the resource's unit, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    Unlimited,
    Max(u64),
}

/// The soft limit (the column after the name) of the line naming `resource`
/// (`Max open files  1024  524288  files`).
pub(crate) fn soft_limit(limits: &str, resource: &str) -> Option<Limit> {
    let line = limits.lines().find(|l| l.starts_with(resource))?;
    let soft = line[resource.len()..].split_whitespace().next()?;
    if soft.eq_ignore_ascii_case("unlimited") {
        return Some(Limit::Unlimited);
    }
    soft.parse().ok().map(Limit::Max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units\n\
        Max open files            1024                 524288               files\n\
        Max address space         unlimited            unlimited            bytes\n\
        Max nice priority         0                    0\n";

    #[test]
    fn the_soft_column_is_read() {
        assert_eq!(soft_limit(LIMITS, "Max open files"), Some(Limit::Max(1024)));
        assert_eq!(
            soft_limit(LIMITS, "Max address space"),
            Some(Limit::Unlimited)
        );
        assert_eq!(soft_limit(LIMITS, "Max nice priority"), Some(Limit::Max(0)));
        assert_eq!(soft_limit(LIMITS, "Max processes"), None);
        assert_eq!(
            soft_limit("Max open files  lots  1  files\n", "Max open files"),
            None
        );
    }
}
