//! `$(VAR)` expansion, as kubelet's forked `expansion` package does it for a
//! container's command, args, environment and `subPathExpr`, with limits so that
//! chained references cannot grow without bound.

/// Longest single string after `$(VAR)` expansion: the kernel's `MAX_ARG_STRLEN`
/// (32 pages), beyond which the container's exec would fail anyway. Chained
/// references (`B=$(A)$(A)`, `C=$(B)$(B)`, ...) grow exponentially; this stops them.
pub(crate) const MAX_EXPANDED_LEN: usize = 128 * 1024;
/// Most bytes one container's environment, command and args may expand to in
/// total: `ARG_MAX` under the default 8 MiB stack limit.
pub(crate) const MAX_EXPANDED_TOTAL: usize = 2 * 1024 * 1024;

/// The result of [`expand`] would exceed its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLong;

/// Expands `$(VAR)` references from `lookup`, as kubelet does: `$$` is a literal `$`,
/// and an undefined `$(VAR)` stays as it was. Stops with [`TooLong`] as soon as the
/// result would pass `max` bytes, before allocating more.
pub(crate) fn expand<'v>(
    input: &str,
    lookup: impl Fn(&str) -> Option<&'v str>,
    max: usize,
) -> Result<String, TooLong> {
    let mut out = String::with_capacity(input.len().min(max));
    let push = |out: &mut String, s: &str| {
        if out.len() + s.len() > max {
            return Err(TooLong);
        }
        out.push_str(s);
        Ok(())
    };
    let bytes = input.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    push(&mut out, "$")?;
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + end];
                        match lookup(name) {
                            Some(v) => push(&mut out, v)?,
                            None => push(&mut out, &input[i..i + 3 + end])?,
                        }
                        i += 3 + end;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = input[i..].chars().next().unwrap_or('$');
        push(&mut out, &input[i..i + ch.len_utf8()])?;
        i += ch.len_utf8();
    }
    Ok(out)
}
