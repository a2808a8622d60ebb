//! A small HTTP/1.1 server for monitoring: GET and HEAD only, one request per
//! connection, every resource bounded.
//!
//! Request heads are parsed by `httparse` (the parser under hyper: well kept, no
//! allocation, fuzzed upstream); this module only bounds what reaches it:
//! - at most [`Limits::max_connections`] connections at a time, one thread each; at the
//!   limit a new connection takes the place of the oldest one that has waited over
//!   250 ms for its request head (that one is closed: idle connections cannot lock
//!   out a health check); when none has, it is answered `503`;
//! - a request head of at most [`Limits::max_head_bytes`] (else `431`) and
//!   [`MAX_HEADERS`] headers (else `400`);
//! - the whole request must arrive within [`Limits::timeout`] of the connect (a slow
//!   client is dropped; a byte trickle does not extend it), and the response is written
//!   with the same timeout;
//! - no request body is read: a request that announces one is answered `413`;
//! - a handler that panics answers `500`; the server thread itself has no panic path.
//!
//! The server runs on its own threads, never on a hot thread.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::query::Query;

/// Most headers in a request.
pub const MAX_HEADERS: usize = 32;

/// The server's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Bytes of request line and headers.
    pub max_head_bytes: usize,
    /// Time from connect to the complete request head, and to write the response.
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 16,
            max_head_bytes: 8192,
            timeout: Duration::from_secs(5),
        }
    }
}

/// A request as a handler sees it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `GET` or `HEAD`.
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// The query string after `?` (empty when none).
    pub query: Query<'a>,
    /// The `Authorization` header's value, if the request carries one.
    pub authorization: Option<&'a [u8]>,
    /// The peer's address.
    pub peer: SocketAddr,
}

/// What a handler answers.
#[derive(Debug, Clone)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// The Content-Type header.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// A `WWW-Authenticate` challenge (with status 401).
    pub challenge: Option<&'static str>,
}

impl Response {
    /// 200 with a JSON body.
    pub fn json(value: &impl serde::Serialize) -> Response {
        match serde_json::to_vec_pretty(value) {
            Ok(body) => Response::with(200, "application/json", body),
            Err(e) => Response::error(500, &format!("rendering JSON: {e}")),
        }
    }

    /// A body of `content_type` with `status`.
    pub fn with(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            content_type,
            body: body.into(),
            challenge: None,
        }
    }

    /// An error status with a one-line text body.
    pub fn error(status: u16, text: &str) -> Response {
        Response::with(status, "text/plain; charset=utf-8", format!("{text}\n"))
    }

    /// 404.
    pub fn not_found() -> Response {
        Response::error(404, "not found")
    }

    /// 401 with a Basic challenge for `realm` (a browser asks for a user and password).
    pub fn unauthorized(challenge: &'static str, text: &str) -> Response {
        let mut r = Response::error(401, text);
        r.challenge = Some(challenge);
        r
    }
}

/// Why a request head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed (400).
    Malformed,
    /// Head longer than the limit (431).
    TooLarge,
    /// Not GET or HEAD (405).
    Method,
    /// The request carries a body (413).
    Body,
}

impl Refusal {
    fn response(self) -> Response {
        match self {
            Refusal::Malformed => Response::error(400, "bad request"),
            Refusal::TooLarge => Response::error(431, "request header fields too large"),
            Refusal::Method => Response::error(405, "only GET and HEAD"),
            Refusal::Body => Response::error(413, "no request body accepted"),
        }
    }
}

/// The parts of a complete, accepted request head (borrowing the buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head<'a> {
    /// `GET` or `HEAD`.
    pub method: &'a str,
    /// The request target as sent (path and query).
    pub target: &'a str,
    /// The `Authorization` header's value, if present (the first one).
    pub authorization: Option<&'a [u8]>,
}

/// Parses what has arrived of a request head: `Ok(None)` while incomplete (and within
/// `max` bytes), the head once complete, or why it is refused. Pure; never panics.
pub fn parse_head(buf: &[u8], max: usize) -> Result<Option<Head<'_>>, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) if buf.len() >= max => Err(Refusal::TooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(n)) if n > max => Err(Refusal::TooLarge),
        Ok(httparse::Status::Complete(_)) => {
            let (Some(method), Some(target)) = (req.method, req.path) else {
                return Err(Refusal::Malformed);
            };
            if method != "GET" && method != "HEAD" {
                return Err(Refusal::Method);
            }
            let mut authorization = None;
            for h in req.headers.iter() {
                if authorization.is_none() && h.name.eq_ignore_ascii_case("authorization") {
                    authorization = Some(h.value);
                }
                let announces_body = (h.name.eq_ignore_ascii_case("content-length")
                    && h.value
                        .iter()
                        .any(|&b| b != b'0' && !b.is_ascii_whitespace()))
                    || h.name.eq_ignore_ascii_case("transfer-encoding");
                if announces_body {
                    return Err(Refusal::Body);
                }
            }
            Ok(Some(Head {
                method,
                target,
                authorization,
            }))
        }
        Err(httparse::Error::TooManyHeaders) => Err(Refusal::Malformed),
        Err(_) => Err(Refusal::Malformed),
    }
}

/// Splits a request target into path and query.
pub fn split_target(target: &str) -> (&str, Query<'_>) {
    match target.split_once('?') {
        Some((path, q)) => (path, Query::new(q)),
        None => (target, Query::new("")),
    }
}

/// A handler: called on a connection thread for each accepted request.
pub type Handler = Arc<dyn Fn(&Request<'_>) -> Response + Send + Sync>;

/// A running server; [`Server::stop`] ends the accept loop (connections in progress
/// finish on their own threads).
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Server {
    /// Binds `addr` and serves `handler` on a thread named `http`.
    pub fn spawn(addr: SocketAddr, limits: Limits, handler: Handler) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("http".into())
            .spawn(move || accept_loop(listener, limits, handler, flag))?;
        Ok(Server { addr, stop })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        // Unblock accept(); a failure means the listener is gone already.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn accept_loop(listener: TcpListener, limits: Limits, handler: Handler, stop: Arc<AtomicBool>) {
    let active = Arc::new(Active::default());
    let mut refused = std::collections::VecDeque::with_capacity(MAX_LINGERING);
    let mut next_id = 0u64;
    for conn in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(stream) = conn else {
            // EMFILE and friends: back off instead of spinning.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        next_id += 1;
        let id = next_id;
        let Ok(handle) = stream.try_clone() else {
            continue;
        };
        if !active.admit(id, handle, limits.max_connections) {
            let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
            let _ = respond(
                &stream,
                "GET",
                &Response::error(503, "too many connections"),
            );
            // Closed at once, the socket would answer the request still on its way
            // with a reset, which can destroy the 503 before the client reads it: the
            // last few refused stay half-closed (FIN sent) until later ones push them
            // out.
            let _ = stream.shutdown(std::net::Shutdown::Write);
            if refused.len() == MAX_LINGERING {
                refused.pop_front();
            }
            refused.push_back(stream);
            continue;
        }
        let guard = ActiveGuard(active.clone(), id);
        let handler = handler.clone();
        let spawned = std::thread::Builder::new()
            .name("http-conn".into())
            .spawn(move || {
                let guard = guard;
                serve(stream, limits, &handler, &guard);
            });
        if spawned.is_err() {
            tracing::warn!("monitoring: cannot start a connection thread");
        }
    }
}

/// Refused connections kept half-closed (see `accept_loop`).
const MAX_LINGERING: usize = 16;

/// A connection still waiting for its request head is closed to make room only once
/// it has waited this long: a request that arrived with its connection is read well
/// within it, however fast new connections come.
const EVICT_AFTER: Duration = Duration::from_millis(250);

/// A connection being served.
struct Served {
    id: u64,
    /// A handle to close it by.
    handle: TcpStream,
    since: Instant,
    /// Still waiting for its request head (not yet being answered).
    waiting: bool,
}

/// The connections being served, oldest first.
#[derive(Default)]
struct Active(Mutex<Vec<Served>>);

impl Active {
    /// Takes connection `id` on, closing the oldest one that has waited for its
    /// request head longer than [`EVICT_AFTER`] if `max` are served already; false if
    /// none may be closed (all are being answered, or arrived just now).
    fn admit(&self, id: u64, handle: TcpStream, max: usize) -> bool {
        let mut conns = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if conns.len() >= max {
            let Some(oldest) = conns
                .iter()
                .position(|c| c.waiting && c.since.elapsed() >= EVICT_AFTER)
            else {
                return false;
            };
            // Its thread's read returns at once and the thread ends.
            let evicted = conns.remove(oldest);
            let _ = evicted.handle.shutdown(std::net::Shutdown::Both);
        }
        conns.push(Served {
            id,
            handle,
            since: Instant::now(),
            waiting: true,
        });
        true
    }

    /// Connection `id` has its request (or its refusal): it is answered now, never
    /// closed to make room.
    fn answering(&self, id: u64) {
        let mut conns = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = conns.iter_mut().find(|c| c.id == id) {
            c.waiting = false;
        }
    }

    fn remove(&self, id: u64) {
        let mut conns = self.0.lock().unwrap_or_else(|p| p.into_inner());
        conns.retain(|c| c.id != id);
    }
}

/// Takes a connection off the served list when its thread ends, however it ends.
struct ActiveGuard(Arc<Active>, u64);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}

fn serve(mut stream: TcpStream, limits: Limits, handler: &Handler, guard: &ActiveGuard) {
    let Ok(peer) = stream.peer_addr() else {
        return;
    };
    let deadline = Instant::now() + limits.timeout;
    let _ = stream.set_write_timeout(Some(limits.timeout));
    let mut buf = vec![0u8; limits.max_head_bytes];
    let mut len = 0;
    let response = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        let n = match stream.read(&mut buf[len..]) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        len += n;
        match parse_head(&buf[..len], limits.max_head_bytes) {
            Ok(None) => continue,
            Err(refusal) => {
                guard.0.answering(guard.1);
                break ("GET", refusal.response());
            }
            Ok(Some(head)) => {
                guard.0.answering(guard.1);
                let (path, query) = split_target(head.target);
                let req = Request {
                    method: head.method,
                    path,
                    query,
                    authorization: head.authorization,
                    peer,
                };
                let answer =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&req)))
                        .unwrap_or_else(|_| Response::error(500, "internal error"));
                break (if head.method == "HEAD" { "HEAD" } else { "GET" }, answer);
            }
        }
    };
    let _ = respond(&stream, response.0, &response.1);
}

fn respond(mut stream: &TcpStream, method: &str, r: &Response) -> io::Result<()> {
    let challenge = match r.challenge {
        Some(c) => format!("WWW-Authenticate: {c}\r\n"),
        None => String::new(),
    };
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{challenge}Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    stream.write_all(head.as_bytes())?;
    if method != "HEAD" {
        stream.write_all(&r.body)?;
    }
    stream.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn heads_are_accepted_refused_or_awaited() {
        let ok = parse_head(b"GET /varz?x=1 HTTP/1.1\r\nHost: a\r\n\r\n", 8192);
        assert_eq!(
            ok,
            Ok(Some(Head {
                method: "GET",
                target: "/varz?x=1",
                authorization: None,
            }))
        );
        assert_eq!(parse_head(b"GET /varz HTTP/1.1\r\nHo", 8192), Ok(None));
        assert_eq!(
            parse_head(b"GET /varz HTTP/1.1\r\nHo", 10),
            Err(Refusal::TooLarge)
        );
        assert_eq!(
            parse_head(b"POST / HTTP/1.1\r\n\r\n", 8192),
            Err(Refusal::Method)
        );
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", 8192),
            Err(Refusal::Body)
        );
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 8192).map(|h| h.is_some()),
            Ok(true)
        );
        assert_eq!(
            parse_head(b"\x00\x01 /\r\n\r\n", 8192),
            Err(Refusal::Malformed)
        );
        let many: String = (0..40).map(|i| format!("h{i}: v\r\n")).collect();
        let req = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(parse_head(req.as_bytes(), 8192), Err(Refusal::Malformed));
    }

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        answer
    }

    /// Connections that never send their request cannot lock a health check out (16
    /// of them made every request a 503; found by a hostile-input pass): a new one
    /// takes the place of the oldest idle one. Only when every connection is being
    /// answered is a new one refused.
    #[test]
    fn idle_connections_give_way_and_busy_ones_do_not() {
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().unwrap();
        let g = gate.clone();
        let handler: Handler = Arc::new(move |r: &Request<'_>| {
            if r.path == "/slow" {
                drop(g.lock());
            }
            Response::json(&"ok")
        });
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let server = Server::spawn("127.0.0.1:0".parse().unwrap(), limits, handler).unwrap();
        let addr = server.local_addr();
        let mut idle: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
        std::thread::sleep(EVICT_AFTER + Duration::from_millis(100));
        for _ in 0..3 {
            let answer = get(addr, "/healthz");
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
        // The oldest idle one was closed to make room (the other was not needed: each
        // request's connection ended before the next came).
        let c = &mut idle[0];
        c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut b = [0u8; 16];
        assert_eq!(
            c.read(&mut b).unwrap(),
            0,
            "the idle connection was not closed"
        );
        // Two requests being answered (their handler waits on the gate): a third
        // connection is refused, not served by closing one of them.
        let slow: Vec<_> = (0..2)
            .map(|_| std::thread::spawn(move || get(addr, "/slow")))
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let answer = get(addr, "/healthz");
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        drop(held);
        for t in slow {
            let answer = t.join().unwrap();
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
        server.stop();
    }

    #[test]
    fn targets_split_into_path_and_query() {
        let (p, q) = split_target("/connz?limit=5&sort=msgs_out");
        assert_eq!(p, "/connz");
        assert_eq!(q.get("limit"), Some("5"));
        assert_eq!(split_target("/").0, "/");
    }

    proptest! {
        /// Any bytes, cut anywhere: the parser answers without panicking, an incomplete
        /// answer only below the limit, and a prefix of an accepted head is never refused
        /// as malformed.
        #[test]
        fn parse_head_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600), max in 1usize..700) {
            match parse_head(&bytes, max) {
                Ok(None) => prop_assert!(bytes.len() < max),
                Ok(Some(h)) => prop_assert!(h.method == "GET" || h.method == "HEAD"),
                Err(_) => {}
            }
        }

        #[test]
        fn a_valid_head_split_anywhere_is_awaited_then_accepted(
            path in "/[a-z]{0,12}(\\?[a-z=&0-9]{0,20})?",
            cut in 0usize..100,
        ) {
            let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\n\r\n");
            let cut = cut.min(req.len() - 1);
            prop_assert_eq!(parse_head(&req.as_bytes()[..cut], 8192), Ok(None));
            let head = parse_head(req.as_bytes(), 8192).unwrap().unwrap();
            prop_assert_eq!(head.target, path.as_str());
        }
    }
}
