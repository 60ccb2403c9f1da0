//! What every container of the docker backend shares: image settings, names and labels, ports on loopback, the mounted binaries, bounded engine calls, logs and signals.

pub(super) use super::engine::{Engine, CALL_TIMEOUT};
pub(super) use crate::backend::gate::{self, Gate, NotStarted, Waited};
pub(super) use crate::backend::{
    ClusterSpec, MoverProgram, MoverSpec, MoverStdout, StopMode, DOCKER_LABEL, START_TIMEOUT,
    STOP_TIMEOUT,
};
pub(super) use std::collections::{BTreeMap, HashMap};
pub(super) use std::path::{Path, PathBuf};
pub(super) use std::sync::atomic::{AtomicUsize, Ordering};
pub(super) use std::sync::Arc;
pub(super) use std::time::{Duration, Instant};
pub(super) use testcontainers::bollard::errors::Error as DockerError;
pub(super) use testcontainers::bollard::models::{HostConfig, PortBinding};
pub(super) use testcontainers::bollard::query_parameters::{
    InspectContainerOptions, KillContainerOptions, LogsOptions,
};
pub(super) use testcontainers::bollard::Docker;
pub(super) use testcontainers::core::{AccessMode, ContainerPort, Mount};
pub(super) use testcontainers::runners::AsyncRunner;
pub(super) use testcontainers::{ContainerAsync, ContainerRequest, GenericImage, ImageExt};

/// Label carrying the run id, beside `DOCKER_LABEL`.
pub const RUN_LABEL: &str = "chaos.run";
/// Postgres's port inside its container.
pub(super) const PG_PORT: u16 = 5432;
/// The Toxiproxy API port inside the proxy container.
pub(super) const PROXY_API_PORT: u16 = 8474;
/// Link number i listens on this + i inside the proxy container.
pub(super) const FIRST_LINK_PORT: u16 = 20000;
/// Where the chaos binaries (the proxy's `chaos`, a shell mover's PATH) are mounted.
pub(super) const BIN_MOUNT: &str = "/opt/chaos/bin";
/// Where the reference mover's folder is mounted.
pub(super) const MOVER_MOUNT: &str = "/opt/chaos/mover";
/// Cap on a container log copied into the run's logs folder.
pub(super) const LOG_COPY_LIMIT_BYTES: usize = 64 << 20;

/// Image names: settings, so users with a registry can point at `postgres:16` and
/// `ghcr.io/shopify/toxiproxy` (which must already be on the engine: nothing is pulled).
#[derive(Debug, Clone)]
pub struct Images {
    /// `CHAOS_POSTGRES_IMAGE`, default `chaos-postgres:15`.
    pub postgres: String,
    /// `CHAOS_PROXY_IMAGE`, default `chaos-runtime:bookworm` running `chaos proxy`; any other
    /// image is run with its own command and must serve the Toxiproxy API on 8474 (as
    /// `ghcr.io/shopify/toxiproxy` does).
    pub proxy: String,
    /// `CHAOS_MOVER_IMAGE`, default `chaos-runtime:bookworm`: a bookworm userland for the
    /// bind-mounted mover (and libfaketime for clock faults).
    pub mover: String,
}

pub(super) const DEFAULT_POSTGRES_IMAGE: &str = "chaos-postgres:15";
pub(super) const DEFAULT_RUNTIME_IMAGE: &str = "chaos-runtime:bookworm";

impl Images {
    pub fn from_env() -> Images {
        let var = |k: &str, d: &str| {
            std::env::var(k)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(|| d.to_string())
        };
        Images {
            postgres: var("CHAOS_POSTGRES_IMAGE", DEFAULT_POSTGRES_IMAGE),
            proxy: var("CHAOS_PROXY_IMAGE", DEFAULT_RUNTIME_IMAGE),
            mover: var("CHAOS_MOVER_IMAGE", DEFAULT_RUNTIME_IMAGE),
        }
    }

    /// Whether the proxy image is ours (so it runs the bind-mounted `chaos proxy`).
    pub fn proxy_is_ours(&self) -> bool {
        self.proxy.starts_with("chaos-runtime")
    }
}

/// `name[:tag]` -> GenericImage (the tag after the last ':' that follows the last '/').
pub(super) fn generic(image: &str) -> GenericImage {
    let slash = image.rfind('/').map(|i| i + 1).unwrap_or(0);
    match image[slash..].rfind(':') {
        Some(i) => GenericImage::new(&image[..slash + i], &image[slash + i + 1..]),
        None => GenericImage::new(image, "latest"),
    }
}

/// A container or network name from the run id: docker allows `[a-zA-Z0-9][a-zA-Z0-9_.-]*`.
pub(super) fn docker_name(run_id: &str, what: &str) -> String {
    let clean = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect::<String>()
    };
    format!("chaos-{}-{}", clean(run_id), clean(what))
}

pub(super) fn labels(run_id: &str) -> [(String, String); 2] {
    [
        (DOCKER_LABEL.to_string(), "1".to_string()),
        (RUN_LABEL.to_string(), run_id.to_string()),
    ]
}

/// Bind each container port to 127.0.0.1:<host port> and publish nothing else (testcontainers
/// would otherwise publish every exposed port on all interfaces).
pub(super) fn publish_on_loopback(
    req: ContainerRequest<GenericImage>,
    ports: Vec<(u16, u16)>,
) -> ContainerRequest<GenericImage> {
    req.with_host_config_modifier(move |hc: &mut HostConfig| {
        hc.publish_all_ports = Some(false);
        hc.port_bindings = Some(
            ports
                .iter()
                .map(|(container, host)| {
                    (
                        format!("{container}/tcp"),
                        Some(vec![PortBinding {
                            host_ip: Some("127.0.0.1".into()),
                            host_port: Some(host.to_string()),
                        }]),
                    )
                })
                .collect(),
        );
    })
}

/// The `chaos` binary to run as the proxy: this executable, or (in test binaries) the one
/// cargo built beside it; `CHAOS_BIN` overrides.
pub(super) fn chaos_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("CHAOS_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    if exe.file_name().is_some_and(|n| n == "chaos") {
        return Ok(exe);
    }
    let dir = exe.parent().unwrap_or(Path::new("."));
    for c in [dir.join("chaos"), dir.join("../chaos")] {
        if c.is_file() {
            return Ok(c);
        }
    }
    anyhow::bail!(
        "no chaos binary beside {}: build it (cargo build --release -p chaos-harness) or set CHAOS_BIN",
        exe.display()
    )
}

/// A file's real folder and name (bind mounts need the real path).
pub(super) fn folder_and_name(path: &Path) -> anyhow::Result<(PathBuf, String)> {
    let real = path
        .canonicalize()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let dir = real.parent().unwrap_or(Path::new("/")).to_path_buf();
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok((dir, name))
}

pub(super) fn is_404(e: &DockerError) -> bool {
    matches!(
        e,
        DockerError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// Run one engine call with the backend's time limit; errors say what failed.
pub(super) async fn bounded<T>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, DockerError>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => anyhow::bail!("{what}: {e}"),
        Err(_) => anyhow::bail!(
            "{what}: no answer from the Docker engine in {} s",
            CALL_TIMEOUT.as_secs()
        ),
    }
}

/// Fail early, with the fix, when an image is missing (testcontainers would try to pull it).
pub(super) async fn require_image(docker: &Docker, image: &str) -> anyhow::Result<()> {
    match tokio::time::timeout(CALL_TIMEOUT, docker.inspect_image(image)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if is_404(&e) => anyhow::bail!(
            "image {image} is not on this Docker engine and nothing is pulled: run scripts/build-images (first build takes a few minutes), or load the image yourself"
        ),
        Ok(Err(e)) => anyhow::bail!("inspect image {image}: {e}"),
        Err(_) => anyhow::bail!("inspect image {image}: no answer from the Docker engine"),
    }
}

/// Whether a container's main process is running, and its exit code if not. `None`: gone.
pub(super) async fn container_state(docker: &Docker, id: &str) -> Option<(bool, i64)> {
    let st = inspect(docker, id).await?.state.unwrap_or_default();
    Some((st.running.unwrap_or(false), st.exit_code.unwrap_or(-1)))
}

/// What the engine says of container `id`, bounded (None: no answer, or gone).
pub(super) async fn inspect(
    docker: &Docker,
    id: &str,
) -> Option<testcontainers::bollard::models::ContainerInspectResponse> {
    tokio::time::timeout(
        CALL_TIMEOUT,
        docker.inspect_container(id, None::<InspectContainerOptions>),
    )
    .await
    .ok()?
    .ok()
}

/// The container's main process as this host numbers it, when the engine runs on this host
/// (the process's cgroup names the container): a signal can then go to it directly.
pub async fn host_pid(docker: &Docker, id: &str) -> Option<i32> {
    let info = inspect(docker, id).await?;
    let pid = i32::try_from(info.state?.pid?).ok().filter(|p| *p > 0)?;
    runs_in(pid, id).then_some(pid)
}

/// Whether process `pid` of this host is in container `id` (checked again before each signal,
/// so a pid the kernel gave to another process after the mover's exit is never signalled).
pub(super) fn runs_in(pid: i32, id: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(id))
}

/// Copy a container's whole log (stdout and stderr) into `path`, bounded.
pub(super) async fn copy_log(docker: &Docker, id: &str, path: &Path) {
    use futures_util::StreamExt;
    let opts = LogsOptions {
        follow: false,
        stdout: true,
        stderr: true,
        since: 0,
        until: 0,
        timestamps: false,
        tail: "all".into(),
    };
    let mut stream = docker.logs(id, Some(opts));
    let mut text = Vec::new();
    let copy = async {
        while let Some(Ok(chunk)) = stream.next().await {
            text.extend_from_slice(&chunk.into_bytes());
            if text.len() > LOG_COPY_LIMIT_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(CALL_TIMEOUT, copy).await;
    let _ = std::fs::write(path, &text);
}

/// The label an image carries when its main process stops and starts postgres by signals
/// (ours: images/postgres/entrypoint.sh), so the container stays up across a database stop.
pub(super) const SIGNALS_LABEL: &str = "chaos.postgres.signals";

/// Its supervisor lets a stop's signal also go to postgres itself, after its own (USR1, USR2):
/// the harness signals the postmaster from this host, and the stop lands at that signal.
pub(super) const DIRECT_LABEL: &str = "chaos.postgres.direct";

/// Whether `image` says (by `SIGNALS_LABEL`) that its main process takes the stop/start signals.
pub(super) async fn takes_db_signals(docker: &Docker, image: &str) -> bool {
    has_label(docker, image, SIGNALS_LABEL).await
}

/// The container's address on its (one) network.
pub(super) async fn container_ip(docker: &Docker, id: &str) -> Option<String> {
    inspect(docker, id)
        .await?
        .network_settings?
        .networks?
        .into_values()
        .find_map(|n| n.ip_address.filter(|ip| !ip.is_empty()))
}

/// Whether `image` carries `label`.
pub(super) async fn has_label(docker: &Docker, image: &str, label: &str) -> bool {
    match tokio::time::timeout(CALL_TIMEOUT, docker.inspect_image(image)).await {
        Ok(Ok(info)) => info
            .config
            .and_then(|c| c.labels)
            .is_some_and(|l| l.contains_key(label)),
        _ => false,
    }
}

/// Where a database container keeps its data directory.
///
/// `tmpfs` (the default with an image that stops and starts postgres inside its container):
/// memory, kept as long as the container, which the supervisor keeps up through every database
/// stop and crash. `volume`: a volume per container on the engine's disk, removed with it (the
/// only choice for an image that restarts as a container, such as postgres:16). On a volume
/// the disk's load moves April off its figures (docs/docker.md has the measurements).
/// `CHAOS_DOCKER_PG_DATA=tmpfs|volume` chooses.
pub(super) fn pg_data_on_tmpfs(
    setting: Option<&str>,
    image: &str,
    supervised: bool,
) -> anyhow::Result<bool> {
    match setting {
        None | Some("") => Ok(supervised),
        Some("volume") => Ok(false),
        Some("tmpfs") if supervised => Ok(true),
        Some("tmpfs") => anyhow::bail!(
            "CHAOS_DOCKER_PG_DATA=tmpfs needs a postgres image that stops and starts inside its container (label {SIGNALS_LABEL}); {image} restarts as a container and would lose its data: use volume"
        ),
        Some(other) => anyhow::bail!("CHAOS_DOCKER_PG_DATA={other}: expected tmpfs or volume"),
    }
}

/// The data directory of our image and of the official postgres images.
pub(super) const PG_DATA_DIR: &str = "/var/lib/postgresql/data";

/// Send signal `sig` ("SIGHUP", or a number as "1") to a container's main process.
pub(super) async fn signal(docker: &Docker, id: &str, sig: &str) -> Result<(), DockerError> {
    docker
        .kill_container(id, Some(KillContainerOptions { signal: sig.into() }))
        .await
}

/// How long the harness waits for a supervised database's stop or start to show before it
/// sends the signal again.
pub(super) const RESIGNAL: Duration = Duration::from_millis(300);
