use super::cluster::proxy_answers;
use super::containers::*;
use super::*;

#[test]
fn pg_data_goes_to_tmpfs_only_where_the_container_outlives_a_stop() {
    let ours = "chaos-postgres:15";
    assert!(pg_data_on_tmpfs(None, ours, true).unwrap());
    assert!(!pg_data_on_tmpfs(None, "postgres:16", false).unwrap());
    assert!(!pg_data_on_tmpfs(Some("volume"), ours, true).unwrap());
    assert!(pg_data_on_tmpfs(Some("tmpfs"), ours, true).unwrap());
    let refused = pg_data_on_tmpfs(Some("tmpfs"), "postgres:16", false)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("postgres:16 restarts as a container") && !refused.contains('\n'),
        "{refused}"
    );
    let bad = pg_data_on_tmpfs(Some("ram"), ours, true)
        .unwrap_err()
        .to_string();
    assert_eq!(bad, "CHAOS_DOCKER_PG_DATA=ram: expected tmpfs or volume");
}

#[test]
fn image_names_split_into_name_and_tag() {
    let i = generic("chaos-postgres:15");
    assert_eq!(
        (
            testcontainers::Image::name(&i),
            testcontainers::Image::tag(&i)
        ),
        ("chaos-postgres", "15")
    );
    let i = generic("ghcr.io/shopify/toxiproxy");
    assert_eq!(testcontainers::Image::tag(&i), "latest");
    let i = generic("localhost:5000/postgres:16");
    assert_eq!(
        (
            testcontainers::Image::name(&i),
            testcontainers::Image::tag(&i)
        ),
        ("localhost:5000/postgres", "16")
    );
}

/// Start and stop a cluster through the backend: databases answer on 127.0.0.1, a stopped
/// node keeps its data, the proxy answers, and nothing labelled with the run is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_starts_keeps_data_across_a_stop_and_leaves_nothing() {
    if engine::probe_api_version(Path::new("/var/run/docker.sock"))
        .await
        .is_err()
        && std::env::var_os("DOCKER_HOST").is_none()
    {
        println!(
            "SKIP: no Docker engine answers (docker info failed): docker backend tests not run"
        );
        return;
    }
    let images = Images::from_env();
    let docker = engine::engine().await.expect("engine").docker.clone();
    for i in [&images.postgres, &images.proxy] {
        if require_image(&docker, i).await.is_err() {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            println!("building images (first build: about 4 minutes)");
            let ok = std::process::Command::new(root.join("scripts/build-images"))
                .current_dir(&root)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(ok, "scripts/build-images failed");
        }
    }
    let log_dir = std::env::temp_dir().join(format!("chaos-docker-unit-{}", std::process::id()));
    std::fs::create_dir_all(&log_dir).unwrap();
    let run_id = format!("unit-{}", std::process::id());
    let spec = ClusterSpec {
        nodes: vec![
            "routing".into(),
            "shard1".into(),
            "shard2".into(),
            "shard3".into(),
        ],
        links: vec!["ingest->shard1".into(), "box-1->routing".into()],
        log_dir: log_dir.clone(),
        run_id: run_id.clone(),
        asynchronous_commit: vec![],
    };
    let mut c = DockerCluster::start(&spec).await.expect("cluster starts");
    println!(
        "docker cluster (routing + 3 shards + proxy) ready in {:.2} s",
        c.start_time().as_secs_f64()
    );
    assert!(proxy_answers(&c.proxy_api()).await, "the proxy answers");
    let url = c.admin_url("shard1");
    let db = crate::db::connect(&url, "test", Duration::from_secs(5))
        .await
        .unwrap();
    db.batch_execute("create table kept(x int); insert into kept values (7)")
        .await
        .unwrap();
    drop(db);
    assert!(
        c.db_signals || !images.postgres.starts_with("chaos-postgres"),
        "our postgres image carries {SIGNALS_LABEL}"
    );
    c.stop_node("shard1", StopMode::Fast).await.expect("stop");
    assert!(!crate::db::ping(&url).await, "a stopped node refuses");
    let shard1_id = c.nodes["shard1"].id.clone();
    // Our image keeps its data on a tmpfs (the stop below keeps the container, so the data).
    let info = docker
        .inspect_container(&shard1_id, None::<InspectContainerOptions>)
        .await
        .expect("inspect shard1");
    let data_on_tmpfs = info
        .host_config
        .and_then(|h| h.mounts)
        .unwrap_or_default()
        .iter()
        .any(|m| {
            m.target.as_deref() == Some(PG_DATA_DIR)
                && m.typ == Some(testcontainers::bollard::models::MountType::TMPFS)
        });
    assert_eq!(
        data_on_tmpfs, c.db_signals,
        "data on a tmpfs exactly when the image is supervised"
    );
    if c.db_signals {
        assert_eq!(
            container_state(&docker, &shard1_id).await.map(|s| s.0),
            Some(true),
            "the supervisor keeps the container up while postgres is stopped"
        );
    }
    let took = c.start_node("shard1").await.expect("start");
    println!(
        "shard1 restarted after a fast stop in {:.2} s",
        took.as_secs_f64()
    );
    let db = crate::db::connect(&url, "test", Duration::from_secs(5))
        .await
        .unwrap();
    let row = db.query_one("select x from kept", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 7, "the data survived the stop");
    drop(db);
    // A crash (SIGQUIT to postgres) and recovery: as the nemesis crashes it, by the signals
    // this host sends at the instant (the supervisor's, then the postmaster's), then the stop.
    assert!(
        c.db_direct || !images.postgres.starts_with("chaos-postgres"),
        "our postgres image carries {DIRECT_LABEL}"
    );
    if let Some(signal) = c.stop_signal("shard1", StopMode::Immediate) {
        signal.send().expect("the crash's signals");
    } else {
        println!("shard1's crash goes through the engine's API (no engine on this host)");
    }
    c.stop_node("shard1", StopMode::Immediate)
        .await
        .expect("crash");
    if c.db_signals {
        assert_eq!(
            container_state(&docker, &shard1_id).await.map(|s| s.0),
            Some(true),
            "the supervisor keeps the container up through a crash signalled from here"
        );
    }
    let took = c.start_node("shard1").await.expect("start after crash");
    println!(
        "shard1 restarted after a crash in {:.2} s",
        took.as_secs_f64()
    );
    assert!(crate::db::ping(&url).await);
    let crash_log = log_dir.join("shard1-now.log");
    copy_log(&docker, &shard1_id, &crash_log).await;
    let text = std::fs::read_to_string(&crash_log).unwrap_or_default();
    assert!(
        text.contains("automatic recovery in progress"),
        "the start after a crash runs recovery; shard1's log:\n{text}"
    );
    assert_eq!(
        c.client_addr("ingest->shard1", "0.0.0.0:20000", false),
        format!("{}:20000", c.proxy_name)
    );
    assert!(c
        .client_addr("ingest->shard1", "0.0.0.0:20000", true)
        .starts_with("127.0.0.1:"));
    // A mover held at its gate starts in milliseconds, as its own main process.
    let spec = MoverSpec {
        box_name: "box-1".into(),
        program: MoverProgram::Shell("sh -c 'echo pid-$$ $CHAOS_BOX'".into()),
        env: vec![(chaos_workloads::mover::env::BOX.into(), "box-1".into())],
        log_path: log_dir.join("box-1.log"),
        reads_gate: false,
        ready_timeout: Duration::from_secs(20),
    };
    c.prepare_movers(std::slice::from_ref(&spec))
        .await
        .expect("prepare");
    let t = Instant::now();
    let (mut mover, stdout) = c.launcher().spawn(&spec).await.expect("spawn");
    println!(
        "a prepared mover spawned in {:.1} ms",
        t.elapsed().as_secs_f64() * 1000.0
    );
    let mut line = String::new();
    use tokio::io::AsyncBufReadExt;
    tokio::io::BufReader::new(stdout)
        .read_line(&mut line)
        .await
        .unwrap();
    assert_eq!(
        line.trim(),
        "pid-1 box-1",
        "the mover is the container's main process"
    );
    assert_eq!(mover.wait().await, Some(0));
    let t = Instant::now();
    c.stop_all().await;
    println!(
        "docker cluster stopped and removed in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let left = engine::remove_labelled(&docker, &format!("{RUN_LABEL}={run_id}"))
        .await
        .unwrap();
    assert_eq!(left, (0, 0), "stop_all left containers or networks");
    assert!(log_dir.join("shard1.log").is_file(), "node logs copied");
    let _ = std::fs::remove_dir_all(&log_dir);
}

#[test]
fn names_are_docker_safe() {
    assert_eq!(
        docker_name("april-20250101T000000Z-42", "box 2"),
        "chaos-april-20250101T000000Z-42-box-2"
    );
}
