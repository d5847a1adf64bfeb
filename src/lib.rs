//! oxlet: a kubelet-like pod lifecycle engine.
//!
//! Data flows one way: pod sources (`config`) → merged updates → the sync loop
//! (`syncloop`) → one pod worker per pod → the runtime (`kuberuntime`, over the CRI client `cri`) → containerd.
//! `pleg` watches the runtime and wakes pod workers; `status` turns what we see into
//! kubelet-faithful pod status; `server` serves read-only views.

mod advisor;
mod agent;
mod allocation;
mod backoff;
mod census;
mod cm;
mod config;
pub mod containerd;
mod contracts;
mod cpumanager;
mod credentials;
mod cri;
mod devicemanager;
mod dra;
mod duration;
mod events;
mod eviction;
mod flag_text;
// The plugin protocols' gRPC over unix sockets.
#[doc(hidden)]
pub mod fuzzing;
mod grpc_unix;
mod hash;
mod heap;
mod http_get;
mod images;
mod klog;
mod koord;
mod koordapi;
mod kubeclient;
mod kuberuntime;
mod locks;
mod logging;
mod logs;
mod memorymanager;
mod metriccache;
mod metrics;
mod node;
mod nodeshutdown;
mod objects;
mod options;
mod percent;
mod pleg;
mod pluginwatcher;
mod pod;
mod podenv;
mod podresources;
mod private_file;
mod prober;
mod procfs;
mod quantity;
mod resourcemanager;
mod rlimit;
mod safe_path;
mod server;
mod stats;
mod status;
mod syncloop;
mod sysfs;
mod tasks;
mod timeline;
mod tls;
mod topology;
mod version;
mod volumes;
mod yaml;

// The library's public surface: what the binary (`src/main.rs`) and the integration tests
// and benchmarks (the managed containerd as a test bed) use. Everything else is crate-private.
pub use agent::{run, timeline_command};
pub use heap::limit_arenas as limit_heap_arenas;
/// The metric advisor's benchmark handles (`benches/advisor.rs`); not an API.
#[doc(hidden)]
pub mod advisor_bench {
    pub use crate::advisor::{CollectorBench, FilledCache};
}
pub use logging::{LogFormat, init as init_logging};
pub use options::{Options, load_or_exit};
