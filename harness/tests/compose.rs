//! docker-compose.yml is a working April testbed (issue 33): `up` alone (docker compose or docker-compose, whichever is installed) installs the schema, plan, data and links through the init service (`chaos install`) and the four movers move turbines onto shard3; `down` removes it all.
//!
//! Needs a Docker engine and compose; where either is missing it prints one SKIP line. The
//! project gets its own name and free host ports (CHAOS_PG_PORT_PREFIX, CHAOS_PROXY_API_PORT,
//! CHAOS_LINK_PORTS), and mounts the binaries this test run built (CHAOS_BIN_DIR).

use crate::common::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `docker compose` when the plugin is there, else `docker-compose`, else None.
fn compose() -> Option<Vec<&'static str>> {
    let works = |argv: &[&str]| {
        Command::new(argv[0])
            .args(&argv[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if works(&["docker", "compose", "version"]) {
        Some(vec!["docker", "compose"])
    } else if works(&["docker-compose", "version"]) {
        Some(vec!["docker-compose"])
    } else {
        None
    }
}

fn free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A prefix P with P2..P5 free (the databases' host ports).
fn pg_prefix() -> u16 {
    (2543..6000)
        .step_by(10)
        .find(|p| (2..=5).all(|d| free(p * 10 + d)))
        .expect("four free ports for the databases")
}

/// The first of 19 free consecutive ports (the links' host ports).
fn link_base() -> u16 {
    (31000..60000)
        .step_by(50)
        .find(|b| (*b..b + 19).all(free))
        .expect("19 free ports for the links")
}

/// `docker compose -p PROJECT down -v` when dropped, whatever happened.
struct Project {
    argv: Vec<&'static str>,
    name: String,
    env: Vec<(String, String)>,
}

impl Project {
    fn run(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(self.argv[0])
            .args(&self.argv[1..])
            .args(["-p", &self.name, "-f"])
            .arg(repo().join("docker-compose.yml"))
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(repo())
            .output()
            .expect("compose");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let (ok, text) = self.run(&["down", "-v", "--remove-orphans"]);
        if !ok {
            eprintln!("compose down failed: {text}");
        }
    }
}

/// One query's first column as i64 (a small runtime of its own).
fn query_i64(url: &str, sql: &str) -> Option<i64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .ok()?;
        tokio::spawn(conn);
        c.query_one(sql, &[]).await.ok()?.try_get::<_, i64>(0).ok()
    })
}

#[test]
fn compose_up_moves_turbines_with_no_manual_step() {
    require_mover();
    let engine = Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !engine.is_ok_and(|s| s.success()) {
        println!("SKIP: no Docker engine answers (docker info failed): compose test not run");
        return;
    }
    let Some(argv) = compose() else {
        println!("SKIP: neither `docker compose` nor `docker-compose` is installed: compose test not run");
        return;
    };
    for image in ["chaos-postgres:15", "chaos-runtime:bookworm"] {
        let ok = Command::new("docker")
            .args(["image", "inspect", image])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "image {image} is missing: run scripts/build-images");
    }
    let bin_dir: PathBuf = chaos().parent().unwrap().canonicalize().unwrap();
    let prefix = pg_prefix();
    let base = link_base();
    let api = (18474..19000).find(|p| free(*p)).unwrap();
    let project = Project {
        argv,
        name: format!("chaos-compose-test-{}", std::process::id()),
        env: vec![
            ("CHAOS_BIN_DIR".into(), bin_dir.display().to_string()),
            ("CHAOS_PG_PORT_PREFIX".into(), prefix.to_string()),
            ("CHAOS_PROXY_API_PORT".into(), api.to_string()),
            ("CHAOS_LINK_PORTS".into(), format!("{base}-{}", base + 18)),
        ],
    };
    println!("{} -p {} up -d", project.argv.join(" "), project.name);
    let began = Instant::now();
    let (ok, text) = project.run(&["up", "-d"]);
    assert!(ok, "compose up failed: {text}");
    println!("up returned in {:.1} s", began.elapsed().as_secs_f64());
    // shard3 is new (April's 200 seeded turbines live on shard1 and shard2): every turbine on
    // it was moved there by a mover.
    let shard3 = format!("postgres://postgres@127.0.0.1:{prefix}5/postgres");
    let routing = format!("postgres://postgres@127.0.0.1:{prefix}2/postgres");
    let moved = loop {
        let n = query_i64(&shard3, "select count(distinct turbine_id) from readings").unwrap_or(0);
        if n >= 5 || began.elapsed() > Duration::from_secs(240) {
            break n;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let (_, ps) = project.run(&["ps", "-a"]);
    let (_, logs) = project.run(&["logs", "--no-color", "init"]);
    println!("{ps}\n{logs}");
    assert!(
        moved >= 5,
        "no turbines moved onto shard3 within 240 s ({moved}):\n{ps}\n{logs}"
    );
    assert!(logs.contains("chaos install: ready"), "{logs}");
    let plan = query_i64(&routing, "select count(*) from move_plan").unwrap_or(0);
    assert!(plan > 100, "April's plan is installed: {plan} entries");
    let token = query_i64(&routing, "select max(token) from claims").unwrap_or(0);
    assert!(
        token >= 17,
        "a box took the claim with April's first token: {token}"
    );
    println!(
        "{moved} turbines on shard3 {:.1} s after `up`; plan of {plan}, claim token {token}",
        began.elapsed().as_secs_f64()
    );
    drop(project);
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "-q",
            "--filter",
            &format!(
                "label=com.docker.compose.project=chaos-compose-test-{}",
                std::process::id()
            ),
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "down removed every container"
    );
}
