//! What the proxy reads from a client's request body: only the fields routing needs. The body
//! itself is forwarded as bytes (decompressed when the client compressed it, since upstream
//! edits and usage parsing need plain JSON).

use std::{
    io::Read,
    sync::{Arc, LazyLock},
    time::Duration,
};

use axum::{
    body::{Body, Bytes},
    http::{HeaderMap, header},
};
use serde::Deserialize;
use tokio::sync::Semaphore;

use super::{body_edit::Members, error::GatewayError};

/// Largest model request body, as sent and after decompression (long histories are big).
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;
/// Longest model id accepted; longer ones are refused before scheduling, so no table keyed by
/// model (counters, bindings, failure state) grows with junk names.
pub const MAX_MODEL_BYTES: usize = 256;
/// Longest a client may take to send a model request body.
pub const BODY_READ_DEADLINE: Duration = Duration::from_secs(5 * 60);
/// zstd frames may ask for a window of at most 2^24 bytes (16 MiB); zstd's own default limit is
/// 2^27, and a "long" frame could make each decoder hold 128 MiB.
pub const MAX_ZSTD_WINDOW_LOG: u32 = 24;
/// Decompressions running at once (each holds a window and up to the body limit of output).
const DECODE_CONCURRENCY: usize = 4;

static DECODERS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| Arc::new(Semaphore::new(DECODE_CONCURRENCY)));

/// Fields of a model request that routing and recording need.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub struct RoutingFields {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub store: Option<bool>,
    #[serde(default)]
    pub prompt_cache_key: Option<String>,
    #[serde(default)]
    pub previous_response_id: Option<String>,
}

/// The names of [`RoutingFields`]' members.
const FIELDS: [&str; 5] = ["model", "stream", "store", "prompt_cache_key", "previous_response_id"];

impl RoutingFields {
    pub fn parse(body: &[u8]) -> Result<Self, GatewayError> {
        serde_json::from_slice(body)
            .map_err(|e| GatewayError::bad_request(format!("the request body is not valid JSON: {e}")))
    }

    /// The same fields, from a body's top-level members that were read already (a WebSocket
    /// frame's): no second pass over a body that carries the whole conversation. `None` where
    /// [`RoutingFields::parse`] refuses an object: a field named twice, or of the wrong type.
    pub fn of_members(members: &Members<'_>) -> Option<Self> {
        /// `Some(None)` for a member that is absent or null, `None` for one of the wrong type.
        fn field<T: serde::de::DeserializeOwned>(members: &Members<'_>, name: &str) -> Option<Option<T>> {
            members.get(name).map_or(Some(None), |raw| serde_json::from_str(raw).ok())
        }
        if members.repeated(&FIELDS).is_some() {
            return None;
        }
        Some(RoutingFields {
            model: field(members, "model")?,
            stream: field(members, "stream")?,
            store: field(members, "store")?,
            prompt_cache_key: field(members, "prompt_cache_key")?,
            previous_response_id: field(members, "previous_response_id")?,
        })
    }
}

/// Reads a model request body: at most [`MAX_BODY_BYTES`] (a larger `Content-Length` is refused
/// before reading) and within [`BODY_READ_DEADLINE`].
pub async fn read_body(headers: &HeaderMap, body: Body) -> Result<Bytes, GatewayError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(GatewayError::request_too_large(MAX_BODY_BYTES));
    }
    match tokio::time::timeout(BODY_READ_DEADLINE, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) if is_length_limit(&e) => Err(GatewayError::request_too_large(MAX_BODY_BYTES)),
        Ok(Err(_)) => Err(GatewayError::bad_request("the request body could not be read")),
        Err(_) => Err(GatewayError::request_body_timeout()),
    }
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
}

/// A model id the gateway will route: at most [`MAX_MODEL_BYTES`] bytes.
pub fn check_model(model: &str) -> Result<(), GatewayError> {
    if model.len() > MAX_MODEL_BYTES {
        return Err(GatewayError::bad_request(format!(
            "the model id is longer than {MAX_MODEL_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Undoes `Content-Encoding: zstd | gzip | deflate` (Codex may compress requests). The output is
/// capped at [`MAX_BODY_BYTES`], zstd windows at 2^[`MAX_ZSTD_WINDOW_LOG`], and the work runs on
/// the blocking pool, a few at a time, never on the async workers.
pub async fn decode(headers: &HeaderMap, body: Bytes) -> Result<Bytes, GatewayError> {
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if matches!(encoding.as_str(), "" | "identity") {
        return Ok(body);
    }
    if !matches!(encoding.as_str(), "zstd" | "gzip" | "x-gzip" | "deflate") {
        return Err(GatewayError::bad_request(format!("unsupported Content-Encoding {encoding:?}")));
    }
    // The permit goes with the work: a caller that leaves does not free the slot while its
    // decompression still runs.
    let permit = Arc::clone(&DECODERS).acquire_owned().await.map_err(|_| GatewayError::internal())?;
    tokio::task::spawn_blocking(move || {
        let out = decode_blocking(&encoding, &body);
        drop(permit);
        out
    })
    .await
    .map_err(|_| GatewayError::internal())?
}

fn decode_blocking(encoding: &str, body: &[u8]) -> Result<Bytes, GatewayError> {
    let limit = MAX_BODY_BYTES as u64 + 1;
    let mut out = Vec::new();
    let read = match encoding {
        "zstd" => zstd::stream::read::Decoder::new(body).and_then(|mut d| {
            d.window_log_max(MAX_ZSTD_WINDOW_LOG)?;
            d.take(limit).read_to_end(&mut out)
        }),
        "gzip" | "x-gzip" => flate2::read::GzDecoder::new(body).take(limit).read_to_end(&mut out),
        _ => flate2::read::ZlibDecoder::new(body).take(limit).read_to_end(&mut out),
    };
    read.map_err(|_| {
        GatewayError::bad_request(format!("the {encoding} request body could not be decompressed"))
    })?;
    if out.len() > MAX_BODY_BYTES {
        return Err(GatewayError::request_too_large(MAX_BODY_BYTES));
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn with_encoding(enc: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_ENCODING, enc.parse().unwrap());
        h
    }

    #[tokio::test]
    async fn zstd_and_gzip_bodies_are_decoded() {
        let plain = br#"{"model":"gpt-5.1-codex","stream":true}"#;
        let z = zstd::encode_all(&plain[..], 3).unwrap();
        assert_eq!(&decode(&with_encoding("zstd"), Bytes::from(z)).await.unwrap()[..], plain);
        let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        g.write_all(plain).unwrap();
        let g = g.finish().unwrap();
        assert_eq!(&decode(&with_encoding("gzip"), Bytes::from(g)).await.unwrap()[..], plain);
        assert_eq!(&decode(&HeaderMap::new(), Bytes::from_static(plain)).await.unwrap()[..], plain);
    }

    #[tokio::test]
    async fn bad_encodings_are_client_errors() {
        let e = decode(&with_encoding("br"), Bytes::from_static(b"x")).await.unwrap_err();
        assert_eq!(e.status, 400);
        let e = decode(&with_encoding("zstd"), Bytes::from_static(b"not zstd")).await.unwrap_err();
        assert_eq!(e.status, 400);
    }

    /// A zstd frame that declares a window (here 2^26) beyond the cap is refused before any
    /// window is allocated.
    #[tokio::test]
    async fn zstd_windows_over_the_cap_are_refused() {
        let plain = vec![b'a'; 64 * 1024];
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        enc.window_log(MAX_ZSTD_WINDOW_LOG + 2).unwrap();
        enc.long_distance_matching(true).unwrap();
        enc.write_all(&plain).unwrap();
        let big_window = enc.finish().unwrap();
        let e = decode(&with_encoding("zstd"), Bytes::from(big_window)).await.unwrap_err();
        assert_eq!(e.status, 400, "{e:?}");
        // the same data with an ordinary window decodes
        let ok = zstd::encode_all(&plain[..], 19).unwrap();
        assert_eq!(decode(&with_encoding("zstd"), Bytes::from(ok)).await.unwrap().len(), plain.len());
    }

    /// A small body that inflates past the body limit is a 413, read no further than the limit.
    #[tokio::test]
    async fn decompression_bombs_stop_at_the_body_limit() {
        let zeros = vec![0u8; MAX_BODY_BYTES + 1024];
        let bomb = zstd::encode_all(&zeros[..], 3).unwrap();
        assert!(bomb.len() < 64 * 1024);
        let e = decode(&with_encoding("zstd"), Bytes::from(bomb)).await.unwrap_err();
        assert_eq!(e.status, 413);
        let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        g.write_all(&zeros).unwrap();
        let e = decode(&with_encoding("gzip"), Bytes::from(g.finish().unwrap())).await.unwrap_err();
        assert_eq!(e.status, 413);
    }

    #[test]
    fn model_ids_are_bounded() {
        assert!(check_model(&"m".repeat(MAX_MODEL_BYTES)).is_ok());
        assert_eq!(check_model(&"m".repeat(MAX_MODEL_BYTES + 1)).unwrap_err().status, 400);
    }

    #[test]
    fn routing_fields_ignore_everything_else() {
        let f =
            RoutingFields::parse(br#"{"model":"m","input":[{"x":1}],"prompt_cache_key":"k","stream":false}"#)
                .unwrap();
        assert_eq!(f.model.as_deref(), Some("m"));
        assert_eq!(f.stream, Some(false));
        assert_eq!(f.prompt_cache_key.as_deref(), Some("k"));
        assert!(RoutingFields::parse(b"{nope").is_err());
    }

    /// The one-pass reading from members gives what the whole-body parse gives, refusals
    /// included.
    #[test]
    fn routing_fields_from_members_are_those_of_the_whole_body() {
        let bodies = [
            r#"{"model":"m","input":[{"model":"inner","stream":1}],"prompt_cache_key":"k","stream":false}"#,
            r#"{"type":"response.create","model":"gpt-5.5","store":false,"previous_response_id":"resp_1"}"#,
            r#"{"model":"m\u00e9\"q","stream":null,"store":true,"prompt_cache_key":"\ud83d\ude00"}"#,
            r#"{"model":"m","prompt_cache_key":"a","prompt_cache_key":"b"}"#,
            r#"{"model":"m","previous_response_id":"a","previous_response_id":null}"#,
            r#"{"model":"m","stream":"yes"}"#,
            r#"{"model":"m","store":0}"#,
            r#"{"model":7}"#,
            r#"{"model":"m","prompt_cache_key":["k"]}"#,
            r#"{"model":"m","previous_response_id":{}}"#,
            r#"{}"#,
            r#"{"stream":true,"model":"m","unknown":{"model":"x"}}"#,
            r#"{"mod\u0065l":"m","stre\u0061m":true}"#,
            r#"{"model":"m","prompt_cache_key":"a","prompt_c\u0061che_key":"b"}"#,
        ];
        for body in bodies {
            let members = Members::of(body.as_bytes()).unwrap();
            assert_eq!(
                RoutingFields::of_members(&members),
                RoutingFields::parse(body.as_bytes()).ok(),
                "{body}"
            );
        }
        let parsed = RoutingFields::of_members(&Members::of(bodies[0].as_bytes()).unwrap()).unwrap();
        assert_eq!((parsed.model.as_deref(), parsed.stream), (Some("m"), Some(false)), "not the inner ones");
    }
}
