//! The accept loop: caps on open connections (in all, and per IP address), a timeout for
//! the HTTP request head, and the hand-off of each connection to hyper, which serves the
//! HTTP endpoints and upgrades WebSockets.
//!
//! Without these, a socket that never finishes its HTTP request is held forever, and
//! enough of them exhaust the process's file descriptors and lock real players out. A
//! connection over a cap gets a plain `503` and is closed at once; one whose request head
//! does not arrive within `server.http_header_timeout_seconds` is closed by hyper.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::Service;

use crate::metrics::Metrics;

/// The caps and the timeout.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AcceptLimits {
    pub connections_max: usize,
    pub connections_per_ip_max: usize,
    /// Loopback addresses are not held to `connections_per_ip_max`.
    pub per_ip_exempt_loopback: bool,
    pub header_timeout: Duration,
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    ServerFull,
    AddressFull,
}

/// Open connections, in all and by address.
#[derive(Debug, Default)]
struct Book {
    open: Mutex<(usize, BTreeMap<IpAddr, usize>)>,
}

impl Book {
    fn take(self: &Arc<Self>, ip: IpAddr, limits: &AcceptLimits) -> Result<ConnectionSlot, Refusal> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let (total, by_ip) = &mut *open;
        if *total >= limits.connections_max {
            return Err(Refusal::ServerFull);
        }
        let n = by_ip.entry(ip).or_insert(0);
        let exempt = limits.per_ip_exempt_loopback && ip.is_loopback();
        if *n >= limits.connections_per_ip_max && !exempt {
            return Err(Refusal::AddressFull);
        }
        *n += 1;
        *total += 1;
        Ok(ConnectionSlot {
            ip,
            book: self.clone(),
        })
    }

    fn release(&self, ip: IpAddr) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let (total, by_ip) = &mut *open;
        *total = total.saturating_sub(1);
        if let Some(n) = by_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                by_ip.remove(&ip);
            }
        }
    }
}

/// One open connection's place under the caps. The HTTP task holds it, and so does the
/// WebSocket task after an upgrade (it travels in the request's extensions): the place is
/// given back when the last holder ends.
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    ip: IpAddr,
    book: Arc<Book>,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.book.release(self.ip);
    }
}

/// Accepts until `shutdown`, then asks every HTTP connection to finish gracefully.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: AcceptLimits,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let book = Arc::new(Book::default());
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown_signal(&mut shutdown) => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was taken:
                    // wait a moment rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        match book.take(peer.ip(), &limits) {
            Err(refusal) => {
                match refusal {
                    Refusal::ServerFull => &metrics.refused_server_full_total,
                    Refusal::AddressFull => &metrics.refused_address_full_total,
                }
                .fetch_add(1, Relaxed);
                tokio::spawn(refuse(stream, refusal));
            }
            Ok(slot) => {
                // Snapshots are small and latency matters more than packet count.
                let _ = stream.set_nodelay(true);
                let slot = Arc::new(slot);
                tokio::spawn(connection(
                    stream,
                    peer,
                    slot,
                    app.clone(),
                    limits.header_timeout,
                    metrics.clone(),
                    shutdown.clone(),
                ));
            }
        }
    }
}

/// Resolves once the server is shutting down (the watch's guard never outlives it).
async fn shutdown_signal(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|&s| s).await;
}

/// Answers a refused connection with a short `503` and closes it, never waiting long on
/// a peer that does not read.
async fn refuse(mut stream: TcpStream, refusal: Refusal) {
    let body = match refusal {
        Refusal::ServerFull => "server full: too many open connections\n",
        Refusal::AddressFull => "too many open connections from this address\n",
    };
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_millis(200), stream.write_all(response.as_bytes())).await;
}

/// Serves one connection's HTTP requests (and its upgrade) with hyper.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    slot: Arc<ConnectionSlot>,
    app: Router,
    header_timeout: Duration,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    metrics.tcp_connections.fetch_add(1, Relaxed);
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        req.extensions_mut().insert(slot.clone());
        let mut app = app.clone();
        async move { app.call(req.map(axum::body::Body::new)).await }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = shutdown_signal(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        if e.is_timeout() {
            metrics.http_header_timeouts_total.fetch_add(1, Relaxed);
        }
        tracing::debug!(%peer, error = %e, "HTTP connection ended");
    }
    metrics.tcp_connections.fetch_sub(1, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_count_in_all_and_by_address_and_give_places_back() {
        let book = Arc::new(Book::default());
        let limits = AcceptLimits {
            connections_max: 3,
            connections_per_ip_max: 2,
            per_ip_exempt_loopback: true,
            header_timeout: Duration::from_secs(1),
        };
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a1 = book.take(a, &limits).unwrap();
        let _a2 = book.take(a, &limits).unwrap();
        assert_eq!(book.take(a, &limits).unwrap_err(), Refusal::AddressFull);
        let _b1 = book.take(b, &limits).unwrap();
        assert_eq!(book.take(b, &limits).unwrap_err(), Refusal::ServerFull);
        drop(a1);
        let _a3 = book.take(a, &limits).unwrap();
        assert_eq!(book.take(b, &limits).unwrap_err(), Refusal::ServerFull);
        // Loopback is exempt from the per-address cap (not from the total).
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let book = Arc::new(Book::default());
        let held: Vec<ConnectionSlot> = (0..3).map(|_| book.take(local, &limits).unwrap()).collect();
        assert_eq!(book.take(local, &limits).unwrap_err(), Refusal::ServerFull);
        drop(held);
    }
}
