//! The HTTP client for model calls: hyper's pooled HTTP/1.1 client, TLS by rustls with the
//! platform's roots, and the `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` environment honoured.
//!
//! Why not reqwest here (it still serves the OAuth, quota and export calls): on the model path it
//! parsed the target URL twice per call in its redirect layer (which runs even with redirects
//! off), copied the headers, and boxed the body twice; side by side that was 10-25 % of
//! SubLane's throughput at c=64. This client sends the request SubLane built, as built.
//!
//! The connection settings are reqwest's: TCP keepalive every 15 s and a 30 s `TCP_USER_TIMEOUT`
//! (a connection a NAT dropped while a call waits minutes for its answer is noticed), and for TLS
//! aws-lc-rs, the platform verifier, ALPN `http/1.1` and SNI. A proxy (`http://` or `https://`)
//! is reached as reqwest reaches one: an `https` target through a `CONNECT` tunnel, an `http`
//! target by sending the request in absolute form to the proxy, each with the proxy URL's user
//! and password as `Proxy-Authorization`.

use std::{
    error::Error as StdError,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use axum::{
    body::Bytes,
    http::{HeaderMap, Method, Request, StatusCode, Uri, header, uri::Scheme},
};
use http_body_util::{BodyDataStream, Full};
use hyper::body::Incoming;
use hyper_rustls::MaybeHttpsStream;
use hyper_util::{
    client::{
        legacy::{
            self,
            connect::{Connected, Connection, HttpConnector, proxy::Tunnel},
        },
        proxy::matcher::Matcher,
    },
    rt::{TokioExecutor, TokioIo, TokioTimer},
};
use tokio::net::TcpStream;
use tower::Service;

type BoxError = Box<dyn StdError + Send + Sync>;

/// Longest a new upstream connection may take: TCP and the proxy's tunnel, and for model calls
/// the TLS handshake (the WebSocket's is bounded with its upgrade, by its caller).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an idle pooled connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(90);
/// How much input hyper buffers for one upstream connection, which also bounds an answer's head
/// (a larger one fails the call as an upstream error). hyper's read buffer grows with each read a
/// large answer fills, up to about this, and keeps its size for the connection's life, pooled
/// or carrying a stream. At hyper's default (about 408 KiB), each of 300 connections pooled
/// after a 2 MiB answer held 150-250 KiB more than after a small one, and 15-50 KiB with this
/// bound (`make bench`, memory). A large answer is read in more, smaller reads instead. (The
/// same size as for the connections of SubLane's own clients, see `serve`.)
const CONNECTION_BUFFER: usize = 32 * 1024;
/// TCP keepalive: first probe after this much silence, then one per interval, gone after three.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Longest written data may go unacknowledged before the connection is given up.
const USER_TIMEOUT: Duration = Duration::from_secs(30);

type Pool = legacy::Client<Timed<hyper_rustls::HttpsConnector<Connect>>, Full<Bytes>>;

thread_local! {
    /// Which of a client's pools this thread calls through: 0, the shared one, or a serving
    /// thread's own (see [`enter_lane`]).
    static LANE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Makes the calling thread use pool `lane` (from 1) of every client made [`Client::with_lanes`]
/// with at least that many lanes. Each serving thread calls it once: a pooled connection's task
/// runs on the runtime that opened it, so a call through another thread's connection would wake
/// that thread twice (request and answer). A client without that lane uses its shared pool.
pub fn enter_lane(lane: usize) {
    LANE.with(|l| l.set(lane));
}

/// Pooled connections to the upstreams. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    /// The shared pool, then one per serving thread.
    pools: Arc<[Pool]>,
    /// The connector under the pool (its proxies decide an http call's `Proxy-Authorization`),
    /// also for connections another protocol runs over (the Codex WebSocket).
    connect: Connect,
    tls: Arc<rustls::ClientConfig>,
}

/// Why a call got no answer (the cause is logged, never shown to a client).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("the target is not a valid URI")]
    Uri,
    #[error(transparent)]
    Http(#[from] legacy::Error),
}

impl Client {
    /// A client using the proxies of the process environment.
    pub fn from_env() -> Result<Self, BoxError> {
        Self::new(Matcher::from_env())
    }

    /// A client reaching the upstreams through `proxies` (none when they match nothing).
    pub fn new(proxies: Matcher) -> Result<Self, BoxError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = rustls_platform_verifier::Verifier::new(Arc::clone(&provider))?;
        let to_proxy = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        let mut to_target = to_proxy.clone();
        to_target.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        // https targets reach this connector too (the TLS layer wraps what it returns)
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
        tcp.set_keepalive(Some(KEEPALIVE));
        tcp.set_keepalive_interval(Some(KEEPALIVE));
        tcp.set_keepalive_retries(Some(3));
        #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
        tcp.set_tcp_user_timeout(Some(USER_TIMEOUT));
        let connect = Connect {
            tcp: tcp.clone(),
            // (an `http://` proxy is spoken to in clear through the same connector)
            to_proxy: hyper_rustls::HttpsConnector::from((tcp, to_proxy)),
            proxies: Arc::new(proxies),
        };
        Ok(Client { pools: Arc::new([]), connect, tls: Arc::new(to_target) }.with_lanes(0))
    }

    /// The same client with empty pools: the shared one, and one for each of `lanes` serving
    /// threads, which those threads use after [`enter_lane`].
    pub fn with_lanes(self, lanes: usize) -> Self {
        Client { pools: (0..=lanes).map(|_| pool(self.connector())).collect(), ..self }
    }

    /// A connector for a pool: the proxies and TLS settings of every upstream connection.
    fn connector(&self) -> Timed<hyper_rustls::HttpsConnector<Connect>> {
        // (built from the config, not the builder, which refuses a config that names ALPN)
        Timed(hyper_rustls::HttpsConnector::from((self.connect.clone(), Arc::clone(&self.tls))))
    }

    /// A connection to the host of `url` (`http` or `https`) for a protocol of its own on top (the
    /// Codex WebSocket): straight there, or through a `CONNECT` tunnel of the proxy that matches
    /// (a tunnel even for `http`: what is sent is no request a forwarding proxy could pass on).
    /// TLS to the host is the caller's, with [`Self::tls`].
    pub async fn open(&self, url: &url::Url) -> Result<TokioIo<Conn>, BoxError> {
        // The port spelled out: `url` drops a scheme's default one, and a tunnel without one
        // would be asked for port 443 whatever the scheme.
        let host = url.host().ok_or("the upstream URL has no host")?;
        let port = url.port_or_known_default().ok_or("the upstream URL has no port")?;
        let uri: Uri = format!("{}://{host}:{port}/", url.scheme()).parse()?;
        Ok(TokioIo::new(within_connect_timeout(self.connect.clone().open(uri, true)).await?))
    }

    /// The TLS settings of every upstream connection (ALPN `http/1.1`).
    pub fn tls(&self) -> Arc<rustls::ClientConfig> {
        Arc::clone(&self.tls)
    }

    /// POSTs `body` to `url` with `headers` as they are (the caller puts exactly one of each
    /// singleton header in them; hyper adds `Host` and `Content-Length`).
    pub async fn post(
        &self,
        url: &url::Url,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> Result<Answer, SendError> {
        let uri: Uri = url.as_str().parse().map_err(|_| SendError::Uri)?;
        if uri.scheme() == Some(&Scheme::HTTP)
            && let Some(auth) = self.connect.proxies.intercept(&uri).as_ref().and_then(|p| p.basic_auth())
        {
            // an http target goes to the proxy in absolute form, with the proxy's credentials
            headers.insert(header::PROXY_AUTHORIZATION, auth.clone());
        }
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri;
        *request.headers_mut() = headers;
        Ok(Answer(self.pool().request(request).await?))
    }

    /// The calling thread's pool: its lane's, or the shared one.
    fn pool(&self) -> &Pool {
        let lane = LANE.with(std::cell::Cell::get);
        self.pools.get(lane).unwrap_or(&self.pools[0])
    }
}

/// An empty pool over `connector`, with the pool settings every pool has.
fn pool(connector: Timed<hyper_rustls::HttpsConnector<Connect>>) -> Pool {
    legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE)
        .http1_max_buf_size(CONNECTION_BUFFER)
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// An upstream's answer: status and headers, and the body still to be read.
pub struct Answer(http::Response<Incoming>);

/// The body of an [`Answer`], chunk by chunk.
pub type BodyStream = BodyDataStream<Incoming>;

impl Answer {
    pub fn status(&self) -> StatusCode {
        self.0.status()
    }

    pub fn headers(&self) -> &HeaderMap {
        self.0.headers()
    }

    /// The body's length when the upstream declared it.
    pub fn content_length(&self) -> Option<u64> {
        hyper::body::Body::size_hint(self.0.body()).exact()
    }

    pub fn bytes_stream(self) -> BodyStream {
        BodyDataStream::new(self.0.into_body())
    }
}

/// The connection under TLS: straight to the target, or through the proxy that matches it.
#[derive(Clone)]
pub struct Connect {
    tcp: HttpConnector,
    /// To a proxy: in TLS when its URL is `https://`.
    to_proxy: hyper_rustls::HttpsConnector<HttpConnector>,
    proxies: Arc<Matcher>,
}

impl Service<Uri> for Connect {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        Box::pin(self.clone().open(dst, false))
    }
}

impl Connect {
    /// A connection for `dst`: through a `CONNECT` tunnel when a proxy matches and the target is
    /// `https` (or `tunnel` is asked for), else to the proxy itself, else straight to `dst`.
    async fn open(mut self, dst: Uri, tunnel: bool) -> Result<Conn, BoxError> {
        let Some(proxy) = self.proxies.intercept(&dst) else {
            let io = Lean::Plain(self.tcp.call(dst).await?);
            return Ok(Conn { io, absolute_form: false });
        };
        let scheme = proxy.uri().scheme();
        if scheme != Some(&Scheme::HTTP) && scheme != Some(&Scheme::HTTPS) {
            return Err("the proxy for upstream calls must be an http:// or https:// URL".into());
        }
        if tunnel || dst.scheme() == Some(&Scheme::HTTPS) {
            let mut tunnel = Tunnel::new(proxy.uri().clone(), self.to_proxy);
            if let Some(auth) = proxy.basic_auth() {
                tunnel = tunnel.with_auth(auth.clone());
            }
            Ok(Conn { io: tunnel.call(dst).await?.into(), absolute_form: false })
        } else {
            Ok(Conn { io: self.to_proxy.call(proxy.uri().clone()).await?.into(), absolute_form: true })
        }
    }
}

/// A TCP connection to the target, a tunnel to it, or (`absolute_form`) to a forwarding proxy.
pub struct Conn {
    io: Lean<TokioIo<TcpStream>>,
    absolute_form: bool,
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        // `proxy(true)`: requests on this connection keep their absolute URI
        self.io.connected().proxy(self.absolute_form)
    }
}

impl hyper::rt::Read for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

/// A connector whose whole connect (proxy tunnel and TLS handshake included) must finish within
/// [`CONNECT_TIMEOUT`].
#[derive(Clone)]
pub struct Timed<S>(S);

impl<S, T> Service<Uri> for Timed<S>
where
    S: Service<Uri, Response = MaybeHttpsStream<T>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + 'static,
    T: 'static,
{
    type Response = Lean<T>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Lean<T>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let connecting = self.0.call(dst);
        Box::pin(async move { within_connect_timeout(connecting).await.map(Lean::from) })
    }
}

/// A connection whose TLS state, when it has any, is boxed. A pooled connection's task holds its
/// stream for the connection's whole life, and `MaybeHttpsStream` is as large as its TLS variant
/// (a rustls connection, twice over where the proxy is spoken to in TLS too): a plain `http://`
/// connection carried several KiB it never used, per open stream (performance goal 3). The box
/// costs TLS connections one allocation when they open.
pub enum Lean<T> {
    Plain(T),
    Tls(Box<MaybeHttpsStream<T>>),
}

impl<T> From<MaybeHttpsStream<T>> for Lean<T> {
    fn from(stream: MaybeHttpsStream<T>) -> Self {
        match stream {
            MaybeHttpsStream::Http(plain) => Lean::Plain(plain),
            tls => Lean::Tls(Box::new(tls)),
        }
    }
}

impl<T: hyper::rt::Read + hyper::rt::Write + Connection + Unpin> Connection for Lean<T> {
    fn connected(&self) -> Connected {
        match self {
            Lean::Plain(s) => s.connected(),
            Lean::Tls(s) => s.connected(),
        }
    }
}

impl<T: hyper::rt::Read + hyper::rt::Write + Unpin> hyper::rt::Read for Lean<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Lean::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Lean::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<T: hyper::rt::Read + hyper::rt::Write + Unpin> hyper::rt::Write for Lean<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Lean::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Lean::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Lean::Plain(s) => Pin::new(s).poll_flush(cx),
            Lean::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Lean::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Lean::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Lean::Plain(s) => s.is_write_vectored(),
            Lean::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Lean::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Lean::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
}

/// `connecting`, given up after [`CONNECT_TIMEOUT`].
async fn within_connect_timeout<T, E: Into<BoxError>>(
    connecting: impl Future<Output = Result<T, E>>,
) -> Result<T, BoxError> {
    match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(r) => r.map_err(Into::into),
        Err(_) => Err("connecting to the upstream timed out".into()),
    }
}

#[cfg(test)]
mod tests {
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpListener,
    };

    use axum::http::HeaderValue;

    use super::*;

    /// A listener that reads one request head, answers `reply` and returns the head it read.
    async fn one_exchange(
        reply: impl AsRef<[u8]> + Send + 'static,
    ) -> (std::net::SocketAddr, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = sock.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            sock.write_all(reply.as_ref()).await.unwrap();
            String::from_utf8_lossy(&head).into_owned()
        });
        (addr, task)
    }

    fn headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer sk-upstream"));
        h
    }

    #[test]
    fn each_serving_thread_calls_through_its_own_pool_and_every_other_thread_the_shared_one() {
        let client = Client::new(Matcher::builder().build()).unwrap().with_lanes(2);
        let pool_of = |lane: Option<usize>| {
            let client = client.clone();
            std::thread::spawn(move || {
                if let Some(lane) = lane {
                    enter_lane(lane);
                }
                let pools = &client.pools;
                pools.iter().position(|p| std::ptr::eq(p, client.pool())).unwrap()
            })
            .join()
            .unwrap()
        };
        assert_eq!(client.pools.len(), 3);
        assert_eq!(pool_of(None), 0, "a thread that serves no lane");
        assert_eq!(pool_of(Some(1)), 1);
        assert_eq!(pool_of(Some(2)), 2);
        assert_eq!(pool_of(Some(3)), 0, "a lane this client has no pool for");
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";

    /// An answer's head is read up to about [`CONNECTION_BUFFER`] (hyper reads at most half as much
    /// again before it gives up): one of 16 KiB is read, and one of 64 KiB fails the call, as the
    /// bound on the connection's buffer makes it.
    #[tokio::test]
    async fn an_answer_head_past_the_connection_buffer_fails_the_call() {
        let client = Client::new(Matcher::builder().build()).unwrap();
        for (padding, read) in [(16 * 1024, true), (64 * 1024, false)] {
            let reply = format!(
                "HTTP/1.1 200 OK\r\nx-padding: {}\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}",
                "p".repeat(padding)
            );
            let (addr, _head) = one_exchange(reply).await;
            let url = url::Url::parse(&format!("http://{addr}/v1/responses")).unwrap();
            let answer = client.post(&url, headers(), Bytes::from_static(b"{}")).await;
            assert_eq!(answer.is_ok(), read, "a head with {padding} bytes of one header");
        }
    }

    #[tokio::test]
    async fn sends_one_of_each_header_in_origin_form_and_reads_the_answer() {
        let (addr, head) = one_exchange(OK).await;
        let client = Client::new(Matcher::builder().build()).unwrap();
        let url = url::Url::parse(&format!("http://{addr}/v1/responses")).unwrap();
        let answer = client.post(&url, headers(), Bytes::from_static(b"{\"model\":\"m\"}")).await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(answer.content_length(), Some(2));
        let body = http_body_util::BodyExt::collect(answer.0.into_body()).await.unwrap().to_bytes();
        assert_eq!(&body[..], b"{}");
        let head = head.await.unwrap().to_ascii_lowercase();
        assert!(head.starts_with("post /v1/responses http/1.1\r\n"), "{head}");
        for (name, n) in
            [("content-type: ", 1), ("content-length: 13", 1), ("host: ", 1), ("authorization: ", 1)]
        {
            assert_eq!(head.matches(&format!("\r\n{name}")).count(), n, "{name} in {head}");
        }
        assert!(!head.contains("proxy-authorization"), "{head}");
    }

    #[tokio::test]
    async fn an_http_target_goes_to_its_proxy_in_absolute_form_with_the_proxy_credentials() {
        let (proxy, head) = one_exchange(OK).await;
        let proxies = Matcher::builder().http(format!("http://user:pw@{proxy}")).build();
        let client = Client::new(proxies).unwrap();
        let url = url::Url::parse("http://upstream.invalid:8080/v1/responses").unwrap();
        let answer = client.post(&url, headers(), Bytes::from_static(b"{}")).await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        let head = head.await.unwrap();
        assert!(head.starts_with("POST http://upstream.invalid:8080/v1/responses HTTP/1.1\r\n"), "{head}");
        // "user:pw" in base64
        assert!(
            head.to_ascii_lowercase().contains("\r\nproxy-authorization: basic dxnlcjpwdw==\r\n"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn an_https_target_is_tunnelled_through_its_proxy_and_never_sent_in_clear() {
        // The proxy refuses the tunnel: the call fails, and nothing but the CONNECT reached it.
        let (proxy, head) = one_exchange("HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n").await;
        let proxies = Matcher::builder().https(format!("http://user:pw@{proxy}")).build();
        let client = Client::new(proxies).unwrap();
        let url = url::Url::parse("https://api.example.com/v1/responses").unwrap();
        assert!(client.post(&url, headers(), Bytes::from_static(b"{\"secret\":1}")).await.is_err());
        let head = head.await.unwrap();
        assert!(head.starts_with("CONNECT api.example.com:443 HTTP/1.1\r\n"), "{head}");
        assert!(head.to_ascii_lowercase().contains("proxy-authorization: basic dxnlcjpwdw=="), "{head}");
        assert!(!head.contains("sk-upstream") && !head.contains("secret"), "{head}");
    }

    #[tokio::test]
    async fn a_connection_for_another_protocol_is_tunnelled_even_to_an_http_target() {
        for (target, connect) in [
            ("http://upstream.invalid:8080/backend-api/codex/responses", "upstream.invalid:8080"),
            // a default port is named: a tunnel is not asked for 443 on a plain target
            ("http://upstream.invalid/backend-api/codex/responses", "upstream.invalid:80"),
            ("http://[::1]/v1/responses", "[::1]:80"),
        ] {
            let (proxy, head) = one_exchange("HTTP/1.1 200 Connection established\r\n\r\n").await;
            let client = Client::new(Matcher::builder().http(format!("http://{proxy}")).build()).unwrap();
            client.open(&url::Url::parse(target).unwrap()).await.unwrap();
            let head = head.await.unwrap();
            assert!(head.starts_with(&format!("CONNECT {connect} HTTP/1.1\r\n")), "{target}: {head}");
        }
    }

    /// A listener that is no TLS server: returns the first five bytes it is sent.
    async fn first_bytes() -> (std::net::SocketAddr, tokio::task::JoinHandle<[u8; 5]>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 5];
            sock.read_exact(&mut buf).await.unwrap();
            buf
        });
        (addr, task)
    }

    /// The first byte of a TLS handshake record (a ClientHello).
    const HANDSHAKE: u8 = 22;

    #[tokio::test]
    async fn an_https_proxy_is_spoken_to_in_tls() {
        for target in ["https://api.example.com/v1/responses", "http://upstream.invalid/v1/responses"] {
            let (proxy, first) = first_bytes().await;
            let proxy_url = format!("https://localhost:{}", proxy.port());
            let proxies = match target.starts_with("https:") {
                true => Matcher::builder().https(proxy_url),
                false => Matcher::builder().http(proxy_url),
            };
            let client = Client::new(proxies.build()).unwrap();
            let url = url::Url::parse(target).unwrap();
            assert!(client.post(&url, headers(), Bytes::from_static(b"{}")).await.is_err());
            assert_eq!(first.await.unwrap()[0], HANDSHAKE, "{target}");
        }
    }

    #[tokio::test]
    async fn an_https_target_is_spoken_to_in_tls() {
        // The client's first bytes must be a TLS ClientHello, never the request itself.
        let (addr, first) = first_bytes().await;
        let client = Client::new(Matcher::builder().build()).unwrap();
        let url = url::Url::parse(&format!("https://localhost:{}/v1/responses", addr.port())).unwrap();
        assert!(client.post(&url, headers(), Bytes::from_static(b"{}")).await.is_err());
        assert_eq!(first.await.unwrap()[0], HANDSHAKE, "a TLS handshake record");
    }

    /// Performance goal 3: the stream a pooled plain connection's task holds for the connection's
    /// whole life is a socket and a tag, not room for two rustls connections.
    #[tokio::test]
    async fn a_plain_connection_holds_no_room_for_tls() {
        use std::mem::size_of;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: Uri = format!("http://{}/", listener.local_addr().unwrap()).parse().unwrap();
        let mut connector = Client::new(Matcher::builder().build()).unwrap().connector();
        let conn = connector.call(uri).await.unwrap();
        assert!(matches!(conn, Lean::Plain(Conn { io: Lean::Plain(_), .. })));
        let (lean, wide) =
            (size_of::<Lean<Conn>>(), size_of::<MaybeHttpsStream<MaybeHttpsStream<TokioIo<TcpStream>>>>());
        assert!(lean <= size_of::<TokioIo<TcpStream>>() + 16, "{lean} bytes");
        assert!(lean * 8 < wide, "{lean} bytes against {wide}");
    }
}
