//! The relay's hand-over to the client: a bounded queue of chunks from one sender (the relay
//! task) to one receiver (the response body), and a wait for the receiver to be dropped (the
//! client left).
//!
//! Why not tokio's mpsc channel: it costs about 1.5 KiB however little it holds (a block of 32
//! slots made with the channel, and two fields padded to 128 bytes each), and a relay holds one
//! for its stream's whole life, so every open stream paid it (performance goal 3: 10,000 open
//! streams in little memory). This one is about 120 bytes; its buffer grows with the chunks
//! waiting in it, up to the bound, and keeps that size. It has three waker slots, one waiter
//! each (the body's read, the relay's send and its wait for the client leaving), behind one lock
//! that is not contended in practice: the relay and the body run on the same serving thread.

use std::{
    collections::VecDeque,
    convert::Infallible,
    future::poll_fn,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    task::{Context, Poll, Waker},
};

use axum::body::Bytes;
use http_body::Frame;

/// The sending half, for the relay.
pub struct Sender(Arc<Shared>);

/// The receiving half: the response body.
pub struct Receiver(Arc<Shared>);

/// Why [`Sender::try_send`] did not queue a chunk, with the chunk.
pub enum TrySendError {
    /// The queue holds its bound: the client reads slower than the upstream writes.
    Full(Bytes),
    /// The receiver was dropped.
    Closed(Bytes),
}

struct Shared {
    bound: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Bytes>,
    /// The body, waiting for a chunk.
    reader: Option<Waker>,
    /// The relay, waiting for room.
    writer: Option<Waker>,
    /// The relay, waiting for the body to be dropped.
    leaving: Option<Waker>,
    /// The body was dropped.
    closed: bool,
    /// The sender was dropped: once the queue is empty, the body ends.
    ended: bool,
}

/// A queue that holds at most `bound` chunks.
pub fn pipe(bound: usize) -> (Sender, Receiver) {
    let shared = Arc::new(Shared { bound, state: Mutex::default() });
    (Sender(shared.clone()), Receiver(shared))
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned lock still holds a consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `bytes` in `state` (held locked) if the body is there and there is room. The
    /// caller wakes the reader once it lets the lock go.
    fn push(&self, state: &mut State, bytes: Bytes) -> Result<(), TrySendError> {
        if state.closed {
            return Err(TrySendError::Closed(bytes));
        }
        if state.queue.len() >= self.bound {
            return Err(TrySendError::Full(bytes));
        }
        state.queue.push_back(bytes);
        Ok(())
    }
}

/// Keeps `cx`'s waker in `slot` (not cloned again when it is the same task's).
fn wait_in(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(waker) if waker.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

/// Wakes a task after the lock is let go, so that it does not wake into a held lock.
fn wake(state: MutexGuard<'_, State>, take: impl FnOnce(&mut State) -> Option<Waker>) {
    let mut state = state;
    let waker = take(&mut state);
    drop(state);
    if let Some(waker) = waker {
        waker.wake();
    }
}

impl Sender {
    /// Queues `bytes` if there is room, without waiting.
    pub fn try_send(&self, bytes: Bytes) -> Result<(), TrySendError> {
        let mut state = self.0.state();
        self.0.push(&mut state, bytes)?;
        wake(state, |s| s.reader.take());
        Ok(())
    }

    /// Queues `bytes` once there is room; the chunk back if the receiver is dropped first.
    pub async fn send(&self, bytes: Bytes) -> Result<(), Bytes> {
        let mut bytes = Some(bytes);
        poll_fn(|cx| {
            let mut state = self.0.state();
            let Some(chunk) = bytes.take() else { return Poll::Ready(Ok(())) };
            match self.0.push(&mut state, chunk) {
                Ok(()) => {
                    wake(state, |s| s.reader.take());
                    Poll::Ready(Ok(()))
                }
                Err(TrySendError::Closed(chunk)) => Poll::Ready(Err(chunk)),
                // The waker is kept under the same lock that found the queue full: a chunk taken
                // after this point finds it.
                Err(TrySendError::Full(chunk)) => {
                    bytes = Some(chunk);
                    wait_in(&mut state.writer, cx);
                    Poll::Pending
                }
            }
        })
        .await
    }

    /// Queues the stream's last chunk (the notice that it was cut) even when the queue holds its
    /// bound, so that a client reading slowly still learns how its stream ended: nothing follows
    /// it, so the bound is passed by one chunk at most. Dropped if the receiver is gone.
    pub fn send_last(&self, bytes: Bytes) {
        let mut state = self.0.state();
        if state.closed {
            return;
        }
        state.queue.push_back(bytes);
        wake(state, |s| s.reader.take());
    }

    /// Resolves once the receiver is dropped.
    pub async fn closed(&self) {
        poll_fn(|cx| {
            let mut state = self.0.state();
            if state.closed {
                return Poll::Ready(());
            }
            wait_in(&mut state.leaving, cx);
            Poll::Pending
        })
        .await;
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.ended = true;
        wake(state, |s| s.reader.take());
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.closed = true;
        // The chunks still queued go now, not when the relay ends (it may drain on for usage).
        let queued = std::mem::take(&mut state.queue);
        // (the body's own waker goes too: it would keep its finished task's memory alive)
        let (writer, leaving, own) = (state.writer.take(), state.leaving.take(), state.reader.take());
        drop(state);
        drop((queued, own));
        writer.into_iter().chain(leaving).for_each(Waker::wake);
    }
}

impl http_body::Body for Receiver {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let mut state = self.0.state();
        if let Some(bytes) = state.queue.pop_front() {
            // Room again for a relay waiting on a full queue.
            wake(state, |s| s.writer.take());
            return Poll::Ready(Some(Ok(Frame::data(bytes))));
        }
        if state.ended {
            return Poll::Ready(None);
        }
        wait_in(&mut state.reader, cx);
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::{future::Future, time::Duration};

    use http_body::Body as _;
    use http_body_util::BodyExt as _;

    use super::*;

    fn chunk(text: &'static str) -> Bytes {
        Bytes::from_static(text.as_bytes())
    }

    /// A waker that counts its wakes, to tell which wait a change woke.
    struct Count(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(0.into()));
        (count.clone(), Waker::from(count))
    }

    fn woken(count: &Count) -> usize {
        count.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn poll<F: Future>(future: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn the_body_is_woken_by_a_chunk_and_by_the_end() {
        let (tx, mut rx) = pipe(1);
        let (reader, waker) = counter();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut rx).poll_frame(&mut cx).is_pending());
        tx.try_send(chunk("a")).ok().unwrap();
        assert_eq!(woken(&reader), 1);
        assert!(matches!(Pin::new(&mut rx).poll_frame(&mut cx), Poll::Ready(Some(Ok(_)))));
        assert!(Pin::new(&mut rx).poll_frame(&mut cx).is_pending());
        drop(tx);
        assert_eq!(woken(&reader), 2);
        assert!(matches!(Pin::new(&mut rx).poll_frame(&mut cx), Poll::Ready(None)));
    }

    #[test]
    fn the_relay_is_woken_by_room_and_each_of_its_waits_by_the_body_leaving() {
        let (tx, mut rx) = pipe(1);
        tx.try_send(chunk("a")).ok().unwrap();
        let mut body = Context::from_waker(Waker::noop());
        {
            let (writer, waker) = counter();
            let mut send = std::pin::pin!(tx.send(chunk("b")));
            assert!(poll(send.as_mut(), &waker).is_pending(), "full");
            assert!(matches!(Pin::new(&mut rx).poll_frame(&mut body), Poll::Ready(Some(Ok(_)))));
            assert_eq!(woken(&writer), 1, "taking a chunk wakes the waiting send");
            assert!(matches!(poll(send.as_mut(), &waker), Poll::Ready(Ok(()))));
        }
        let ((writer, on_room), (leaving, on_leaving)) = (counter(), counter());
        let mut send = std::pin::pin!(tx.send(chunk("c")));
        let mut closed = std::pin::pin!(tx.closed());
        assert!(poll(send.as_mut(), &on_room).is_pending(), "full again");
        assert!(poll(closed.as_mut(), &on_leaving).is_pending());
        drop(rx);
        assert_eq!((woken(&writer), woken(&leaving)), (1, 1), "each wait is woken by its own waker");
        assert!(matches!(poll(send.as_mut(), &on_room), Poll::Ready(Err(c)) if c == "c"));
        assert!(poll(closed.as_mut(), &on_leaving).is_ready());
    }

    #[tokio::test]
    async fn chunks_arrive_in_order_and_the_body_ends_after_the_last() {
        let (tx, rx) = pipe(4);
        tx.try_send(chunk("a")).ok().unwrap();
        let reader = tokio::spawn(rx.collect());
        tokio::task::yield_now().await;
        // The body waits for the next chunk, and is woken by it.
        tx.send(chunk("b")).await.unwrap();
        tx.try_send(chunk("c")).ok().unwrap();
        drop(tx);
        let body = reader.await.unwrap().unwrap().to_bytes();
        assert_eq!(body, "abc");
    }

    #[tokio::test]
    async fn a_full_queue_refuses_a_try_and_makes_a_send_wait_for_room() {
        let (tx, mut rx) = pipe(2);
        tx.try_send(chunk("a")).ok().unwrap();
        tx.try_send(chunk("b")).ok().unwrap();
        assert!(matches!(tx.try_send(chunk("c")), Err(TrySendError::Full(c)) if c == "c"));
        {
            let mut send = std::pin::pin!(tx.send(chunk("c")));
            assert!(
                tokio::time::timeout(Duration::from_millis(20), send.as_mut()).await.is_err(),
                "no room yet"
            );
            let first = rx.frame().await.unwrap().unwrap().into_data().ok().unwrap();
            assert_eq!(first, "a");
            tokio::time::timeout(Duration::from_secs(5), send).await.unwrap().unwrap();
        }
        drop(tx);
        assert_eq!(rx.collect().await.unwrap().to_bytes(), "bc");
    }

    #[tokio::test]
    async fn a_dropped_body_ends_every_wait_of_the_relay_and_refuses_its_chunks() {
        let (tx, rx) = pipe(1);
        tx.try_send(chunk("a")).ok().unwrap();
        let closed = tokio::spawn(async move {
            let waiting = tx.send(chunk("b"));
            let (sent, ()) = tokio::join!(waiting, tx.closed());
            (sent, tx)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!closed.is_finished(), "both wait while the body lives");
        drop(rx);
        let (sent, tx) = tokio::time::timeout(Duration::from_secs(5), closed).await.unwrap().unwrap();
        assert_eq!(sent.unwrap_err(), "b", "the waiting chunk comes back");
        assert!(matches!(tx.try_send(chunk("c")), Err(TrySendError::Closed(_))));
        tx.closed().await;
    }

    #[tokio::test]
    async fn what_is_queued_is_dropped_with_the_body() {
        let (tx, rx) = pipe(4);
        let held = Bytes::from(vec![7u8; 64]);
        tx.try_send(held.clone()).ok().unwrap();
        assert!(!held.is_unique());
        drop(rx);
        assert!(held.is_unique(), "the queued chunk went with the body, not with the relay");
    }
}
