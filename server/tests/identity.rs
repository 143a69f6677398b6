//! Sign-in, sessions, roles and the same-origin rule, through the real server (ID-1, ID-2, ID-5).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ADMIN_PASSWORD, TestServer, code};
use reqwest::{Method, StatusCode, header};
use serde_json::json;
use sublane::members::Bootstrap;

#[tokio::test]
async fn bootstrap_admin_signs_in_and_sees_themself() {
    let t = TestServer::start().await;
    assert_eq!(t.server.bootstrap, Bootstrap::CreatedWithConfiguredPassword);
    let mut c = t.client();
    let resp = c
        .request(Method::POST, "/api/session")
        .json(&json!({"username": "admin", "password": ADMIN_PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let cookie = resp.headers()[header::SET_COOKIE].to_str().unwrap().to_owned();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"), "{cookie}");
    c.absorb(&resp);

    let (status, me) = c.call(Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(me["username"], "admin");
    assert_eq!(me["role"], "admin");
    assert!(me.get("password_hash").is_none());

    // sign out ends the session server-side, not just in the browser
    let old_cookie = c.cookie.clone();
    let (status, _) = c.call(Method::DELETE, "/api/session", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    c.cookie = old_cookie;
    let (status, body) = c.call(Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "unauthorized");
}

#[tokio::test]
async fn wrong_password_and_unknown_user_get_the_same_401() {
    let t = TestServer::start().await;
    let mut c = t.client();
    for (user, pass) in [("admin", "wrong-password"), ("nobody", "whatever-pass")] {
        let (status, body) =
            c.call(Method::POST, "/api/session", Some(json!({"username": user, "password": pass}))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(code(&body), "invalid_credentials");
    }
}

#[tokio::test]
async fn generated_admin_password_is_reported_once_and_works() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let t = TestServer::start_in(dir, &[]).await;
    let Bootstrap::CreatedWithGeneratedPassword(password) = &t.server.bootstrap else {
        panic!("expected a generated password, got {:?}", t.server.bootstrap);
    };
    assert!(password.len() >= 16);
    let mut c = t.client();
    c.sign_in("admin", password).await;
    // a restart on the same data keeps the admin and prints nothing new
    let TestServer { server, dir, .. } = t;
    server.shutdown().await.unwrap();
    let again = sublane::serve::start(
        common::config_for(data, &[]),
        std::sync::Arc::new(sublane::clock::SystemClock),
    )
    .await
    .unwrap();
    assert_eq!(again.bootstrap, Bootstrap::Existing);
    again.shutdown().await.unwrap();
    drop(dir);
}

/// Every admin route: anonymous callers get 401, members 403.
#[tokio::test]
async fn admin_routes_refuse_anonymous_and_members() {
    let t = TestServer::start().await;
    let admin = t.admin().await;
    let (mut member, _) = t.member(&admin, "bob").await;
    let mut anonymous = t.client();
    let routes: &[(Method, &str, Option<serde_json::Value>)] = &[
        (Method::GET, "/api/members", None),
        (Method::POST, "/api/members", Some(json!({"username": "x", "password": "12345678"}))),
        (Method::GET, "/api/members/1", None),
        (Method::PATCH, "/api/members/1", Some(json!({"enabled": false}))),
        (Method::DELETE, "/api/members/1", None),
        (Method::GET, "/api/pools", None),
        (Method::POST, "/api/pools", Some(json!({"name": "p2"}))),
        (Method::GET, "/api/pools/1", None),
        (Method::PATCH, "/api/pools/1", Some(json!({"name": "renamed"}))),
        (Method::DELETE, "/api/pools/1", None),
        (Method::GET, "/api/accounts", None),
        (Method::POST, "/api/accounts", Some(json!({"provider": "openai_api", "name": "a"}))),
        (Method::GET, "/api/accounts/1", None),
        (Method::PATCH, "/api/accounts/1", Some(json!({"name": "b"}))),
        (Method::DELETE, "/api/accounts/1", None),
        (Method::PATCH, "/api/accounts/1/limits", Some(json!({"max_concurrency": 5}))),
        (Method::GET, "/api/requests", None),
        (Method::GET, "/api/keys", None),
        (Method::POST, "/api/keys", Some(json!({"name": "k", "member_id": 1}))),
        (Method::DELETE, "/api/keys/1", None),
    ];
    for (method, path, body) in routes {
        let (status, resp) = anonymous.call(method.clone(), path, body.clone()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "anonymous {method} {path}: {resp}");
        assert_eq!(code(&resp), "unauthorized");
        let (status, resp) = member.call(method.clone(), path, body.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "member {method} {path}: {resp}");
        assert_eq!(code(&resp), "forbidden");
    }
    // the member's own routes work for them
    let (status, _) = member.call(Method::GET, "/api/me/keys", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = anonymous.call(Method::GET, "/api/me/keys", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn mutations_need_same_origin_and_json() {
    let t = TestServer::start().await;
    let creds = json!({"username": "admin", "password": ADMIN_PASSWORD});

    let mut no_origin = t.client();
    no_origin.origin = None;
    let (status, body) = no_origin.call(Method::POST, "/api/session", Some(creds.clone())).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(code(&body), "forbidden");

    let mut evil = t.client();
    evil.origin = Some("http://evil.example".into());
    let (status, _) = evil.call(Method::POST, "/api/session", Some(creds.clone())).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Referer stands in for a missing Origin
    let resp = no_origin
        .request(Method::POST, "/api/session")
        .header(header::REFERER, format!("{}/login", t.base))
        .json(&creds)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    // same origin but not JSON
    let c = t.client();
    let resp = c
        .request(Method::POST, "/api/session")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(creds.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);

    // server functions of the web app are guarded too
    let resp = no_origin
        .request(Method::POST, "/rpc/login")
        .form(&[("username", "admin"), ("password", ADMIN_PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);

    // reads need no Origin
    let resp = no_origin.request(Method::GET, "/healthz").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn disabling_a_member_ends_their_sessions_and_blocks_sign_in() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    let (mut bob, bob_id) = t.member(&admin, "bob").await;
    assert_eq!(bob.call(Method::GET, "/api/me", None).await.0, StatusCode::OK);

    let (status, body) =
        admin.call(Method::PATCH, &format!("/api/members/{bob_id}"), Some(json!({"enabled": false}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["enabled"], false);
    assert_eq!(bob.call(Method::GET, "/api/me", None).await.0, StatusCode::UNAUTHORIZED);
    let (status, body) = bob
        .call(Method::POST, "/api/session", Some(json!({"username": "bob", "password": "member-password-1"})))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(code(&body), "invalid_credentials");

    // re-enabled, bob signs in again
    admin.call(Method::PATCH, &format!("/api/members/{bob_id}"), Some(json!({"enabled": true}))).await;
    bob.sign_in("bob", "member-password-1").await;
}

#[tokio::test]
async fn password_change_signs_out_old_sessions() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    let (mut bob, bob_id) = t.member(&admin, "bob").await;
    let (status, _) = admin
        .call(Method::PATCH, &format!("/api/members/{bob_id}"), Some(json!({"password": "new-password-9"})))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bob.call(Method::GET, "/api/me", None).await.0, StatusCode::UNAUTHORIZED);
    bob.sign_in("bob", "new-password-9").await;
}

#[tokio::test]
async fn the_last_enabled_admin_cannot_be_demoted_or_disabled() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    for patch in [json!({"enabled": false}), json!({"role": "member"})] {
        let (status, body) = admin.call(Method::PATCH, "/api/members/1", Some(patch)).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert_eq!(code(&body), "conflict");
    }
    // with a second admin, the first may step down
    let (status, body) = admin
        .call(
            Method::POST,
            "/api/members",
            Some(json!({"username": "carol", "password": "carol-pass-1", "role": "admin"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = admin.call(Method::PATCH, "/api/members/1", Some(json!({"role": "member"}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["role"], "member");
}

#[tokio::test]
async fn member_validation_errors_are_4xx_with_codes() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    // 422s about one input name it, in the message and in `field` (forms show it beside the input)
    let named = [
        (json!({"username": "bob", "password": "short"}), "password"),
        (json!({"username": "b o b", "password": "long-enough"}), "username"),
        (
            json!({"username": "bob", "password": "long-enough", "concurrency_limit": 1001}),
            "concurrency_limit",
        ),
        (json!({"username": "bob", "password": "long-enough", "rpm_limit": 0}), "rpm_limit"),
        (json!({"username": "bob", "password": "long-enough", "pool_ids": [999]}), "pool_ids"),
    ];
    for (body, field) in named {
        let (status, resp) = admin.call(Method::POST, "/api/members", Some(body.clone())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body} -> {resp}");
        assert_eq!(resp["error"]["field"], field, "{resp}");
        assert!(resp["error"]["message"].as_str().unwrap().contains(field), "{resp}");
    }
    let cases = [
        (json!({"username": "bob"}), StatusCode::UNPROCESSABLE_ENTITY),
        (
            json!({"username": "bob", "password": "long-enough", "surprise": 1}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (json!({"username": "ADMIN", "password": "long-enough"}), StatusCode::CONFLICT),
    ];
    for (body, want) in cases {
        let (status, resp) = admin.call(Method::POST, "/api/members", Some(body.clone())).await;
        assert_eq!(status, want, "{body} -> {resp}");
        assert!(resp["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{resp}");
    }
    // malformed JSON is a 400
    let resp = admin
        .request(Method::POST, "/api/members")
        .header(header::CONTENT_TYPE, "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let (status, body) = admin.call(Method::PATCH, "/api/members/999", Some(json!({"enabled": true}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(code(&body), "not_found");
    let (status, _) = admin.call(Method::GET, "/api/members/abc", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn unknown_api_routes_and_methods_answer_in_json() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    let (status, body) = admin.call(Method::GET, "/api/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(code(&body), "not_found");
    let (status, body) = admin.call(Method::PUT, "/api/members", Some(json!({}))).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(code(&body), "method_not_allowed");
}

#[tokio::test]
async fn healthz_and_graceful_shutdown() {
    let t = TestServer::start().await;
    let resp = reqwest::get(format!("{}/healthz", t.base)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.json::<serde_json::Value>().await.unwrap()["status"], "ok");
    let base = t.base.clone();
    t.server.shutdown().await.unwrap();
    assert!(reqwest::get(format!("{base}/healthz")).await.is_err(), "nothing listens after shutdown");
}

#[tokio::test]
async fn a_second_process_on_the_same_database_refuses_to_start() {
    let t = TestServer::start().await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_sublane"))
        .env("SUBLANE_DATA_DIR", t.dir.path())
        .env("SUBLANE_ADDR", "127.0.0.1:0")
        .env("SUBLANE_ADMIN_PASSWORD", "irrelevant-123")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("another SubLane process"), "{stderr}");
    // the first server is unaffected
    assert_eq!(reqwest::get(format!("{}/healthz", t.base)).await.unwrap().status(), StatusCode::OK);
}

/// Stored deadlines read the injected clock: a session ends exactly at its TTL (ID-2).
#[tokio::test]
async fn sessions_expire_after_their_ttl() {
    let clock = sublane::clock::FakeClock::new(chrono::DateTime::from_timestamp(1_900_000_000, 0).unwrap());
    let t = TestServer::start_with_clock(clock.clone()).await;
    let mut admin = t.admin().await;
    clock.advance(chrono::TimeDelta::days(7) - chrono::TimeDelta::seconds(1));
    assert_eq!(admin.call(Method::GET, "/api/me", None).await.0, StatusCode::OK);
    clock.advance(chrono::TimeDelta::seconds(1));
    assert_eq!(admin.call(Method::GET, "/api/me", None).await.0, StatusCode::UNAUTHORIZED);
}
