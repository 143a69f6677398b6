//! What the proxy reads from a client's request body: only the fields routing needs. The body
//! itself is forwarded as bytes (decompressed when the client compressed it, since upstream
//! edits and usage parsing need plain JSON).

use std::io::Read;

use axum::{
    body::Bytes,
    http::{HeaderMap, header},
};
use serde::Deserialize;

use super::error::GatewayError;
use crate::serve::MAX_BODY_BYTES;

/// Fields of a model request that routing and recording need.
#[derive(Debug, Default, Deserialize)]
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

impl RoutingFields {
    pub fn parse(body: &[u8]) -> Result<Self, GatewayError> {
        serde_json::from_slice(body)
            .map_err(|e| GatewayError::bad_request(format!("the request body is not valid JSON: {e}")))
    }
}

/// Undoes `Content-Encoding: zstd | gzip | deflate` (Codex may compress requests).
pub fn decode(headers: &HeaderMap, body: Bytes) -> Result<Bytes, GatewayError> {
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let limit = MAX_BODY_BYTES as u64 + 1;
    let mut out = Vec::new();
    let read = match encoding.as_str() {
        "" | "identity" => return Ok(body),
        "zstd" => {
            zstd::stream::read::Decoder::new(&body[..]).and_then(|d| d.take(limit).read_to_end(&mut out))
        }
        "gzip" | "x-gzip" => flate2::read::GzDecoder::new(&body[..]).take(limit).read_to_end(&mut out),
        "deflate" => flate2::read::ZlibDecoder::new(&body[..]).take(limit).read_to_end(&mut out),
        other => {
            return Err(GatewayError::bad_request(format!("unsupported Content-Encoding {other:?}")));
        }
    };
    read.map_err(|_| {
        GatewayError::bad_request(format!("the {encoding} request body could not be decompressed"))
    })?;
    if out.len() > MAX_BODY_BYTES {
        return Err(GatewayError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            "the decompressed request body is too large",
        ));
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

    #[test]
    fn zstd_and_gzip_bodies_are_decoded() {
        let plain = br#"{"model":"gpt-5.1-codex","stream":true}"#;
        let z = zstd::encode_all(&plain[..], 3).unwrap();
        assert_eq!(&decode(&with_encoding("zstd"), Bytes::from(z)).unwrap()[..], plain);
        let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        g.write_all(plain).unwrap();
        let g = g.finish().unwrap();
        assert_eq!(&decode(&with_encoding("gzip"), Bytes::from(g)).unwrap()[..], plain);
        assert_eq!(&decode(&HeaderMap::new(), Bytes::from_static(plain)).unwrap()[..], plain);
    }

    #[test]
    fn bad_encodings_are_client_errors() {
        let e = decode(&with_encoding("br"), Bytes::from_static(b"x")).unwrap_err();
        assert_eq!(e.status, 400);
        let e = decode(&with_encoding("zstd"), Bytes::from_static(b"not zstd")).unwrap_err();
        assert_eq!(e.status, 400);
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
}
