//! Spreading connections over the serving threads.
//!
//! Every serving thread accepts from the one listening socket, and whichever is awake takes
//! what is waiting, as many as are waiting. Work never moves between threads, so a burst of
//! connections (every client reconnecting after a restart, a pool opening 64 at once) could all
//! land on one thread and stay there for their lives: one core busy, the others idle. So a
//! thread keeps a connection it accepted only while it holds no more open connections than the
//! least loaded thread, and otherwise hands it to that thread. While the threads are even,
//! nothing is handed over; when they are not, a connection crosses threads once, at its start,
//! and its calls never do.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use tokio::{net::TcpStream, sync::mpsc};

/// A connection accepted on one thread, on its way to the thread that serves it. Its socket
/// leaves the accepting thread's reactor (a tokio socket is bound to one runtime) and joins the
/// serving thread's there.
type Handed = (std::net::TcpStream, SocketAddr, Held);

/// A connection this thread serves: its socket, its peer, and its place in the count.
pub(super) type Served = (TcpStream, SocketAddr, Held);

/// Each thread's count of open connections, and the way to hand a connection to each.
struct Spread {
    open: Counts,
    to: Box<[mpsc::UnboundedSender<Handed>]>,
}

/// Open connections by thread. Apart from the senders, so that a connection waiting in a queue
/// holds no way back to that queue (a cycle that could outlive the threads).
type Counts = Arc<[AtomicUsize]>;

/// One serving thread's side of the spread.
pub(super) struct Lane {
    index: usize,
    spread: Arc<Spread>,
    handed: mpsc::UnboundedReceiver<Handed>,
}

/// A connection counted against the thread that serves it, until dropped. It lives in the
/// connection's socket wrapper, so a WebSocket that hyper hands on after the upgrade still
/// counts for as long as it is open.
pub(super) struct Held {
    open: Counts,
    lane: usize,
}

/// One lane for each of `threads` serving threads.
pub(super) fn lanes(threads: usize) -> Vec<Lane> {
    let (to, handed): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::unbounded_channel()).unzip();
    let open = (0..threads).map(|_| AtomicUsize::new(0)).collect();
    let spread = Arc::new(Spread { open, to: to.into() });
    handed
        .into_iter()
        .enumerate()
        .map(|(index, handed)| Lane { index, spread: spread.clone(), handed })
        .collect()
}

impl Lane {
    /// Places a connection this thread accepted: it is given back to be served here, or handed
    /// to the least loaded thread (`None`). The counts are read without a lock, so two threads
    /// deciding at once may both keep theirs: the spread is even give or take a connection or
    /// two, which is all a spread needs.
    pub(super) fn place(&self, tcp: TcpStream, peer: SocketAddr) -> Option<Served> {
        let mine = self.spread.open[self.index].load(Ordering::Relaxed);
        let counts = self.spread.open.iter().map(|open| open.load(Ordering::Relaxed));
        let (least, fewest) = counts.enumerate().min_by_key(|&(_, open)| open).unwrap_or((self.index, mine));
        // Kept when this thread is among the least loaded.
        if mine <= fewest {
            return Some((tcp, peer, self.hold(self.index)));
        }
        let std = match tcp.into_std() {
            Ok(std) => std,
            Err(e) => {
                tracing::debug!(error = %e, "an accepted connection could not leave its thread");
                return None;
            }
        };
        match self.spread.to[least].send((std, peer, self.hold(least))) {
            Ok(()) => None,
            // That thread has stopped serving: this one takes the connection back.
            Err(mpsc::error::SendError((std, peer, _counted_there))) => {
                Self::join((std, peer, self.hold(self.index)))
            }
        }
    }

    /// The next connection another thread handed to this one, joined to this thread's reactor.
    /// Cancel-safe: nothing is awaited after one is taken from the queue.
    pub(super) async fn handed(&mut self) -> Option<Served> {
        loop {
            if let Some(served) = Self::join(self.handed.recv().await?) {
                return Some(served);
            }
        }
    }

    /// A handed connection's socket joined to this thread's reactor.
    fn join((std, peer, held): Handed) -> Option<Served> {
        let tcp = TcpStream::from_std(std)
            .inspect_err(|e| tracing::debug!(error = %e, "a handed-over connection could not be served"))
            .ok()?;
        Some((tcp, peer, held))
    }

    fn hold(&self, lane: usize) -> Held {
        self.spread.open[lane].fetch_add(1, Ordering::Relaxed);
        Held { open: self.spread.open.clone(), lane }
    }

    /// Stops taking connections from other threads (a hand-over from now on fails, and the
    /// thread that accepted the connection serves it) and gives back those already handed here,
    /// to be served like the others this thread holds.
    pub(super) async fn stop(mut self) -> Vec<Served> {
        self.handed.close();
        // Until the queue says there is no more: a hand-over under way when it closed is counted
        // before it lands, and `try_recv` would report it missing.
        let mut handed = Vec::new();
        while let Some(served) = self.handed().await {
            handed.push(served);
        }
        handed
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.open[self.lane].fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use axum::{Router, routing::get};
    use http_body_util::BodyExt as _;
    use hyper_util::rt::TokioIo;
    use tokio::{
        io::{AsyncReadExt as _, AsyncWriteExt as _},
        net::TcpListener,
    };

    use super::*;

    /// A connected socket as a serving thread gets it from `accept`, and the client's end.
    async fn accepted(listener: &TcpListener) -> (TcpStream, SocketAddr, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (tcp, peer) = listener.accept().await.unwrap();
        (tcp, peer, client)
    }

    #[tokio::test]
    async fn a_thread_keeps_what_leaves_it_among_the_least_loaded_and_hands_on_the_rest() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let [first, mut second]: [Lane; 2] = lanes(2).try_into().ok().unwrap();
        let (mut kept, mut clients) = (Vec::new(), Vec::new());
        for _ in 0..6 {
            let (tcp, peer, client) = accepted(&listener).await;
            clients.push(client);
            kept.extend(first.place(tcp, peer));
        }
        assert_eq!(kept.len(), 3, "every other connection of a burst on one thread is handed on");
        let mut handed = Vec::new();
        for _ in 0..3 {
            handed.push(second.handed().await.unwrap());
        }
        assert!(second.handed.is_empty());
        let peers: Vec<_> = kept.iter().chain(&handed).map(|(_, peer, _)| *peer).collect();
        let mut expected: Vec<_> = clients.iter().map(|c| c.local_addr().unwrap()).collect();
        expected.sort();
        let mut got = peers.clone();
        got.sort();
        assert_eq!(got, expected, "each connection is served once, with its own peer address");
        // A handed socket works where it lands: what its client writes arrives, and back.
        let (tcp, peer, _) = &mut handed[0];
        let client = clients.iter_mut().find(|c| c.local_addr().unwrap() == *peer).unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        tcp.read_exact(&mut got).await.unwrap();
        tcp.write_all(b"pong").await.unwrap();
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"pong");

        // Connections that end stop counting: the first thread, now the least loaded, keeps
        // until it holds more than the second.
        kept.clear();
        for _ in 0..4 {
            let (tcp, peer, client) = accepted(&listener).await;
            clients.push(client);
            kept.extend(first.place(tcp, peer));
        }
        assert_eq!(kept.len(), 4, "0, 1, 2 and 3 held against 3: kept");
        let (tcp, peer, _client) = accepted(&listener).await;
        assert!(first.place(tcp, peer).is_none(), "4 against 3: handed on");

        // A thread that stopped serving is not handed anything: the connection stays.
        drop(second);
        let (tcp, peer, _client) = accepted(&listener).await;
        assert!(first.place(tcp, peer).is_some());
    }

    #[tokio::test]
    async fn a_stopped_thread_gives_back_what_was_handed_to_it_and_takes_no_more() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let [first, second]: [Lane; 2] = lanes(2).try_into().ok().unwrap();
        let (tcp, peer, _one) = accepted(&listener).await;
        let _kept = first.place(tcp, peer).unwrap();
        let (tcp, peer, two) = accepted(&listener).await;
        assert!(first.place(tcp, peer).is_none());
        let queued = second.stop().await;
        assert_eq!(queued.iter().map(|(_, peer, _)| *peer).collect::<Vec<_>>(), [two.local_addr().unwrap()]);
        let (tcp, peer, _three) = accepted(&listener).await;
        let _also_kept = first.place(tcp, peer).unwrap();
        let (tcp, peer, _four) = accepted(&listener).await;
        assert!(first.place(tcp, peer).is_some(), "2 against 1, but that thread takes no more");
    }

    /// Connections queued before the threads start (clients reconnecting to a restarted
    /// SubLane) are the burst that one thread would otherwise take whole: each thread serves
    /// its share, handed-over ones included.
    #[tokio::test]
    async fn a_burst_of_connections_is_spread_over_the_serving_threads() {
        const CONNECTIONS: usize = 16;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::new();
        for _ in 0..CONNECTIONS {
            clients.push(TcpStream::connect(addr).await.unwrap());
        }
        let app =
            Router::new().route("/", get(|| async { std::thread::current().name().unwrap().to_owned() }));
        tokio::spawn(super::super::serve_forever(listener, 2, app, "spread-test"));

        // Every connection stays open until each has been answered, so none frees its place.
        let mut senders = Vec::new();
        for client in clients {
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(client)).await.unwrap();
            tokio::spawn(conn);
            senders.push(sender);
        }
        let mut served_by = std::collections::BTreeMap::<String, usize>::new();
        for sender in &mut senders {
            let request =
                axum::http::Request::get("/").header("host", "sublane").body(String::new()).unwrap();
            let answer = sender.send_request(request).await.unwrap();
            let thread = answer.into_body().collect().await.unwrap().to_bytes();
            *served_by.entry(String::from_utf8(thread.to_vec()).unwrap()).or_default() += 1;
        }
        assert_eq!(served_by.values().sum::<usize>(), CONNECTIONS);
        let counts: Vec<usize> =
            ["spread-test-1", "spread-test-2"].map(|t| served_by.get(t).copied().unwrap_or(0)).into();
        assert!(
            counts.iter().all(|&n| n >= CONNECTIONS / 2 - 2),
            "each thread serves about half: {served_by:?}"
        );
    }
}
