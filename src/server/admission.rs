//! Who gets a connection when the server is full: TLS handshakes in flight, and
//! connections per client address, with a small budget of their own for clients
//! not (yet) authenticated.
//!
//! Go's `http.Server`, which kubelet serves with, has no cap at all: each connection
//! costs a goroutine and a descriptor until its timeouts end it, and kubelet's secure
//! port sets no handshake timeout short of its 4 h read timeout. A Rust server with
//! no cap would run out of descriptors the same way, and one shared cap taken before
//! TLS lets a flood of silent connects lock out the apiserver. So:
//!
//! - **Handshakes** are bounded in time (the header-read timeout) and in number, per
//!   client and in all; past either bound the *oldest* handshake in flight is dropped
//!   for the new one, so a flood of silent connects only shortens its own lives and a
//!   real client's handshake (a few milliseconds) still completes.
//! - **After the handshake** a connection is counted against its client's address. A
//!   verified client certificate makes it authenticated at once; without one it draws
//!   from the unauthenticated budget (in all and per client) until a request on it
//!   authenticates (a bearer token, as metrics-server sends), when it moves to its
//!   client's own count. When the unauthenticated budget is full, the oldest
//!   connection there that has not sent a request yet is closed for the new one.
//! - Every connection, either kind, counts toward the server's overall cap (what the
//!   open-file limit allows).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::conn::Limits;
use crate::locks::Locked as _;

/// Why a connection was not taken (said at -v=2, at most every 10 s per reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The server holds `max_connections` connections.
    Full,
    /// This client holds its authenticated share.
    ClientFull,
    /// The unauthenticated budget (this client's, or everyone's) is full of
    /// connections that are busy.
    UnauthenticatedFull,
}

impl Refusal {
    pub(super) fn reason(self) -> &'static str {
        match self {
            Refusal::Full => "the server's connection cap is reached",
            Refusal::ClientFull => "this client holds its share of connections",
            Refusal::UnauthenticatedFull => {
                "the budget for unauthenticated connections is full of busy ones"
            }
        }
    }
}

/// How much one client address holds.
#[derive(Default)]
struct Counts {
    handshakes: usize,
    authenticated: usize,
    unauthenticated: usize,
}

impl Counts {
    fn is_empty(&self) -> bool {
        self.handshakes == 0 && self.authenticated == 0 && self.unauthenticated == 0
    }
}

/// An unauthenticated connection: whom it belongs to, how to close it, and whether
/// it has sent a request (one that has not may be closed for a newer one).
struct Waiting {
    ip: IpAddr,
    close: CancellationToken,
    requested: Arc<AtomicBool>,
}

#[derive(Default)]
struct State {
    next: u64,
    /// Handshakes in flight, oldest first.
    handshakes: BTreeMap<u64, (IpAddr, CancellationToken)>,
    /// Unauthenticated connections, oldest first.
    unauthenticated: BTreeMap<u64, Waiting>,
    established: usize,
    clients: HashMap<IpAddr, Counts>,
}

impl State {
    fn id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn counts(&mut self, ip: IpAddr) -> &mut Counts {
        self.clients.entry(ip).or_default()
    }

    fn forget_if_empty(&mut self, ip: IpAddr) {
        if self.clients.get(&ip).is_some_and(Counts::is_empty) {
            self.clients.remove(&ip);
        }
    }

    /// Closes the oldest handshake in flight (of `ip` alone when given).
    fn drop_oldest_handshake(&mut self, ip: Option<IpAddr>) {
        let oldest = (self.handshakes.iter())
            .find(|(_, (owner, _))| ip.is_none_or(|ip| *owner == ip))
            .map(|(id, _)| *id);
        if let Some((owner, close)) = oldest.and_then(|id| self.handshakes.remove(&id)) {
            close.cancel();
            self.counts(owner).handshakes -= 1;
        }
    }

    /// Closes the oldest unauthenticated connection (of `ip` alone when given) that
    /// has not sent a request; false when there is none.
    fn drop_oldest_silent(&mut self, ip: Option<IpAddr>) -> bool {
        let oldest = (self.unauthenticated.iter())
            .find(|(_, w)| ip.is_none_or(|ip| w.ip == ip) && !w.requested.load(Ordering::Relaxed))
            .map(|(id, _)| *id);
        let Some(w) = oldest.and_then(|id| self.unauthenticated.remove(&id)) else {
            return false;
        };
        w.close.cancel();
        self.established -= 1;
        self.counts(w.ip).unauthenticated -= 1;
        true
    }
}

/// The server's bookkeeping of handshakes and connections.
pub(super) struct Admission {
    limits: Limits,
    state: Mutex<State>,
}

impl Admission {
    pub(super) fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            state: Mutex::new(State::default()),
        })
    }

    /// A handshake from `ip` may start; an older one is dropped when this client or
    /// the server has as many in flight as allowed. The guard's token fires if this
    /// handshake is dropped for a newer one.
    pub(super) fn handshake(self: &Arc<Self>, ip: IpAddr) -> Handshake {
        let mut s = self.state.locked();
        if s.counts(ip).handshakes >= self.limits.max_handshakes_per_client {
            s.drop_oldest_handshake(Some(ip));
        }
        if s.handshakes.len() >= self.limits.max_handshakes {
            s.drop_oldest_handshake(None);
        }
        let id = s.id();
        let close = CancellationToken::new();
        s.handshakes.insert(id, (ip, close.clone()));
        s.counts(ip).handshakes += 1;
        Handshake {
            admission: self.clone(),
            id,
            close,
        }
    }

    /// Takes a connection from `ip`, authenticated (a verified client certificate, or
    /// a server without authentication) or not.
    pub(super) fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        authenticated: bool,
    ) -> Result<Arc<Slot>, Refusal> {
        let l = &self.limits;
        let mut s = self.state.locked();
        if authenticated && s.counts(ip).authenticated >= l.max_connections_per_client {
            return Err(Refusal::ClientFull);
        }
        if s.established >= l.max_connections && !(authenticated && s.drop_oldest_silent(None)) {
            return Err(Refusal::Full);
        }
        let close = CancellationToken::new();
        let requested = Arc::new(AtomicBool::new(false));
        let id = s.id();
        if authenticated {
            s.counts(ip).authenticated += 1;
        } else {
            let client_full = s.counts(ip).unauthenticated >= l.max_unauthenticated_per_client;
            if client_full && !s.drop_oldest_silent(Some(ip)) {
                return Err(Refusal::UnauthenticatedFull);
            }
            let all_full = s.unauthenticated.len() >= l.max_unauthenticated;
            if all_full && !s.drop_oldest_silent(None) {
                return Err(Refusal::UnauthenticatedFull);
            }
            s.counts(ip).unauthenticated += 1;
            let waiting = Waiting {
                ip,
                close: close.clone(),
                requested: requested.clone(),
            };
            s.unauthenticated.insert(id, waiting);
        }
        s.established += 1;
        Ok(Arc::new(Slot {
            admission: self.clone(),
            ip,
            id,
            close,
            requested,
            authenticated: AtomicBool::new(authenticated),
        }))
    }

    /// How many handshakes and connections are held now (for tests and logs).
    #[cfg(test)]
    fn held(&self) -> (usize, usize, usize) {
        let s = self.state.locked();
        (s.handshakes.len(), s.established, s.unauthenticated.len())
    }
}

/// A handshake in flight; dropping it ends its count.
pub(super) struct Handshake {
    admission: Arc<Admission>,
    id: u64,
    /// Fires when this handshake is dropped for a newer one.
    pub close: CancellationToken,
}

impl Drop for Handshake {
    fn drop(&mut self) {
        let mut s = self.admission.state.locked();
        if let Some((ip, _)) = s.handshakes.remove(&self.id) {
            s.counts(ip).handshakes -= 1;
            s.forget_if_empty(ip);
        }
    }
}

/// A connection's place under the caps, held as long as the connection or a stream
/// it was upgraded to lives.
pub(super) struct Slot {
    admission: Arc<Admission>,
    ip: IpAddr,
    id: u64,
    /// Fires when this connection is closed for a newer one.
    close: CancellationToken,
    requested: Arc<AtomicBool>,
    authenticated: AtomicBool,
}

impl Slot {
    /// Fires when this connection is closed to make room.
    pub(super) fn closed(&self) -> &CancellationToken {
        &self.close
    }

    /// A request came on this connection: it is no longer closed for newer ones.
    pub(super) fn requested(&self) {
        self.requested.store(true, Ordering::Relaxed);
    }

    /// A request on this connection authenticated as `user`: the connection moves
    /// from the unauthenticated budget to its client's own count, when that has room.
    pub(super) fn authenticated(&self, user: &str) {
        if self.authenticated.load(Ordering::Relaxed) {
            return;
        }
        let mut s = self.admission.state.locked();
        if s.counts(self.ip).authenticated >= self.admission.limits.max_connections_per_client {
            tracing::debug!(peer = %self.ip, user, "a connection authenticated, but its client holds its share of authenticated connections; it stays in the unauthenticated budget");
            return;
        }
        if s.unauthenticated.remove(&self.id).is_some() {
            let counts = s.counts(self.ip);
            counts.unauthenticated -= 1;
            counts.authenticated += 1;
            self.authenticated.store(true, Ordering::Relaxed);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.admission.state.locked();
        if self.authenticated.load(Ordering::Relaxed) {
            s.counts(self.ip).authenticated -= 1;
        } else if s.unauthenticated.remove(&self.id).is_some() {
            s.counts(self.ip).unauthenticated -= 1;
        } else {
            // Already closed for a newer connection: its counts went then.
            return;
        }
        s.established -= 1;
        s.forget_if_empty(self.ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            max_connections: 10,
            max_handshakes: 4,
            max_handshakes_per_client: 2,
            max_connections_per_client: 6,
            max_unauthenticated: 4,
            max_unauthenticated_per_client: 2,
        }
    }

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, n])
    }

    #[test]
    fn the_oldest_handshake_makes_room_per_client_and_in_all() {
        let a = Admission::new(limits());
        let (h1, h2) = (a.handshake(ip(2)), a.handshake(ip(2)));
        let h3 = a.handshake(ip(2));
        assert!(h1.close.is_cancelled() && !h2.close.is_cancelled());
        assert_eq!(a.held().0, 2);
        let (h4, h5) = (a.handshake(ip(3)), a.handshake(ip(4)));
        assert!(!h2.close.is_cancelled() && a.held().0 == 4);
        let _h6 = a.handshake(ip(5));
        assert!(h2.close.is_cancelled() && !h3.close.is_cancelled());
        drop((h1, h2, h3, h4, h5));
        assert_eq!(a.held().0, 1);
    }

    #[test]
    fn unauthenticated_connections_have_a_small_budget_of_their_own() {
        let a = Admission::new(limits());
        let s1 = a.admit(ip(2), false).unwrap();
        let s2 = a.admit(ip(2), false).unwrap();
        s2.requested();
        // The client's share is full: its silent one goes for the new one.
        let s3 = a.admit(ip(2), false).unwrap();
        assert!(s1.closed().is_cancelled());
        s3.requested();
        assert_eq!(
            a.admit(ip(2), false).err(),
            Some(Refusal::UnauthenticatedFull)
        );
        let s4 = a.admit(ip(3), false).unwrap();
        let s5 = a.admit(ip(4), false).unwrap();
        s5.requested();
        // Everyone's budget is full: the oldest silent one (s4) goes.
        let _s6 = a.admit(ip(5), false).unwrap();
        assert!(s4.closed().is_cancelled());
        // Authenticated clients are not held back by the unauthenticated budget.
        let authed: Vec<_> = (0..6).map(|_| a.admit(ip(9), true).unwrap()).collect();
        assert_eq!(a.admit(ip(9), true).err(), Some(Refusal::ClientFull));
        drop(authed);
        drop((s1, s2, s3, s4, s5));
        assert_eq!(a.held(), (0, 1, 1));
    }

    #[test]
    fn a_connection_that_authenticates_leaves_the_unauthenticated_budget() {
        let a = Admission::new(limits());
        let s = a.admit(ip(2), false).unwrap();
        s.requested();
        s.authenticated("metrics-server");
        assert_eq!(a.held(), (0, 1, 0));
        let _more: Vec<_> = (0..2).map(|_| a.admit(ip(2), false).unwrap()).collect();
        drop(s);
        assert_eq!(a.held(), (0, 2, 2));
    }

    #[test]
    fn the_overall_cap_holds_and_authenticated_clients_push_out_silent_ones() {
        let mut l = limits();
        l.max_connections = 3;
        let a = Admission::new(l);
        let _x = a.admit(ip(2), true).unwrap();
        let _y = a.admit(ip(3), true).unwrap();
        let silent = a.admit(ip(4), false).unwrap();
        assert_eq!(a.admit(ip(5), false).err(), Some(Refusal::Full));
        let _z = a.admit(ip(6), true).unwrap();
        assert!(silent.closed().is_cancelled());
        assert_eq!(a.admit(ip(6), true).err(), Some(Refusal::Full));
        drop(silent);
        assert_eq!(a.held(), (0, 3, 0));
    }
}
