//! `/proc/self/mountinfo`: each mount's point, filesystem type and super options
//! (`id parent major:minor root point options [tags…] - type source super-options`).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// One line of the mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    /// The mount point, octal escapes decoded.
    pub point: PathBuf,
    /// The filesystem type (`ext4`, `cgroup`, `cgroup2`); empty on a line without the
    /// ` - ` separator, which still names a mount point.
    pub fs_type: String,
    /// The super block's options (`rw,cpu,cpuacct` for a v1 cgroup hierarchy).
    pub super_options: String,
}

/// Every mount of the table, in its order (stacked mounts repeat their point). Bytes,
/// not text: a mount point need not be UTF-8.
pub(crate) fn parse_mountinfo(text: &[u8]) -> Vec<Mount> {
    text.split(|b| *b == b'\n').filter_map(mount).collect()
}

fn mount(line: &[u8]) -> Option<Mount> {
    let mut fields = line.split(|b| *b == b' ');
    let point = fields.nth(4)?;
    let mut after = fields.skip_while(|f| *f != b"-").skip(1);
    let text = |f: Option<&[u8]>| String::from_utf8_lossy(f.unwrap_or_default()).into_owned();
    let fs_type = text(after.next());
    let super_options = text(after.nth(1));
    Some(Mount {
        point: PathBuf::from(OsString::from_vec(unescape(point))),
        fs_type,
        super_options,
    })
}

/// The kernel writes space, tab, newline and backslash in mount paths as `\ooo`.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_decoded() {
        let text = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
            40 22 8:1 /x /var/lib/a\\040b rw - ext4 /dev/sda1 rw\n\
            41 22 8:1 /x /back\\134slash rw - ext4 /dev/sda1 rw\n";
        let points: Vec<PathBuf> = parse_mountinfo(text).into_iter().map(|m| m.point).collect();
        assert_eq!(
            points,
            vec![
                PathBuf::from("/"),
                PathBuf::from("/var/lib/a b"),
                PathBuf::from("/back\\slash")
            ]
        );
    }

    #[test]
    fn the_type_and_super_options_follow_the_separator() {
        let text = b"30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct\n\
            31 25 0:27 / /sys/fs/cgroup/unified rw master:1 - cgroup2 cgroup2 rw\n\
            32 25 0:28 / /odd rw\n\
            short line\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(m[0].point, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(
            (m[0].fs_type.as_str(), m[0].super_options.as_str()),
            ("cgroup", "rw,cpu,cpuacct")
        );
        assert_eq!(
            (m[1].fs_type.as_str(), m[1].super_options.as_str()),
            ("cgroup2", "rw")
        );
        assert_eq!(
            (m[2].fs_type.as_str(), m[2].super_options.as_str()),
            ("", "")
        );
    }

    #[test]
    fn the_hosts_table_parses() {
        let text = std::fs::read("/proc/self/mountinfo").unwrap();
        let m = parse_mountinfo(&text);
        assert!(m.iter().any(|m| m.point == std::path::Path::new("/")));
        assert!(m.iter().all(|m| !m.fs_type.is_empty()));
    }
}
