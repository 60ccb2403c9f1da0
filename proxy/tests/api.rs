//! The HTTP API over raw HTTP: Toxiproxy's status codes, JSON shapes and routing answers.

mod common;

use common::*;
use serde_json::json;
use std::collections::BTreeSet;

fn keys(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_crud_status_codes_and_shapes() {
    let echo = echo().await;
    let server = chaos_proxy::start(localhost0()).await.unwrap();
    let api = server.api_addr();
    let body = json!({"name": "pg", "listen": "127.0.0.1:0", "upstream": echo.addr.to_string()})
        .to_string();

    let r = http(api, "POST", "/proxies", Some(&body)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let p = r.json();
    assert_eq!(
        keys(&p),
        ["enabled", "listen", "name", "toxics", "upstream"]
            .map(String::from)
            .into()
    );
    assert_eq!(p["enabled"], true);
    assert_eq!(p["toxics"], json!([]));
    let listen: std::net::SocketAddr = p["listen"].as_str().unwrap().parse().unwrap();
    assert_ne!(listen.port(), 0, "listen must report the bound port");

    let r = http(api, "POST", "/proxies", Some(&body)).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json(),
        json!({"error": "proxy already exists", "status": 409})
    );
    assert!(r.body.ends_with('\n'), "http.Error appends a newline");

    let r = http(api, "GET", "/proxies", None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["pg"]["listen"], p["listen"]);

    let r = http(api, "GET", "/proxies/nope", None).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json(), json!({"error": "proxy not found", "status": 404}));

    let r = http(api, "GET", "/proxies/pg", None).await;
    assert_eq!((r.status, r.json()), (200, p.clone()));

    let r = http(api, "DELETE", "/proxies/pg", None).await;
    assert_eq!((r.status, r.body.as_str()), (204, ""));
    let r = http(api, "DELETE", "/proxies/pg", None).await;
    assert_eq!(r.status, 404);
    // The listener is gone with the proxy.
    assert!(tokio::net::TcpStream::connect(listen).await.is_err());
    server.shutdown().await;
}

#[tokio::test]
async fn bad_requests_answer_400() {
    let server = chaos_proxy::start(localhost0()).await.unwrap();
    let api = server.api_addr();
    let r = http(api, "POST", "/proxies", Some("{not json")).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .starts_with("bad request body"));
    let r = http(api, "POST", "/proxies", None).await;
    assert_eq!(r.json()["error"], "bad request body: EOF");
    let r = http(
        api,
        "POST",
        "/proxies",
        Some(r#"{"upstream":"127.0.0.1:1"}"#),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "missing required field: name");
    let r = http(api, "POST", "/proxies", Some(r#"{"name":"x"}"#)).await;
    assert_eq!(r.json()["error"], "missing required field: upstream");
    let r = http(
        api,
        "POST",
        "/proxies",
        Some(r#"{"name":5,"upstream":"a:1"}"#),
    )
    .await;
    assert_eq!(r.status, 400);
    server.shutdown().await;
}

#[tokio::test]
async fn toxic_crud_status_codes_and_defaults() {
    let echo = echo().await;
    let server = chaos_proxy::start(localhost0()).await.unwrap();
    let api = server.api_addr();
    let body = json!({"name": "pg", "listen": "127.0.0.1:0", "upstream": echo.addr.to_string()});
    assert_eq!(
        http(api, "POST", "/proxies", Some(&body.to_string()))
            .await
            .status,
        201
    );

    let t = r#"{"type":"latency","attributes":{"latency":100}}"#;
    let r = http(api, "POST", "/proxies/pg/toxics", Some(t)).await;
    assert_eq!(
        r.status, 200,
        "toxic create answers 200, not 201: {}",
        r.body
    );
    assert_eq!(
        r.json(),
        json!({"attributes": {"latency": 100, "jitter": 0}, "name": "latency_downstream",
               "type": "latency", "stream": "downstream", "toxicity": 1})
    );
    let r = http(api, "POST", "/proxies/pg/toxics", Some(t)).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json(),
        json!({"error": "toxic already exists", "status": 409})
    );

    let r = http(
        api,
        "POST",
        "/proxies/pg/toxics",
        Some(r#"{"type":"nope"}"#),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (400, json!("invalid toxic type"))
    );
    let r = http(
        api,
        "POST",
        "/proxies/pg/toxics",
        Some(r#"{"type":"latency","stream":"sideways"}"#),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = http(api, "POST", "/proxies/nope/toxics", Some(t)).await;
    assert_eq!(r.status, 404);
    let r = http(
        api,
        "POST",
        "/proxies/pg/toxics",
        Some(r#"{"name":"cut","type":"timeout","stream":"upstream","toxicity":0.5,"attributes":{"timeout":7}}"#),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["toxicity"], json!(0.5));

    // Upstream chain listed before downstream, as GetToxicArray.
    let r = http(api, "GET", "/proxies/pg/toxics", None).await;
    let names: Vec<_> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("cut"), json!("latency_downstream")]);

    // PATCH decodes onto the existing toxic: jitter set, latency kept.
    let r = http(
        api,
        "PATCH",
        "/proxies/pg/toxics/latency_downstream",
        Some(r#"{"attributes":{"jitter":5}}"#),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["attributes"], json!({"latency": 100, "jitter": 5}));
    let r = http(
        api,
        "POST",
        "/proxies/pg/toxics/latency_downstream",
        Some(r#"{"toxicity":0.25}"#),
    )
    .await;
    assert_eq!(r.json()["toxicity"], json!(0.25));
    let r = http(api, "GET", "/proxies/pg/toxics/latency_downstream", None).await;
    assert_eq!(r.json()["attributes"]["jitter"], 5);
    let r = http(api, "PATCH", "/proxies/pg/toxics/nope", Some("{}")).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json(), json!({"error": "toxic not found", "status": 404}));

    let r = http(api, "DELETE", "/proxies/pg/toxics/cut", None).await;
    assert_eq!(r.status, 204);
    let r = http(api, "DELETE", "/proxies/pg/toxics/cut", None).await;
    assert_eq!(r.status, 404);
    let r = http(api, "GET", "/proxies/pg", None).await;
    assert_eq!(r.json()["toxics"].as_array().unwrap().len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn populate_and_reset() {
    let echo = echo().await;
    let server = chaos_proxy::start(localhost0()).await.unwrap();
    let api = server.api_addr();
    let up = echo.addr.to_string();
    let body = json!([
        {"name": "a", "listen": "127.0.0.1:0", "upstream": up},
        {"name": "b", "listen": "127.0.0.1:0", "upstream": up, "enabled": false},
    ]);
    let r = http(api, "POST", "/populate", Some(&body.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let v = r.json();
    assert_eq!(keys(&v), ["proxies".to_string()].into());
    let list = v["proxies"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(
        (list[0]["enabled"].clone(), list[1]["enabled"].clone()),
        (json!(true), json!(false))
    );

    let r = http(api, "POST", "/populate", Some(r#"[{"name":"c"}]"#)).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"],
        "missing required field: upstream at proxy 1"
    );

    let t = r#"{"type":"latency","attributes":{"latency":10}}"#;
    assert_eq!(
        http(api, "POST", "/proxies/a/toxics", Some(t)).await.status,
        200
    );
    let r = http(api, "POST", "/reset", None).await;
    assert_eq!((r.status, r.body.as_str()), (204, ""));
    let all = http(api, "GET", "/proxies", None).await.json();
    for name in ["a", "b"] {
        assert_eq!(all[name]["enabled"], true, "reset re-enables {name}");
        assert_eq!(
            all[name]["toxics"],
            json!([]),
            "reset removes toxics of {name}"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn patch_updates_proxy_and_disable_keeps_port() {
    let echo = echo().await;
    let echo2 = common::echo().await;
    let server = chaos_proxy::start(localhost0()).await.unwrap();
    let api = server.api_addr();
    let body = json!({"name": "pg", "listen": "127.0.0.1:0", "upstream": echo.addr.to_string()});
    let p = http(api, "POST", "/proxies", Some(&body.to_string()))
        .await
        .json();
    let listen = p["listen"].as_str().unwrap().to_string();

    let r = http(api, "PATCH", "/proxies/pg", Some(r#"{"enabled":false}"#)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["enabled"], false);
    assert_eq!(r.json()["listen"], listen.as_str());
    assert!(
        tokio::net::TcpStream::connect(&listen).await.is_err(),
        "disabled proxy refuses"
    );

    let r = http(api, "POST", "/proxies/pg", Some(r#"{"enabled":true}"#)).await;
    assert_eq!((r.status, r.json()["listen"].clone()), (200, json!(listen)));
    let mut s = connect(&listen).await;
    round_trip(&mut s, b"hello").await;

    let r = http(
        api,
        "PATCH",
        "/proxies/pg",
        Some(&json!({"upstream": echo2.addr.to_string()}).to_string()),
    )
    .await;
    assert_eq!(r.json()["upstream"], echo2.addr.to_string());
    assert_eq!(r.json()["enabled"], true);
    let r = http(api, "PATCH", "/proxies/pg", Some("nope")).await;
    assert_eq!(r.status, 400);
    let r = http(api, "PATCH", "/proxies/ghost", Some("{}")).await;
    assert_eq!(r.status, 404);
    server.shutdown().await;
}

#[tokio::test]
async fn routing_404_405_and_version() {
    let server = chaos_proxy::start(localhost0()).await.unwrap();
    let api = server.api_addr();
    for (m, p) in [
        ("GET", "/nope"),
        ("GET", "/proxies/"),
        ("GET", "/proxies/a/b"),
        ("GET", "/metrics"),
    ] {
        let r = http(api, m, p, None).await;
        assert_eq!(
            (r.status, r.body.as_str()),
            (404, "404 page not found\n"),
            "{m} {p}"
        );
    }
    for (m, p) in [
        ("DELETE", "/proxies"),
        ("PUT", "/proxies/x"),
        ("GET", "/reset"),
        ("POST", "/version"),
        ("GET", "/populate"),
        ("PATCH", "/proxies/x/toxics"),
        ("PUT", "/proxies/x/toxics/y"),
    ] {
        let r = http(api, m, p, None).await;
        assert_eq!((r.status, r.body.as_str()), (405, ""), "{m} {p}");
    }
    let r = http(api, "GET", "//proxies", None).await;
    assert_eq!((r.status, r.header("location")), (301, Some("/proxies")));
    let r = http(api, "GET", "/version", None).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body,
        format!("{{\"version\": \"{}\"}}\n", chaos_proxy::version())
    );
    assert_eq!(r.json()["version"], chaos_proxy::version());
    server.shutdown().await;
}

/// Toxiproxy registers `noop` (data passes unchanged): it is created, named, listed, updated
/// and deleted like any toxic, with no attributes.
#[tokio::test]
async fn noop_toxic_answers_like_any_toxic() {
    let echo = echo().await;
    let server = chaos_proxy::start(localhost0()).await.unwrap();
    let api = server.api_addr();
    let body = json!({"name": "pg", "listen": "127.0.0.1:0", "upstream": echo.addr.to_string()});
    let p = http(api, "POST", "/proxies", Some(&body.to_string()))
        .await
        .json();

    let r = http(
        api,
        "POST",
        "/proxies/pg/toxics",
        Some(r#"{"type":"noop"}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json(),
        json!({"attributes": {}, "name": "noop_downstream", "type": "noop",
               "stream": "downstream", "toxicity": 1})
    );
    let r = http(
        api,
        "POST",
        "/proxies/pg/toxics",
        Some(r#"{"type":"noop"}"#),
    )
    .await;
    assert_eq!(r.status, 409);

    // Unknown attributes are ignored, as Go's decoder ignores unknown fields.
    let r = http(
        api,
        "POST",
        "/proxies/pg/toxics",
        Some(r#"{"name":"quiet","type":"noop","stream":"Upstream","toxicity":0.5,"attributes":{"latency":5}}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json(),
        json!({"attributes": {}, "name": "quiet", "type": "noop",
               "stream": "Upstream", "toxicity": 0.5})
    );
    let r = http(
        api,
        "POST",
        "/proxies/pg/toxics",
        Some(r#"{"name":"odd","type":"noop","attributes":5}"#),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (
            400,
            json!("bad request body: json: cannot unmarshal number into Go struct field ToxicWrapper.attributes of type toxics.NoopToxic")
        )
    );

    // Listed with the proxy, upstream chain first.
    let r = http(api, "GET", "/proxies/pg/toxics", None).await;
    let names: Vec<_> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("quiet"), json!("noop_downstream")]);
    let r = http(api, "GET", "/proxies/pg", None).await;
    assert_eq!(r.json()["toxics"].as_array().unwrap().len(), 2);

    // Data passes both ways unchanged, on a connection opened with the toxics in place.
    let mut s = connect(p["listen"].as_str().unwrap()).await;
    round_trip(&mut s, b"through two noops").await;

    let r = http(
        api,
        "PATCH",
        "/proxies/pg/toxics/quiet",
        Some(r#"{"toxicity":1}"#),
    )
    .await;
    assert_eq!((r.status, r.json()["toxicity"].clone()), (200, json!(1)));
    round_trip(&mut s, b"after the update").await;
    let r = http(api, "DELETE", "/proxies/pg/toxics/quiet", None).await;
    assert_eq!(r.status, 204);
    let r = http(api, "GET", "/proxies/pg/toxics/quiet", None).await;
    assert_eq!(r.status, 404);
    round_trip(&mut s, b"after the delete").await;
    server.shutdown().await;
}
