//! `/proc/<pid>/cgroup`: the cgroup a process is in, one line per hierarchy
//! (`id:controllers:path`).

/// The path in the unified hierarchy (`0::path`, cgroup v2) when `controller` is None,
/// else in the v1 hierarchy that has `controller` (`4:memory:/path`).
pub(crate) fn cgroup_path<'a>(text: &'a str, controller: Option<&str>) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let wanted = match controller {
            None => id == "0" && controllers.is_empty(),
            Some(c) => controllers.split(',').any(|have| have == c),
        };
        wanted.then_some(path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unified_line_or_a_controllers_line() {
        let v1 = "12:pids:/user.slice\n4:cpu,cpuacct:/a\n3:memory:/kubelet.slice/kubelet.service\n0::/init.scope\n";
        assert_eq!(
            cgroup_path(v1, Some("memory")),
            Some("/kubelet.slice/kubelet.service")
        );
        assert_eq!(cgroup_path(v1, Some("cpu")), Some("/a"));
        assert_eq!(cgroup_path(v1, None), Some("/init.scope"));
        assert_eq!(cgroup_path("0::/\n", Some("memory")), None);
        assert_eq!(cgroup_path("garbage\n", None), None);
        assert_eq!(cgroup_path("0::/with:colon\n", None), Some("/with:colon"));
    }
}
