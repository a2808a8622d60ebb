//! `--http`: the monitoring endpoint of `tickwire router`, `tickwire feed` and
//! `tickwire fix` (crate `tickwire-monitor` serves it; docs/monitoring.md lists it all).
//!
//! Each component gives a [`Component`]: the JSON and Prometheus documents it can
//! render. The routes common to all (the dashboard, `/healthz`, `/metrics`, `/varz`,
//! `/api/dashboard`) are dispatched here once; a component adds its own (`/connz`...).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use tickwire_monitor::http::{Handler, Limits, Request, Response, Server};
use tickwire_monitor::prom;
use tickwire_router::auth::AuthConfig;
use tickwire_rt::snapshot::Reader;
use tickwire_rt::MonoNanos;

pub mod access;
pub mod feed;
pub mod fix;
pub mod probe;
pub mod router;

/// The flags every monitored command takes.
#[derive(Args, Debug, Clone)]
pub struct HttpArgs {
    /// Serve the monitoring endpoint (dashboard, JSON, /metrics) on ADDR. Off unless
    /// given; `--http` alone listens on loopback only (127.0.0.1, the command's default
    /// port: router 7480, feed 7481, fix 7482). Beyond loopback it requires a login
    /// (--http-auth; the router also takes its own [auth] users) unless --http-open
    /// (docs/monitoring.md).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, require_equals = false)]
    pub http: Option<Option<String>>,
    /// Who may read the endpoint: a TOML file with an [auth] table in the router's format
    /// (the router's config file will do); its users with `admin = true` log in with
    /// HTTP Basic (password) or Bearer (token). Required on that endpoint even on
    /// loopback once given. The router uses its own [auth] users without this flag.
    #[arg(long, value_name = "FILE", conflicts_with = "http_open")]
    pub http_auth: Option<PathBuf>,
    /// Serve a non-loopback --http address to anyone who can reach it, without a login
    /// (a warning is logged). Never needed on loopback.
    #[arg(long)]
    pub http_open: bool,
    /// /metrics: the most clients (router) or sessions (FIX) given their own labelled
    /// series; the rest are in the totals only.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub metrics_max_series: usize,
}

impl HttpArgs {
    /// The address to serve on, if enabled: a bare port (on loopback), IP:PORT or
    /// HOST:PORT (resolved, as the router's --listen); a bare `--http` is loopback on
    /// `default_port`.
    pub fn addr(&self, default_port: u16) -> anyhow::Result<Option<SocketAddr>> {
        let Some(given) = &self.http else {
            return Ok(None);
        };
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        Ok(Some(match given.as_deref() {
            None => SocketAddr::new(loopback, default_port),
            Some(text) => match text.parse::<u16>() {
                Ok(port) => SocketAddr::new(loopback, port),
                Err(_) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
                    return Err(crate::units::UsageError(format!(
                        "--http: {text:?} is not a port number (at most 65535)"
                    ))
                    .into());
                }
                Err(_) => {
                    crate::listen::parse(text)
                        .map_err(|e| crate::units::UsageError(format!("--http: {e}")))?;
                    crate::listen::resolve("--http", text)?
                }
            },
        }))
    }
}

/// Who may read an endpoint: `None` is everyone.
pub type Access = Option<Arc<access::Guard>>;

impl HttpArgs {
    /// Who may read the endpoint on `addr`. `own` is the component's own `[auth]` (the
    /// router's) and whether the component itself refuses anonymous clients: its admin
    /// users are asked for beyond loopback, and on loopback too when it refuses
    /// anonymous clients.
    pub fn access(
        &self,
        addr: SocketAddr,
        own: Option<(&AuthConfig, bool)>,
    ) -> anyhow::Result<Access> {
        let beyond_loopback = !addr.ip().is_loopback();
        // A file that is missing, does not parse or names no admin is a usage error
        // (exit status 2), found before anything starts, as a bad flag is.
        let usage = crate::units::UsageError::of;
        if let Some(path) = &self.http_auth {
            let cfg = access::read_auth_file(path).map_err(usage)?;
            let guard = access::Guard::new(&cfg, &format!("--http-auth {}", path.display()))
                .map_err(usage)?;
            return Ok(Some(Arc::new(guard)));
        }
        if self.http_open {
            if beyond_loopback {
                tracing::warn!(http = %addr, "the monitoring endpoint is open beyond loopback (--http-open): anyone who reaches it reads every client's name, address and counters");
            }
            return Ok(None);
        }
        match own {
            Some((cfg, refuses_anonymous))
                if !cfg.users.is_empty() && (beyond_loopback || refuses_anonymous) =>
            {
                let guard = access::Guard::new(cfg, "the router's [auth] table").map_err(usage)?;
                Ok(Some(Arc::new(guard)))
            }
            _ if beyond_loopback => Err(access::refuse_open(addr, own.is_some())),
            _ => Ok(None),
        }
    }
}

/// What a monitored component renders; called on HTTP connection threads.
pub trait Component: Send + Sync + 'static {
    /// Live and serving (`/healthz`): Err says why not.
    fn health(&self) -> Result<(), String>;
    /// Server information and totals (`/varz`).
    fn varz(&self) -> serde_json::Value;
    /// The Prometheus document (`/metrics`), after the common families.
    fn metrics(&self, out: &mut prom::Text, max_series: usize);
    /// What the dashboard draws (`/api/dashboard`; shape in assets/dashboard.js).
    fn dashboard(&self) -> serde_json::Value;
    /// A component's own route, if `req` is one.
    fn route(&self, req: &Request<'_>) -> Option<Response>;
}

/// Starts the endpoint for `component` on `addr`, readable by `access`; prints and logs
/// where it listens.
pub fn serve(
    addr: SocketAddr,
    component: Arc<dyn Component>,
    max_series: usize,
    access: Access,
) -> anyhow::Result<Server> {
    let server = start(addr, component, max_series, access)?;
    announce(&server);
    Ok(server)
}

/// Prints where `server` listens (the line scripts read on stdout).
pub fn announce(server: &Server) {
    println!(
        "tickwire monitor listening on http://{}/",
        server.local_addr()
    );
}

/// [`serve`] without the line on stdout ([`announce`] prints it): for a command that
/// starts its endpoint before it prints its own banner.
pub fn start(
    addr: SocketAddr,
    component: Arc<dyn Component>,
    max_series: usize,
    access: Access,
) -> anyhow::Result<Server> {
    let started = std::time::Instant::now();
    let login = if access.is_some() {
        "admin login"
    } else {
        "open"
    };
    let handler: Handler = Arc::new(move |req: &Request<'_>| {
        if req.path != "/healthz" {
            if let Some(guard) = &access {
                if let Err(refusal) = guard.admit(req) {
                    return refusal;
                }
            }
        }
        route(&*component, req, max_series, started, access.as_deref())
    });
    let server = Server::spawn(addr, Limits::default(), handler)
        .with_context(|| format!("starting the monitoring endpoint on {addr}"))
        .map_err(|e| {
            crate::listen::hint_in_use(
                e,
                "is another tickwire command serving --http there? pick another port with --http",
            )
        })?;
    tracing::info!(http = %server.local_addr(), access = login, "monitoring endpoint listening");
    Ok(server)
}

fn route(
    c: &dyn Component,
    req: &Request<'_>,
    max_series: usize,
    started: std::time::Instant,
    guard: Option<&access::Guard>,
) -> Response {
    if let Some(asset) = tickwire_monitor::dashboard::asset(req.path) {
        return asset;
    }
    match req.path {
        "/healthz" => match c.health() {
            Ok(()) => Response::json(&serde_json::json!({ "status": "ok" })),
            Err(why) => {
                let mut r = Response::json(&serde_json::json!({ "status": "error", "error": why }));
                r.status = 503;
                r
            }
        },
        "/varz" => Response::json(&c.varz()),
        "/api/dashboard" => Response::json(&c.dashboard()),
        "/metrics" => {
            let mut out = prom::Text::new();
            out.single(
                "tickwire_process_uptime_seconds",
                prom::Kind::Gauge,
                "Seconds since the monitoring endpoint started.",
                started.elapsed().as_secs_f64(),
            );
            if let Some(g) = guard {
                out.single(
                    "tickwire_monitor_login_failures_total",
                    prom::Kind::Counter,
                    "Requests to the monitoring endpoint refused for a wrong, malformed or non-admin login (one without credentials is answered 401 and not counted).",
                    g.failures() as f64,
                );
            }
            c.metrics(&mut out, max_series);
            Response::with(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                out.finish(),
            )
        }
        _ => match paging_error(req) {
            Some(refusal) => refusal,
            None => c.route(req).unwrap_or_else(Response::not_found),
        },
    }
}

/// A `400` for an `offset` or `limit` that is not a number (it was read as the
/// default, so `limit=abc` quietly gave 100 items).
fn paging_error(req: &Request<'_>) -> Option<Response> {
    ["offset", "limit"].into_iter().find_map(|key| {
        let v = req.query.get(key)?;
        v.parse::<usize>().is_err().then(|| {
            Response::error(
                400,
                &match key {
                    "limit" => format!("limit={v:?}: expected a whole number (at most 1024)"),
                    // New-user pass: offset=-1 was told about the limit's maximum.
                    _ => format!("offset={v:?}: expected a whole number (0 or more)"),
                },
            )
        })
    })
}

/// Items `offset..offset+limit` of `items` (query `offset`, `limit`: at most 1024,
/// default 100) with the paging fields NATS's endpoints use.
pub fn page<T: serde::Serialize>(req: &Request<'_>, items: &[T]) -> serde_json::Value {
    let offset = req.query.number("offset", 0, items.len());
    let limit = req.query.number("limit", 100, 1024);
    let end = offset.saturating_add(limit).min(items.len());
    serde_json::json!({
        "total": items.len(),
        "offset": offset,
        "limit": limit,
        "items": &items[offset..end],
    })
}

/// Requests within this long of a snapshot share it (the hot thread makes at most one
/// per tick either way)...
const FRESH: Duration = Duration::from_millis(50);
/// ...or within this many times what the snapshot took the hot thread to make, when
/// longer: requests in a row take at most ~1/20 of the loop's time, however large its
/// state (a router with 10,000 queues took ~150 ms per snapshot)...
const SHARE_PER_COST: u32 = 20;
/// ...but never longer than this.
const MAX_SHARE: Duration = Duration::from_secs(10);
/// How long a request waits for the hot thread's next tick.
const WAIT: Duration = Duration::from_millis(500);
/// The hot threads tick at least every 100 ms: silent for this long, one is stuck.
const STUCK_NS: u64 = 2_000_000_000;

/// How long requests share a snapshot that took `cost` to make.
fn share_for(cost: Duration) -> Duration {
    cost.saturating_mul(SHARE_PER_COST).clamp(FRESH, MAX_SHARE)
}

/// A hot thread's snapshots as the HTTP threads see them: fetched on request through
/// [`tickwire_rt::snapshot`] and shared for [`FRESH`].
pub struct Source<T> {
    cache: Mutex<Cache<T>>,
    /// The loop's liveness, read without the cache's lock: a request waiting up to
    /// [`WAIT`] for a snapshot holds that lock, and `/healthz` must answer at once
    /// (a hostile-input pass: with the loop stuck, 16 pollers of `/varz` made every
    /// `/healthz` time out).
    pulse: tickwire_rt::snapshot::Pulse,
    /// Who answers, for errors: "the router's event loop".
    who: &'static str,
}

struct Cache<T> {
    reader: Reader<T>,
    last: Option<(Instant, Arc<T>)>,
}

impl<T> Source<T> {
    /// Serves what `reader` fetches from `who`.
    pub fn new(reader: Reader<T>, who: &'static str) -> Source<T> {
        Source {
            pulse: reader.pulse(),
            cache: Mutex::new(Cache { reader, last: None }),
            who,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache<T>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A snapshot at most [`FRESH`] old (or [`SHARE_PER_COST`] times what it cost the
    /// hot thread, at most [`MAX_SHARE`]), or None when the hot thread did not answer.
    pub fn snapshot(&self) -> Option<Arc<T>> {
        let mut c = self.lock();
        if let Some((at, s)) = &c.last {
            if at.elapsed() < share_for(c.reader.last_cost()) {
                return Some(s.clone());
            }
        }
        if self.stuck() {
            // No tick for seconds: the next will not come within WAIT either; answer
            // at once instead of holding the lock for it.
            return None;
        }
        let s: Arc<T> = Arc::from(c.reader.fetch(WAIT)?);
        c.last = Some((Instant::now(), s.clone()));
        Some(s)
    }

    /// `f` of a snapshot as JSON, or 503.
    pub fn json(&self, f: impl FnOnce(&T) -> serde_json::Value) -> Response {
        match self.snapshot() {
            Some(s) => Response::json(&f(&s)),
            None => self.unanswered(),
        }
    }

    /// 503: the hot thread did not answer.
    pub fn unanswered(&self) -> Response {
        Response::error(503, &format!("{} did not answer", self.who))
    }

    /// `f` of a snapshot, or the error document of [`Source::error_doc`].
    pub fn doc(&self, kind: &str, f: impl FnOnce(&T) -> serde_json::Value) -> serde_json::Value {
        match self.snapshot() {
            Some(s) => f(&s),
            None => self.error_doc(kind),
        }
    }

    /// For `/metrics`: the `<prefix>_up` gauge (1 when the hot thread answers this
    /// scrape), then the snapshot if it did.
    pub fn scrape(&self, out: &mut prom::Text, up: &str) -> Option<Arc<T>> {
        let s = self.snapshot();
        out.single(
            up,
            prom::Kind::Gauge,
            &format!("1 when {} answers.", self.who),
            f64::from(u8::from(s.is_some())),
        );
        s
    }

    /// The `/varz`-style error document.
    pub fn error_doc(&self, kind: &str) -> serde_json::Value {
        serde_json::json!({ "kind": kind, "error": format!("{} did not answer", self.who) })
    }

    /// The hot thread has not ticked for [`STUCK_NS`] (or has stopped).
    fn stuck(&self) -> bool {
        self.pulse.loop_gone()
            || self
                .pulse
                .heartbeat()
                .is_some_and(|t| MonoNanos::now().saturating_sub(t) > STUCK_NS)
    }

    /// Live: the hot thread ticked within [`STUCK_NS`] and has not stopped. Takes no
    /// lock: never waits behind a request for a snapshot.
    pub fn health(&self) -> Result<(), String> {
        match self.pulse.heartbeat() {
            None => Err(format!("{} has not ticked yet", self.who)),
            Some(t) if MonoNanos::now().saturating_sub(t) > STUCK_NS => Err(format!(
                "{}'s last tick was {} ms ago",
                self.who,
                MonoNanos::now().saturating_sub(t) / 1_000_000
            )),
            Some(_) if self.pulse.loop_gone() => Err(format!("{} has stopped", self.who)),
            Some(_) => Ok(()),
        }
    }
}

/// One unlabelled family per `(name, kind, help, value)`.
pub fn singles(out: &mut prom::Text, families: &[(&str, prom::Kind, &str, u64)]) {
    for &(name, kind, help, v) in families {
        out.single(name, kind, help, v as f64);
    }
}

/// A labelled metric family: name, type, help, and the value of one item.
pub type Family<T> = (&'static str, prom::Kind, &'static str, fn(&T) -> f64);

/// Each family of `families`, with one sample per item of `items` (the item and its
/// labels), after a `<series_omitted>` gauge counting the `omitted` items that have no
/// series of their own (the `--metrics-max-series` cap).
pub fn per_item<T>(
    out: &mut prom::Text,
    (series_omitted, omitted_help, omitted): (&str, &str, usize),
    families: &[Family<T>],
    items: &[(&T, Vec<(&str, String)>)],
) {
    out.single(
        series_omitted,
        prom::Kind::Gauge,
        omitted_help,
        omitted as f64,
    );
    for &(name, kind, help, value) in families {
        out.family(name, kind, help);
        for (item, labels) in items {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            out.sample(name, &labels, value(item));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_share_a_snapshot_longer_when_it_cost_the_loop_more() {
        assert_eq!(share_for(Duration::ZERO), FRESH);
        assert_eq!(share_for(Duration::from_millis(1)), FRESH);
        assert_eq!(
            share_for(Duration::from_millis(150)),
            Duration::from_secs(3),
            "a 150 ms snapshot: at most 1/20 of the loop"
        );
        assert_eq!(share_for(Duration::from_secs(5)), MAX_SHARE);
        assert_eq!(share_for(Duration::MAX), MAX_SHARE);
    }

    /// Hostile-input pass: `/healthz` took the lock a `/varz` request holds while it
    /// waits up to 500 ms for the loop, so with the loop stuck and 16 pollers every
    /// `/healthz` timed out. Health now reads the heartbeat without that lock, and a
    /// stuck loop is not waited for at all.
    #[test]
    fn health_does_not_wait_behind_a_request_for_a_snapshot() {
        let (publisher, reader) = tickwire_rt::snapshot::channel::<u32>(MonoNanos::now());
        let source = Arc::new(Source::new(reader, "the test loop"));
        // The loop ticked just now and never again: a request waits WAIT for it.
        let waiting = {
            let source = source.clone();
            std::thread::spawn(move || source.snapshot())
        };
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        assert_eq!(source.health(), Ok(()));
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
        assert!(waiting.join().unwrap().is_none(), "no tick, no snapshot");
        // Stuck (no tick for more than 2 s): no wait, and health says so.
        publisher.tick(MonoNanos(1), || 0);
        let t = Instant::now();
        assert!(source.snapshot().is_none());
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
        assert!(source.health().unwrap_err().contains("last tick was"));
        // A loop that stopped after a recent tick.
        publisher.tick(MonoNanos::now(), || 0);
        drop(publisher);
        assert!(source.health().unwrap_err().contains("has stopped"));
        assert!(source.snapshot().is_none());
    }
}
