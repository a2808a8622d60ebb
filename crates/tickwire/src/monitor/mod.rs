//! `--http`: the monitoring endpoint of `tickwire router`, `tickwire feed` and
//! `tickwire fix` (crate `tickwire-monitor` serves it; docs/monitoring.md lists it all).
//!
//! Each component gives a [`Component`]: the JSON and Prometheus documents it can
//! render. The routes common to all (the dashboard, `/healthz`, `/metrics`, `/varz`,
//! `/api/dashboard`) are dispatched here once; a component adds its own (`/connz`...).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tickwire_monitor::http::{Handler, Limits, Request, Response, Server};
use tickwire_monitor::prom;

pub mod probe;
pub mod router;

/// The flags every monitored command takes.
#[derive(Args, Debug, Clone)]
pub struct HttpArgs {
    /// Serve the monitoring endpoint (dashboard, JSON, /metrics) on ADDR. Off unless
    /// given; `--http` alone listens on loopback only (127.0.0.1, the command's default
    /// port: router 7480, feed 7481, fix 7482). There is no authentication: bind a
    /// non-loopback address only on a trusted network (docs/monitoring.md).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, require_equals = false)]
    pub http: Option<Option<String>>,
    /// /metrics: the most clients (router) or sessions (FIX) given their own labelled
    /// series; the rest are in the totals only [default: 50].
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub metrics_max_series: usize,
}

impl HttpArgs {
    /// The address to serve on, if enabled: a bare port or host:port; a bare `--http`
    /// is loopback on `default_port`.
    pub fn addr(&self, default_port: u16) -> anyhow::Result<Option<SocketAddr>> {
        let Some(given) = &self.http else {
            return Ok(None);
        };
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        Ok(Some(match given.as_deref() {
            None => SocketAddr::new(loopback, default_port),
            Some(text) => match text.parse::<u16>() {
                Ok(port) => SocketAddr::new(loopback, port),
                Err(_) => text
                    .parse()
                    .with_context(|| format!("--http {text:?}: expected PORT or IP:PORT"))?,
            },
        }))
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

/// Starts the endpoint for `component` on `addr`; prints and logs where it listens.
pub fn serve(
    addr: SocketAddr,
    component: Arc<dyn Component>,
    max_series: usize,
) -> anyhow::Result<Server> {
    let started = std::time::Instant::now();
    let handler: Handler =
        Arc::new(move |req: &Request<'_>| route(&*component, req, max_series, started));
    let server = Server::spawn(addr, Limits::default(), handler)
        .with_context(|| format!("starting the monitoring endpoint on {addr}"))?;
    tracing::info!(http = %server.local_addr(), "monitoring endpoint listening");
    println!(
        "tickwire monitor listening on http://{}/",
        server.local_addr()
    );
    Ok(server)
}

fn route(
    c: &dyn Component,
    req: &Request<'_>,
    max_series: usize,
    started: std::time::Instant,
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
            c.metrics(&mut out, max_series);
            Response::with(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                out.finish(),
            )
        }
        _ => c.route(req).unwrap_or_else(Response::not_found),
    }
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
