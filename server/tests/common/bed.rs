//! The scheduling rig on a fake clock: token expiry, backoff, quota freshness and retention are
//! exact, with no sleeps. Test files add their own helpers in `impl Bed` blocks.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use sublane::{clock::FakeClock, mock_upstream::MockUpstream};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest};

use super::{
    TestServer,
    rig::{MODEL, Rig},
};

/// Where every test's fake clock starts (unix seconds).
pub const T0: i64 = 1_900_000_000;

/// SubLane on a fake clock with the mock upstream.
pub struct Bed {
    pub rig: Rig,
    pub clock: FakeClock,
}

impl Bed {
    pub async fn start(extra: &[(&str, &str)]) -> Bed {
        let mock = MockUpstream::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let clock = FakeClock::new(DateTime::from_timestamp(T0, 0).unwrap());
        let t =
            Rig::server_with_clock(&mock, extra, tempfile::tempdir().unwrap(), Arc::new(clock.clone())).await;
        Bed { rig: Rig::prepare(t, mock).await, clock }
    }

    /// The same data directory and clock in a new process.
    pub async fn restart(self) -> Bed {
        let Bed { rig, clock } = self;
        let Rig { t, mock, .. } = rig;
        let TestServer { server, dir, .. } = t;
        server.shutdown().await.unwrap();
        let t = Rig::server_with_clock(&mock, &[], dir, Arc::new(clock.clone())).await;
        Bed { rig: Rig::prepare(t, mock).await, clock }
    }

    /// The fake clock's time, unix seconds.
    pub fn now(&self) -> i64 {
        use sublane::clock::Clock;
        self.clock.now().timestamp()
    }

    pub fn advance(&self, secs: i64) {
        self.clock.advance(TimeDelta::seconds(secs));
    }

    /// One WebSocket session with one Responses turn; the events up to `response.completed`,
    /// every one of which must not be an error.
    pub async fn ws_turn(&self) -> Vec<Value> {
        let url = format!("{}/v1/responses", self.rig.t.base.replace("http://", "ws://"));
        let mut req = url.into_client_request().unwrap();
        req.headers_mut().insert("authorization", format!("Bearer {}", self.rig.key).parse().unwrap());
        let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
        let create =
            json!({"type": "response.create", "model": MODEL, "input": [{"role": "user", "content": "hi"}]});
        ws.send(tungstenite::Message::text(create.to_string())).await.unwrap();
        let mut events = Vec::new();
        loop {
            let msg = tokio::time::timeout(std::time::Duration::from_secs(10), ws.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let tungstenite::Message::Text(t) = msg else { continue };
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            assert_ne!(v["type"], "error", "{v}");
            let done = v["type"] == "response.completed";
            events.push(v);
            if done {
                return events;
            }
        }
    }
}
