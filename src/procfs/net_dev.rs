//! `/proc/<pid>/net/dev`: each interface's receive and transmit counters, in the
//! namespace of the process.

/// One interface's line: receive, then transmit, each eight counters (bytes, packets,
/// errs, drop, fifo, frame or colls, compressed, multicast or carrier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NetDevice<'a> {
    pub name: &'a str,
    pub rx: [u64; 8],
    pub tx: [u64; 8],
}

/// Each line past the two header lines, in order: its interface, or None where the
/// line is not a name and sixteen numbers (cAdvisor then trusts none of the file; the
/// metric advisor skips the line).
pub(crate) fn net_devices(text: &str) -> impl Iterator<Item = Option<NetDevice<'_>>> {
    text.lines().skip(2).map(net_device)
}

fn net_device(line: &str) -> Option<NetDevice<'_>> {
    let (name, rest) = line.split_once(':')?;
    let mut n = [0u64; 16];
    let mut words = rest.split_whitespace();
    for slot in &mut n {
        *slot = words.next()?.parse().ok()?;
    }
    if words.next().is_some() {
        return None;
    }
    let (rx, tx) = n.split_at(8);
    Some(NetDevice {
        name: name.trim(),
        rx: rx.try_into().ok()?,
        tx: tx.try_into().ok()?,
    })
}

/// cAdvisor's `ignoredDevicePrefixes` for network stats (loopback, `veth` pod ends,
/// the `docker`/`nerdctl` bridges), matched as it does, case aside.
pub(crate) fn ignored_by_cadvisor(name: &str) -> bool {
    ["lo", "veth", "docker", "nerdctl"].iter().any(|p| {
        name.get(..p.len())
            .is_some_and(|h| h.eq_ignore_ascii_case(p))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1459648616 1593927    0    0    0     0          0         0 1459648616 1593927    0    0    0     0       0          0
  eth0: 1000 10 2 0 0 0 0 0 2000 20 3 0 0 0 0 0
  bad0: 1 2 3
  bad1: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 x
  bad2: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17
";

    #[test]
    fn good_lines_are_read_and_bad_ones_are_none() {
        let lines: Vec<Option<NetDevice>> = net_devices(DEV).collect();
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert!(lines[2..].iter().all(Option::is_none), "{lines:?}");
        let got: Vec<NetDevice> = lines.into_iter().flatten().collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].name, "lo");
        assert_eq!(got[1].name, "eth0");
        assert_eq!(got[1].rx, [1000, 10, 2, 0, 0, 0, 0, 0]);
        assert_eq!(got[1].tx, [2000, 20, 3, 0, 0, 0, 0, 0]);
        assert_eq!(net_devices("").count(), 0);
    }

    #[test]
    fn cadvisors_ignored_interfaces() {
        for name in ["lo", "veth1a2b", "docker0", "nerdctl0", "Docker0"] {
            assert!(ignored_by_cadvisor(name), "{name}");
        }
        for name in ["eth0", "cni0", "l", "ens3"] {
            assert!(!ignored_by_cadvisor(name), "{name}");
        }
    }
}
