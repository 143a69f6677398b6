//! Workspace settings managed in the app (issue 12): `GET/PATCH /api/settings` for admins only,
//! validated with the field named, applied to the next request without a restart, kept across a
//! restart, and "default" handing the value back to the environment or built-in default.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    bed::Bed,
    rig::{Answer, MODEL, Rig, body},
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn setting<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array().unwrap().iter().find(|s| s["name"] == name).unwrap()
}

/// A call that holds its account's only slot for a while.
fn hold(rig: &Rig) -> tokio::task::JoinHandle<Answer> {
    let call = rig.responses(None, body(MODEL)).send();
    tokio::spawn(async move { Answer::read(call.await.unwrap()).await })
}

#[tokio::test]
async fn settings_are_admin_only_validated_and_applied_without_a_restart() {
    let mut b = Bed::start(&[("SUBLANE_QUEUE_TIMEOUT", "20s")]).await;
    let id = b.rig.add_account("codex", "at-set", 0).await;
    b.rig.limit(id, 1).await;
    // who may read and change them
    let (status, _) = b.rig.t.client().call(Method::GET, "/api/settings", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (mut bob, _) = b.rig.t.member(&b.rig.admin, "bob").await;
    let (status, _) = bob.call(Method::GET, "/api/settings", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = bob.call(Method::PATCH, "/api/settings", Some(json!({"queue_capacity": 0}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, list) = b.rig.admin.call(Method::GET, "/api/settings", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list.as_array().unwrap().len(), 7);
    let timeout = setting(&list, "queue_timeout");
    assert_eq!((timeout["value"].as_u64(), timeout["source"].as_str()), (Some(20), Some("configuration")));
    assert_eq!(setting(&list, "queue_capacity")["source"], "default");
    assert_eq!(setting(&list, "stream_idle_timeout")["value"], Value::Null, "off by default");
    // bad input: 422 naming the setting, nothing stored
    for (bad, name) in [
        (json!({"queue_timeout": 0}), "queue_timeout"),
        (json!({"queue_capacity": "many"}), "queue_capacity"),
        (json!({"nope": 1}), "nope"),
        (json!({"failure_window": 1.5}), "failure_window"),
        (json!({"queue_timeout": null}), "queue_timeout"),
        (json!({"queue_capacity": 5, "model_cooldown": 9999}), "model_cooldown"),
    ] {
        let (status, e) = b.rig.admin.call(Method::PATCH, "/api/settings", Some(bad.clone())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().starts_with(name), "{e}");
    }
    let (_, list) = b.rig.admin.call(Method::GET, "/api/settings", None).await;
    assert_eq!(setting(&list, "queue_capacity")["source"], "default", "a refused patch stores nothing");

    // no queue at all: the next request that would wait is refused at once
    let (status, list) =
        b.rig.admin.call(Method::PATCH, "/api/settings", Some(json!({"queue_capacity": 0}))).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(
        (
            setting(&list, "queue_capacity")["value"].as_u64(),
            setting(&list, "queue_capacity")["source"].as_str()
        ),
        (Some(0), Some("database"))
    );
    b.rig.script("at-set", json!({"delay_ms": 800})).await;
    let held = hold(&b.rig);
    b.rig.busy(id).await;
    let a = b.rig.send(None, MODEL).await;
    assert_eq!((a.status, a.code()), (StatusCode::TOO_MANY_REQUESTS, "account_queue_full"), "{a:?}");
    assert_eq!(held.await.unwrap().status, StatusCode::OK);

    // the workspace gate: one operation at a time
    b.rig
        .admin
        .call(
            Method::PATCH,
            "/api/settings",
            Some(json!({"workspace_capacity": 1, "queue_capacity": "default"})),
        )
        .await;
    let held = hold(&b.rig);
    b.rig.busy(id).await;
    let a = b.rig.send(None, MODEL).await;
    assert_eq!((a.status, a.code()), (StatusCode::TOO_MANY_REQUESTS, "workspace_busy"), "{a:?}");
    assert_eq!(held.await.unwrap().status, StatusCode::OK);

    // kept across a restart; "default" hands it back
    let mut b = b.restart().await;
    let (_, list) = b.rig.admin.call(Method::GET, "/api/settings", None).await;
    assert_eq!(
        (
            setting(&list, "workspace_capacity")["value"].as_u64(),
            setting(&list, "workspace_capacity")["source"].as_str()
        ),
        (Some(1), Some("database"))
    );
    assert_eq!(setting(&list, "queue_capacity")["source"], "default");
    let (status, list) = b
        .rig
        .admin
        .call(
            Method::PATCH,
            "/api/settings",
            Some(json!({"workspace_capacity": "default", "stream_idle_timeout": 30})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(setting(&list, "workspace_capacity")["source"], "configuration", "the test server sets it");
    assert_eq!(setting(&list, "stream_idle_timeout")["value"], 30);
}
