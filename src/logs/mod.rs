//! Container logs (kubelet's `logs` package and its legacy symlinks): the log
//! manager that rotates each running container's log by size and count, and the
//! `/var/log/containers` links log shippers read, and the reader that turns a
//! log file back into what the container wrote (`/containerLogs`), followed through
//! one shared inotify watcher (`watch.rs`) instead of a thread per stream.

mod read;
mod rotation;
mod symlinks;
mod watch;

pub(crate) use read::{Follow, LogOptions, LogReader, container_log_file};
pub(crate) use rotation::{LogManager, RotatePolicy, remove_container_logs};
pub(crate) use symlinks::{LinkOf, create_log_link, remove_dangling_log_links, remove_log_link};
pub(crate) use watch::LogWatch;
