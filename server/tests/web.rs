//! The web app through the real server: pages render on the server (UI-5), sign-in works as a
//! plain form post, and server-function errors carry honest statuses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ADMIN_PASSWORD, TestServer};
use reqwest::{Method, StatusCode, header};

const HTML: &str = "text/html,application/xhtml+xml";

#[tokio::test]
async fn pages_redirect_visitors_and_render_for_members() {
    let t = TestServer::start().await;
    let anon = t.client();
    let resp = anon.request(Method::GET, "/keys").header(header::ACCEPT, HTML).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::FOUND);
    assert_eq!(resp.headers()[header::LOCATION], "/login");

    let login = anon.request(Method::GET, "/login").header(header::ACCEPT, HTML).send().await.unwrap();
    assert_eq!(login.status(), StatusCode::OK);
    let html = login.text().await.unwrap();
    assert!(html.contains("Sign in to SubLane") && html.contains("/pkg/sublane.js"), "{html}");

    let (mut bob, _) = t.member(&t.admin().await, "bob").await;
    let page = bob.request(Method::GET, "/").header(header::ACCEPT, HTML).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains("No requests recorded yet"), "requests page renders fully on the server");
    assert!(
        html.contains("API keys") && !html.contains("/admin/accounts"),
        "members see no admin navigation"
    );

    let (status, _) = bob.call(Method::POST, "/api/me/keys", Some(serde_json::json!({"name": "desk"}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let keys = bob.request(Method::GET, "/keys").header(header::ACCEPT, HTML).send().await.unwrap();
    let html = keys.text().await.unwrap();
    assert!(html.contains("desk") && html.contains("sk-sl-"), "keys are listed in the server HTML");
    // The browser hydrates with the data serialized beside the HTML, so the page must be built
    // once: a page built again sends a second copy of its data, and when the data changed in
    // between (a new record) the HTML no longer matches the first copy and hydration panics.
    let serialized = html.split("__RESOLVED_RESOURCES[").skip(1).map(|s| s.split("\";").next().unwrap_or(s));
    let copies = serialized.filter(|data| data.contains("desk")).count();
    assert_eq!(copies, 1, "the keys page's data is serialized once: {html}");

    let admin_page =
        t.admin().await.request(Method::GET, "/").header(header::ACCEPT, HTML).send().await.unwrap();
    assert!(admin_page.text().await.unwrap().contains("/admin/accounts"), "admins see admin navigation");
}

#[tokio::test]
async fn unknown_pages_are_404() {
    let t = TestServer::start().await;
    let resp =
        t.client().request(Method::GET, "/no/such/page").header(header::ACCEPT, HTML).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn login_form_post_sets_the_cookie_and_redirects_without_javascript() {
    let t = TestServer::start().await;
    let mut c = t.client();
    let resp = c
        .request(Method::POST, "/rpc/login")
        .header(header::ACCEPT, HTML)
        .header(header::REFERER, format!("{}/login", t.base))
        .form(&[("username", "admin"), ("password", ADMIN_PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FOUND);
    assert_eq!(resp.headers()[header::LOCATION], "/");
    c.absorb(&resp);
    assert_eq!(c.call(Method::GET, "/api/me", None).await.0, StatusCode::OK);
}

#[tokio::test]
async fn server_function_errors_use_the_right_status() {
    let t = TestServer::start().await;
    let c = t.client();
    let resp = c
        .request(Method::POST, "/rpc/login")
        .form(&[("username", "admin"), ("password", "wrong-password")])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "invalid_credentials");
    assert!(!body.to_string().contains("wrong-password"));

    let resp = c.request(Method::POST, "/rpc/my_keys").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
}

/// Without JavaScript a refused form comes back to its own page, which shows the error: the
/// answer is server_fn's redirect, never a 4xx, whose `Location` a browser ignores to show the
/// error's JSON. Creating a key is refused so, before any key is made: its secret would be lost.
#[tokio::test]
async fn a_refused_form_post_without_javascript_returns_to_its_page_with_the_error() {
    let t = TestServer::start().await;
    let (mut bob, _) = t.member(&t.admin().await, "bob").await;
    let post = |c: &common::Client, endpoint: &str, page: &str, form: &[(&str, &str)]| {
        c.request(Method::POST, &format!("/rpc/{endpoint}"))
            .header(header::ACCEPT, HTML)
            .header(header::REFERER, format!("{}{page}", t.base))
            .form(form)
    };
    let cases = [
        (
            "login",
            "/login",
            vec![("username", "admin"), ("password", "wrong-password")],
            "wrong username or password",
        ),
        (
            "create_key",
            "/keys",
            vec![("name", "desk"), ("expires_at", "")],
            "Creating a key needs JavaScript",
        ),
    ];
    for (endpoint, page, form, shown) in cases {
        let cookie = if endpoint == "login" { None } else { bob.cookie.clone() };
        let client = common::Client { cookie, ..t.client() };
        let resp = post(&client, endpoint, page, &form).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::FOUND, "{endpoint}");
        let location = resp.headers()[header::LOCATION].to_str().unwrap().to_owned();
        assert!(location.starts_with(&format!("{}{page}?", t.base)), "{location}");
        assert!(!location.contains("wrong-password"), "{location}");
        let html = client
            .request(Method::GET, &location[t.base.len()..])
            .header(header::ACCEPT, HTML)
            .send()
            .await
            .unwrap();
        assert_eq!(html.status(), StatusCode::OK);
        let html = html.text().await.unwrap();
        assert!(html.contains(shown), "{endpoint}: the page shows the error: {html}");
    }
    let (status, keys) = bob.call(Method::GET, "/api/me/keys", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(keys, serde_json::json!([]), "no key was made");
}

/// A page rendered on the server keeps its resources' error statuses: it asks for HTML like a
/// form posted without JavaScript, but it is a GET.
#[tokio::test]
async fn a_page_whose_data_is_refused_keeps_the_refusals_status() {
    let t = TestServer::start().await;
    let (bob, _) = t.member(&t.admin().await, "bob").await;
    for (path, status) in
        [("/admin/members", StatusCode::FORBIDDEN), ("/?outcome=succes", StatusCode::UNPROCESSABLE_ENTITY)]
    {
        let resp = bob.request(Method::GET, path).header(header::ACCEPT, HTML).send().await.unwrap();
        assert_eq!(resp.status(), status, "{path}");
    }
}

/// A later page of the request history links back to the newest, with its filters kept.
#[tokio::test]
async fn a_later_history_page_links_to_the_newest_with_its_filters() {
    let t = TestServer::start().await;
    let (bob, _) = t.member(&t.admin().await, "bob").await;
    let page = |path: &'static str| {
        let req = bob.request(Method::GET, path).header(header::ACCEPT, HTML);
        async move { req.send().await.unwrap().text().await.unwrap() }
    };
    let later = page("/?cursor=999&outcome=success").await;
    assert!(later.contains(r#"href="?outcome=success""#) && later.contains("Newest requests"), "{later}");
    assert!(!page("/?outcome=success").await.contains("Newest requests"), "the first page has none");
}

/// The Requests page's server function with no filter set: form encoding omits the argument.
#[tokio::test]
async fn request_history_server_function_accepts_an_absent_filter() {
    let t = TestServer::start().await;
    let admin = t.admin().await;
    for body in ["", "everyone=true"] {
        let resp = admin
            .request(Method::POST, "/rpc/requests")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{body:?}");
        let v: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(v["items"], serde_json::json!([]));
    }
}

/// The Accounts page's server functions: admins only, and they act like the JSON API.
#[tokio::test]
async fn account_server_functions_are_admin_only_and_act_like_the_api() {
    let t = TestServer::start().await;
    let mut admin = t.admin().await;
    let (status, account) = admin
        .call(
            Method::POST,
            "/api/accounts",
            Some(serde_json::json!({"provider": "codex", "name": "web-codex", "pool_ids": [1],
                "credentials": {"kind": "oauth", "access_token": "t"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let id = account["id"].as_i64().unwrap();
    let form = |c: &common::Client, endpoint: &str, body: String| {
        c.request(Method::POST, &format!("/rpc/{endpoint}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
    };
    let (member, _) = t.member(&admin, "not-an-admin").await;
    for (endpoint, body) in [
        ("account_runtime", String::new()),
        ("account_action", format!("id={id}&action=disable")),
        ("account_settings", format!("id={id}&name=x&pools=1&max_concurrency=5&priority=1&expires_at=")),
        ("account_pools", String::new()),
        ("account_sign_in", "provider=codex".to_owned()),
        (
            "add_account",
            "provider=openai_api&name=k&pools=1&max_concurrency=5&priority=0&api_key=sk-1".to_owned(),
        ),
        ("reauthorize_account", format!("id={id}&api_key=sk-1")),
        ("delete_account", format!("id={id}")),
    ] {
        let resp = form(&member, endpoint, body).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{endpoint}");
    }
    let resp = form(&admin, "account_runtime", String::new()).send().await.unwrap();
    let list: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(
        (&list[0]["name"], &list[0]["in_flight"]),
        (&serde_json::json!("web-codex"), &serde_json::json!(0))
    );
    let resp = form(&admin, "account_action", format!("id={id}&action=disable")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let done: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(done["account"]["status"], "disabled");
    let settings = format!("id={id}&name=web-codex-2&pools=&max_concurrency=5&priority=3&expires_at=");
    let resp = form(&admin, "account_settings", settings).send().await.unwrap();
    let view: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(
        (&view["name"], &view["max_concurrency"], &view["priority"], &view["pool_ids"]),
        (
            &serde_json::json!("web-codex-2"),
            &serde_json::json!(5),
            &serde_json::json!(3),
            &serde_json::json!([])
        )
    );
    let resp = form(
        &admin,
        "account_settings",
        format!("id={id}&name=n&pools=1,x&max_concurrency=5&priority=3&expires_at="),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY, "a pool id that is no number");
    // the expiry field: a `datetime-local` value read as UTC, empty for never, nonsense refused
    let expiring =
        format!("id={id}&name=n&pools=&max_concurrency=5&priority=3&expires_at=2031-01-02T03%3A04");
    let view: serde_json::Value =
        form(&admin, "account_settings", expiring).send().await.unwrap().json().await.unwrap();
    assert_eq!(view["expires_at"], "2031-01-02T03:04:00Z", "{view}");
    let resp = form(&admin, "account_runtime", String::new()).send().await.unwrap();
    let list: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(
        (&list[0]["expires_at"], &list[0]["expired"]),
        (&serde_json::json!(1_925_089_440), &serde_json::json!(false))
    );
    // a form without the field (an older page's) is refused, not read as "never"; the same minute
    // keeps the API's second
    let without = format!("id={id}&name=n&pools=&max_concurrency=5&priority=3");
    let resp = form(&admin, "account_settings", without).send().await.unwrap();
    assert!(!resp.status().is_success(), "{}", resp.status());
    let (_, view) = admin.call(Method::GET, &format!("/api/accounts/{id}"), None).await;
    assert_eq!(view["expires_at"], "2031-01-02T03:04:00Z", "{view}");
    let path = format!("/api/accounts/{id}");
    let (status, _) = admin
        .call(Method::PATCH, &path, Some(serde_json::json!({"expires_at": "2031-01-02T03:04:30Z"})))
        .await;
    assert_eq!(status, StatusCode::OK);
    let same = format!("id={id}&name=n&pools=&max_concurrency=5&priority=3&expires_at=2031-01-02T03%3A04");
    let view: serde_json::Value =
        form(&admin, "account_settings", same).send().await.unwrap().json().await.unwrap();
    assert_eq!(view["expires_at"], "2031-01-02T03:04:30Z", "{view}");
    let never = format!("id={id}&name=n&pools=&max_concurrency=5&priority=3&expires_at=");
    let view: serde_json::Value =
        form(&admin, "account_settings", never).send().await.unwrap().json().await.unwrap();
    assert_eq!(view["expires_at"], serde_json::Value::Null);
    let bad = format!("id={id}&name=n&pools=&max_concurrency=5&priority=3&expires_at=tomorrow");
    let resp = form(&admin, "account_settings", bad).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY, "a time that is no time");
    // an API key account added and deleted through the web app's functions
    let add = "provider=anthropic_api&name=web-key&pools=1&max_concurrency=4&priority=0&api_key=sk-ant-api-1";
    let resp = form(&admin, "add_account", add.to_owned()).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let added: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(
        (&added["credential"]["kind"], &added["pool_ids"]),
        (&serde_json::json!("api_key"), &serde_json::json!([1]))
    );
    let both = "provider=anthropic_api&name=two&pools=1&max_concurrency=4&priority=0&api_key=k&file=x";
    let resp = form(&admin, "add_account", both.to_owned()).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY, "exactly one source of credentials");
    let resp = form(&admin, "delete_account", format!("id={}", added["id"])).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let (status, _) = admin.call(Method::GET, &format!("/api/accounts/{}", added["id"]), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let resp = form(
        &admin,
        "account_settings",
        format!("id={id}&name=n&pools=&max_concurrency=0&priority=3&expires_at="),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY, "the API's bounds hold here too");
}

/// Self-service: a member changes their own password with the current one; the session making the
/// change stays, the others end when asked; a wrong current password or a weak new one changes
/// nothing.
#[tokio::test]
async fn members_change_their_own_password() {
    let t = TestServer::start().await;
    let admin = t.admin().await;
    let (mut bob, _) = t.member(&admin, "carol").await;
    let mut other = t.client();
    other.sign_in("carol", common::MEMBER_PASSWORD).await;
    let (status, _) = t
        .client()
        .call(
            Method::POST,
            "/api/me/password",
            Some(serde_json::json!({"current_password": "x", "new_password": "y"})),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let wrong = serde_json::json!({"current_password": "not-it-at-all", "new_password": "a-new-password"});
    let (status, e) = bob.call(Method::POST, "/api/me/password", Some(wrong)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{e}");
    let weak = serde_json::json!({"current_password": common::MEMBER_PASSWORD, "new_password": "short"});
    let (status, e) = bob.call(Method::POST, "/api/me/password", Some(weak)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().starts_with("new_password"), "{e}");
    let mismatch = serde_json::json!({"current_password": common::MEMBER_PASSWORD, "new_password": "a-new-password", "confirm_password": "another-one!"});
    let (status, _) = bob.call(Method::POST, "/api/me/password", Some(mismatch)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let good =
        serde_json::json!({"current_password": common::MEMBER_PASSWORD, "new_password": "a-new-password"});
    let (status, _) = bob.call(Method::POST, "/api/me/password", Some(good)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = bob.call(Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::OK, "the session that changed it stays");
    let (status, _) = other.call(Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the other session ended");
    let mut again = t.client();
    again.sign_in("carol", "a-new-password").await;
    let (status, _) = again.call(Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::OK, "the new password works");
}
