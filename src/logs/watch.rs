//! Wake-ups for followed logs without a thread each: one inotify instance for all
//! of them (the kernel allows few instances per user, many watches), one watch per
//! container log directory shared by every follower of it, and each follower told by
//! a `watch` channel when its directory changed.
//!
//! kubelet's follower (`kuberuntime/logs.waitLogs`) waits the same way, with fsnotify
//! on the file and a forced look every second; here the directory is watched, so a
//! rotation's new file is seen at once as well as each write. There is no reader
//! task: whichever follower is waiting when the inotify descriptor becomes readable
//! drains it and wakes the others.

use std::collections::HashMap;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

use crate::locks::Locked as _;

/// What a follower does without an inotify watch: look this often.
const POLL_WITHOUT_WATCH: Duration = Duration::from_millis(250);

/// One watched directory: its followers' channel and how many hold it.
struct Watched {
    tx: watch::Sender<()>,
    users: usize,
}

/// The node's one inotify instance for followed logs.
pub(crate) struct LogWatch {
    fd: Option<AsyncFd<OwnedFd>>,
    dirs: Mutex<HashMap<i32, Watched>>,
}

impl LogWatch {
    /// A watcher; without inotify (instances used up, or no runtime reactor) each
    /// follower polls instead.
    pub(crate) fn new() -> Arc<LogWatch> {
        // `new` is deprecated for fds the AsyncFd does not own; it owns this OwnedFd,
        // and the unsafe `register` is not for oxlet (it forbids `unsafe`).
        #[allow(deprecated, reason = "sound: the AsyncFd owns the OwnedFd")]
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
            .map_err(io::Error::from)
            .and_then(AsyncFd::new);
        let fd = match fd {
            Ok(fd) => Some(fd),
            Err(e) => {
                tracing::warn!(error = %e, "no inotify for followed logs; they poll every 250ms");
                None
            }
        };
        let w = Arc::new(LogWatch {
            fd,
            dirs: Mutex::new(HashMap::new()),
        });
        crate::census::watch("logs.watchedDirs", &w, |w| w.dirs.locked().len());
        w
    }

    /// Watches `dir` (never through a symlink) for as long as the answer lives.
    pub(crate) fn watch(self: &Arc<Self>, dir: &Path) -> DirWatch {
        let added = self.fd.as_ref().map(|fd| {
            let flags = WatchFlags::MODIFY
                | WatchFlags::CREATE
                | WatchFlags::MOVED_TO
                | WatchFlags::MOVED_FROM
                | WatchFlags::DELETE
                | WatchFlags::DELETE_SELF
                | WatchFlags::MOVE_SELF
                | WatchFlags::DONT_FOLLOW
                | WatchFlags::ONLYDIR;
            // Under the lock: two followers of one directory get the same descriptor.
            let mut dirs = self.dirs.locked();
            let wd = inotify::add_watch(fd.get_ref(), dir, flags)?;
            let w = dirs.entry(wd).or_insert_with(|| Watched {
                tx: watch::Sender::new(()),
                users: 0,
            });
            w.users += 1;
            Ok::<_, rustix::io::Errno>((wd, w.tx.subscribe()))
        });
        match added {
            Some(Ok((wd, rx))) => DirWatch {
                owner: self.clone(),
                wd: Some(wd),
                rx: Some(rx),
            },
            Some(Err(e)) => {
                tracing::info!(dir = %dir.display(), error = %e, "cannot watch a log directory; its follower polls every 250ms");
                self.unwatched()
            }
            None => self.unwatched(),
        }
    }

    fn unwatched(self: &Arc<Self>) -> DirWatch {
        DirWatch {
            owner: self.clone(),
            wd: None,
            rx: None,
        }
    }

    /// Reads every queued event and wakes the followers of each directory named;
    /// ends with `WouldBlock` once the queue is empty (so readiness is cleared).
    fn drain(&self, fd: &OwnedFd) -> io::Result<()> {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(fd, &mut buf);
        let mut woken = Vec::new();
        let mut overflow = false;
        let end = loop {
            match reader.next() {
                Ok(ev) if ev.events().contains(ReadFlags::QUEUE_OVERFLOW) => overflow = true,
                Ok(ev) => woken.push(ev.wd()),
                Err(e) => break io::Error::from(e),
            }
        };
        let dirs = self.dirs.locked();
        if overflow {
            dirs.values().for_each(|w| w.tx.send_replace(()));
        }
        for wd in woken {
            if let Some(w) = dirs.get(&wd) {
                w.tx.send_replace(());
            }
        }
        Err(end)
    }
}

/// A follower's hold on its directory's watch; the watch goes with its last holder.
pub(crate) struct DirWatch {
    owner: Arc<LogWatch>,
    wd: Option<i32>,
    rx: Option<watch::Receiver<()>>,
}

impl DirWatch {
    /// Marks what happened so far as seen: `changed` waits for what comes after.
    pub(crate) fn mark_seen(&mut self) {
        if let Some(rx) = self.rx.as_mut() {
            rx.borrow_and_update();
        }
    }

    /// Waits until the directory changed since `mark_seen`, or at most `within`.
    pub(crate) async fn changed(&mut self, within: Duration) {
        let (Some(rx), Some(fd)) = (self.rx.as_mut(), self.owner.fd.as_ref()) else {
            tokio::time::sleep(within.min(POLL_WITHOUT_WATCH)).await;
            return;
        };
        let tick = tokio::time::sleep(within);
        tokio::pin!(tick);
        loop {
            tokio::select! {
                r = rx.changed() => {
                    if r.is_err() {
                        // The sender is gone only with the entry; poll out the wait.
                        tick.as_mut().await;
                    }
                    return;
                }
                () = tick.as_mut() => return,
                g = fd.readable() => {
                    let Ok(mut g) = g else {
                        tick.as_mut().await;
                        return;
                    };
                    let owner = &self.owner;
                    let _ = g.try_io(|fd| owner.drain(fd.get_ref()));
                }
            }
        }
    }
}

impl Drop for DirWatch {
    fn drop(&mut self) {
        let (Some(wd), Some(fd)) = (self.wd, self.owner.fd.as_ref()) else {
            return;
        };
        let mut dirs = self.owner.dirs.locked();
        let Some(w) = dirs.get_mut(&wd) else { return };
        w.users -= 1;
        if w.users == 0 {
            dirs.remove(&wd);
            // Gone already when the directory was removed; nothing to undo then.
            let _ = inotify::remove_watch(fd.get_ref(), wd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn a_write_wakes_every_follower_of_the_directory_and_the_watch_goes_with_them() {
        let dir = tempfile::tempdir().unwrap();
        let w = LogWatch::new();
        let mut a = w.watch(dir.path());
        let mut b = w.watch(dir.path());
        assert_eq!(w.dirs.locked().len(), 1, "one watch for one directory");
        a.mark_seen();
        b.mark_seen();
        let file = dir.path().join("0.log");
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            std::fs::write(file, "x\n").unwrap();
        });
        let t = Instant::now();
        tokio::join!(
            a.changed(Duration::from_secs(5)),
            b.changed(Duration::from_secs(5))
        );
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        writer.await.unwrap();
        drop(a);
        assert_eq!(w.dirs.locked().len(), 1);
        drop(b);
        assert!(w.dirs.locked().is_empty());
    }

    #[tokio::test]
    async fn a_symlinked_directory_is_not_watched() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        let w = LogWatch::new();
        let d = w.watch(&dir.path().join("link"));
        assert!(d.wd.is_none());
        assert!(w.dirs.locked().is_empty());
    }
}
