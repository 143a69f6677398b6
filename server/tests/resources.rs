//! Keys, pools and accounts through the JSON API (ID-3, ID-4, ID-6, ACC-5).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TestServer, code, contains};
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn member_creates_lists_and_revokes_a_key_and_only_a_hash_is_stored() {
    let t = TestServer::start().await;
    let admin = t.admin().await;
    let (mut bob, bob_id) = t.member(&admin, "bob").await;

    let (status, created) = bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "laptop"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("sk-sl-") && secret.len() == 49, "{secret}");
    assert_eq!(created["key"]["member_id"], bob_id);
    assert_eq!(created["key"]["pool_name"], "default", "the only pool is chosen by default");
    assert_eq!(created["key"]["status"], "active");
    let id = created["key"]["id"].as_i64().unwrap();

    let (status, list) = bob.call(Method::GET, "/api/me/keys", None).await;
    assert_eq!(status, StatusCode::OK);
    let list_text = list.to_string();
    assert!(!list_text.contains(&secret), "the secret is shown only once");
    assert_eq!(list[0]["id"], id);
    let hint = list[0]["hint"].as_str().unwrap();
    assert!(hint.starts_with(&secret[..10]) && hint.ends_with(&secret[secret.len() - 4..]), "{hint}");

    assert!(!contains(&t.db_bytes(), &secret), "database must hold only the hash");

    // another member cannot see or revoke it
    let (mut carol, _) = t.member(&admin, "carol").await;
    let (_, carols) = carol.call(Method::GET, "/api/me/keys", None).await;
    assert_eq!(carols, json!([]));
    let (status, body) = carol.call(Method::DELETE, &format!("/api/me/keys/{id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    let (status, revoked) = bob.call(Method::DELETE, &format!("/api/me/keys/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    assert_eq!(revoked["status"], "revoked");
    let first = revoked["revoked_at"].clone();
    let (_, again) = bob.call(Method::DELETE, &format!("/api/me/keys/{id}"), None).await;
    assert_eq!(again["revoked_at"], first, "revoking twice keeps the first time");
    let (_, list) = bob.call(Method::GET, "/api/me/keys", None).await;
    assert_eq!(list[0]["status"], "revoked", "revoked keys stay listed for history");
}

#[tokio::test]
async fn key_rules_pool_membership_expiry_and_admin_route() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    let (mut bob, bob_id) = t.member(&admin, "bob").await;
    let (_, pool) = admin.call(Method::POST, "/api/pools", Some(json!({"name": "team-b"}))).await;
    let pool_b = pool["id"].as_i64().unwrap();

    // not a member of team-b
    let (status, body) =
        bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "k", "pool_id": pool_b}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // expiry in the past
    let (status, _) = bob
        .call(Method::POST, "/api/me/keys", Some(json!({"name": "k", "expires_at": "2001-01-01T00:00:00Z"})))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // a member cannot create keys for others
    let (status, _) =
        bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "k", "member_id": 1}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // empty name
    let (status, _) = bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "  "}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    // once in two pools, bob must choose
    admin.call(Method::PATCH, &format!("/api/pools/{pool_b}"), Some(json!({"member_ids": [bob_id]}))).await;
    let (status, body) = bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "k"}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("pool_id"));
    let (status, body) =
        bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "k", "pool_id": pool_b}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["key"]["pool_name"], "team-b");

    // admin creates for bob, lists all, revokes any
    let (status, body) = admin
        .call(Method::POST, "/api/keys", Some(json!({"name": "ci", "member_id": bob_id, "pool_id": pool_b})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let admin_made = body["key"]["id"].as_i64().unwrap();
    let (status, body) = admin.call(Method::POST, "/api/keys", Some(json!({"name": "ci"}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (_, all) = admin.call(Method::GET, "/api/keys", None).await;
    assert_eq!(all.as_array().unwrap().len(), 2);
    let (status, body) = admin.call(Method::DELETE, &format!("/api/keys/{admin_made}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "revoked");
    let (status, _) = admin.call(Method::DELETE, "/api/keys/9999", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn pools_create_update_members_and_policy() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    let (_, bob_id) = t.member(&admin, "bob").await;
    let (status, pool) = admin
        .call(
            Method::POST,
            "/api/pools",
            Some(json!({
                "name": "codex-team",
                "member_ids": [bob_id],
                "model_policy": {"mode": "allow", "models": ["gpt-5.1-codex"], "aliases": {"fast": "gpt-5.1-codex"}}
            })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{pool}");
    assert_eq!(pool["member_ids"], json!([bob_id]));
    assert_eq!(pool["model_policy"]["mode"], "allow");
    assert_eq!(pool["model_policy"]["aliases"]["fast"], "gpt-5.1-codex");
    let id = pool["id"].as_i64().unwrap();

    let (status, pool) = admin
        .call(
            Method::PATCH,
            &format!("/api/pools/{id}"),
            Some(json!({"model_policy": {"mode": "deny", "models": ["o3"]}, "member_ids": []})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{pool}");
    assert_eq!(pool["model_policy"], json!({"mode": "deny", "models": ["o3"], "aliases": {}}));
    assert_eq!(pool["member_ids"], json!([]));
    assert_eq!(pool["name"], "codex-team", "unpatched fields stay");

    let (status, body) = admin.call(Method::POST, "/api/pools", Some(json!({"name": "CODEX-team"}))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, _) = admin
        .call(Method::POST, "/api/pools", Some(json!({"name": "x", "model_policy": {"mode": "sometimes"}})))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = admin
        .call(
            Method::POST,
            "/api/pools",
            Some(json!({"name": "x", "model_policy": {"models": ["has space"]}})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) =
        admin.call(Method::POST, "/api/pools", Some(json!({"name": "x", "member_ids": [424242]}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "unknown member ids are rejected");
    let (status, _) = admin.call(Method::GET, "/api/pools/999", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, pools) = admin.call(Method::GET, "/api/pools", None).await;
    assert_eq!(pools.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn account_credentials_are_sealed_and_never_returned() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    let (status, acct) = admin
        .call(
            Method::POST,
            "/api/accounts",
            Some(json!({
                "provider": "codex", "name": "alice-plus", "pool_ids": [1], "priority": 5,
                "credentials": {"kind": "oauth", "access_token": "AT-marker-7f3a", "refresh_token": "RT-marker-9c1e",
                                "expires_at": "2031-01-01T00:00:00Z", "provider_account_id": "acct-123"}
            })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{acct}");
    assert_eq!(acct["max_concurrency"], 30, "ADM-1 default");
    assert_eq!(acct["credential"]["kind"], "oauth");
    assert_eq!(acct["credential"]["provider_account_id"], "acct-123");
    assert_eq!(acct["pool_ids"], json!([1]));
    let id = acct["id"].as_i64().unwrap();
    for body in [acct.to_string(), admin.call(Method::GET, "/api/accounts", None).await.1.to_string()] {
        assert!(!body.contains("marker"), "credentials leaked: {body}");
    }
    let db = t.db_bytes();
    assert!(!contains(&db, "AT-marker-7f3a") && !contains(&db, "RT-marker-9c1e"), "stored in the clear");

    // the sealed credential opens with the key file
    let sealer = sublane::crypto::Sealer::load_or_create(&t.dir.path().join("credentials.key")).unwrap();
    let url = format!("sqlite://{}?mode=ro", t.db_path().display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let creds = sublane::accounts::credentials(&pool, &sealer, id).await.unwrap().unwrap();
    assert!(
        matches!(creds, app::model::CredentialInput::OAuth { ref access_token, .. } if access_token == "AT-marker-7f3a")
    );
    pool.close().await;

    // patch: limits and pools; then delete keeps history but drops it from lists
    let (status, acct) = admin
        .call(
            Method::PATCH,
            &format!("/api/accounts/{id}"),
            Some(json!({"max_concurrency": 4, "pool_ids": []})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{acct}");
    assert_eq!(acct["max_concurrency"], 4);
    assert_eq!(acct["pool_ids"], json!([]));
    let (status, _) = admin.call(Method::DELETE, &format!("/api/accounts/{id}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = admin.call(Method::GET, &format!("/api/accounts/{id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = admin.call(Method::DELETE, &format!("/api/accounts/{id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // the name is free again once deleted
    let (status, _) = admin
        .call(Method::POST, "/api/accounts", Some(json!({"provider": "codex", "name": "alice-plus"})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
}

#[tokio::test]
async fn account_validation() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    let cases = [
        // an API-key provider given OAuth tokens, and the reverse
        (
            json!({"provider": "openai_api", "name": "a", "credentials": {"kind": "oauth", "access_token": "x"}}),
            422,
        ),
        (json!({"provider": "claude", "name": "a", "credentials": {"kind": "api_key", "api_key": "x"}}), 422),
        (
            json!({"provider": "anthropic_api", "name": "a", "credentials": {"kind": "api_key", "api_key": " "}}),
            422,
        ),
        (json!({"provider": "codex", "name": "a", "max_concurrency": 0}), 422),
        (json!({"provider": "codex", "name": "a", "max_concurrency": 1001}), 422),
        (json!({"provider": "gemini_pro_max", "name": "a"}), 422),
        (json!({"provider": "codex", "name": "a", "pool_ids": [77]}), 422),
    ];
    for (body, want) in cases {
        let (status, resp) = admin.call(Method::POST, "/api/accounts", Some(body.clone())).await;
        assert_eq!(status.as_u16(), want, "{body} -> {resp}");
        assert!(!code(&resp).is_empty());
    }
    let (status, _) = admin
        .call(
            Method::POST,
            "/api/accounts",
            Some(json!({"provider": "openai_api", "name": "k1",
            "credentials": {"kind": "api_key", "api_key": "sk-proj-abc"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) =
        admin.call(Method::POST, "/api/accounts", Some(json!({"provider": "codex", "name": "K1"}))).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
}

#[tokio::test]
async fn keys_show_expired_once_their_time_passes() {
    let clock = sublane::clock::FakeClock::new(chrono::DateTime::from_timestamp(1_900_000_000, 0).unwrap());
    let t = TestServer::start_with_clock(clock.clone()).await;
    let mut admin = t.admin().await;
    let expires = chrono::DateTime::from_timestamp(1_900_000_000 + 3600, 0).unwrap();
    let (status, body) = admin
        .call(Method::POST, "/api/me/keys", Some(json!({"name": "short-lived", "expires_at": expires})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["key"]["status"], "active");
    clock.advance(chrono::TimeDelta::seconds(3600));
    let (_, list) = admin.call(Method::GET, "/api/me/keys", None).await;
    assert_eq!(list[0]["status"], "expired");
}

/// API-1 / ADM-1: `PATCH /api/accounts/{id}/limits` takes 1..=1000 and answers 422 outside.
#[tokio::test]
async fn account_limits_route_validates_the_range() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    let (_, acct) =
        admin.call(Method::POST, "/api/accounts", Some(json!({"provider": "codex", "name": "a"}))).await;
    let path = format!("/api/accounts/{}/limits", acct["id"]);
    for bad in [
        json!({"max_concurrency": 0}),
        json!({"max_concurrency": 1001}),
        json!({"max_concurrency": -1}),
        json!({}),
    ] {
        let (status, body) = admin.call(Method::PATCH, &path, Some(bad.clone())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad} -> {body}");
    }
    for good in [1, 1000, 7] {
        let (status, body) = admin.call(Method::PATCH, &path, Some(json!({"max_concurrency": good}))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["max_concurrency"], good);
    }
    let (mut bob, _) = t.member(&admin, "bob").await;
    assert_eq!(
        bob.call(Method::PATCH, &path, Some(json!({"max_concurrency": 5}))).await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        admin.call(Method::PATCH, "/api/accounts/999/limits", Some(json!({"max_concurrency": 5}))).await.0,
        StatusCode::NOT_FOUND
    );
}

/// Issue 12: a member switches their own key off and on and changes its expiry; a switched-off key
/// is refused by the proxy at once; a revoked key stays revoked; nobody touches another's key
/// (404); admins list keys by member and pool and change any.
#[tokio::test]
async fn keys_are_switched_off_and_on_by_their_owner_or_an_admin() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    let (mut bob, bob_id) = t.member(&admin, "bob").await;
    let (mut eve, _) = t.member(&admin, "eve").await;
    let (_, made) = bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "laptop"}))).await;
    let id = made["key"]["id"].as_i64().unwrap();
    let secret = made["secret"].as_str().unwrap().to_owned();
    let http = reqwest::Client::new();
    let models = |s: &str| http.get(format!("{}/v1/models", t.base)).bearer_auth(s.to_owned()).send();
    assert_eq!(models(&secret).await.unwrap().status(), StatusCode::OK);

    let path = format!("/api/me/keys/{id}");
    let (status, _) = eve.call(Method::PATCH, &path, Some(json!({"enabled": false}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another member's key does not exist for eve");
    let (status, key) = bob.call(Method::PATCH, &path, Some(json!({"enabled": false}))).await;
    assert_eq!((status, key["status"].as_str()), (StatusCode::OK, Some("disabled")), "{key}");
    assert_eq!(models(&secret).await.unwrap().status(), StatusCode::UNAUTHORIZED, "refused at once");
    let (_, key) = bob
        .call(Method::PATCH, &path, Some(json!({"enabled": true, "expires_at": "2099-01-01T00:00:00Z"})))
        .await;
    assert_eq!(
        (key["status"].as_str(), key["expires_at"].as_str()),
        (Some("active"), Some("2099-01-01T00:00:00Z"))
    );
    assert_eq!(models(&secret).await.unwrap().status(), StatusCode::OK);
    let (status, e) =
        bob.call(Method::PATCH, &path, Some(json!({"expires_at": "2001-01-01T00:00:00Z"}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    let (_, key) = bob.call(Method::PATCH, &path, Some(json!({"expires_at": null}))).await;
    assert_eq!(key["expires_at"], serde_json::Value::Null, "never expires");

    // admins: filtered lists, and any key
    let (_, mine) = bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "ci"}))).await;
    let (status, list) = admin.call(Method::GET, &format!("/api/keys?member_id={bob_id}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list.as_array().unwrap().len(), 2);
    let (_, list) = admin.call(Method::GET, "/api/keys?pool_id=999", None).await;
    assert!(list.as_array().unwrap().is_empty());
    let other = mine["key"]["id"].as_i64().unwrap();
    let (status, key) =
        admin.call(Method::PATCH, &format!("/api/keys/{other}"), Some(json!({"enabled": false}))).await;
    assert_eq!((status, key["status"].as_str()), (StatusCode::OK, Some("disabled")));
    let (status, _) =
        bob.call(Method::PATCH, &format!("/api/keys/{other}"), Some(json!({"enabled": true}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "the admin route is for admins");
    let own = format!("/api/me/keys/{other}");
    let (status, _) = bob.call(Method::PATCH, &own, Some(json!({"enabled": true}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "an admin's switch-off binds the owner");
    admin.call(Method::PATCH, &format!("/api/keys/{other}"), Some(json!({"enabled": true}))).await;
    bob.call(Method::PATCH, &own, Some(json!({"enabled": false}))).await;
    let (status, key) = bob.call(Method::PATCH, &own, Some(json!({"enabled": true}))).await;
    assert_eq!(
        (status, key["status"].as_str()),
        (StatusCode::OK, Some("active")),
        "the owner's own switch-off is theirs"
    );

    // an admin's expiry binds the owner: forward yes, back or away no
    let (status, _) = admin
        .call(
            Method::PATCH,
            &format!("/api/keys/{other}"),
            Some(json!({"expires_at": "2099-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    for later in [json!(null), json!("2099-06-01T00:00:00Z")] {
        let (status, body) = bob.call(Method::PATCH, &own, Some(json!({"expires_at": later}))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{later}: {body}");
    }
    let (status, key) =
        bob.call(Method::PATCH, &own, Some(json!({"expires_at": "2098-01-01T00:00:00Z"}))).await;
    assert_eq!((status, key["expires_at"].as_str()), (StatusCode::OK, Some("2098-01-01T00:00:00Z")));
    admin.call(Method::PATCH, &format!("/api/keys/{other}"), Some(json!({"expires_at": null}))).await;
    let (status, _) =
        bob.call(Method::PATCH, &own, Some(json!({"expires_at": "2099-06-01T00:00:00Z"}))).await;
    assert_eq!(status, StatusCode::OK, "an admin's cleared expiry frees the owner again");

    // a revoked key stays revoked
    bob.call(Method::DELETE, &path, None).await;
    let (status, _) = bob.call(Method::PATCH, &path, Some(json!({"enabled": true}))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = bob.call(Method::PATCH, &path, Some(json!({"bogus": 1}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
}

/// Deleting a member: signed out, keys refused at once, out of every pool; their records stay and
/// read "name (deleted)"; the username is free again; nobody deletes themselves.
#[tokio::test]
async fn deleting_a_member_revokes_their_keys_and_keeps_their_records() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    let (mut bob, bob_id) = t.member(&admin, "bob").await;
    let (_, made) = bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "laptop"}))).await;
    let secret = made["secret"].as_str().unwrap().to_owned();
    let http = reqwest::Client::new();
    let call = |s: &str| {
        http.post(format!("{}/v1/responses", t.base))
            .bearer_auth(s.to_owned())
            .json(&json!({"model": "gpt-5", "input": "hi"}))
            .send()
    };
    // no account serves the pool: the request is refused after authentication, and recorded
    assert_ne!(call(&secret).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(t.records(1).await.len(), 1);

    let (status, body) = admin.call(Method::DELETE, &format!("/api/members/{bob_id}"), None).await;
    assert_eq!((status, body["revoked_keys"].as_u64()), (StatusCode::OK, Some(1)), "{body}");
    assert_eq!(call(&secret).await.unwrap().status(), StatusCode::UNAUTHORIZED, "the key is refused at once");
    let (status, _) = bob.call(Method::GET, "/api/me/keys", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "their session ended");
    let again = t.client();
    let resp = again
        .request(Method::POST, "/api/session")
        .json(&json!({"username": "bob", "password": common::MEMBER_PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "they cannot sign in");
    let (_, members) = admin.call(Method::GET, "/api/members", None).await;
    assert!(members.as_array().unwrap().iter().all(|m| m["id"] != bob_id), "{members}");
    let (status, _) = admin.call(Method::GET, &format!("/api/members/{bob_id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, pool) = admin.call(Method::GET, "/api/pools/1", None).await;
    assert!(!pool["member_ids"].as_array().unwrap().contains(&json!(bob_id)), "{pool}");
    let (_, page) = admin.call(Method::GET, "/api/requests", None).await;
    assert_eq!(page["items"][0]["username"], "bob (deleted)", "{page}");
    let (_, keys) = admin.call(Method::GET, &format!("/api/keys?member_id={bob_id}"), None).await;
    assert_eq!(keys[0]["status"], "revoked", "the key is kept, revoked: {keys}");
    let (status, _) = admin.call(Method::DELETE, &format!("/api/members/{bob_id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "deleted once");

    // the name is free again, for a new member with nothing of the old one's
    let (mut bob2, bob2_id) = t.member(&admin, "bob").await;
    assert_ne!(bob2_id, bob_id);
    let (_, mine) = bob2.call(Method::GET, "/api/me/keys", None).await;
    assert_eq!(mine, json!([]));
    let (_, own) = bob2.call(Method::GET, "/api/me/requests", None).await;
    assert_eq!(own["items"], json!([]), "the old member's records stay theirs");

    // nobody deletes themselves (so an enabled admin, the one deleting, always stays)
    let (_, me) = admin.call(Method::GET, "/api/me", None).await;
    let admin_id = me["id"].as_i64().unwrap();
    let (status, body) = admin.call(Method::DELETE, &format!("/api/members/{admin_id}"), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (_, other) = admin
        .call(
            Method::POST,
            "/api/members",
            Some(json!({"username": "root2", "password": "long-enough", "role": "admin"})),
        )
        .await;
    let other_id = other["id"].as_i64().unwrap();
    let (status, _) = admin.call(Method::DELETE, &format!("/api/members/{other_id}"), None).await;
    assert_eq!(status, StatusCode::OK, "another admin can be deleted");
}

/// Deleting a pool: its keys are refused at once, members and accounts leave it (the accounts
/// stay), its name is free again; policy mistakes are 422s naming the field.
#[tokio::test]
async fn deleting_a_pool_revokes_its_keys_and_frees_its_name() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    let (mut bob, bob_id) = t.member(&admin, "bob").await;
    let (_, pool) =
        admin.call(Method::POST, "/api/pools", Some(json!({"name": "team", "member_ids": [bob_id]}))).await;
    let pool_id = pool["id"].as_i64().unwrap();
    let (status, account) = admin
        .call(
            Method::POST,
            "/api/accounts",
            Some(json!({
                "provider": "openai_api", "name": "k1", "pool_ids": [1, pool_id],
                "credentials": {"kind": "api_key", "api_key": "sk-test-1"}
            })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{account}");
    let (_, made) =
        bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "ci", "pool_id": pool_id}))).await;
    let secret = made["secret"].as_str().unwrap().to_owned();
    let (_, kept) = bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "main", "pool_id": 1}))).await;
    let http = reqwest::Client::new();
    let models = |s: &str| http.get(format!("{}/v1/models", t.base)).bearer_auth(s.to_owned()).send();
    assert_eq!(models(&secret).await.unwrap().status(), StatusCode::OK);

    let (status, body) = admin.call(Method::DELETE, &format!("/api/pools/{pool_id}"), None).await;
    assert_eq!((status, body["revoked_keys"].as_u64()), (StatusCode::OK, Some(1)), "{body}");
    assert_eq!(models(&secret).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        models(kept["secret"].as_str().unwrap()).await.unwrap().status(),
        StatusCode::OK,
        "keys of other pools go on"
    );
    let (_, account) = admin.call(Method::GET, &format!("/api/accounts/{}", account["id"]), None).await;
    assert_eq!(account["pool_ids"], json!([1]), "the account stays, in its other pools");
    let (_, pools) = admin.call(Method::GET, "/api/pools", None).await;
    assert_eq!(pools.as_array().unwrap().len(), 1, "{pools}");
    let (status, _) = admin.call(Method::GET, &format!("/api/pools/{pool_id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) =
        admin.call(Method::PATCH, &format!("/api/pools/{pool_id}"), Some(json!({"name": "x"}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, keys) = admin.call(Method::GET, &format!("/api/keys?pool_id={pool_id}"), None).await;
    assert_eq!(
        (keys[0]["status"].as_str(), keys[0]["pool_name"].as_str()),
        (Some("revoked"), Some("team (deleted)"))
    );
    let (status, body) =
        bob.call(Method::POST, "/api/me/keys", Some(json!({"name": "x", "pool_id": pool_id}))).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("pool_id"))
    );
    let (status, _) = admin
        .call(
            Method::POST,
            "/api/members",
            Some(json!({"username": "eve", "password": "long-enough", "pool_ids": [pool_id]})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "a deleted pool cannot be joined");
    let (status, _) = admin
        .call(
            Method::PATCH,
            &format!("/api/accounts/{}", account["id"]),
            Some(json!({"pool_ids": [1, pool_id]})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "a form loaded before the delete cannot put an account back"
    );
    let (status, _) = admin.call(Method::POST, "/api/pools", Some(json!({"name": "team"}))).await;
    assert_eq!(status, StatusCode::CREATED, "the name is free again");
    let (status, body) = admin.call(Method::POST, "/api/pools", Some(json!({"name": "ops~deleted~1"}))).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("name")));

    // model policy mistakes name their field
    let cases = [
        (json!({"mode": "deny", "models": ["has space"]}), "model_policy.models"),
        (json!({"mode": "deny", "models": ["o3", "o3"]}), "model_policy.models"),
        (json!({"mode": "allow", "models": []}), "model_policy.models"),
        (json!({"aliases": {"fast": ""}}), "model_policy.aliases"),
        (json!({"aliases": {"same": "same"}}), "model_policy.aliases"),
    ];
    for (policy, field) in cases {
        let (status, body) =
            admin.call(Method::PATCH, "/api/pools/1", Some(json!({"model_policy": policy}))).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{policy} -> {body}");
        assert_eq!(body["error"]["field"], field, "{body}");
    }
    let (status, body) = admin.call(Method::PATCH, "/api/pools/1", Some(json!({"name": " "}))).await;
    assert_eq!((status, body["error"]["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("name")));
    let (status, body) =
        admin.call(Method::PATCH, "/api/pools/1", Some(json!({"member_ids": [bob_id, 4242]}))).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("member_ids"))
    );
}

/// ID-6: a database restored without its credentials key, or beside another key, is refused at
/// start (it would start with a new key and skip every account, each call answered
/// `no_available_account`), until the operator says the key is lost: then the accounts it cannot
/// open lose their credentials and show `error`, and new credentials bring them back.
#[tokio::test]
async fn a_start_without_the_credentials_key_is_refused_unless_it_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let t = TestServer::start_in(dir, &[("SUBLANE_ADMIN_PASSWORD", common::ADMIN_PASSWORD)]).await;
    let mut admin = t.admin().await;
    let account = json!({"provider": "openai_api", "name": "sealed", "pool_ids": [1],
                         "credentials": {"kind": "api_key", "api_key": "sk-upstream-1"}});
    let (status, acct) = admin.call(Method::POST, "/api/accounts", Some(account)).await;
    assert_eq!(status, StatusCode::CREATED, "{acct}");
    let id = acct["id"].as_i64().unwrap();
    let TestServer { server, dir, .. } = t;
    server.shutdown().await.unwrap();
    let start = |env: &'static [(&'static str, &'static str)]| {
        let config = common::config_for(data.clone(), env);
        async move { sublane::serve::start(config, std::sync::Arc::new(sublane::clock::SystemClock)).await }
    };
    let key = data.join("credentials.key");
    let original = std::fs::read(&key).unwrap();

    std::fs::remove_file(&key).unwrap();
    let refused = start(&[]).await.err().expect("a missing key is refused").to_string();
    assert!(refused.contains("credentials.key is missing") && refused.contains("1 account"), "{refused}");
    assert!(!key.exists(), "no new key is made");

    std::fs::write(&key, [7u8; 32]).unwrap();
    let refused = start(&[]).await.err().expect("another key is refused").to_string();
    assert!(refused.contains("opens none of the stored credentials"), "{refused}");

    // the right key again: it starts
    std::fs::write(&key, &original).unwrap();
    start(&[]).await.unwrap().shutdown().await.unwrap();

    // the key is lost: replaced, the account shows error and serves nothing until re-authorized;
    // later starts need no flag
    std::fs::remove_file(&key).unwrap();
    let server = start(&[("SUBLANE_REPLACE_CREDENTIALS_KEY", "true")]).await.unwrap();
    assert!(key.exists(), "a new key");
    server.shutdown().await.unwrap();
    start(&[]).await.unwrap().shutdown().await.unwrap();
    let status = |t: &TestServer| {
        let url = format!("sqlite://{}?mode=ro", t.db_path().display());
        async move {
            let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
            let row: (String, Option<String>) =
                sqlx::query_as("SELECT status, reauth_reason FROM accounts WHERE id = ?")
                    .bind(id)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            pool.close().await;
            row
        }
    };
    let t = TestServer::start_in(dir, &[]).await;
    assert_eq!(status(&t).await, ("error".to_owned(), Some("credentials_key_replaced".to_owned())));
    // the old key found again: the account comes back as it was, no re-authorization
    let TestServer { server, dir, .. } = t;
    server.shutdown().await.unwrap();
    std::fs::write(&key, &original).unwrap();
    let t = TestServer::start_in(dir, &[]).await;
    assert_eq!(status(&t).await, ("active".to_owned(), None));
    // lost again and replaced: new credentials bring it back
    let TestServer { server, dir, .. } = t;
    server.shutdown().await.unwrap();
    std::fs::remove_file(&key).unwrap();
    start(&[("SUBLANE_REPLACE_CREDENTIALS_KEY", "true")]).await.unwrap().shutdown().await.unwrap();
    let t = TestServer::start_in(dir, &[]).await;
    let mut admin = t.admin().await;
    let (_, acct) = admin.call(Method::GET, &format!("/api/accounts/{id}"), None).await;
    assert_eq!(acct["status"], "error", "{acct}");
    let creds = json!({"credentials": {"kind": "api_key", "api_key": "sk-upstream-2"}});
    let (status, acct) = admin.call(Method::PATCH, &format!("/api/accounts/{id}"), Some(creds)).await;
    assert_eq!((status, &acct["status"]), (StatusCode::OK, &json!("active")), "{acct}");
}
