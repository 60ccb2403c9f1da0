//! The docker backend: every database, the proxy and every mover in its own container (started and removed through testcontainers) on one private network per run, published on 127.0.0.1 only.
//!
//! Images are settings (environment variables, see `Images`): by default the locally built
//! `chaos-postgres:15` and `chaos-runtime:bookworm` (scripts/build-images); nothing is ever
//! pulled. The chaos binaries are bind-mounted read-only into the proxy and mover containers
//! (`/opt/chaos/bin`, `/opt/chaos/mover`) rather than baked into an image, so a rebuilt binary is
//! used at once and the images never go stale. Every container and the network carry the labels
//! `chaos.harness=1` and `chaos.run=<run id>`; `chaos down --all` removes leftovers by label.

mod cluster;
mod containers;
pub mod engine;
mod lock;
mod lock_box;
mod lock_net;
mod lock_redis;
mod lock_zk;
mod movers;
mod standby;
mod supervised;
#[cfg(test)]
mod tests;

pub use cluster::DockerCluster;
pub use containers::{host_pid, Images, RUN_LABEL};
pub use lock::DockerEtcd;
pub use lock_redis::DockerRedis;
pub use lock_zk::DockerZk;
pub use movers::{DockerLauncher, DockerMover, DockerSignaller};
