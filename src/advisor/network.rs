//! The host's network counters for the node summary: every interface from
//! `/proc/net/dev` but the ones cAdvisor ignores (loopback, `veth*` pod ends and the
//! `docker*`/`nerdctl*` bridges), and the default interface, the one holding the
//! default route in `/proc/net/route`. Both files are read bounded
//! ([`crate::procfs::read_bounded`]); `/proc/net/dev`'s lines are parsed in
//! `crate::procfs`, which the cgroup rows' network counters share.

use std::path::Path;
use std::time::SystemTime;

use crate::contracts::{InterfaceReading, NetworkReading};
use crate::procfs::{ProcError, read_bounded};

/// Interfaces kept at most (a node with many pods has a `veth` per pod; those are
/// skipped, but a bound keeps any other flood out of every snapshot).
pub(crate) const MAX_INTERFACES: usize = 64;

/// The interface of the first up default route (destination and mask 0).
pub(crate) fn parse_default_route(text: &str) -> Option<String> {
    const RTF_UP: u32 = 0x1;
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (iface, dest, flags, mask) = (f.first()?, f.get(1)?, f.get(3)?, f.get(7)?);
        let flags = u32::from_str_radix(flags, 16).ok()?;
        (*dest == "00000000" && *mask == "00000000" && flags & RTF_UP != 0)
            .then(|| (*iface).to_string())
    })
}

/// The counters of `/proc/net/dev`, ignored interfaces left out, at most
/// [`MAX_INTERFACES`].
pub(crate) fn parse_net_dev(text: &str) -> Vec<InterfaceReading> {
    crate::procfs::net_devices(text)
        .flatten()
        .filter(|d| !crate::procfs::ignored_by_cadvisor(d.name))
        .take(MAX_INTERFACES)
        .map(|d| InterfaceReading {
            name: d.name.to_string(),
            rx_bytes: d.rx[0],
            rx_errors: d.rx[2],
            tx_bytes: d.tx[0],
            tx_errors: d.tx[2],
        })
        .collect()
}

/// The host's network reading from `<proc_root>/net/{dev,route}`; no default
/// interface when the route table has no default route.
pub(crate) fn read(proc_root: &Path) -> Result<NetworkReading, ProcError> {
    let interfaces = parse_net_dev(&read_bounded(&proc_root.join("net/dev"))?);
    let default = read_bounded(&proc_root.join("net/route"))
        .ok()
        .and_then(|t| parse_default_route(&t));
    Ok(NetworkReading {
        time: SystemTime::now(),
        default,
        interfaces,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
cni0\t0000580A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
eth1\t00000000\t010200C0\t0002\t0\t0\t0\t00000000\t0\t0\t0
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
";

    const DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1459648616 1593927    0    0    0     0          0         0 1459648616 1593927    0    0    0     0       0          0
  eth0: 1000 10 2 0 0 0 0 0 2000 20 3 0 0 0 0 0
vethab12: 5 1 0 0 0 0 0 0 6 1 0 0 0 0 0 0
  cni0: 7 1 0 0 0 0 0 0 8 1 1 0 0 0 0 0
  bad0: 1 2 3
";

    #[test]
    fn the_default_route_is_the_first_up_one() {
        assert_eq!(parse_default_route(ROUTE).as_deref(), Some("eth0"));
        assert_eq!(parse_default_route("Iface\tDestination\n"), None);
        assert_eq!(parse_default_route(""), None);
    }

    #[test]
    fn net_dev_keeps_the_host_interfaces_and_skips_bad_lines() {
        let got = parse_net_dev(DEV);
        assert_eq!(
            got,
            vec![
                InterfaceReading {
                    name: "eth0".into(),
                    rx_bytes: 1000,
                    rx_errors: 2,
                    tx_bytes: 2000,
                    tx_errors: 3,
                },
                InterfaceReading {
                    name: "cni0".into(),
                    rx_bytes: 7,
                    rx_errors: 0,
                    tx_bytes: 8,
                    tx_errors: 1,
                },
            ]
        );
    }

    #[test]
    fn interfaces_are_bounded() {
        let mut text = String::from("h1\nh2\n");
        for i in 0..MAX_INTERFACES + 5 {
            text.push_str(&format!("eth{i}: 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0\n"));
        }
        assert_eq!(parse_net_dev(&text).len(), MAX_INTERFACES);
    }

    #[test]
    fn the_hosts_files_parse() {
        let r = read(Path::new("/proc")).unwrap();
        assert!(r.interfaces.iter().all(|i| i.name != "lo"));
        if let Some(d) = &r.default {
            assert!(!d.is_empty());
        }
    }
}
