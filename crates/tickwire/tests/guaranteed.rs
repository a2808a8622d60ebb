//! Guaranteed messaging across processes, on the real binary: the CLI flow, bad input
//! and faults, and the kill -9 loop (a publisher and a consumer carry on while the
//! router is killed with SIGKILL at random moments and restarted on its data directory).
//!
//! The long run: `TICKWIRE_KILL_CYCLES=20 cargo test -p tickwire --test guaranteed kill_9 -- --nocapture`.

// Tests fail loudly on any unexpected error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{free_port, run_cli, FixedRouter, Got, Raw, RouterProc};
use tickwire_client::{
    Client, ErrorCode, Event, GuaranteedPublisher, QueueConsumer, QueueOp, ReconnectOptions, Start,
    Wait,
};
use tickwire_wire::gm as wgm;

/// A router on a fixed port and data directory, so it can be killed and restarted.
fn durable(port: u16, dir: &Path, sync: &str) -> FixedRouter {
    durable_with(port, dir, sync, Stdio::inherit())
}

fn durable_with(port: u16, dir: &Path, sync: &str, stderr: Stdio) -> FixedRouter {
    let dir = dir.display().to_string();
    FixedRouter::start(port, &["--data-dir", &dir, "--sync", sync], stderr)
}

/// A [`durable`] router (fsync) on a free port with the queue `orders` (`orders/>`).
fn durable_with_orders(dir: &Path) -> (u16, FixedRouter) {
    let port = free_port();
    let router = durable(port, dir, "fsync");
    create_queue(
        router.addr,
        r#"{"name":"orders","subscriptions":["orders/>"]}"#,
    );
    (port, router)
}

fn reconnect_opts(name: &str) -> ReconnectOptions {
    ReconnectOptions::local(name, Duration::from_secs(60))
}

fn create_queue(addr: SocketAddr, json: &str) {
    let mut c = Client::connect(addr).expect("connect");
    c.queue_request(QueueOp::Create, json)
        .expect("create queue");
    c.close().ok();
}

/// What the consumer saw, per publisher sequence number.
#[derive(Default)]
struct Seen {
    /// seq -> deliveries (first, then flagged repeats)
    deliveries: BTreeMap<u64, u32>,
    unflagged_duplicates: Vec<u64>,
    redelivered: u64,
}

#[test]
fn kill_9_loop_loses_no_acknowledged_message_and_flags_every_duplicate() {
    let cycles: usize = std::env::var("TICKWIRE_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut router = durable(port, dir.path(), "fsync");
    let addr = router.addr.to_string();
    create_queue(
        router.addr,
        r#"{"name":"orders","subscriptions":["orders/>"]}"#,
    );

    let per_cycle = 3_000u64;
    let total = per_cycle * cycles as u64 + per_cycle;
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    // The publisher's reconnections so far: each kill waits for the last one to be
    // noticed (two kills within one outage are one reconnection, which made the count
    // below flaky on a loaded machine).
    let reconnected = Arc::new(AtomicU64::new(0));
    // Set after the last kill: the publisher waits for it halfway through its last
    // part, so that every kill lands while it still has publishing to do (however
    // late the killing thread runs on a loaded machine).
    let killed_all = Arc::new(AtomicBool::new(false));

    // The consumer: acknowledges each delivery after recording it.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let consumer = {
        let (addr, seen, stop) = (addr.clone(), seen.clone(), stop.clone());
        std::thread::spawn(move || -> Result<(), String> {
            let mut c = QueueConsumer::connect(
                &addr,
                "orders",
                256,
                Start::Queue,
                reconnect_opts("killer-consumer"),
            )
            .map_err(|e| format!("consumer connect: {e}"))?;
            while !stop.load(Ordering::Acquire) {
                let mut acks = Vec::new();
                c.poll(Wait::Timeout(Duration::from_millis(50)), |d| {
                    let seq = u64::from_le_bytes(d.payload[..8].try_into().unwrap_or([0; 8]));
                    let mut s = seen.lock().unwrap();
                    let n = s.deliveries.entry(seq).or_insert(0);
                    *n += 1;
                    if d.redelivered {
                        s.redelivered += 1;
                    } else if *n > 1 {
                        s.unflagged_duplicates.push(seq);
                    }
                    acks.push(d.msg_id);
                })
                .map_err(|e| format!("consumer poll: {e}"))?;
                for id in acks {
                    c.ack(id).map_err(|e| format!("consumer ack: {e}"))?;
                }
            }
            c.close().ok();
            Ok(())
        })
    };

    // The publisher: guaranteed publishes of the sequence number, paced lightly.
    let publisher = {
        let (addr, published, killed_all) = (addr.clone(), published.clone(), killed_all.clone());
        let reconnected = reconnected.clone();
        let hold_at = per_cycle * cycles as u64 + per_cycle / 2;
        std::thread::spawn(move || -> Result<(u64, u64, u64, u64), String> {
            let mut p = GuaranteedPublisher::connect(
                &addr,
                "killer-publisher",
                reconnect_opts("killer-publisher"),
            )
            .map_err(|e| format!("publisher connect: {e}"))?;
            let mut payload = vec![0u8; 64];
            for seq in 1..=total {
                if seq == hold_at {
                    // Holding, it still polls: a kill waits for this reconnection.
                    let deadline = Instant::now() + Duration::from_secs(120);
                    while !killed_all.load(Ordering::Acquire) && Instant::now() < deadline {
                        p.poll(Wait::Timeout(Duration::from_millis(5)))
                            .map_err(|e| format!("publisher poll: {e}"))?;
                        reconnected.store(p.reconnects(), Ordering::Release);
                    }
                }
                payload[..8].copy_from_slice(&seq.to_le_bytes());
                p.publish("orders/new", &payload)
                    .map_err(|e| format!("publish {seq}: {e}"))?;
                published.store(seq, Ordering::Release);
                if seq % 100 == 0 {
                    p.poll(Wait::NoWait)
                        .map_err(|e| format!("publisher poll: {e}"))?;
                    reconnected.store(p.reconnects(), Ordering::Release);
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            let all = p
                .wait_answered(Duration::from_secs(60))
                .map_err(|e| format!("waiting for answers: {e}"))?;
            let c = p.counts().clone();
            if !all {
                return Err(format!(
                    "{} publishes unanswered after 60 s",
                    p.unanswered()
                ));
            }
            Ok((c.published, c.acked, c.nacked, p.reconnects()))
        })
    };

    // Kill -9 at pseudo-random moments while publishing is under way.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for cycle in 0..cycles {
        let target = per_cycle * (cycle as u64 + 1);
        let deadline = Instant::now() + Duration::from_secs(60);
        while (published.load(Ordering::Acquire) < target
            || reconnected.load(Ordering::Acquire) < cycle as u64)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(rng % 40));
        router.kill9();
        router = durable(port, dir.path(), "fsync");
        eprintln!(
            "cycle {}: killed and restarted at ~{} published",
            cycle + 1,
            published.load(Ordering::Acquire)
        );
    }

    killed_all.store(true, Ordering::Release);
    let (npub, acked, nacked, reconnects) = publisher
        .join()
        .expect("publisher thread")
        .expect("publisher");
    assert_eq!(npub, total);
    assert_eq!(nacked, 0, "no publish should be refused");
    assert_eq!(acked, total, "every publish acknowledged in the end");
    assert!(
        reconnects >= cycles as u64,
        "the publisher reconnected {reconnects} times for {cycles} kills"
    );

    // Every acknowledged publish is delivered at least once.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let missing = {
            let s = seen.lock().unwrap();
            (1..=total)
                .filter(|q| !s.deliveries.contains_key(q))
                .count()
        };
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} acknowledged messages never delivered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Release);
    consumer.join().expect("consumer thread").expect("consumer");
    let s = seen.lock().unwrap();
    assert!(
        s.unflagged_duplicates.is_empty(),
        "duplicates without REDELIVERED: {:?}",
        &s.unflagged_duplicates[..s.unflagged_duplicates.len().min(20)]
    );
    eprintln!(
        "kill -9 loop: {cycles} cycles, {total} published and acknowledged, 0 lost, {} redelivered (flagged), 0 unflagged duplicates, {reconnects} publisher reconnects",
        s.redelivered
    );
    // After everything was acknowledged by the consumer, the queue is empty.
    drop(s);
    let mut c = Client::connect(router.addr).expect("connect");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let show: serde_json::Value =
            serde_json::from_str(&c.queue_request(QueueOp::Show, "orders").expect("show"))
                .expect("json");
        if show["depth"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "queue not drained: {show}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// New-user pass: `sub --queue` on a queue deleted meanwhile said "reconnecting", then
/// failed binding it. It ends at once, saying the queue was deleted.
#[test]
fn sub_queue_ends_when_its_queue_is_deleted_without_reconnecting() {
    let r = RouterProc::start(&[]);
    let a = r.addr_str();
    let t = Duration::from_secs(60);
    let (st, _, err) = run_cli(
        &["queue", "create", "dq", "--sub", "dq/>", "--router", &a],
        t,
    );
    assert!(st.success(), "{err}");
    let mut sub = common::cli(&["sub", "--queue", "dq", "--router", &a])
        .spawn()
        .unwrap();
    // Bound (the queue shows its consumer) before it is deleted.
    let deadline = Instant::now() + Duration::from_secs(20);
    while queue_show(&a, "dq")["consumers"].as_u64() < Some(1) {
        assert!(Instant::now() < deadline, "{}", queue_show(&a, "dq"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let (st, _, err) = run_cli(&["queue", "delete", "dq", "--router", &a], t);
    assert!(st.success(), "{err}");
    let st = common::wait_child(&mut sub, t, "sub --queue of a deleted queue");
    let (_, err) = common::take_output(&mut sub);
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(
        err.contains("was deleted") && !err.contains("reconnecting"),
        "{err}"
    );
}

/// New-user pass: two `pub --guaranteed` to one topic share the default identity; the
/// first died with "taken-over" and no word of what to do.
#[test]
fn a_taken_over_guaranteed_pub_says_to_give_each_its_own_identity() {
    for identity in [None, Some("desk-1")] {
        taken_over(identity);
    }
}

/// Two `pub --guaranteed` at once under the default identity or `identity`: the first
/// is taken over and says what to do.
fn taken_over(identity: Option<&str>) {
    let r = RouterProc::start(&[]);
    let a = r.addr_str();
    let t = Duration::from_secs(60);
    let (st, _, err) = run_cli(
        &[
            "queue", "create", "twice", "--sub", "twice/>", "--router", &a,
        ],
        t,
    );
    assert!(st.success(), "{err}");
    let named: Vec<&str> = identity.map_or_else(Vec::new, |i| vec!["--identity", i]);
    let mut first = common::cli(
        &[
            &[
                "pub",
                "twice/x",
                "--count",
                "200",
                "--rate",
                "20",
                "--guaranteed",
                "--router",
                &a,
            ][..],
            &named,
        ]
        .concat(),
    )
    .spawn()
    .unwrap();
    // Under way (some stored) before the second opens the same identity.
    let deadline = Instant::now() + Duration::from_secs(20);
    while queue_show(&a, "twice")["depth"].as_u64() < Some(2) {
        assert!(
            Instant::now() < deadline,
            "the first publisher stored nothing"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (st, _, err) = run_cli(
        &[
            &["pub", "twice/x", "second", "--guaranteed", "--router", &a][..],
            &named,
        ]
        .concat(),
        t,
    );
    assert!(st.success(), "{err}");
    let st = common::wait_child(&mut first, t, "the first pub");
    let (_, err) = common::take_output(&mut first);
    assert_eq!(st.code(), Some(1), "{err}");
    // The default identity is blamed only when it was the one (new-user pass).
    let hint = match identity {
        None => "(two commands publishing at once share the default one): give each concurrent publisher its own --identity",
        Some(_) => "opened this publisher identity (--identity): give each concurrent publisher its own",
    };
    assert!(err.contains(hint) && err.contains("taken-over"), "{err}");
}

#[test]
fn cli_queue_pub_guaranteed_and_sub_queue_account_for_every_message() {
    let r = RouterProc::start(&[]);
    let a = r.addr_str();
    let t = Duration::from_secs(60);
    // No queue yet: stats says how to create one, on this router.
    let (st, out, err) = run_cli(&["stats", "--router", &a], t);
    assert!(st.success(), "{out}{err}");
    assert!(
        out.contains(&format!(
            "no queues (tickwire queue create NAME --sub PATTERN --router {a})"
        )),
        "{out}"
    );
    fills_queue_with(&a, 500);
    let q = queue_show(&a, "fills");
    assert_eq!(q["depth"], 500, "{q}");
    let (st, out, err) = run_cli(
        &[
            "sub", "--queue", "fills", "--count", "500", "--quiet", "--router", &a,
        ],
        t,
    );
    assert!(st.success(), "{out}{err}");
    let q = queue_show(&a, "fills");
    assert_eq!(
        (q["depth"].as_u64(), q["acked"].as_u64()),
        (Some(0), Some(500)),
        "{q}"
    );
    // stats shows the queue.
    let (st, out, _) = run_cli(&["stats", "--router", &a], t);
    assert!(st.success());
    assert!(
        out.contains("fills") && out.contains("guaranteed: spool"),
        "{out}"
    );
    // The same create again changes nothing and says so.
    let (st, out, err) = run_cli(
        &[
            "queue", "create", "fills", "--sub", "fills/>", "--router", &a,
        ],
        t,
    );
    assert!(st.success(), "{out}{err}");
    assert!(
        out.contains("queue fills already exists with this definition: nothing changed"),
        "{out}{err}"
    );
    let q = queue_show(&a, "fills");
    assert!(q["definition"]["first_message_id"].is_u64(), "{q}");
    assert!(q["definition"].get("created_at").is_none(), "{q}");
    // A second create with a different definition is refused with a clear error.
    let (st, out, err) = run_cli(
        &[
            "queue", "create", "fills", "--sub", "other/>", "--router", &a,
        ],
        t,
    );
    assert!(!st.success(), "{out}{err}");
    assert!(err.contains("queue-exists"), "{err}");
    // It names what differs, with both values.
    assert!(
        err.contains(r#"subscriptions is ["fills/>"], asked ["other/>"]"#),
        "{err}"
    );
    // A dead-letter queue that does not exist yet is created on first use: the create
    // says so (a mistyped name would quietly become a new queue); an existing one is
    // not mentioned.
    let (st, out, err) = run_cli(
        &[
            "queue",
            "create",
            "dlq-user",
            "--sub",
            "dlq-user/>",
            "--dead-letter-queue",
            "nosuch",
            "--router",
            &a,
        ],
        t,
    );
    assert!(st.success(), "{out}{err}");
    assert!(
        err.contains("note: dead-letter queue nosuch does not exist yet"),
        "{out}{err}"
    );
    let (st, out, err) = run_cli(
        &[
            "queue",
            "create",
            "dlq-user2",
            "--sub",
            "dlq-user2/>",
            "--dead-letter-queue",
            "fills",
            "--router",
            &a,
        ],
        t,
    );
    assert!(st.success(), "{out}{err}");
    assert!(!err.contains("does not exist"), "{out}{err}");
    // A publish to a full queue is NACKed, reported and reflected in the exit code.
    let (st, ..) = run_cli(
        &[
            "queue",
            "create",
            "tiny",
            "--sub",
            "tiny",
            "--max-messages",
            "2",
            "--router",
            &a,
        ],
        t,
    );
    assert!(st.success());
    let (st, out, err) = run_cli(
        &[
            "pub",
            "--guaranteed",
            "tiny",
            "--count",
            "5",
            "--rate",
            "0",
            "--router",
            &a,
        ],
        t,
    );
    assert_eq!(st.code(), Some(3), "{out}{err}");
    assert!(format!("{out}{err}").contains("queue-full"), "{out}{err}");
    // The refusal says what the queue holds and which limit it reached.
    assert!(
        err.contains("queue tiny is full: it holds 2 messages (")
            && err.contains("bytes), its limit is max_messages 2"),
        "{err}"
    );
    // And what to do next, with this router's address.
    assert!(
        err.contains(&format!(
            "hint: queue tiny takes messages again as its consumers acknowledge them \
             (`tickwire sub --queue tiny --router {a}`); `tickwire queue purge tiny --router {a}` \
             drops what it holds; `tickwire queue show tiny --router {a}` shows its limits"
        )),
        "{err}"
    );
    // A message that alone exceeds max_bytes: the message is what does not fit.
    let (st, out, err) = run_cli(
        &[
            "queue",
            "create",
            "small",
            "--sub",
            "small",
            "--max-bytes",
            "16",
            "--router",
            &a,
        ],
        t,
    );
    assert!(st.success(), "{out}{err}");
    let (st, out, err) = run_cli(
        &[
            "pub",
            "--guaranteed",
            "small",
            "a payload of 24 bytes...",
            "--router",
            &a,
        ],
        t,
    );
    assert_eq!(st.code(), Some(3), "{out}{err}");
    assert!(
        err.contains("queue small cannot hold this message: 29 bytes as stored (topic and payload), more than its max_bytes 16"),
        "{err}"
    );
    // Waiting or purging cannot help that one: no hint suggests it.
    assert!(!err.contains("hint: queue"), "{err}");
    // Purging says how many messages it dropped: the two the full queue held.
    let (st, out, err) = run_cli(&["queue", "purge", "tiny", "--router", &a], t);
    assert!(st.success(), "{out}{err}");
    assert_eq!(out, "queue tiny purged: 2 messages dropped\n", "{err}");
    let (_, out, _) = run_cli(
        &["queue", "show", "tiny", "--print-json", "--router", &a],
        t,
    );
    let q: serde_json::Value = serde_json::from_str(&out).expect("queue show JSON");
    assert_eq!(q["depth"], 0, "{q}");
    // Regression: a publish that no queue matches was reported "acknowledged" (stored
    // nowhere). The command has the router refuse it, and says which queue to create;
    // --allow-no-queue lets the router acknowledge it.
    let nowhere = |extra: &[&str]| {
        let mut args = vec!["pub", "--guaranteed", "audit/x", "hello", "--router", &a];
        args.extend_from_slice(extra);
        run_cli(&args, t)
    };
    let (st, out, err) = nowhere(&[]);
    assert_eq!(st.code(), Some(3), "{out}{err}");
    assert!(
        err.contains("0 acknowledged, 1 refused (no-matching-queue: 1)")
            && err.contains("stored those messages nowhere")
            && err.contains(&format!(
                "`tickwire queue create audit --sub 'audit/>' --router {a}`"
            ))
            && !err.contains("ask an administrator"),
        "{err}"
    );
    // A queue that does not exist: `queue show` says where the queues are listed.
    let (st, out, err) = run_cli(&["queue", "show", "nope", "--router", &a], t);
    assert_eq!(st.code(), Some(1), "{out}{err}");
    assert!(
        err.contains(&format!(
            "no queue named \"nope\" (`tickwire queue list --router {a}` lists the queues)"
        )),
        "{err}"
    );
    // A command the router suggests names no router: the CLI says which flags to add.
    let (st, out, err) = run_cli(&["sub", "--queue", "nope", "--router", &a], t);
    assert_eq!(st.code(), Some(1), "{out}{err}");
    assert!(
        err.contains("(tickwire queue create nope --sub PATTERN)")
            && err.contains(&format!(
                "hint: add `--router {a}` to the tickwire command suggested above"
            )),
        "{err}"
    );
    // Demanding-user pass: only the last 16 refusals are listed, and the list did not
    // say so; their sequence numbers carry on from earlier runs of the identity, so
    // each now also says which message (input line, with --stdin) of this run it was.
    let (st, out, err) = nowhere(&["--count", "20"]);
    assert_eq!(st.code(), Some(3), "{out}{err}");
    assert!(
        err.contains("20 refused (no-matching-queue: 20)")
            && err.contains("the last 16 of the 20 refused:")
            && err.contains(", message 20 of this run: no-matching-queue")
            && err.contains(", message 5 of this run: ")
            && !err.contains(", message 4 of this run: "),
        "{err}"
    );
    let (st, out, err) = nowhere(&["--allow-no-queue"]);
    assert!(st.success(), "{out}{err}");
    assert!(err.contains("1 acknowledged, 0 refused"), "{err}");
}

#[test]
fn bad_guaranteed_input_gets_clear_errors_and_direct_traffic_carries_on() {
    let r = RouterProc::start(&[]);
    // A direct subscriber that must keep receiving throughout.
    let mut sub = Client::connect(r.addr).expect("sub");
    sub.subscribe("md/>").expect("subscribe");
    let mut direct = Client::connect(r.addr).expect("direct publisher");
    let mut got = 0u64;
    let check_direct = |direct: &mut Client, sub: &mut Client, got: &mut u64| {
        direct.publish("md/x", b"tick").expect("publish");
        direct.flush().expect("flush");
        let want = *got + 1;
        let deadline = Instant::now() + Duration::from_secs(10);
        while *got < want {
            sub.poll(Wait::Timeout(Duration::from_millis(100)), |_| *got += 1)
                .expect("poll");
            assert!(Instant::now() < deadline, "direct message not delivered");
        }
    };
    check_direct(&mut direct, &mut sub, &mut got);

    // Malformed guaranteed frames are fatal for that client only.
    let mut bad = Vec::new();
    wgm::encode_bind(&mut bad, 1, 1, Start::Queue, "q");
    bad[8 + 4 + 4] = 7; // unknown start position
    let mut raw = Raw::hello(r.addr, "bad-bind");
    raw.send(&bad);
    assert!(!raw.expect_fatal(ErrorCode::MALFORMED_FRAME).is_empty());
    check_direct(&mut direct, &mut sub, &mut got);

    // Acks for unknown bindings and ids, a BIND to a missing queue: non-fatal errors.
    let mut c = Client::connect(r.addr).expect("connect");
    let e = c
        .bind("nope", 4, Start::Queue)
        .expect_err("bind to a missing queue");
    assert!(e.to_string().contains("no-such-queue"), "{e}");
    let mut raw = Raw::hello(r.addr, "acker");
    let mut b = Vec::new();
    wgm::encode_consumer_ack(&mut b, 99, 1, 5);
    raw.send(&b);
    match raw.next(Duration::from_secs(5)) {
        Ok(common::Got::Error { code, fatal, .. }) => {
            assert_eq!((code, fatal), (ErrorCode::UNKNOWN_DELIVERY, false));
        }
        other => panic!("expected a non-fatal ERROR, got {other:?}"),
    }
    check_direct(&mut direct, &mut sub, &mut got);

    // A consumer that never acknowledges gets its window and no more; the rest waits.
    create_queue(r.addr, r#"{"name":"slow","subscriptions":["slow"]}"#);
    let mut slow = Client::connect(r.addr).expect("slow consumer");
    let binding = slow.bind("slow", 3, Start::Queue).expect("bind");
    let mut p = Client::connect(r.addr).expect("publisher");
    p.open_publisher("bad-input-pub", 0).expect("open");
    for i in 0..10u8 {
        p.publish_guaranteed("slow", &[i]).expect("publish");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.unanswered() > 0 {
        p.poll_events(Wait::Timeout(Duration::from_millis(50)), |_| {})
            .expect("poll");
        assert!(Instant::now() < deadline, "publishes unanswered");
    }
    // Until 3 arrived (bounded), then 500 ms more in which no fourth may.
    let mut delivered = 0;
    let first = Instant::now() + Duration::from_secs(10);
    let mut until = first;
    while Instant::now() < until {
        if delivered >= 3 && until == first {
            until = Instant::now() + Duration::from_millis(500);
        }
        slow.poll_events(Wait::Timeout(Duration::from_millis(50)), |e| {
            if let Event::Delivery(d) = e {
                assert_eq!(d.binding, binding.id.0);
                delivered += 1;
            }
        })
        .expect("poll");
    }
    assert_eq!(
        delivered, 3,
        "window 3: exactly 3 deliveries before any ack"
    );
    check_direct(&mut direct, &mut sub, &mut got);

    // Without a spool: a clear SPOOL_UNAVAILABLE, not a hang or a disconnect.
    let off = RouterProc::start(&["--no-guaranteed"]);
    let mut c = Client::connect(off.addr).expect("connect");
    let e = c.queue_request(QueueOp::List, "").expect_err("no spool");
    assert!(e.to_string().contains("spool-unavailable"), "{e}");
    c.subscribe("x").expect("the connection is still usable");
}

#[test]
fn a_full_disk_nacks_guaranteed_publishes_and_spares_direct_traffic() {
    // A 1 MiB tmpfs as the data directory (root only: CI runs as root).
    let dir = tempfile::tempdir().expect("tempdir");
    let mount = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(dir.path())
        .status();
    if !mount.is_ok_and(|s| s.success()) {
        common::peer_missing(
            "a_full_disk_nacks_guaranteed_publishes_and_spares_direct_traffic",
            "cannot mount a small tmpfs (needs root)",
        );
        return;
    }
    struct Umount<'a>(&'a Path);
    impl Drop for Umount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _u = Umount(dir.path());
    let port = free_port();
    let router = durable(port, dir.path(), "fsync");
    create_queue(router.addr, r#"{"name":"big","subscriptions":["big"]}"#);
    let mut sub = Client::connect(router.addr).expect("sub");
    sub.subscribe("md/>").expect("subscribe");
    let mut p = Client::connect(router.addr).expect("publisher");
    p.open_publisher("disk-filler", 0).expect("open");
    let payload = vec![7u8; 16 * 1024];
    let mut spool_failed = 0u64;
    let mut acked = 0u64;
    // While the disk has room: acknowledged (waited for, so they are not part of one
    // big first batch that fails whole).
    for _ in 0..4 {
        p.publish_guaranteed("big", &payload).expect("publish");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while p.unanswered() > 0 {
        p.poll_events(Wait::Timeout(Duration::from_millis(50)), |e| {
            if let Event::Acked { first, last } = e {
                acked += last - first + 1
            }
        })
        .expect("poll");
        assert!(Instant::now() < deadline, "the first publishes unanswered");
    }
    assert_eq!(acked, 4, "64 KiB fit on a 1 MiB disk");
    for _ in 0..200 {
        p.publish_guaranteed("big", &payload).expect("publish");
        p.poll_events(Wait::NoWait, |e| match e {
            Event::Nacked { reason, .. } if reason == wgm::NackReason::SPOOL_FAILED => {
                spool_failed += 1
            }
            Event::Acked { first, last } => acked += last - first + 1,
            _ => {}
        })
        .expect("poll");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while p.unanswered() > 0 {
        p.poll_events(Wait::Timeout(Duration::from_millis(50)), |e| match e {
            Event::Nacked { reason, .. } if reason == wgm::NackReason::SPOOL_FAILED => {
                spool_failed += 1
            }
            Event::Acked { first, last } => acked += last - first + 1,
            _ => {}
        })
        .expect("poll");
        assert!(
            Instant::now() < deadline,
            "publishes unanswered with a full disk"
        );
    }
    assert!(
        spool_failed > 0,
        "a 1 MiB disk cannot hold 3.2 MiB: some publishes must be NACKed spool-failed"
    );
    assert!(acked < 204, "acked {acked} of 204 on a 1 MiB disk");
    // Direct traffic still flows.
    let mut d = Client::connect(router.addr).expect("direct");
    d.publish("md/y", b"still here").expect("publish");
    d.flush().expect("flush");
    let mut n = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while n == 0 {
        sub.poll(Wait::Timeout(Duration::from_millis(100)), |_| n += 1)
            .expect("poll");
        assert!(
            Instant::now() < deadline,
            "direct message lost while the disk is full"
        );
    }
    drop(router);
}

/// Identities beyond the router's 1,024: an idle one makes room. Here every other
/// identity stored something, so the one used longest ago (`x`) is forgotten; the
/// forget is in the spool, so after a restart a new publisher of `x` starts afresh
/// (its publishes are stored, not taken for the old `x`'s duplicates) and nothing
/// stored is lost.
#[test]
fn identities_beyond_the_bound_replace_the_oldest_idle_one_and_that_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let router = durable(port, dir.path(), "page-cache");
    create_queue(router.addr, r#"{"name":"f","subscriptions":["f"]}"#);
    create_queue(router.addr, r#"{"name":"g","subscriptions":["g"]}"#);
    let publish_acked = |p: &mut Client, topic: &str, payload: &[u8]| {
        let want = p.publish_counts().acked + 1;
        p.publish_guaranteed(topic, payload).expect("publish");
        let deadline = Instant::now() + Duration::from_secs(20);
        while p.publish_counts().acked < want {
            p.poll_events(Wait::Timeout(Duration::from_millis(50)), |_| {})
                .expect("poll");
            assert!(Instant::now() < deadline, "publish unanswered");
        }
    };
    let mut x = Client::connect(router.addr).expect("x");
    x.open_publisher("x", 0).expect("open x");
    for i in 0..5u8 {
        publish_acked(&mut x, "f", &[i]);
    }
    x.close().expect("close x");
    // 1,023 more identities, each storing one message, one after the other on one
    // connection (each open lets the previous one go): the router now remembers
    // 1,024, and the next new one needs the place of the one used longest ago, x.
    let mut flood = Client::connect(router.addr).expect("flood");
    for i in 0..1024 {
        flood
            .open_publisher(&format!("n{i}"), 0)
            .unwrap_or_else(|e| panic!("open n{i}: {e}"));
        // The last one's acknowledgement also says the forget before it is written.
        publish_acked(&mut flood, "g", b"n");
    }
    let stats: serde_json::Value =
        serde_json::from_str(&flood.stats_json().expect("stats")).expect("json");
    assert_eq!(stats["guaranteed"]["totals"]["publishers_forgotten"], 1);
    assert_eq!(stats["guaranteed"]["publisher_identities"], 1024);
    assert_eq!(stats["guaranteed"]["max_publisher_identities"], 1024);
    flood.close().ok();
    router.kill9();

    let router = durable(port, dir.path(), "page-cache");
    let mut x = Client::connect(router.addr).expect("x again");
    let opened = x.open_publisher("x", 0).expect("open x again");
    assert_eq!(
        opened.last_seq, 0,
        "x was forgotten, and stays so after a restart"
    );
    publish_acked(&mut x, "f", b"new");
    let stats: serde_json::Value =
        serde_json::from_str(&x.stats_json().expect("stats")).expect("json");
    assert_eq!(
        stats["guaranteed"]["totals"]["duplicates"], 0,
        "the new x's seq 1 was taken for the old x's"
    );
    // New-user pass: stored by a queue with no direct subscriber, a guaranteed publish
    // was counted unrouted (an alert on it fired on a healthy order flow).
    assert_eq!(stats["router"]["totals"]["unrouted"], 0, "{stats}");
    let show: serde_json::Value =
        serde_json::from_str(&x.queue_request(QueueOp::Show, "f").expect("show")).expect("json");
    assert_eq!(
        show["depth"], 6,
        "5 of the old x and 1 of the new, none lost"
    );
}

#[test]
fn a_corrupt_spool_record_is_reported_and_the_rest_recovered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let router = durable(port, dir.path(), "fsync");
    create_queue(router.addr, r#"{"name":"c","subscriptions":["c"]}"#);
    let mut p = Client::connect(router.addr).expect("publisher");
    p.open_publisher("corruptor", 0).expect("open");
    for i in 0..100u64 {
        let mut payload = i.to_le_bytes().to_vec();
        payload.extend_from_slice(&[0xAB; 200]);
        p.publish_guaranteed("c", &payload).expect("publish");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while p.unanswered() > 0 {
        p.poll_events(Wait::Timeout(Duration::from_millis(50)), |_| {})
            .expect("poll");
        assert!(Instant::now() < deadline, "publishes unanswered");
    }
    assert_eq!(p.publish_counts().acked, 100);
    router.kill9();
    // Flip one byte in the middle of the segment: inside a message's payload.
    let seg = std::fs::read_dir(dir.path().join("spool"))
        .expect("spool dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("a segment file");
    let mut bytes = std::fs::read(&seg).expect("read segment");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xFF;
    std::fs::write(&seg, &bytes).expect("write segment");
    let mut router = durable_with(port, dir.path(), "fsync", Stdio::piped());
    let stderr = router.child.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(String::new()));
    {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("router: {line}");
                log.lock().unwrap().push_str(&line);
            }
        });
    }
    // The damage is reported, and everything else is there.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !log.lock().unwrap().contains("damaged") {
        assert!(
            Instant::now() < deadline,
            "no damage report in the router log: {}",
            log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = Client::connect(router.addr).expect("connect");
    let show: serde_json::Value =
        serde_json::from_str(&c.queue_request(QueueOp::Show, "c").expect("show")).expect("json");
    let depth = show["depth"].as_u64().expect("depth");
    assert!(
        (98..=99).contains(&depth),
        "one damaged record skipped, the rest recovered: depth {depth}"
    );
    // Direct traffic and the queue work after recovery.
    c.subscribe("d").expect("subscribe");
    let b = c.bind("c", 200, Start::Queue).expect("bind");
    let mut n = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while n < depth {
        c.poll_events(Wait::Timeout(Duration::from_millis(50)), |e| {
            if let Event::Delivery(d) = e {
                assert_eq!(d.binding, b.id.0);
                assert!(d.redelivered, "recovered messages are flagged");
                n += 1;
            }
        })
        .expect("poll");
        assert!(Instant::now() < deadline, "only {n} of {depth} delivered");
    }
}

#[test]
fn a_publisher_that_never_reads_its_acks_is_cut_off_and_what_it_stored_stays() {
    let (r, log) = RouterProc::start_logged(&["--egress-limit", "64KiB", "--max-frame", "64KiB"]);
    create_queue(
        r.addr,
        r#"{"name":"deaf","subscriptions":["deaf"],"max_messages":0,"max_bytes":0}"#,
    );
    let mut raw = Raw::hello(r.addr, "deaf-publisher");
    let mut b = Vec::new();
    wgm::encode_pub_open(&mut b, 1, 0, "deaf");
    raw.send(&b);
    // Publish without ever reading, until the router cuts the connection off.
    let mut writer = raw.s.try_clone().expect("clone");
    writer
        .set_write_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let sender = std::thread::spawn(move || {
        use std::io::Write;
        let mut sent = 0u64;
        let mut batch = Vec::new();
        for seq in 1..=2_000_000u64 {
            let start = batch.len();
            tickwire_wire::frame::encode_publish(
                &mut batch,
                "deaf",
                b"x",
                tickwire_wire::frame::PublishOptions {
                    seq: Some(seq),
                    publisher_send: None,
                },
                u32::MAX,
            )
            .expect("encode");
            batch[start + 5] |= tickwire_wire::frame::flags::GUARANTEED;
            if seq % 1_000 == 0 {
                if writer.write_all(&batch).is_err() {
                    return sent;
                }
                sent = seq;
                batch.clear();
            }
        }
        sent
    });
    let sent = sender.join().expect("sender");
    assert!(
        sent < 2_000_000,
        "the router never cut off a publisher that reads nothing"
    );
    // The router cut it off as a slow consumer (its log says so, naming it).
    let line = log.wait_for(
        &[
            "disconnecting client",
            "deaf-publisher",
            "slow-consumer",
            "slow consumer",
        ],
        Duration::from_secs(30),
    );
    assert!(
        line.is_some(),
        "no slow-consumer disconnect logged:\n{}",
        log.text()
    );
    // What it reads now: the answers the kernel held, then the fatal SLOW_CONSUMER when
    // it fitted. It may not have: the kernel's buffers were full of answers this
    // publisher never read, and the router lingers only 1 s for the error to leave; an
    // orderly close or a reset after the answers is then right. A timeout is not.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match raw.next(Duration::from_secs(10)) {
            Ok(common::Got::Error { code, fatal, .. }) => {
                assert_eq!((code, fatal), (ErrorCode::SLOW_CONSUMER, true));
                break;
            }
            Ok(_) => {}
            Err(common::Closed::Eof | common::Closed::Reset) => break,
            Err(common::Closed::TimedOut) => panic!("the cut-off connection stayed open"),
        }
        assert!(
            Instant::now() < deadline,
            "no SLOW_CONSUMER error and no close"
        );
    }
    // The messages it published before that are stored, and the router serves others.
    let mut c = Client::connect(r.addr).expect("connect");
    let show: serde_json::Value =
        serde_json::from_str(&c.queue_request(QueueOp::Show, "deaf").expect("show")).expect("json");
    assert!(show["depth"].as_u64().is_some_and(|d| d > 1_000), "{show}");
}

/// The queues' bounds on the real binary: a definition that would pass
/// `max_queue_index_nodes` is refused with the reason (and the router carries on), a
/// guaranteed publish that would pass `max_queue_entries` is NACKed `queue-full`, a
/// queue whose start would enter too many retained messages is refused, and the stats
/// show both figures.
#[test]
fn queue_definitions_and_entries_are_bounded_router_wide() {
    let config = common::temp("queue-bounds.toml");
    std::fs::write(
        &config,
        "[router]\nmax_queue_index_nodes = 6\nmax_queue_entries = 5\n",
    )
    .unwrap();
    let r = RouterProc::start(&["--config", config.to_str().unwrap()]);
    let a = r.addr_str();
    let t = Duration::from_secs(60);
    let create = |args: &[&str]| {
        let mut all = vec!["queue", "create"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--router", &a]);
        run_cli(&all, t)
    };
    // The root and t (a trailing `>` is kept on its parent): 2 nodes; a/b/c makes 5; x
    // and p/q would add 3 more: refused whole.
    for (name, pattern) in [("t1", "t/>"), ("t2", "t/>"), ("abc", "a/b/c")] {
        let (st, out, err) = create(&[name, "--sub", pattern]);
        assert!(st.success(), "{name}: {out}{err}");
    }
    let (st, out, err) = create(&["xpq", "--sub", "x", "--sub", "p/q"]);
    assert!(!st.success(), "{out}{err}");
    assert!(
        err.contains("queue not created") && err.contains("max_queue_index_nodes (6)"),
        "{err}"
    );
    let (st, _, err) = run_cli(&["queue", "show", "xpq", "--router", &a], t);
    assert!(!st.success() && err.contains("no-such-queue"), "{err}");
    // Two queues match t/x: two entries per message, so the third would make 6.
    let (st, out, err) = run_cli(
        &[
            "pub",
            "--guaranteed",
            "t/x",
            "--count",
            "3",
            "--rate",
            "0",
            "--router",
            &a,
        ],
        t,
    );
    let said = format!("{out}{err}");
    assert_eq!(st.code(), Some(3), "{said}");
    assert!(
        said.contains("2 acknowledged") && said.contains("queue-full"),
        "{said}"
    );
    // The two retained messages would make 6 entries in a queue from the beginning.
    let (st, out, err) = create(&["late", "--sub", "t/>", "--start", "beginning"]);
    assert!(!st.success(), "{out}{err}");
    assert!(err.contains("max_queue_entries (5)"), "{err}");
    let (st, out, err) = run_cli(&["stats", "--json", "--router", &a], t);
    assert!(st.success(), "{out}{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("stats JSON");
    let g = &doc["guaranteed"];
    assert_eq!(
        (
            g["queue_entries"].as_u64(),
            g["max_queue_entries"].as_u64(),
            g["queue_index_nodes"].as_u64(),
            g["max_queue_index_nodes"].as_u64()
        ),
        (Some(4), Some(5), Some(5), Some(6)),
        "{g}"
    );
}

/// A queue LIST is one frame of JSON at most, refused at once when the queues are too
/// many to fit, and one unread answer at a time per client: the requests behind it get
/// a non-fatal BUSY (they each cost a walk of every queue before).
#[test]
fn queue_lists_are_bounded_and_one_at_a_time() {
    let r = RouterProc::start(&[]);
    for q in ["a", "b", "c"] {
        create_queue(
            r.addr,
            &format!(r#"{{"name":"{q}","subscriptions":["{q}"]}}"#),
        );
    }
    let mut raw = Raw::hello(r.addr, "lister");
    let mut b = Vec::new();
    for id in 1..=3 {
        wgm::encode_queue_request(&mut b, id, QueueOp::List, "");
    }
    raw.send(&b);
    let first = raw.next(Duration::from_secs(10)).expect("the list");
    let Got::Other(text) = first else {
        panic!("expected the QUEUE_REPLY, got {first:?}")
    };
    assert!(
        text.contains("QueueReply") && text.contains(r#"\"name\":\"c\""#),
        "{text}"
    );
    for id in 2..=3 {
        match raw.next(Duration::from_secs(10)) {
            Ok(Got::Error {
                code,
                fatal,
                request_id,
                text,
            }) => {
                assert_eq!(
                    (code, fatal, request_id),
                    (ErrorCode::BUSY, false, id),
                    "{text}"
                );
                assert!(text.contains("still unread"), "{text}");
            }
            other => panic!("expected BUSY for request {id}, got {other:?}"),
        }
    }
    // Read: the next LIST is answered in full.
    b.clear();
    wgm::encode_queue_request(&mut b, 4, QueueOp::List, "");
    raw.send(&b);
    let again = raw.next(Duration::from_secs(10)).expect("the list again");
    assert!(
        matches!(&again, Got::Other(t) if t.contains("QueueReply")),
        "{again:?}"
    );

    // More queues than one frame can hold (at least 256 bytes each): refused at once.
    let small = RouterProc::start(&["--max-frame", "4096"]);
    for q in 0..20 {
        create_queue(
            small.addr,
            &format!(r#"{{"name":"q{q}","subscriptions":["t{q}"]}}"#),
        );
    }
    let mut c = Client::connect(small.addr).expect("connect");
    let e = c.queue_request(QueueOp::List, "").unwrap_err();
    assert!(e.to_string().contains("does not fit in one frame"), "{e}");
    c.close().ok();

    // STATS lists the queues too: the reply is cut to fit the router's max_frame and
    // says how many it left out (before, it outgrew the frame: a client with the
    // router's max_frame failed with "frame length ... outside the allowed range").
    let opts = tickwire_client::ClientOptions {
        max_frame: 4096,
        ..tickwire_client::ClientOptions::named("stats-reader")
    };
    let mut c = Client::connect_with(small.addr, opts).expect("connect");
    let doc: serde_json::Value =
        serde_json::from_str(&c.stats_json().expect("a STATS reply of at most max_frame"))
            .expect("stats JSON");
    let shown = doc["guaranteed"]["queues"]
        .as_array()
        .expect("queues")
        .len() as u64;
    let omitted = doc["guaranteed"]["queues_omitted"]
        .as_u64()
        .expect("queues_omitted");
    assert!(omitted > 0, "20 queues do not fit in 4096 bytes: {doc}");
    assert_eq!(shown + omitted, 20, "{doc}");
    c.close().ok();
}

/// A STATS reply lists at most 1,000 queues (the first by name) whatever fits, and
/// says how many it left out: its cost on the router's loop stays bounded however
/// many queues there are (with 10,000, four clients asking one after another held the
/// router for 2.6 s at a time).
#[test]
fn stats_list_at_most_a_thousand_queues_and_count_the_rest() {
    let r = RouterProc::start(&[]);
    let mut c = Client::connect(r.addr).expect("connect");
    for q in 0..1_005 {
        c.queue_request(
            QueueOp::Create,
            &format!(r#"{{"name":"q{q:04}","subscriptions":["t{q}"]}}"#),
        )
        .expect("create queue");
    }
    let doc: serde_json::Value = serde_json::from_str(&c.stats_json().expect("stats")).unwrap();
    let queues = doc["guaranteed"]["queues"].as_array().expect("queues");
    assert_eq!(queues.len(), 1_000);
    assert_eq!(queues[0]["name"], "q0000");
    assert_eq!(queues[999]["name"], "q0999");
    assert_eq!(doc["guaranteed"]["queues_omitted"], 5);
    c.close().ok();
}

/// A guaranteed PUBLISH of exactly `max_frame` bytes is accepted, and its DELIVER (the
/// stored message plus 16 bytes of binding, delivery count and message id) reaches a
/// consumer whose own `max_frame` is the router's: router frames may exceed `max_frame`
/// by `frame::ROUTER_FRAME_OVERHEAD` bytes (docs/protocol.md, "Frame size"). Before, the
/// client accepted only 8 bytes over and failed every delivery of such a message.
#[test]
fn a_guaranteed_message_of_max_frame_bytes_reaches_a_consumer_with_the_same_max_frame() {
    let r = RouterProc::start(&["--max-frame", "4096"]);
    create_queue(r.addr, r#"{"name":"big","subscriptions":["big"]}"#);
    let opts = || tickwire_client::ClientOptions {
        max_frame: 4096,
        ..tickwire_client::ClientOptions::named("max-frame-test")
    };
    let mut p = Client::connect_with(r.addr, opts()).expect("connect");
    p.open_publisher("max-frame-publisher", 0)
        .expect("PUB_OPEN");
    // HEADER (8) + SEQ (8) + topic + payload = 4096: the largest PUBLISH the router takes.
    let payload = vec![7u8; 4096 - 8 - 8 - "big".len()];
    let outcome = p.publish_guaranteed_wait("big", &payload).expect("publish");
    assert!(
        matches!(outcome, tickwire_client::Outcome::Acked),
        "{outcome:?}"
    );
    let mut c = Client::connect_with(r.addr, opts()).expect("connect");
    c.bind("big", 8, Start::Queue).expect("bind");
    let mut got = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.is_none() {
        c.poll_events(Wait::Timeout(Duration::from_millis(50)), |e| {
            if let Event::Delivery(d) = e {
                got = Some(d.payload.len());
            }
        })
        .expect("a delivery of max_frame bytes decodes");
        assert!(Instant::now() < deadline, "no delivery");
    }
    assert_eq!(got, Some(payload.len()));
}

/// Regression (a create that starts in the past filled its queue in one router turn):
/// the fill goes on in steps and the create is answered when it is done; the queue then
/// holds every retained message it matches (not those before its start), which a
/// consumer takes, and STATS shows no create still pending.
#[test]
fn a_queue_created_from_the_beginning_over_many_retained_messages_is_filled_and_consumed() {
    let r = RouterProc::start(&[]);
    let a = r.addr_str();
    let t = Duration::from_secs(120);
    let (st, out, err) = run_cli(
        &["queue", "create", "keep", "--sub", "r/>", "--router", &a],
        t,
    );
    assert!(st.success(), "{out}{err}");
    // Many more than one step of the fill (1,024 at the create, 8,192 per tick).
    let n = 40_000u64;
    for topic in ["r/x", "r/y/z"] {
        let count = (n / 2).to_string();
        let (st, out, err) = run_cli(
            &[
                "pub",
                "--guaranteed",
                topic,
                "--count",
                &count,
                "--rate",
                "0",
                "--router",
                &a,
            ],
            t,
        );
        assert!(st.success(), "{out}{err}");
    }
    // `r/*` matches r/x (the first half), not r/y/z.
    let (st, out, err) = run_cli(
        &[
            "queue",
            "create",
            "late",
            "--sub",
            "r/*",
            "--start",
            "beginning",
            "--timeout",
            "100s",
            "--router",
            &a,
        ],
        t,
    );
    assert!(st.success(), "{out}{err}");
    assert!(out.contains("queue late created"), "{out}{err}");
    let (st, out, err) = run_cli(
        &["queue", "show", "late", "--print-json", "--router", &a],
        t,
    );
    assert!(st.success(), "{out}{err}");
    let q: serde_json::Value = serde_json::from_str(&out).expect("queue show JSON");
    assert_eq!(q["depth"], n / 2, "{q}");
    assert_eq!(q["definition"]["first_message_id"], n + 1, "{q}");
    let doc = common::stats_json(&a);
    assert_eq!(doc["guaranteed"]["pending_creates"], serde_json::json!([]));
    // A consumer takes them all, in order.
    let mut c = Client::connect(r.addr).expect("connect");
    let b = c.bind("late", 1024, Start::Queue).expect("bind");
    let mut ids = Vec::new();
    let deadline = Instant::now() + t;
    while (ids.len() as u64) < n / 2 {
        assert!(
            Instant::now() < deadline,
            "{} of {} delivered",
            ids.len(),
            n / 2
        );
        let mut got = Vec::new();
        c.poll_events(Wait::Timeout(Duration::from_millis(50)), |e| {
            if let Event::Delivery(d) = e {
                assert_eq!(d.topic, b"r/x");
                got.push(d.msg_id);
            }
        })
        .expect("poll");
        for &id in &got {
            c.ack(b.id, id).expect("ack");
        }
        ids.extend(got);
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in id order");
    assert_eq!(ids.first(), Some(&1));
    c.close().ok();
}

/// How `sub --queue` is ended in [`sub_queue_after_the_router_is_killed`].
#[derive(Clone, Copy, Debug)]
enum QueueEnd {
    /// `--give-up-after 2s`: exit 1 once the router stays away that long.
    GiveUp,
    /// Ctrl-C while it waits for the router: exit 0 at once.
    Interrupt,
    /// `--no-reconnect`: exit 0 at the loss.
    NoReconnect,
}

/// `sub --queue` bound to a queue with one message, then the router stopped: returns
/// the exit status and standard error. The wait is bounded by `wait_child` (it failed
/// only after the default 60 s, and a Ctrl-C did not shorten it).
fn sub_queue_after_the_router_is_killed(end: QueueEnd) -> (std::process::ExitStatus, String) {
    let r = RouterProc::start(&[]);
    let a = r.addr_str();
    let t = Duration::from_secs(30);
    let (st, out, err) = run_cli(
        &[
            "queue", "create", "orders", "--sub", "orders/>", "--router", &a,
        ],
        t,
    );
    assert!(st.success(), "{out}{err}");
    let (st, out, err) = run_cli(
        &["pub", "--guaranteed", "orders/1", "first", "--router", &a],
        t,
    );
    assert!(st.success(), "{out}{err}");
    let mut args = vec!["sub", "--queue", "orders", "--router", &a];
    match end {
        QueueEnd::GiveUp => args.extend(["--give-up-after", "2s"]),
        QueueEnd::Interrupt => {}
        QueueEnd::NoReconnect => args.push("--no-reconnect"),
    }
    let mut sub = common::cli(&args).spawn().unwrap();
    // Bound once the message is printed.
    // Kept open to the end: a closed pipe would end the command on its own.
    let mut stdout = BufReader::new(sub.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("orders/1 first"), "{line}");
    r.terminate();
    let mut stderr = BufReader::new(sub.stderr.take().unwrap());
    let mut said = String::new();
    if let QueueEnd::Interrupt = end {
        // Stopped while it waits for the router, not before it noticed the loss.
        while !said.contains("disconnected") {
            assert!(stderr.read_line(&mut said).unwrap() > 0, "{said}");
        }
        common::interrupt(&sub);
    }
    let st = common::wait_child(&mut sub, Duration::from_secs(20), "sub --queue");
    std::io::Read::read_to_string(&mut stderr, &mut said).unwrap();
    drop(stdout);
    (st, said)
}

#[test]
fn sub_queue_reports_a_lost_router_and_honours_give_up_after() {
    let (st, err) = sub_queue_after_the_router_is_killed(QueueEnd::GiveUp);
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(
        err.contains("disconnected: ") && err.contains("; reconnecting"),
        "{err}"
    );
    assert!(
        err.contains("gave up: the router could not be reached again for 2s (--give-up-after)"),
        "{err}"
    );
}

#[test]
fn sub_queue_stops_at_once_on_ctrl_c_while_reconnecting() {
    let (st, err) = sub_queue_after_the_router_is_killed(QueueEnd::Interrupt);
    assert_eq!(st.code(), Some(0), "{err}");
    assert!(err.contains("stopping"), "{err}");
    assert!(err.contains("1 message"), "the summary: {err}");
}

#[test]
fn sub_queue_no_reconnect_exits_at_the_loss() {
    let (st, err) = sub_queue_after_the_router_is_killed(QueueEnd::NoReconnect);
    // An error, as for `sub` on a topic: the summary, then the cause (status 1).
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("(--no-reconnect)"), "{err}");
    assert!(!err.contains("reconnecting"), "{err}");
}

/// Regression (new-user pass): `sub --queue q --count 5` took a window of 64, so at
/// its exit up to 64 messages it never printed went back to the queue, and the next
/// consumer got them flagged "redelivered". Its window is now its count: at most that
/// many come back (each acknowledgement lets the router send one more; the protocol
/// has no way to shrink a window).
#[test]
fn sub_queue_count_takes_a_window_no_larger_than_its_count() {
    let r = RouterProc::start(&[]);
    let a = r.addr_str();
    fills_queue_with(&a, 100);
    let (st, out, err) = run_cli(
        &["sub", "--queue", "fills", "--count", "5", "--router", &a],
        Duration::from_secs(60),
    );
    assert!(st.success(), "{out}{err}");
    assert_eq!(
        out.lines().filter(|l| l.contains("fills/IBM")).count(),
        5,
        "{out}"
    );
    let q = queue_show(&a, "fills");
    assert_eq!(q["acked"].as_u64(), Some(5), "{q}");
    let delivered = q["delivered"].as_u64().expect("delivered");
    assert!(
        delivered <= 10,
        "at most a window of 5 beyond the 5 printed (69 with a window of 64): {q}"
    );
    assert_eq!(queue_depth(r.addr, "fills"), 95);
}

/// Demanding-user pass: `sub --queue q | head -5` acknowledged every message it wrote
/// into the pipe, read or not. Into a pipe a message is now acknowledged once the
/// reader has taken it out of the pipe: a reader that takes nothing and goes away
/// leaves every message in the queue, and the command says so.
#[test]
fn sub_queue_into_a_pipe_acknowledges_only_what_its_reader_took() {
    let r = RouterProc::start(&[]);
    let a = r.addr_str();
    fills_queue_with(&a, 10);
    let mut sub = Command::new(common::BIN)
        .args(["sub", "--queue", "fills", "--router", &a])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sub --queue");
    // All ten written into the pipe (the queue shows them delivered), none read.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let q = queue_show(&a, "fills");
        if q["delivered"].as_u64() == Some(10) {
            break;
        }
        assert!(Instant::now() < deadline, "never delivered: {q}");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(queue_show(&a, "fills")["acked"].as_u64(), Some(0));
    // Five lines taken out of the pipe, one read at a time (as a reader that stops
    // after five): those five are acknowledged, the rest are not.
    let mut out = sub.stdout.take().expect("stdout");
    let mut taken = Vec::new();
    let mut byte = [0u8; 1];
    while taken.iter().filter(|&&b| b == b'\n').count() < 5 {
        assert_eq!(std::io::Read::read(&mut out, &mut byte).unwrap(), 1);
        taken.push(byte[0]);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while queue_show(&a, "fills")["acked"].as_u64() != Some(5) {
        assert!(Instant::now() < deadline, "{}", queue_show(&a, "fills"));
        std::thread::sleep(Duration::from_millis(20));
    }
    // The reader goes away: the command ends (status 0) and says what it left.
    drop(out);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = sub.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "sub --queue outlived its reader");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut sub.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    assert!(
        err.contains("standard output closed by its reader: 5 messages written and not read"),
        "{err}"
    );
    let q = queue_show(&a, "fills");
    assert_eq!(
        (q["acked"].as_u64(), q["depth"].as_u64()),
        (Some(5), Some(5)),
        "{q}"
    );
}

/// Review: held in the pipe until read, a slow reader's messages outlived the queue's
/// ack timeout: the queue handed them on again (the reader saw them twice) and
/// dead-lettered those it had read. A message now waits there unacknowledged at most
/// half the ack timeout.
#[test]
fn sub_queue_into_a_slow_pipe_reader_causes_no_redelivery() {
    let r = RouterProc::start(&[]);
    let a = r.addr_str();
    let t = Duration::from_secs(30);
    create_timed_queue(&a, "slow", "1s", "1");
    publish_guaranteed(&a, "slow/x", 20);
    let mut sub = Command::new(common::BIN)
        .args(["sub", "--queue", "slow", "--count", "20", "--router", &a])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sub --queue");
    // A reader taking one line per 100 ms, a byte at a time (as `while read`): 2 s for
    // the 20, twice the ack timeout.
    let mut out = sub.stdout.take().expect("stdout");
    let mut lines = 0;
    let mut byte = [0u8; 1];
    while lines < 20 {
        assert_eq!(std::io::Read::read(&mut out, &mut byte).unwrap(), 1);
        if byte[0] == b'\n' {
            lines += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let status = common::wait_child(&mut sub, t, "sub --queue --count 20");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut sub.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    let q = queue_show(&a, "slow");
    assert_eq!(
        (
            q["acked"].as_u64(),
            q["redelivered"].as_u64(),
            q["dead_lettered"].as_u64()
        ),
        (Some(20), Some(0), Some(0)),
        "{q}\n{err}"
    );
}

/// Demanding-user pass: a consumer stopped past its messages' ack timeout printed
/// and "acknowledged" them when it went on, while the router had already handed them
/// on (here: to the dead-letter queue); nothing said so. It now warns, and the
/// summary counts the acknowledgements refused as too late.
#[test]
fn sub_queue_says_when_its_acknowledgements_came_too_late() {
    let r = RouterProc::start(&[]);
    let a = r.addr_str();
    let t = Duration::from_secs(30);
    create_timed_queue(&a, "late", "200ms", "0");
    let mut sub = Command::new(common::BIN)
        .args([
            "sub", "--queue", "late", "--quiet", "--count", "3", "--router", &a,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sub --queue");
    let deadline = Instant::now() + t;
    while queue_show(&a, "late")["consumers"].as_u64() != Some(1) {
        assert!(Instant::now() < deadline, "the consumer never bound");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Frozen while the messages arrive and their ack timeout passes.
    common::signal(sub.id(), "STOP");
    publish_guaranteed(&a, "late/x", 3);
    let deadline = Instant::now() + t;
    while queue_show(&a, "late")["dead_lettered"].as_u64() != Some(3) {
        assert!(Instant::now() < deadline, "{}", queue_show(&a, "late"));
        std::thread::sleep(Duration::from_millis(50));
    }
    common::signal(sub.id(), "CONT");
    let status = common::wait_child(&mut sub, t, "sub --queue after SIGCONT");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut sub.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    assert!(
        err.contains("warning: the router no longer held a message this consumer acknowledged")
            && err.contains("came too late"),
        "{err}"
    );
}

/// New-user pass: an exclusive queue's standby said it was waiting, then took over
/// and printed messages without a word. It now says when it became the active one.
#[test]
fn an_exclusive_standby_says_when_it_takes_over() {
    let r = RouterProc::start(&[]);
    let a = r.addr_str();
    let t = Duration::from_secs(30);
    let (st, out, err) = run_cli(
        &[
            "queue",
            "create",
            "exq",
            "--sub",
            "exq/>",
            "--exclusive",
            "--router",
            &a,
        ],
        t,
    );
    assert!(st.success(), "{out}{err}");
    let spawn = |count: &str| {
        Command::new(common::BIN)
            .args([
                "sub", "--queue", "exq", "--quiet", "--count", count, "--router", &a,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sub --queue")
    };
    let mut active = spawn("1000");
    let deadline = Instant::now() + t;
    while queue_show(&a, "exq")["consumers"].as_u64() != Some(1) {
        assert!(Instant::now() < deadline, "the first consumer never bound");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut standby = spawn("2");
    let deadline = Instant::now() + t;
    while queue_show(&a, "exq")["consumers"].as_u64() != Some(2) {
        assert!(Instant::now() < deadline, "the standby never bound");
        std::thread::sleep(Duration::from_millis(20));
    }
    active.kill().unwrap();
    active.wait().unwrap();
    publish_guaranteed(&a, "exq/x", 2);
    let status = common::wait_child(&mut standby, t, "the standby");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut standby.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    let waiting = err
        .find("waiting as a standby")
        .unwrap_or_else(|| panic!("{err}"));
    let took = err
        .find("the active consumer went; this one is active now")
        .unwrap_or_else(|| panic!("{err}"));
    assert!(waiting < took, "{err}");
}

/// Demanding-user pass: `queue delete` said nothing of what went with the queue
/// (`purge` says how many messages it dropped).
#[test]
fn queue_delete_says_what_it_dropped() {
    let r = RouterProc::start(&[]);
    let a = r.addr_str();
    fills_queue_with(&a, 3);
    let (st, out, err) = run_cli(
        &["queue", "delete", "fills", "--router", &a],
        Duration::from_secs(30),
    );
    assert!(st.success(), "{out}{err}");
    assert!(
        out.contains("queue fills deleted: 3 messages dropped"),
        "{out}"
    );
}

/// Creates queue `name` (on `name/>`) through the CLI with an ack timeout and a
/// redelivery limit.
fn create_timed_queue(router: &str, name: &str, ack_timeout: &str, max_redeliveries: &str) {
    let sub = format!("{name}/>");
    let (st, out, err) = run_cli(
        &[
            "queue",
            "create",
            name,
            "--sub",
            &sub,
            "--ack-timeout",
            ack_timeout,
            "--max-redeliveries",
            max_redeliveries,
            "--router",
            router,
        ],
        Duration::from_secs(60),
    );
    assert!(st.success(), "{out}{err}");
}

/// Publishes `n` guaranteed messages to `topic` with `pub --guaranteed`, every one
/// acknowledged.
fn publish_guaranteed(router: &str, topic: &str, n: u64) {
    let count = n.to_string();
    let (st, out, err) = run_cli(
        &[
            "pub",
            "--guaranteed",
            topic,
            "m",
            "--count",
            &count,
            "--rate",
            "0",
            "--router",
            router,
        ],
        Duration::from_secs(60),
    );
    assert!(st.success(), "{out}{err}");
    assert!(
        format!("{out}{err}").contains(&format!("{n} acknowledged")),
        "{out}{err}"
    );
}

/// Creates queue `fills` (on `fills/>`) through the CLI and publishes `n` guaranteed
/// messages to `fills/IBM` with `pub --guaranteed`, every one acknowledged.
fn fills_queue_with(router: &str, n: u64) {
    let t = Duration::from_secs(60);
    let (st, out, err) = run_cli(
        &[
            "queue", "create", "fills", "--sub", "fills/>", "--router", router,
        ],
        t,
    );
    assert!(st.success(), "{out}{err}");
    publish_guaranteed(router, "fills/IBM", n);
}

/// `queue show NAME --print-json` through the CLI.
fn queue_show(router: &str, name: &str) -> serde_json::Value {
    let (st, out, err) = run_cli(
        &["queue", "show", name, "--print-json", "--router", router],
        Duration::from_secs(60),
    );
    assert!(st.success(), "{out}{err}");
    serde_json::from_str(&out).expect("queue show JSON")
}

/// Messages stored in queue `name`, as `queue show` counts them.
fn queue_depth(addr: SocketAddr, name: &str) -> u64 {
    let mut c = Client::connect(addr).expect("connect");
    let show: serde_json::Value =
        serde_json::from_str(&c.queue_request(QueueOp::Show, name).expect("show")).expect("json");
    c.close().ok();
    show["depth"].as_u64().expect("depth")
}

/// Regression: `sleep 8 | tickwire pub orders/new --stdin --guaranteed` ignored Ctrl-C
/// (it said "stopping: waiting for the answers ..." and then blocked until its input
/// ended, then exited 0). It now stops reading at once, waits for the answers, prints
/// the summary and exits 130, as `pub --count` does.
#[test]
fn regression_ctrl_c_stops_pub_stdin_guaranteed_while_its_input_is_quiet() {
    let r = RouterProc::start(&[]);
    create_queue(r.addr, r#"{"name":"orders","subscriptions":["orders/>"]}"#);
    let a = r.addr_str();
    let mut child = common::cli(&[
        "pub",
        "--router",
        &a,
        "orders/new",
        "--stdin",
        "--guaranteed",
    ])
    .stdin(Stdio::piped())
    .spawn()
    .expect("spawn pub --stdin --guaranteed");
    let mut input = child.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut input, b"buy 100 AAPL\n").unwrap();
    // Stored (and so acknowledged): the line was read and published.
    let deadline = Instant::now() + Duration::from_secs(20);
    while queue_depth(r.addr, "orders") < 1 {
        assert!(Instant::now() < deadline, "the line was never stored");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Standard input stays open and quiet, as `sleep 8 |` keeps it.
    common::interrupt(&child);
    let st = common::wait_child(
        &mut child,
        Duration::from_secs(20),
        "pub --stdin --guaranteed after Ctrl-C, its input open",
    );
    drop(input);
    let (_, err) = common::take_output(&mut child);
    assert_eq!(st.code(), Some(130), "{err}");
    assert!(
        err.contains("1 published, 1 acknowledged, 0 refused, 0 unanswered"),
        "{err}"
    );
    assert!(
        err.contains(
            "stopped (Ctrl-C): published 1 message to orders/new (standard input not read to its end)"
        ),
        "{err}"
    );
}

/// A router restarted with a smaller --max-frame than the messages it stored refuses
/// to start, saying which --max-frame reads them, and cuts nothing: started as before,
/// it has them all (hostile-input pass: the restart cut three acknowledged messages as
/// a "torn tail").
#[test]
fn a_smaller_max_frame_at_a_restart_refuses_to_start_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, router) = durable_with_orders(dir.path());
    let a = router.addr_str();
    let (st, out, err) = run_cli(
        &[
            "pub",
            "--guaranteed",
            "orders/big",
            "--size",
            "300000",
            "--count",
            "3",
            "--router",
            &a,
        ],
        Duration::from_secs(60),
    );
    assert!(st.success(), "{out}{err}");
    router.kill9();
    let data = dir.path().display().to_string();
    let mut small = common::cli(&[
        "router",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--data-dir",
        &data,
        "--max-frame",
        "64KiB",
    ])
    .spawn()
    .expect("spawn router");
    let st = common::wait_child(
        &mut small,
        Duration::from_secs(30),
        "router --max-frame 64KiB",
    );
    let (_, err) = common::take_output(&mut small);
    assert!(!st.success(), "{err}");
    assert!(
        err.contains("start it with --max-frame") && err.contains("nothing was cut"),
        "{err}"
    );
    let router = durable(port, dir.path(), "fsync");
    assert_eq!(queue_depth(router.addr, "orders"), 3);
}

/// Appends `records` to the spool in `dir` with the spool's own writer (as a forger
/// with write access to the data directory could), and waits until they are durable.
fn append_to_spool(dir: &Path, records: &[Vec<u8>]) {
    let cfg = tickwire_spool::Config::new(dir.join("spool"));
    let (spool, _) = tickwire_spool::Spool::open(cfg, |_, _| {}).expect("open spool");
    let mut app = spool.start(Box::new(|| {})).expect("start spool");
    let mut last = 0;
    for r in records {
        last = app.append(r).expect("append").0;
    }
    app.flush();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match app.poll_durable() {
            Some(tickwire_spool::Durable::Through(l)) if l.0 >= last => break,
            Some(tickwire_spool::Durable::Failed { .. }) => panic!("spool write failed"),
            _ => {}
        }
        assert!(Instant::now() < deadline, "records not durable");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A spool holding more than a router holds (forged records: more publisher identities
/// than it remembers, more queues than it keeps) refuses the start with the bound it
/// passes, where it used to take them all in (hostile-input pass: 500,000 identities
/// rewritten by every checkpoint; 7.9 MB of definitions indexed into 2.2 GB).
#[test]
fn a_spool_holding_more_than_a_router_holds_refuses_the_start() {
    use tickwire_router::gm::record::{encode, Record};
    let rec = |r: &Record<'_>| {
        let mut b = Vec::new();
        encode(&mut b, r);
        b
    };
    let start = |dir: &Path| {
        let (st, _, err) = run_cli(
            &[
                "router",
                "--listen",
                &format!("127.0.0.1:{}", free_port()),
                "--data-dir",
                &dir.display().to_string(),
            ],
            Duration::from_secs(60),
        );
        assert!(!st.success(), "{err}");
        err
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let names: Vec<String> = (0..1025).map(|i| format!("forged{i}")).collect();
    let records: Vec<Vec<u8>> = names
        .iter()
        .map(|n| {
            rec(&Record::Publisher {
                hwm: 1,
                identity: n,
            })
        })
        .collect();
    append_to_spool(dir.path(), &records);
    let err = start(dir.path());
    assert!(
        err.contains("cannot recover the spool")
            && err.contains("1025 publisher identities, more than the 1024"),
        "{err}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let defs: Vec<String> = (0..10_002)
        .map(|i| format!(r#"{{"name":"q{i}","subscriptions":["t/{i}"]}}"#))
        .collect();
    let records: Vec<Vec<u8>> = defs
        .iter()
        .map(|d| rec(&Record::QueueDefined { json: d }))
        .collect();
    append_to_spool(dir.path(), &records);
    let err = start(dir.path());
    assert!(
        err.contains("cannot recover the spool")
            && err.contains("defines 10002 queues, more than the 10001"),
        "{err}"
    );
}

/// `sub --queue` across a router restart says when it is back, after how long and how
/// many attempts, as `sub` on a topic does, and its summary counts the reconnection and
/// the time disconnected (new-user pass: "reconnected: bound to queue o1 again" with no
/// figures, and no such summary line).
#[test]
fn sub_queue_says_how_long_a_reconnection_took_and_sums_them_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, router) = durable_with_orders(dir.path());
    let a = router.addr_str();
    let t = Duration::from_secs(30);
    let publish = |body: &str| {
        let (st, out, err) = run_cli(
            &["pub", "--guaranteed", "orders/1", body, "--router", &a],
            t,
        );
        assert!(st.success(), "{out}{err}");
    };
    publish("first");
    let mut sub = common::cli(&["sub", "--queue", "orders", "--router", &a])
        .spawn()
        .unwrap();
    let mut stdout = common::Lines::start(sub.stdout.take().unwrap());
    let mut stderr = common::Lines::start(sub.stderr.take().unwrap());
    stdout.wait_for("orders/1 first", t);
    router.kill9();
    let router = durable(port, dir.path(), "fsync");
    let back = stderr.wait_for("reconnected", t);
    publish("second");
    stdout.wait_for("orders/1 second", t);
    common::interrupt(&sub);
    let st = common::wait_child(&mut sub, Duration::from_secs(20), "sub --queue");
    let said = stderr.rest(t);
    assert!(st.success(), "{said}");
    let attempts = back
        .strip_prefix("reconnected after ")
        .and_then(|rest| rest.split_once(" s ("))
        .and_then(|(_, rest)| rest.split_once(" attempt"))
        .and_then(|(n, _)| n.parse::<u32>().ok());
    assert!(
        attempts.is_some_and(|n| n >= 1) && back.contains("): bound to queue orders again ("),
        "{said}"
    );
    assert!(said.contains("1 reconnection, "), "{said}");
    assert!(said.contains(" s disconnected; "), "{said}");
    drop(router);
}

/// Regression: `pub --guaranteed` said nothing when its connection dropped (only the
/// summary's "N resent after 1 reconnects"), although `pub --help` promised a line for
/// each loss and return. Now it says both as they happen, and the summary's count is
/// in the singular for one.
#[test]
fn regression_pub_guaranteed_tells_each_loss_and_return_of_its_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, router) = durable_with_orders(dir.path());
    let a = router.addr_str();
    let mut child = common::cli(&[
        "pub",
        "--router",
        &a,
        "orders/new",
        "x",
        "--guaranteed",
        "--count",
        "3000",
        "--rate",
        "1000",
    ])
    .spawn()
    .expect("spawn pub --guaranteed");
    let deadline = Instant::now() + Duration::from_secs(20);
    while queue_depth(router.addr, "orders") < 100 {
        assert!(Instant::now() < deadline, "nothing was stored");
        std::thread::sleep(Duration::from_millis(20));
    }
    router.kill9();
    let router = durable(port, dir.path(), "fsync");
    let st = common::wait_child(&mut child, Duration::from_secs(60), "pub --guaranteed");
    let (_, err) = common::take_output(&mut child);
    assert!(st.success(), "{err}");
    let lost = err
        .find("disconnected: ")
        .unwrap_or_else(|| panic!("{err}"));
    let back = err
        .find("reconnected after ")
        .unwrap_or_else(|| panic!("{err}"));
    assert!(lost < back, "{err}");
    assert!(err[lost..].contains("; reconnecting"), "{err}");
    // The return line says how long and how many attempts, as `sub`'s and `pub`'s do.
    let line = err[back..].lines().next().unwrap_or_default();
    let attempts = line
        .split_once(" s (")
        .and_then(|(_, rest)| rest.split_once(" attempt"))
        .and_then(|(n, _)| n.parse::<u32>().ok());
    assert!(
        attempts.is_some_and(|n| n >= 1) && line.contains("): publisher re-opened, "),
        "{line}"
    );
    assert!(err.contains("resent after 1 reconnection;"), "{err}");
    assert!(!err.contains("reconnects"), "{err}");
    // The return line counts what that re-open resent, as the summary does (a new-user
    // pass saw "322 unanswered messages resent" against "342 resent": the line counted
    // what was unanswered when it was printed, later).
    let number_before = |text: &str, words: &str| -> u64 {
        let at = text
            .find(words)
            .unwrap_or_else(|| panic!("{words:?} in {text}"));
        let digits: String = text[..at]
            .trim_end()
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.chars().rev().collect::<String>().parse().unwrap()
    };
    let on_return = if err.contains("1 unanswered message resent") {
        1
    } else {
        number_before(&err, "unanswered messages resent")
    };
    assert_eq!(
        on_return,
        number_before(&err, "resent after 1 reconnection;"),
        "{err}"
    );
    assert!(
        err.contains("3000 published, 3000 acknowledged, 0 refused, 0 unanswered"),
        "{err}"
    );
    drop(router);
}

/// Hostile-input pass: a guaranteed publish numbered 0 was answered PUB_ACK and stored
/// nowhere (the router took it for a resend below the identity's floor), and one
/// numbered 2^64-1 was stored, after which the Rust client numbered its next publish 0
/// (wrapped) and lost it the same way. Both are now refused as malformed, the publish
/// before them kept.
#[test]
fn guaranteed_publishes_numbered_0_or_2_pow_64_minus_1_are_refused_not_acknowledged() {
    let r = RouterProc::start(&[]);
    create_queue(r.addr, r#"{"name":"zq","subscriptions":["zq/>"]}"#);
    for (i, bad) in [0u64, u64::MAX].into_iter().enumerate() {
        let mut raw = Raw::hello(r.addr, "numbering");
        let mut b = Vec::new();
        wgm::encode_pub_open(&mut b, 1, 0, &format!("numbering-{i}"));
        raw.send(&b);
        match raw.next(Duration::from_secs(10)) {
            Ok(Got::Other(f)) if f.starts_with("PubOpened") => {}
            other => panic!("expected PUB_OPENED, got {other:?}"),
        }
        let publish = |seq: u64| {
            let mut b = Vec::new();
            tickwire_wire::frame::encode_publish(
                &mut b,
                "zq/t",
                format!("seq {seq}").as_bytes(),
                tickwire_wire::frame::PublishOptions {
                    seq: Some(seq),
                    publisher_send: None,
                },
                u32::MAX,
            )
            .expect("encode");
            b[5] |= tickwire_wire::frame::flags::GUARANTEED;
            b
        };
        raw.send(&publish(1));
        match raw.next(Duration::from_secs(10)) {
            Ok(Got::Other(f)) if f.starts_with("PubAck") => {}
            other => panic!("expected the PUB_ACK of seq 1, got {other:?}"),
        }
        raw.send(&publish(bad));
        // Neither a PUB_ACK nor anything else first: the fatal error, then the close.
        let text = raw.expect_fatal(ErrorCode::MALFORMED_FRAME);
        assert!(text.contains("from 1 to 2^64-2"), "{text}");
        assert_eq!(queue_depth(r.addr, "zq"), i as u64 + 1, "after seq {bad}");
    }
}

/// New-user pass: `--sync` and `--publish-window` with `--no-guaranteed` were accepted in
/// silence; the router warns that they set nothing.
#[test]
fn spool_settings_without_guaranteed_messaging_are_warned_about() {
    let (_r, log) = RouterProc::start_logged(&[
        "--no-guaranteed",
        "--sync",
        "interval:10ms",
        "--publish-window",
        "7",
    ]);
    let line = log.wait_for(
        &["--sync and --publish-window set nothing: guaranteed messaging is off (--no-guaranteed)"],
        Duration::from_secs(20),
    );
    assert!(line.is_some(), "{}", log.text());
}

/// `tickwire stats` of a router whose config file turned guaranteed messaging off does
/// not claim it was `--no-guaranteed` (new-user pass: it said so, a flag never given).
#[test]
fn stats_of_a_router_without_guaranteed_messaging_names_both_ways_to_turn_it_off() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("router.toml");
    std::fs::write(&config, "[router]\nguaranteed = false\n").unwrap();
    let r = RouterProc::start(&["--config", config.to_str().unwrap()]);
    let (st, out, err) = run_cli(
        &["stats", "--router", &r.addr_str()],
        Duration::from_secs(30),
    );
    assert!(st.success(), "{err}");
    assert!(
        out.contains("guaranteed messaging: off (router started with --no-guaranteed or `guaranteed = false`)"),
        "{out}"
    );
}
