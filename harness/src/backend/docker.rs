//! The docker backend: every database, the proxy and every mover in its own container on a private network (not built yet: every entry point says so).

use super::{ClusterSpec, MoverSpec, MoverStdout, StopMode};
use std::time::Duration;

const NOT_BUILT: &str = "the docker backend is not built yet; use --backend process";

pub struct DockerCluster;

impl DockerCluster {
    pub async fn start(_spec: &ClusterSpec) -> anyhow::Result<DockerCluster> {
        anyhow::bail!(NOT_BUILT)
    }
    pub fn describe(&self) -> String {
        String::new()
    }
    pub fn admin_url(&self, _node: &str) -> String {
        String::new()
    }
    pub fn upstream(&self, _node: &str) -> String {
        String::new()
    }
    pub fn proxy_api(&self) -> String {
        String::new()
    }
    pub fn link_listen(&self, _link: &str, _index: usize) -> String {
        String::new()
    }
    pub fn client_addr(&self, _link: &str, reported: &str, _for_harness: bool) -> String {
        reported.to_string()
    }
    pub async fn stop_node(&mut self, _node: &str, _mode: StopMode) -> anyhow::Result<()> {
        anyhow::bail!(NOT_BUILT)
    }
    pub async fn start_node(&mut self, _node: &str) -> anyhow::Result<Duration> {
        anyhow::bail!(NOT_BUILT)
    }
    pub fn last_start(&self, _node: &str) -> Duration {
        Duration::ZERO
    }
    pub fn start_time(&self) -> Duration {
        Duration::ZERO
    }
    pub fn launcher(&self) -> DockerLauncher {
        DockerLauncher
    }
    pub async fn stop_all(&mut self) {}
}

#[derive(Clone)]
pub struct DockerLauncher;

impl DockerLauncher {
    pub async fn spawn(&self, _spec: &MoverSpec) -> anyhow::Result<(DockerMover, MoverStdout)> {
        anyhow::bail!(NOT_BUILT)
    }
}

pub struct DockerMover;

impl DockerMover {
    pub fn signaller(&self) -> DockerSignaller {
        DockerSignaller
    }
    pub async fn wait(&mut self) -> Option<i32> {
        None
    }
}

#[derive(Clone)]
pub struct DockerSignaller;

impl DockerSignaller {
    pub async fn signal(&self, _sig: i32, _freezer: bool) -> anyhow::Result<()> {
        anyhow::bail!(NOT_BUILT)
    }
    pub fn kill_now(&self) {}
}
