//! The text of list and map flag values (pflag's and kubelet's comma-separated forms),
//! and why such a value is refused. Settings read flags and config fields with them;
//! the node status reads `--node-labels` with them too, so they sit below both.

/// The pairs of a map's text (pflag's `MapStringString`): comma-separated
/// `key<sep>value`, keys and values trimmed; "" is the empty map.
pub(crate) fn map_pairs(text: &str, sep: char) -> Result<Vec<(&str, &str)>, InvalidValue> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|item| match item.split_once(sep) {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim(), v.trim())),
            _ => Err(format!("{:?} must be formatted as key{sep}value", item.trim()).into()),
        })
        .collect()
}

/// The entries of a multimap's text, in order: comma-separated `key:value`, split
/// at the first `:` and trimmed (kubelet's `ColonSeparatedMultimapStringString`).
pub(crate) fn multimap(
    text: &str,
) -> Result<std::collections::BTreeMap<String, Vec<String>>, InvalidValue> {
    let mut map = std::collections::BTreeMap::<String, Vec<String>>::new();
    for pair in text.split(',').filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once(':') else {
            return Err(format!("{pair:?}: malformed pair, expect string:string").into());
        };
        map.entry(k.trim().to_string())
            .or_default()
            .push(v.trim().to_string());
    }
    Ok(map)
}

/// The items of a list's text: comma-separated, trimmed; "" is the empty list.
pub(crate) fn list_items(text: &str) -> Vec<&str> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Why a setting's value is refused: the reason alone (the caller names the flag
/// or field and the value, in a `Problem`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct InvalidValue(pub String);

impl From<&str> for InvalidValue {
    fn from(reason: &str) -> Self {
        InvalidValue(reason.to_string())
    }
}

impl From<String> for InvalidValue {
    fn from(reason: String) -> Self {
        InvalidValue(reason)
    }
}
