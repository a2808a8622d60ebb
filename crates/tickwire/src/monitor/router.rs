//! The router's monitoring component: `/varz`, `/connz`, `/subsz`, `/queuez`, `/latz`,
//! `/metrics` and the dashboard document, all rendered on HTTP threads from a
//! [`Snapshot`] the event loop hands over at its timer tick
//! ([`tickwire_router::monitor`]), plus the latency probe's histograms.

use std::cell::Cell;

use serde::{Serialize, Serializer};
use serde_json::{json, Value};
use tickwire_monitor::http::{Request, Response};
use tickwire_monitor::latency::QUANTILES;
use tickwire_monitor::prom::{Kind, Text};
use tickwire_router::core::{ClientId, ClientStats};
use tickwire_router::monitor::{ClientView, Reader, Snapshot};

use super::{page, per_item, probe, Component, Family, Source};

/// Connections listed on the dashboard.
const DASHBOARD_CONNECTIONS: usize = 20;

/// Patterns listed per row of `/connz?subs=1` and `/subsz` (the first in sorted
/// order); the row's `patterns_total` and `patterns_truncated` say what was left out.
const ROW_PATTERNS: usize = 1000;
/// Patterns listed per page, all rows together: with patterns of at most 250 bytes
/// (`MAX_TOPIC_BYTES`), a page's patterns take at most ~2 MiB of JSON, and the page
/// (1,024 rows at most) stays under 4 MiB however many patterns clients hold. Unbounded,
/// 10 clients of 10,000 patterns made a 23.6 MB answer, held whole (~62 MB of RSS each)
/// while its requester did not read.
const PAGE_PATTERNS: usize = 8192;

/// The router as the monitoring endpoint sees it.
pub struct RouterMonitor {
    source: Source<Snapshot>,
    probe: Option<probe::Shared>,
}

const WHO: &str = "the router's event loop";

impl RouterMonitor {
    /// Serves what `reader` fetches and what `probe` measured.
    pub fn new(reader: Reader, probe: Option<probe::Shared>) -> RouterMonitor {
        RouterMonitor {
            source: Source::new(reader, WHO),
            probe,
        }
    }

    fn probe_summary(&self) -> Value {
        self.probe
            .as_ref()
            .map_or(Value::Null, |p| latency_summary(&probe::lock(p)))
    }
}

fn latency_summary(l: &tickwire_monitor::Latency) -> Value {
    // To the nanosecond (seconds times 1e6 printed 713.7270000000001).
    let us = |q: f64| (l.quantile_seconds(q) * 1e9).round() / 1e3;
    json!({
        "samples": l.count(),
        "p50_us": us(0.5),
        "p99_us": us(0.99),
        "p999_us": us(0.999),
        "max_us": us(1.0),
    })
}

fn slow_count(s: &Snapshot) -> usize {
    s.clients.iter().filter(|c| c.slow).count()
}

fn queues(s: &Snapshot) -> &[Value] {
    s.guaranteed_json()["queues"]
        .as_array()
        .map_or(&[], Vec::as_slice)
}

/// Guaranteed messaging's totals and spool (`guaranteed` of the stats document; absent
/// on a router without it): what `tickwire stats` shows, to scrape and alert on.
fn guaranteed_metrics(out: &mut Text, g: &Value) {
    if g.is_null() {
        return;
    }
    let t = &g["totals"];
    let spool = &g["spool"];
    let num = |v: &Value| v.as_f64().unwrap_or(0.0);
    for (name, kind, help, v) in [
        (
            "tickwire_router_guaranteed_publishes_total",
            Kind::Counter,
            "Guaranteed publishes received (resends included).",
            &t["publishes"],
        ),
        (
            "tickwire_router_guaranteed_acked_total",
            Kind::Counter,
            "Guaranteed publishes acknowledged (stored per the spool's sync).",
            &t["acked"],
        ),
        (
            "tickwire_router_guaranteed_nacked_total",
            Kind::Counter,
            "Guaranteed publishes refused (PUB_NACK: no queue, queue full, not permitted, spool failed, ...).",
            &t["nacked"],
        ),
        (
            "tickwire_router_guaranteed_duplicates_total",
            Kind::Counter,
            "Resends of messages already stored (acknowledged again, stored once).",
            &t["duplicates"],
        ),
        (
            "tickwire_router_guaranteed_spool_failures_total",
            Kind::Counter,
            "Spool writes or syncs that failed (their publishes NACKed spool-failed).",
            &t["spool_failures"],
        ),
        (
            "tickwire_router_guaranteed_retained_messages",
            Kind::Gauge,
            "Messages the spool keeps for replay (from a queue's start point), whether or not a queue still holds them.",
            &g["retained_messages"],
        ),
        (
            "tickwire_router_guaranteed_retained_bytes",
            Kind::Gauge,
            "Payload and topic bytes of the retained messages.",
            &g["retained_bytes"],
        ),
        (
            "tickwire_router_spool_disk_bytes",
            Kind::Gauge,
            "Bytes of the spool's segment files on disk.",
            &spool["bytes_on_disk"],
        ),
        (
            "tickwire_router_spool_fsyncs_total",
            Kind::Counter,
            "fdatasync calls on the spool.",
            &spool["fsyncs"],
        ),
        (
            "tickwire_router_spool_failed_batches_total",
            Kind::Counter,
            "Spool write batches that failed.",
            &spool["failed_batches"],
        ),
    ] {
        out.single(name, kind, help, num(v));
    }
}

/// Sorts connections by `key` (largest first for counters).
fn sort_clients(clients: &mut [&ClientView], key: &str) -> Result<(), String> {
    let k: fn(&ClientView) -> u64 = match key {
        "id" => {
            clients.sort_by_key(|c| c.stats.id.0);
            return Ok(());
        }
        "msgs_in" => |c| c.stats.counters.msgs_in,
        "msgs_out" => |c| c.stats.counters.msgs_out,
        "bytes_in" => |c| c.stats.counters.bytes_in,
        "bytes_out" => |c| c.stats.counters.bytes_out,
        "discards" => |c| c.stats.counters.discards,
        "pending" => |c| c.stats.egress_pending as u64,
        "subs" => |c| c.stats.subscriptions as u64,
        "uptime" => |c| c.stats.connected_for_ms,
        other => return Err(format!("sort: unknown key {other:?} (id, msgs_in, msgs_out, bytes_in, bytes_out, discards, pending, subs, uptime)")),
    };
    clients.sort_by_key(|c| std::cmp::Reverse(k(c)));
    Ok(())
}

/// `/connz` but for the snapshot-wide fields: the page of `clients` in the order of the
/// `sort` key (cheap: the keys are counters), each row built only if it is on the page.
fn connz(clients: &[ClientView], req: &Request<'_>) -> Result<Value, String> {
    let mut sorted: Vec<&ClientView> = clients.iter().collect();
    let sort = req.query.get("sort");
    let sort = sort.as_deref().unwrap_or("id");
    sort_clients(&mut sorted, sort)?;
    let subs = req
        .query
        .get("subs")
        .is_some_and(|v| v == "1" || v == "true");
    let budget = Budget::new();
    let build = Connection::with_patterns(subs.then_some(&budget));
    let mut doc = page(req, &lazy(sorted.into_iter(), &build));
    doc["sort"] = json!(sort);
    Ok(doc)
}

/// `/subsz` but for the snapshot-wide fields: the page of the clients holding patterns
/// (holding `pattern`, when given), their patterns sorted only if on the page.
fn subsz(clients: &[ClientView], req: &Request<'_>) -> Value {
    let filter = req.query.get("pattern");
    let filter = filter.as_deref();
    let holders = clients
        .iter()
        .filter(|c| !c.patterns.is_empty())
        .filter(|c| filter.is_none_or(|f| c.patterns.iter().any(|p| &**p == f)));
    let budget = Budget::new();
    let build = |c| Subscriber::of(c, &budget);
    page(req, &lazy(holders, &build))
}

/// What is left of a page's [`PAGE_PATTERNS`]; rows take from it as they are serialized
/// (in page order).
struct Budget(Cell<usize>);

impl Budget {
    fn new() -> Budget {
        Budget(Cell::new(PAGE_PATTERNS))
    }

    /// The first (sorted) patterns of `c` its row lists, at most [`ROW_PATTERNS`] and
    /// what is left of the page's budget.
    fn take<'c>(&self, c: &'c ClientView) -> Patterns<'c> {
        let total = c.patterns.len();
        let n = total.min(ROW_PATTERNS).min(self.0.get());
        self.0.set(self.0.get() - n);
        let mut listed = if n == 0 {
            Vec::new()
        } else {
            c.sorted_patterns()
        };
        listed.truncate(n);
        Patterns {
            patterns: listed,
            patterns_total: total,
            patterns_truncated: total - n,
        }
    }
}

/// A row's patterns, as many as its page allows ([`Budget`]), and how many there are.
#[derive(Serialize)]
struct Patterns<'a> {
    patterns: Vec<&'a str>,
    patterns_total: usize,
    patterns_truncated: usize,
}

/// A list item whose JSON is built only when it is serialized. [`page`] serializes just
/// the items on its page, so the others cost two pointers each: `/connz?limit=1` used to
/// build every client's document (patterns included, even without `subs`) to return
/// one, and concurrent requests against clients holding many patterns grew the router's
/// RSS by tens of MB.
struct Lazy<'a, T: ?Sized, F>(&'a T, &'a F);

impl<'a, T: ?Sized, R: Serialize, F: Fn(&'a T) -> R> Serialize for Lazy<'a, T, F> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.1)(self.0).serialize(s)
    }
}

/// `items` in order, each to be built by `build` if its page is served.
fn lazy<'a, T: ?Sized, F>(items: impl Iterator<Item = &'a T>, build: &'a F) -> Vec<Lazy<'a, T, F>> {
    items.map(|item| Lazy(item, build)).collect()
}

/// A `/connz` row: the client as [`ClientView`] serializes it, without `patterns`
/// unless the request asked (`subs`).
struct Connection<'a, 'b> {
    client: &'a ClientView,
    /// With the patterns (`subs`), taken from the page's budget.
    subs: Option<&'b Budget>,
}

impl<'b> Connection<'_, 'b> {
    /// Makes rows with the patterns (`subs`: a budget) or without.
    fn with_patterns(
        subs: Option<&'b Budget>,
    ) -> impl for<'c> Fn(&'c ClientView) -> Connection<'c, 'b> {
        move |client| Connection { client, subs }
    }
}

impl Serialize for Connection<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Every field of the view; no `..`, so a field added to it must be decided on here.
        let ClientView {
            stats,
            slow,
            patterns: _,
        } = self.client;
        Row {
            stats,
            slow: *slow,
            patterns: self.subs.map(|b| b.take(self.client)),
        }
        .serialize(s)
    }
}

/// A `/connz` row: [`ClientView`]'s keys, the patterns bounded ([`Budget`]) and only
/// with `subs`.
#[derive(Serialize)]
struct Row<'a> {
    #[serde(flatten)]
    stats: &'a ClientStats,
    slow: bool,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    patterns: Option<Patterns<'a>>,
}

/// A `/subsz` row.
#[derive(Serialize)]
struct Subscriber<'a> {
    id: ClientId,
    name: &'a str,
    #[serde(flatten)]
    patterns: Patterns<'a>,
}

impl Subscriber<'_> {
    fn of<'c>(c: &'c ClientView, budget: &Budget) -> Subscriber<'c> {
        Subscriber {
            id: c.stats.id,
            name: &c.stats.name,
            patterns: budget.take(c),
        }
    }
}

/// The clients with their own /metrics series: the `max` that queued the most.
fn metric_clients(s: &Snapshot, max: usize) -> Vec<&ClientView> {
    let mut v: Vec<&ClientView> = s.clients.iter().collect();
    v.sort_by_key(|c| std::cmp::Reverse(c.stats.counters.bytes_out + c.stats.counters.bytes_in));
    v.truncate(max);
    v.sort_by_key(|c| c.stats.id.0);
    v
}

/// The multicast streams' series, one per stream, labelled by group.
fn multicast_metrics(out: &mut Text, streams: &Value) {
    let Some(streams) = streams.as_array().filter(|a| !a.is_empty()) else {
        return;
    };
    for (name, key, kind, help) in [
        (
            "tickwire_router_multicast_messages_total",
            "messages",
            Kind::Counter,
            "Messages sent on a multicast stream (not in any client's msgs_out).",
        ),
        (
            "tickwire_router_multicast_datagrams_total",
            "datagrams",
            Kind::Counter,
            "Datagrams sent on a multicast stream.",
        ),
        (
            "tickwire_router_multicast_retransmitted_total",
            "retransmitted",
            Kind::Counter,
            "Datagrams a multicast stream sent again for NAKs.",
        ),
        (
            "tickwire_router_multicast_naks_total",
            "naks",
            Kind::Counter,
            "NAKs a multicast stream received.",
        ),
        (
            "tickwire_router_multicast_receivers",
            "receivers",
            Kind::Gauge,
            "Receivers whose flow reports a multicast stream holds.",
        ),
    ] {
        out.family(name, kind, help);
        for st in streams {
            let group = st["group"].as_str().unwrap_or_default();
            out.sample(
                name,
                &[("group", group)],
                st[key].as_u64().unwrap_or(0) as f64,
            );
        }
    }
}

/// `/varz`'s `cache` object: the stats document's (`tickwire stats`): patterns,
/// depth and limits beside the counters; null without a cache.
fn cache_json(s: &Snapshot) -> Value {
    let mut v = json!(s.cache);
    if let (Some(o), Some(c)) = (v.as_object_mut(), &s.cache_config) {
        o.insert("patterns".into(), json!(c.patterns));
        o.insert("depth".into(), json!(c.depth));
        o.insert("max_topics".into(), json!(c.max_topics));
        o.insert("max_bytes".into(), json!(c.max_bytes));
    }
    v
}

/// The last-value cache's configured limits, as gauges beside its series.
fn cache_limit_metrics(out: &mut Text, c: &tickwire_router::monitor::CacheConfig) {
    for (name, help, v) in [
        (
            "tickwire_router_cache_max_topics",
            "Most topics the last-value cache holds (cache_max_topics).",
            c.max_topics,
        ),
        (
            "tickwire_router_cache_max_bytes",
            "Most bytes the last-value cache holds (cache_max_bytes).",
            c.max_bytes,
        ),
        (
            "tickwire_router_cache_depth",
            "Messages the last-value cache keeps per topic (cache_depth).",
            c.depth,
        ),
        (
            "tickwire_router_cache_patterns",
            "Topic patterns the last-value cache keeps (their list: /varz cache.patterns).",
            c.patterns.len(),
        ),
    ] {
        out.single(name, Kind::Gauge, help, v as f64);
    }
}

/// The last-value cache's series (a router started with `--cache`).
fn cache_metrics(out: &mut Text, c: &tickwire_router::cache::CacheStats) {
    out.single(
        "tickwire_router_cache_topics",
        Kind::Gauge,
        "Topics the last-value cache holds (bounded by cache_max_topics).",
        c.topics as f64,
    );
    out.single(
        "tickwire_router_cache_bytes",
        Kind::Gauge,
        "Bytes the last-value cache holds (bounded by cache_max_bytes).",
        c.bytes as f64,
    );
    for (name, help, v) in [
        (
            "tickwire_router_cache_stored_messages_total",
            "Messages the last-value cache stored (replacing older ones included).",
            c.stored,
        ),
        (
            "tickwire_router_cache_evicted_topics_total",
            "Topics evicted from the last-value cache to stay within its limits.",
            c.evicted_topics,
        ),
        (
            "tickwire_router_cache_evicted_messages_total",
            "Messages evicted with those topics.",
            c.evicted_messages,
        ),
        (
            "tickwire_router_cache_too_large_total",
            "Messages not cached because one alone exceeds cache_max_bytes.",
            c.too_large,
        ),
        (
            "tickwire_router_cache_images_total",
            "Initial images and cache queries served.",
            c.images,
        ),
        (
            "tickwire_router_cache_image_messages_total",
            "Cached messages sent in initial images and cache queries.",
            c.image_messages,
        ),
        (
            "tickwire_router_cache_images_throttled_total",
            "Initial images and cache queries answered BUSY (image_scan_rate budgets spent).",
            c.images_throttled,
        ),
    ] {
        out.single(name, Kind::Counter, help, v as f64);
    }
}

impl Component for RouterMonitor {
    fn health(&self) -> Result<(), String> {
        self.source.health()
    }

    fn varz(&self) -> Value {
        self.source.doc("router", |s| {
            json!({
                "kind": "router",
                "server": s.router,
                "max_clients": s.max_clients,
                "egress_limit": s.egress_limit,
                "shared_groups": s.shared_groups,
                "slow_consumers": slow_count(s),
                "queues": queues(s).len(),
                "guaranteed": s.guaranteed.is_some(),
                "cache": cache_json(s),
                // Sent by multicast, in no client's msgs_out (new-user pass: only the
                // stats JSON showed the streams).
                "multicast": s.multicast,
                "latency_probe": self.probe_summary(),
            })
        })
    }

    fn metrics(&self, out: &mut Text, max_series: usize) {
        let Some(s) = self.source.scrape(out, "tickwire_router_up") else {
            return;
        };
        let r = &s.router;
        let t = &r.totals;
        out.single(
            "tickwire_router_uptime_seconds",
            Kind::Gauge,
            "Seconds since the router started.",
            r.uptime_ms as f64 / 1e3,
        );
        out.single(
            "tickwire_router_clients",
            Kind::Gauge,
            "Connected clients (the latency probe included).",
            r.clients as f64,
        );
        out.single(
            "tickwire_router_subscriptions",
            Kind::Gauge,
            "Subscriptions, all clients.",
            r.subscriptions as f64,
        );
        out.single(
            "tickwire_router_subscriptions_removing",
            Kind::Gauge,
            "Subscriptions of closed clients still being removed from the index (a bounded number per loop turn; counted in tickwire_router_subscriptions and index_nodes until then).",
            r.subscriptions_removing as f64,
        );
        out.single(
            "tickwire_router_index_nodes",
            Kind::Gauge,
            "Nodes of the subscription index, all clients (bounded by max_index_nodes).",
            r.index_nodes as f64,
        );
        out.single(
            "tickwire_router_egress_bytes",
            Kind::Gauge,
            "Bytes all clients' egress buffers hold allocated (bounded by egress_memory_limit: at it, clients over their share are slow consumers).",
            r.egress_bytes as f64,
        );
        out.single(
            "tickwire_router_slow_consumers",
            Kind::Gauge,
            "Clients whose egress buffer filled and who are losing their oldest messages now.",
            slow_count(&s) as f64,
        );
        for (name, help, v) in [
            (
                "tickwire_router_connections_total",
                "Connections accepted.",
                t.connections,
            ),
            (
                "tickwire_router_refused_connections_total",
                "Connections refused at the connection limit.",
                t.refused,
            ),
            (
                "tickwire_router_evicted_before_login_total",
                "Connections closed at the connection limit before they logged in (the oldest, 100 ms since its accept or TLS handshake at least), to admit a new one.",
                t.evicted_before_login,
            ),
            (
                "tickwire_router_error_disconnects_total",
                "Connections closed for a protocol error, stall or slow consumer.",
                t.disconnects_error,
            ),
            (
                "tickwire_router_received_messages_total",
                "Messages published to the router.",
                t.msgs_in,
            ),
            (
                "tickwire_router_received_bytes_total",
                "Bytes received, all frames.",
                t.bytes_in,
            ),
            (
                "tickwire_router_delivered_messages_total",
                "Messages queued to subscribers (one per matching subscriber).",
                t.msgs_out,
            ),
            (
                "tickwire_router_sent_bytes_total",
                "Bytes written, all frames.",
                t.bytes_out,
            ),
            (
                "tickwire_router_discarded_messages_total",
                "Messages discarded for slow consumers.",
                t.discards,
            ),
            (
                "tickwire_router_memory_discarded_messages_total",
                "Messages discarded because all egress buffers were at egress_memory_limit (also in discarded_messages_total).",
                t.memory_discards,
            ),
            (
                "tickwire_router_memory_disconnects_total",
                "Clients disconnected as slow consumers because all egress buffers were at egress_memory_limit (also in error_disconnects_total).",
                t.memory_disconnects,
            ),
            (
                "tickwire_router_unrouted_messages_total",
                "Direct (not guaranteed) published messages that matched no subscriber; guaranteed ones are the queues' (tickwire_router_guaranteed_* and per-queue counters).",
                t.unrouted,
            ),
            (
                "tickwire_router_no_responders_total",
                "Requests answered NO_RESPONDERS.",
                t.no_responders,
            ),
            (
                "tickwire_router_requests_busy_total",
                "Requests answered BUSY: the responders they matched could not take their reply (allow_responses bounds).",
                t.requests_busy,
            ),
            (
                "tickwire_router_auth_failures_total",
                "Logins refused (bad credentials, or none where one is required).",
                t.auth_failures,
            ),
            (
                "tickwire_router_user_limit_refused_total",
                "Logins refused at the user's max_connections.",
                t.user_limit_refused,
            ),
            (
                "tickwire_router_denied_total",
                "Actions refused by the permission rules (PERMISSION_DENIED, not-permitted NACKs).",
                t.denied,
            ),
            (
                "tickwire_router_tls_throttled_total",
                "TLS connections closed before their handshake by the per-address rate limit.",
                t.tls_throttled,
            ),
        ] {
            out.single(name, Kind::Counter, help, v as f64);
        }
        guaranteed_metrics(out, s.guaranteed_json());
        if let Some(c) = &s.cache {
            cache_metrics(out, c);
        }
        if let Some(c) = &s.cache_config {
            cache_limit_metrics(out, c);
        }
        multicast_metrics(out, &s.multicast);

        let clients = metric_clients(&s, max_series);
        let per_client: [Family<ClientView>; 5] = [
            (
                "tickwire_router_client_received_messages_total",
                Kind::Counter,
                "Messages published by the client.",
                |c| c.stats.counters.msgs_in as f64,
            ),
            (
                "tickwire_router_client_delivered_messages_total",
                Kind::Counter,
                "Messages queued to the client.",
                |c| c.stats.counters.msgs_out as f64,
            ),
            (
                "tickwire_router_client_discarded_messages_total",
                Kind::Counter,
                "Messages discarded because the client read too slowly.",
                |c| c.stats.counters.discards as f64,
            ),
            (
                "tickwire_router_client_egress_pending_bytes",
                Kind::Gauge,
                "Bytes queued for the client, not yet written.",
                |c| c.stats.egress_pending as f64,
            ),
            (
                "tickwire_router_client_slow",
                Kind::Gauge,
                "1 while the client is a slow consumer.",
                |c| f64::from(u8::from(c.slow)),
            ),
        ];
        let items: Vec<(&ClientView, Vec<(&str, String)>)> = clients
            .iter()
            .map(|c| {
                let labels = vec![
                    ("client", c.stats.id.0.to_string()),
                    ("name", c.stats.name.clone()),
                ];
                (*c, labels)
            })
            .collect();
        per_item(
            out,
            (
                "tickwire_router_client_series_omitted",
                "Connected clients without their own series (beyond --metrics-max-series; counted in the totals).",
                s.clients.len().saturating_sub(clients.len()),
            ),
            &per_client,
            &items,
        );

        let qs = queues(&s);
        if s.guaranteed.is_some() {
            let per_queue: [(&str, Kind, &str, &str); 10] = [
                (
                    "tickwire_router_queue_depth_messages",
                    Kind::Gauge,
                    "Messages stored in the queue, not yet acknowledged.",
                    "depth",
                ),
                (
                    "tickwire_router_queue_depth_bytes",
                    Kind::Gauge,
                    "Bytes of the messages stored in the queue.",
                    "bytes",
                ),
                (
                    "tickwire_router_queue_in_flight_messages",
                    Kind::Gauge,
                    "Messages delivered and not yet acknowledged.",
                    "in_flight",
                ),
                (
                    "tickwire_router_queue_consumers",
                    Kind::Gauge,
                    "Consumers bound to the queue.",
                    "consumers",
                ),
                (
                    "tickwire_router_queue_delivered_messages_total",
                    Kind::Counter,
                    "Deliveries from the queue.",
                    "delivered",
                ),
                (
                    "tickwire_router_queue_acked_messages_total",
                    Kind::Counter,
                    "Acknowledged messages.",
                    "acked",
                ),
                (
                    "tickwire_router_queue_redelivered_messages_total",
                    Kind::Counter,
                    "Deliveries of messages delivered before (ack timeout, a consumer gone, a NACK).",
                    "redelivered",
                ),
                (
                    "tickwire_router_queue_dead_lettered_messages_total",
                    Kind::Counter,
                    "Messages moved to the dead-letter queue (redeliveries or TTL exhausted).",
                    "dead_lettered",
                ),
                (
                    "tickwire_router_queue_discarded_messages_total",
                    Kind::Counter,
                    "Messages dropped by the queue's full policy (discard-oldest) or TTL without a dead-letter queue.",
                    "discarded",
                ),
                (
                    "tickwire_router_queue_rejected_messages_total",
                    Kind::Counter,
                    "Publishes refused because the queue was full (full policy reject).",
                    "rejected",
                ),
            ];
            for (name, kind, help, field) in per_queue {
                out.family(name, kind, help);
                for q in qs.iter().take(max_series) {
                    let qname = q["name"].as_str().unwrap_or("");
                    out.sample(name, &[("queue", qname)], q[field].as_f64().unwrap_or(0.0));
                }
            }
        }

        if let Some(p) = &self.probe {
            let l = probe::lock(p);
            let name = "tickwire_router_probe_round_trip_seconds";
            out.family(name, Kind::Summary, "Round trip of the built-in probe's messages through the router (publish to receipt), since the start.");
            for q in QUANTILES {
                let label = q.to_string();
                out.sample(name, &[("quantile", &label)], l.quantile_seconds(q));
            }
            out.sample(&format!("{name}_sum"), &[], l.sum_seconds());
            out.sample(&format!("{name}_count"), &[], l.count() as f64);
        }
    }

    fn dashboard(&self) -> Value {
        let Some(s) = self.source.snapshot() else {
            return self.source.error_doc("router");
        };
        let r = &s.router;
        let t = &r.totals;
        let mut shown: Vec<&ClientView> = s.clients.iter().collect();
        shown.sort_by_key(|c| {
            std::cmp::Reverse((c.slow, c.stats.egress_pending, c.stats.counters.msgs_out))
        });
        shown.truncate(DASHBOARD_CONNECTIONS);
        let latency = self.probe.as_ref().map(|p| {
            let l = probe::lock(p);
            json!({
                "source": "built-in probe: publish → router → back",
                "history": l.history().collect::<Vec<_>>(),
            })
        });
        let mut counters = json!({
            "msgs_in": t.msgs_in,
            "msgs_out": t.msgs_out,
            "bytes_in": t.bytes_in,
            "bytes_out": t.bytes_out,
            "discards": t.discards,
            "unrouted": t.unrouted,
            "connections": t.connections,
        });
        let mut gauges = json!({
            "clients": r.clients,
            "subscriptions": r.subscriptions,
            "slow_consumers": slow_count(&s),
        });
        let mut rate_charts = json!([
            ["msgs_in", "msgs_out"],
            ["bytes_in", "bytes_out"],
            ["discards", "unrouted"]
        ]);
        // The last-value cache, when the router keeps one (new-user pass: only `stats`,
        // /varz and /metrics showed it).
        if let Some(c) = &s.cache {
            for (k, v) in [
                ("cache_stored", c.stored),
                ("cache_images", c.images),
                ("cache_image_messages", c.image_messages),
                ("cache_evicted_topics", c.evicted_topics),
                ("cache_evicted_messages", c.evicted_messages),
                ("cache_too_large", c.too_large),
                ("cache_images_throttled", c.images_throttled),
            ] {
                counters[k] = json!(v);
            }
            gauges["cache_topics"] = json!(c.topics);
            gauges["cache_bytes"] = json!(c.bytes);
            if let Some(charts) = rate_charts.as_array_mut() {
                charts.push(json!(["cache_stored", "cache_images"]));
            }
        }
        json!({
            "kind": "router",
            "name": r.name,
            "version": r.version,
            "uptime_ms": r.uptime_ms,
            "counters": counters,
            "gauges": gauges,
            "rate_charts": rate_charts,
            "connections": {
                "total": s.clients.len(),
                "shown": shown.len(),
                "slow": slow_count(&s),
                "list": shown,
            },
            "latency": latency,
            "queues": s.guaranteed.is_some().then(|| queues(&s).to_vec()),
        })
    }

    fn route(&self, req: &Request<'_>) -> Option<Response> {
        Some(match req.path {
            "/connz" => {
                let Some(s) = self.source.snapshot() else {
                    return Some(self.source.unanswered());
                };
                let mut doc = match connz(&s.clients, req) {
                    Ok(doc) => doc,
                    Err(e) => return Some(Response::error(400, &e)),
                };
                doc["slow_consumers"] = json!(slow_count(&s));
                Response::json(&doc)
            }
            "/subsz" => self.source.json(|s| {
                let mut doc = subsz(&s.clients, req);
                doc["subscriptions"] = json!(s.router.subscriptions);
                doc["shared_groups"] = json!(s.shared_groups);
                doc
            }),
            "/queuez" => self.source.json(|s| {
                if s.guaranteed.is_none() {
                    return json!({ "enabled": false, "total": 0, "items": [] });
                }
                let mut doc = page(req, queues(s));
                doc["enabled"] = json!(true);
                doc["totals"] = s.guaranteed_json()["totals"].clone();
                doc
            }),
            "/latz" => match &self.probe {
                None => Response::json(&json!({ "enabled": false })),
                Some(p) => {
                    let l = probe::lock(p);
                    Response::json(&json!({
                        "enabled": true,
                        "source": "built-in probe: publish → router → back",
                        "summary": latency_summary(&l),
                        "history": l.history().collect::<Vec<_>>(),
                    }))
                }
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tickwire_monitor::query::Query;
    use tickwire_router::core::{ClientCounters, Phase};

    use super::*;

    /// New-user pass: /varz showed "max_us": 713.7270000000001 (seconds times 1e6).
    #[test]
    fn latency_figures_are_whole_nanoseconds_in_microseconds() {
        let mut l = tickwire_monitor::Latency::new();
        l.record(713_727);
        let v = latency_summary(&l);
        let max = v["max_us"].as_f64().unwrap();
        assert_eq!(max, (max * 1e3).round() / 1e3, "{v}");
        assert!((max - 713.727).abs() < 0.5, "{v}");
        assert!(!v.to_string().contains("0000000"), "{v}");
    }

    fn client(id: u64, msgs_out: u64, patterns: &[&str]) -> ClientView {
        ClientView {
            stats: ClientStats {
                id: ClientId(id),
                name: format!("c{id}"),
                addr: format!("127.0.0.1:{}", 5000 + id),
                user: (id % 2 == 0).then(|| format!("user{id}")),
                phase: Phase::Open,
                connected_unix_ms: 1_700_000_000_000 + id,
                connected_for_ms: 1000 * id,
                subscriptions: patterns.len(),
                egress_pending: 0,
                counters: ClientCounters {
                    msgs_out,
                    ..ClientCounters::default()
                },
            },
            slow: id == 3,
            patterns: patterns.iter().map(|p| Arc::from(*p)).collect(),
        }
    }

    fn clients() -> Vec<ClientView> {
        vec![
            client(1, 50, &["b/>", "a/x"]),
            client(2, 10, &[]),
            client(3, 90, &["a/x"]),
            client(4, 50, &["z", "a/*", "m/n"]),
            client(5, 0, &["a/x", "q"]),
        ]
    }

    fn request(query: &str) -> Request<'_> {
        Request {
            method: "GET",
            path: "/",
            query: Query::new(query),
            authorization: None,
            peer: "127.0.0.1:1".parse().unwrap(),
        }
    }

    /// `/connz` as it was built before the page was chosen first: every client's
    /// document, patterns removed afterwards.
    fn connz_before(clients: &[ClientView], req: &Request<'_>) -> Value {
        let mut sorted: Vec<&ClientView> = clients.iter().collect();
        let sort = req.query.get("sort");
        let sort = sort.as_deref().unwrap_or("id");
        sort_clients(&mut sorted, sort).unwrap();
        let subs = req
            .query
            .get("subs")
            .is_some_and(|v| v == "1" || v == "true");
        let list: Vec<Value> = sorted
            .iter()
            .map(|c| {
                let mut v = serde_json::to_value(c).unwrap();
                if subs {
                    v["patterns_total"] = json!(c.patterns.len());
                    v["patterns_truncated"] = json!(0);
                } else {
                    v.as_object_mut().unwrap().remove("patterns");
                }
                v
            })
            .collect();
        let mut doc = page(req, &list);
        doc["sort"] = json!(sort);
        doc
    }

    /// `/subsz` as it was built before: every holder's row, sorted patterns included.
    fn subsz_before(clients: &[ClientView], req: &Request<'_>) -> Value {
        let filter = req.query.get("pattern");
        let filter = filter.as_deref();
        let list: Vec<Value> = clients
            .iter()
            .filter(|c| !c.patterns.is_empty())
            .filter(|c| filter.is_none_or(|f| c.patterns.iter().any(|p| &**p == f)))
            .map(|c| json!({ "id": c.stats.id, "name": c.stats.name, "patterns": c.sorted_patterns(), "patterns_total": c.patterns.len(), "patterns_truncated": 0 }))
            .collect();
        page(req, &list)
    }

    #[test]
    fn connz_pages_are_the_documents_they_were() {
        let cs = clients();
        for q in [
            "",
            "limit=1",
            "limit=0",
            "offset=2&limit=2",
            "offset=4",
            "offset=99",
            "subs=1",
            "subs=true&limit=2&offset=1",
            "subs=0",
            "sort=msgs_out&limit=3",
            "sort=msgs_out&subs=1&offset=1&limit=2",
            "sort=subs",
            "sort=uptime&subs",
        ] {
            let req = request(q);
            assert_eq!(connz(&cs, &req).unwrap(), connz_before(&cs, &req), "{q}");
        }
        let doc = connz(&cs, &request("limit=2")).unwrap();
        assert!(doc["items"][0].get("patterns").is_none(), "{doc}");
        assert_eq!(doc["items"][0]["slow"], false);
        assert_eq!(doc["items"][1]["user"], "user2");
        let doc = connz(&cs, &request("subs=1&limit=1")).unwrap();
        assert_eq!(doc["items"][0]["patterns"], json!(["a/x", "b/>"]));
        assert_eq!(doc["total"], 5);
    }

    #[test]
    fn connz_refuses_an_unknown_sort_key() {
        let e = connz(&clients(), &request("sort=name")).unwrap_err();
        assert!(e.contains("unknown key \"name\""), "{e}");
    }

    #[test]
    fn subsz_pages_are_the_documents_they_were() {
        let cs = clients();
        for q in [
            "",
            "limit=1",
            "offset=1&limit=2",
            "offset=9",
            "pattern=a/x",
            "pattern=a/x&offset=1&limit=1",
            "pattern=nothing",
        ] {
            let req = request(q);
            assert_eq!(subsz(&cs, &req), subsz_before(&cs, &req), "{q}");
        }
    }

    /// Regression: `/connz?subs=1` and `/subsz` listed every pattern: 10 clients of
    /// 10,000 patterns of 250 bytes made a 23.6 MB answer, built whole and held while
    /// its requester did not read (16 such requests: router RSS 270 MB → 1,267 MB).
    #[test]
    fn patterns_are_bounded_per_row_and_per_page() {
        let mut many = client(1, 0, &[]);
        let patterns: Vec<Arc<str>> = (0..2 * ROW_PATTERNS)
            .rev()
            .map(|i| Arc::from(format!("{i:05}/{}", "x".repeat(244)).as_str()))
            .collect();
        assert!(patterns.iter().all(|p| p.len() == 250));
        many.patterns = patterns.into();
        many.stats.subscriptions = many.patterns.len();
        // One client over the row bound: its first patterns, sorted, and the true count.
        let one = [many.clone(), client(2, 0, &["a/x"])];
        for doc in [
            connz(&one, &request("subs=1")).unwrap(),
            subsz(&one, &request("")),
        ] {
            let row = &doc["items"][0];
            let listed = row["patterns"].as_array().unwrap();
            assert_eq!(listed.len(), ROW_PATTERNS, "{}", row["name"]);
            assert!(listed[0].as_str().unwrap().starts_with("00000/"));
            assert!(listed[ROW_PATTERNS - 1]
                .as_str()
                .unwrap()
                .starts_with("00999/"));
            assert_eq!(row["patterns_total"], 2 * ROW_PATTERNS);
            assert_eq!(row["patterns_truncated"], ROW_PATTERNS);
            assert_eq!(doc["items"][1]["patterns"], json!(["a/x"]));
            assert_eq!(doc["items"][1]["patterns_truncated"], 0);
        }
        // A full page of such clients: the page's budget, then rows with none listed.
        let full: Vec<ClientView> = (0..1024)
            .map(|id| ClientView {
                stats: ClientStats {
                    id: ClientId(id),
                    ..many.stats.clone()
                },
                ..many.clone()
            })
            .collect();
        for doc in [
            connz(&full, &request("subs=1&limit=1024")).unwrap(),
            subsz(&full, &request("limit=1024")),
        ] {
            let items = doc["items"].as_array().unwrap();
            assert_eq!(items.len(), 1024);
            let listed: usize = items
                .iter()
                .map(|r| r["patterns"].as_array().unwrap().len())
                .sum();
            assert_eq!(listed, PAGE_PATTERNS);
            assert!(items
                .iter()
                .all(|r| r["patterns_total"] == 2 * ROW_PATTERNS));
            let last = &items[1023];
            assert_eq!(last["patterns"], json!([]));
            assert_eq!(last["patterns_truncated"], 2 * ROW_PATTERNS);
            let bytes = serde_json::to_vec(&doc).unwrap().len();
            assert!(bytes <= 4 << 20, "{bytes} bytes");
        }
    }

    #[test]
    fn only_the_rows_on_the_page_are_built() {
        let items: Vec<u32> = (0..1000).collect();
        let built = std::cell::Cell::new(0);
        let build = |i: &u32| {
            built.set(built.get() + 1);
            *i
        };
        let list = lazy(items.iter(), &build);
        assert_eq!(built.get(), 0, "making the list builds nothing");
        let doc = page(&request("offset=10&limit=3"), &list);
        assert_eq!(doc["items"], json!([10, 11, 12]));
        assert_eq!(doc["total"], 1000);
        assert_eq!(built.get(), 3, "only the page's three rows");
    }
}
