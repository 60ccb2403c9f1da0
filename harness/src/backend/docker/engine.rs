//! The Docker engine connection: one bollard client at the engine's own API version, and a local socket that lets testcontainers (which always speaks API 1.53) talk to older engines.
//!
//! testcontainers 0.28 builds its bollard client at bollard's default API version (1.53, Docker
//! 29) and never negotiates; an older engine (Debian 12's 20.10 speaks 1.41, Docker 28 speaks
//! 1.51) answers every such request with "client version 1.53 is too new". When the engine is
//! older, the harness serves a unix socket that rewrites `/v1.53/` to the engine's own version in
//! each request path and forwards the request unchanged otherwise, and points testcontainers at
//! it through `DOCKER_HOST` (set once, before testcontainers' first call).

use std::path::{Path, PathBuf};
use std::time::Duration;
use testcontainers::bollard::{ClientVersion, Docker, API_DEFAULT_VERSION};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Every call to the engine is bounded by this (bollard's own per-request timeout).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `docker info`-like probes wait before saying no engine answers.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The engine this process talks to.
pub struct Engine {
    /// Our own client, at the engine's version (or 1.53 if the engine is newer).
    pub docker: Docker,
    /// The engine's API version, e.g. "1.41".
    pub api_version: String,
    /// Where testcontainers is pointed (the engine itself, or the rewriting socket).
    pub testcontainers_host: String,
}

static ENGINE: tokio::sync::OnceCell<Engine> = tokio::sync::OnceCell::const_new();
/// The engine's socket and API version, for removals from Drop (which make their own client).
pub static ENGINE_FOR_DROP: std::sync::OnceLock<(PathBuf, String)> = std::sync::OnceLock::new();

/// The engine's unix socket: `DOCKER_HOST=unix://...` or the default.
fn engine_socket() -> anyhow::Result<PathBuf> {
    match std::env::var("CHAOS_DOCKER_HOST")
        .or_else(|_| std::env::var("DOCKER_HOST"))
        .ok()
    {
        None => Ok(PathBuf::from("/var/run/docker.sock")),
        Some(h) if h.is_empty() => Ok(PathBuf::from("/var/run/docker.sock")),
        Some(h) => match h.strip_prefix("unix://") {
            Some(p) => Ok(PathBuf::from(p)),
            None => anyhow::bail!(
                "DOCKER_HOST={h}: the docker backend talks to a local engine over a unix socket only (it bind-mounts the chaos binaries): unset DOCKER_HOST or point it at unix:///..."
            ),
        },
    }
}

/// One unversioned `GET /version` on the socket: the engine's API version ("1.41").
pub async fn probe_api_version(socket: &Path) -> anyhow::Result<String> {
    let no_engine = |why: String| {
        anyhow::anyhow!(
            "no Docker engine answers at {} ({why}): start dockerd, or use --backend process",
            socket.display()
        )
    };
    let work = async {
        let mut s = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| no_engine(e.to_string()))?;
        s.write_all(b"GET /version HTTP/1.0\r\nHost: docker\r\n\r\n")
            .await
            .map_err(|e| no_engine(e.to_string()))?;
        let mut buf = Vec::new();
        // HTTP/1.0: the engine closes the connection after the answer; /version is small.
        s.take(1 << 20)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| no_engine(e.to_string()))?;
        let text = String::from_utf8_lossy(&buf);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .ok_or_else(|| no_engine("no HTTP answer to GET /version".into()))?;
        let v: serde_json::Value = serde_json::from_str(body.trim())
            .map_err(|e| no_engine(format!("GET /version answered no JSON: {e}")))?;
        v["ApiVersion"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| no_engine("GET /version has no ApiVersion".into()))
    };
    tokio::time::timeout(PROBE_TIMEOUT, work)
        .await
        .map_err(|_| no_engine(format!("no answer in {} s", PROBE_TIMEOUT.as_secs())))?
}

fn parse_version(v: &str) -> Option<ClientVersion> {
    let (a, b) = v.split_once('.')?;
    Some(ClientVersion {
        major_version: a.parse().ok()?,
        minor_version: b.parse().ok()?,
    })
}

/// A fresh client at `version` (used from other runtimes too: a client is bound to none).
pub fn client(socket: &Path, version: &str) -> anyhow::Result<Docker> {
    let v = parse_version(version).unwrap_or(ClientVersion {
        major_version: API_DEFAULT_VERSION.major_version,
        minor_version: API_DEFAULT_VERSION.minor_version,
    });
    let v = if v < *API_DEFAULT_VERSION {
        v
    } else {
        API_DEFAULT_VERSION.clone()
    };
    Docker::connect_with_unix(&socket.display().to_string(), CALL_TIMEOUT.as_secs(), &v)
        .map_err(|e| anyhow::anyhow!("docker client for {}: {e}", socket.display()))
}

/// The engine, connected once per process (and the rewriting socket started if needed).
pub async fn engine() -> anyhow::Result<&'static Engine> {
    ENGINE
        .get_or_try_init(|| async {
            let socket = engine_socket()?;
            let api_version = probe_api_version(&socket).await?;
            let docker = client(&socket, &api_version)?;
            let ours = parse_version(&api_version).ok_or_else(|| {
                anyhow::anyhow!("the engine reports API version {api_version:?}, which is not N.M")
            })?;
            let testcontainers_host = if ours < *API_DEFAULT_VERSION {
                let shim = start_version_shim(&socket, &api_version).await?;
                format!("unix://{}", shim.display())
            } else {
                format!("unix://{}", socket.display())
            };
            // testcontainers reads DOCKER_HOST when it builds its client, on its first call,
            // which comes after this (every container start goes through `engine()` first).
            std::env::set_var("DOCKER_HOST", &testcontainers_host);
            let _ = ENGINE_FOR_DROP.set((socket.clone(), api_version.clone()));
            anyhow::Ok(Engine {
                docker,
                api_version,
                testcontainers_host,
            })
        })
        .await
}

/// Serve a unix socket that forwards every request to the engine, with the API version in its
/// path lowered to the engine's. One upstream connection per request keeps it simple; upgrades
/// (attach, exec) are not forwarded (the backend uses neither).
async fn start_version_shim(engine: &Path, engine_version: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::temp_dir().join(format!("chaos-docker-{}.sock", std::process::id()));
    // Removed on the way out (`reap::own`), or by the next command if this one is killed.
    crate::owned::hold(crate::owned::Thing::File(path.clone()));
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).map_err(|e| {
        anyhow::anyhow!(
            "bind {} (the docker API version shim): {e}; is /tmp writable?",
            path.display()
        )
    })?;
    let from = format!(
        "/v{}.{}/",
        API_DEFAULT_VERSION.major_version, API_DEFAULT_VERSION.minor_version
    );
    let to = format!("/v{engine_version}/");
    let engine = engine.to_path_buf();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (engine, from, to) = (engine.clone(), from.clone(), to.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    forward(req, engine.clone(), from.clone(), to.clone())
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(path)
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn forward(
    mut req: hyper::Request<hyper::body::Incoming>,
    engine: PathBuf,
    from: String,
    to: String,
) -> Result<hyper::Response<hyper::body::Incoming>, BoxError> {
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let rewritten = match pq.strip_prefix(&from) {
        Some(rest) => format!("{to}{rest}"),
        None => pq,
    };
    *req.uri_mut() = rewritten.parse()?;
    let stream = tokio::time::timeout(PROBE_TIMEOUT, tokio::net::UnixStream::connect(&engine))
        .await
        .map_err(|_| "the docker engine did not accept a connection in 5 s")??;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    // No timeout here: log follows and waits stream for as long as the container lives; the
    // caller's own timeouts bound them.
    Ok(sender.send_request(req).await?)
}

/// Remove every container and network with `label=value` (or just `label` when value is None),
/// from any context (Drop, exit paths): a fresh client on its own thread and runtime, bounded,
/// straight to the engine's own socket (never the API shim, which lives on the harness's
/// runtime and may be gone). Returns (containers, networks) removed.
pub fn remove_labelled_blocking(
    label: &str,
    value: Option<&str>,
) -> anyhow::Result<(usize, usize)> {
    let filter = match value {
        Some(v) => format!("{label}={v}"),
        None => label.to_string(),
    };
    // After `engine()`, DOCKER_HOST names the shim: the engine's socket is kept beside it.
    let socket = match ENGINE_FOR_DROP.get() {
        Some(e) => e.0.clone(),
        None => engine_socket()?,
    };
    // Before any engine() call (e.g. the next command removing what a killed one left) 1.41
    // is asked for: every engine since Docker 20.10 speaks it.
    let version = ENGINE_FOR_DROP
        .get()
        .map(|e| e.1.clone())
        .unwrap_or_else(|| "1.41".into());
    let worker = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let docker = client(&socket, &version)?;
            tokio::time::timeout(Duration::from_secs(60), remove_labelled(&docker, &filter))
                .await
                .map_err(|_| anyhow::anyhow!("no answer from the Docker engine in 60 s"))?
        })
    });
    worker
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("the removal thread panicked")))
}

/// Remove every container (forced, with its anonymous volumes) and then every network matching
/// the label filter (`key` or `key=value`).
pub async fn remove_labelled(docker: &Docker, filter: &str) -> anyhow::Result<(usize, usize)> {
    use std::collections::HashMap;
    use testcontainers::bollard::query_parameters::{
        ListContainersOptionsBuilder, ListNetworksOptions, RemoveContainerOptions,
    };
    let filters: HashMap<&str, Vec<&str>> = HashMap::from([("label", vec![filter])]);
    let list = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await
        .map_err(|e| anyhow::anyhow!("list containers labelled {filter}: {e}"))?;
    let mut containers = 0;
    let removes = list.iter().filter_map(|c| c.id.clone()).map(|id| {
        let docker = docker.clone();
        async move {
            let opts = RemoveContainerOptions {
                force: true,
                v: true,
                link: false,
            };
            match docker.remove_container(&id, Some(opts)).await {
                Ok(()) => true,
                // Gone already, or being removed by another call (a mover's own removal).
                Err(testcontainers::bollard::errors::Error::DockerResponseServerError {
                    status_code: 404 | 409,
                    ..
                }) => false,
                Err(e) => {
                    eprintln!("chaos: remove container {id}: {e}");
                    false
                }
            }
        }
    });
    for removed in futures_util::future::join_all(removes).await {
        containers += removed as usize;
    }
    let nets = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(HashMap::from([(
                "label".to_string(),
                vec![filter.to_string()],
            )])),
        }))
        .await
        .map_err(|e| anyhow::anyhow!("list networks labelled {filter}: {e}"))?;
    let mut networks = 0;
    for n in nets {
        let Some(id) = n.id.or(n.name) else { continue };
        match docker.remove_network(&id).await {
            Ok(()) => networks += 1,
            Err(e) => eprintln!("chaos: remove network {id}: {e}"),
        }
    }
    Ok((containers, networks))
}
