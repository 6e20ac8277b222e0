//! The listener: HTTP/1.1 connections on hyper, with the limits a client cannot hold the
//! server past, and a shutdown that ends.
//!
//! - **Header timeout.** A request's head must arrive within `header_timeout`; a client
//!   that sends half a header (or nothing) on an open connection is disconnected then.
//! - **Shutdown.** When the shutdown future resolves the listener closes at once, idle
//!   connections are closed, and requests in flight get the `grace` period to finish
//!   (their connections close after their answer). When it ends, whatever is left is
//!   dropped: each abandoned request's work is cancelled, its client sees the connection
//!   close, and [`serve`] reports how many there were.
//! - **Every error is JSON.** hyper answers a request it cannot parse (a malformed request
//!   line or header: 400; a URI over its limit: 414; headers over its buffer: 431) itself,
//!   with an empty body, before any handler runs. [`JsonErrors`] rewrites exactly those
//!   answers, on their way to the socket, into the `{"error": ...}` form of every other
//!   error.

use super::Shared;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;

/// How a server stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped {
    /// Requests still in flight when the grace period ended: each was cancelled and its
    /// connection closed without an answer. 0 after a clean drain.
    pub abandoned: usize,
    /// Connections closed by force at the end (idle, or half-way through a request head or
    /// body, or abandoned).
    pub closed: usize,
    /// From the shutdown signal to the return.
    pub took: Duration,
}

/// Accepts connections on `listener` and serves `app` on each until `shutdown` resolves,
/// then drains as the module documentation says.
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Stopped {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    let header_timeout = shared.cfg.header_timeout;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let service = TowerToHyperService::new(app.clone());
                    let mut stop = stop_rx.clone();
                    conns.spawn(async move {
                        let mut b = http1::Builder::new();
                        b.timer(TokioTimer::new()).header_read_timeout(header_timeout);
                        let conn = b.serve_connection(TokioIo::new(JsonErrors::new(stream)), service);
                        tokio::pin!(conn);
                        let stopped = async move {
                            // The guard `wait_for` returns is not Send: drop it at once.
                            let _ = stop.wait_for(|s| *s).await.map(|_| ());
                        };
                        tokio::select! {
                            _ = conn.as_mut() => {}
                            () = stopped => {
                                // No new request on this connection; the one in flight (if
                                // any) finishes, or the drain below drops it.
                                conn.as_mut().graceful_shutdown();
                                let _ = conn.await;
                            }
                        }
                    });
                }
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    let t0 = Instant::now();
    drop(listener);
    let _ = stop_tx.send(true);
    let grace = shared.cfg.grace;
    // Requests in flight get the grace period...
    let left = |s: &Shared| s.in_flight.load(Ordering::Acquire);
    while left(&shared) > 0 && t0.elapsed() < grace {
        tokio::select! {
            () = shared.idle.notified() => {}
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
    let abandoned = left(&shared);
    // ...then their connections a moment to write the last answers and close.
    let flush = grace.saturating_sub(t0.elapsed()).min(Duration::from_secs(1));
    let _ = tokio::time::timeout(flush, async { while conns.join_next().await.is_some() {} }).await;
    let closed = conns.len();
    // Dropping a connection drops its request's future, whose guard cancels its work.
    conns.abort_all();
    while conns.join_next().await.is_some() {}
    Stopped {
        abandoned,
        closed,
        took: t0.elapsed(),
    }
}

/// hyper's own answer to a request it could not parse, as it writes it:
/// `HTTP/1.1 <code> <reason>\r\nconnection: close\r\ncontent-length: 0\r\n...\r\n\r\n`.
/// Returns the same head with a JSON body, or `None` for every other write.
fn rewrite(buf: &[u8]) -> Option<Vec<u8>> {
    const MARK: &[u8] = b"\r\nconnection: close\r\ncontent-length: 0\r\n";
    let rest = buf.strip_prefix(b"HTTP/1.1 ")?;
    let code = std::str::from_utf8(rest.get(..3)?).ok()?;
    let (what, status) = match code {
        "400" => ("the request line or a header is malformed", "400 Bad Request"),
        "414" => ("the request target is too long", "414 URI Too Long"),
        "431" => (
            "the request's headers are too large",
            "431 Request Header Fields Too Large",
        ),
        _ => return None,
    };
    // The whole head, and nothing after it: hyper writes such an answer in one piece.
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    if end + 4 != buf.len() {
        return None;
    }
    let at = buf.windows(MARK.len()).position(|w| w == MARK)?;
    let first_line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    if at != first_line_end {
        return None;
    }
    let body = serde_json::json!({"error": format!("bad request: {what} (HTTP/1.1)")}).to_string();
    // Keep the other headers hyper wrote (the date), after ours.
    let others = &buf[at + MARK.len()..end + 2];
    let mut out = format!(
        "HTTP/1.1 {status}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(others);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body.as_bytes());
    Some(out)
}

/// A connection's socket, with hyper's parse-error answers rewritten as JSON ([`rewrite`]).
/// Writes are not vectored, so hyper hands each answer's head to one `poll_write`.
pub(super) struct JsonErrors<S> {
    inner: S,
    /// A rewritten answer being written: the bytes, how many are out, and the length of
    /// the write it replaces (what the caller is told was written).
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl<S> JsonErrors<S> {
    pub(super) fn new(inner: S) -> Self {
        JsonErrors { inner, pending: None }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonErrors<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonErrors<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        if me.pending.is_none() {
            match rewrite(buf) {
                Some(out) => me.pending = Some((out, 0, buf.len())),
                None => return Pin::new(&mut me.inner).poll_write(cx, buf),
            }
        }
        loop {
            let Some((out, done, replaced)) = me.pending.as_mut() else {
                return Poll::Ready(Ok(0));
            };
            if *done == out.len() {
                let n = *replaced;
                me.pending = None;
                return Poll::Ready(Ok(n));
            }
            match Pin::new(&mut me.inner).poll_write(cx, &out[*done..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *done += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn only_hypers_own_parse_error_answers_are_rewritten() {
        let hyper = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 04:55:35 GMT\r\n\r\n";
        let out = String::from_utf8(rewrite(hyper).expect("rewritten")).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        assert!(head.contains("content-type: application/json"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(head.ends_with("date: Wed, 02 Dec 2026 04:55:35 GMT"), "{head}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert!(v["error"].as_str().unwrap().contains("malformed"));
        for code in ["414 URI Too Long", "431 Request Header Fields Too Large"] {
            let h = format!("HTTP/1.1 {code}\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n");
            assert!(rewrite(h.as_bytes()).is_some(), "{code}");
        }
        // The service's own answers (a body follows the head, or a content type is set) and
        // partial writes pass through untouched.
        for other in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"[..],
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\nda",
            b"{\"error\": \"HTTP/1.1 400 Bad Request\"}",
            b"HTTP/1.1 400 Bad Request\r\nx: y\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
        ] {
            assert!(rewrite(other).is_none(), "{}", String::from_utf8_lossy(other));
        }
    }
}
