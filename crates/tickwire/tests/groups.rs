//! Shared subscriptions (queue groups) across processes on the real router.

// Tests fail loudly on any unexpected error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{run_cli, Got, Raw, RouterProc};
use tickwire_client::{Client, ErrorCode, Wait};

fn drain(c: &mut Client, into: &mut Vec<u32>, quiet_for: Duration) {
    loop {
        let n = c
            .poll(Wait::Timeout(quiet_for), |m| {
                into.push(std::str::from_utf8(m.payload()).unwrap().parse().unwrap());
            })
            .unwrap();
        if n == 0 {
            return;
        }
    }
}

/// Waits until the router has the subscriptions (a PING round trip from the
/// publisher after the members' ACKs orders nothing across connections, so publish
/// only after every member's subscribe returned: the ACK means installed).
fn publish_range(p: &mut Client, topic: &str, range: std::ops::Range<u32>) {
    for i in range {
        p.publish(topic, i.to_string().as_bytes()).unwrap();
    }
    p.flush().unwrap();
}

/// Routing visits every group matching a topic, so groups are bounded: per client
/// (`--max-shared-subscriptions`) and router-wide (`--max-shared-groups`), refused
/// non-fatally; a client in many matching groups still gets one copy.
#[test]
fn shared_groups_are_bounded_and_a_client_in_many_gets_one_copy() {
    let router = RouterProc::start(&[
        "--no-guaranteed",
        "--max-shared-subscriptions",
        "5",
        "--max-shared-groups",
        "8",
    ]);
    let mut a = Client::connect(router.addr).unwrap();
    for i in 0..5 {
        a.subscribe(&format!("$share/a{i}/t")).unwrap();
    }
    match a.subscribe("$share/a5/t") {
        Err(e @ tickwire_client::Error::Rejected { .. }) => {
            assert!(!e.is_fatal(), "{e}");
            assert!(
                e.to_string().contains("at most 5 shared subscriptions"),
                "{e}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let mut b = Client::connect(router.addr).unwrap();
    for i in 0..3 {
        b.subscribe(&format!("$share/b{i}/t")).unwrap();
    }
    match b.subscribe("$share/b3/t") {
        Err(e @ tickwire_client::Error::Rejected { .. }) => {
            assert!(!e.is_fatal(), "{e}");
            assert!(e.to_string().contains("max_shared_groups"), "{e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Joining an existing group is still allowed.
    b.subscribe("$share/a0/t").unwrap();
    let mut p = Client::connect(router.addr).unwrap();
    publish_range(&mut p, "t", 0..10);
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    drain(&mut a, &mut got_a, Duration::from_millis(300));
    drain(&mut b, &mut got_b, Duration::from_millis(300));
    assert_eq!(got_a, (0..10).collect::<Vec<u32>>(), "a: one copy of each");
    assert_eq!(got_b, (0..10).collect::<Vec<u32>>(), "b: one copy of each");
}

#[test]
fn each_message_goes_to_one_member_round_robin_and_outsiders_get_all() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let mut members: Vec<Client> = (0..3)
        .map(|_| {
            let mut c = Client::connect(router.addr).unwrap();
            c.subscribe_shared("workers", "jobs/>").unwrap();
            c
        })
        .collect();
    let mut outsider = Client::connect(router.addr).unwrap();
    outsider.subscribe("jobs/>").unwrap();
    // Another group on the same pattern gets its own full share.
    let mut other_group = Client::connect(router.addr).unwrap();
    other_group.subscribe_shared("audit", "jobs/>").unwrap();

    let mut p = Client::connect(router.addr).unwrap();
    publish_range(&mut p, "jobs/a", 0..300);

    let mut got: Vec<Vec<u32>> = vec![Vec::new(); 3];
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.iter().map(Vec::len).sum::<usize>() < 300 {
        for (c, g) in members.iter_mut().zip(got.iter_mut()) {
            drain(c, g, Duration::from_millis(20));
        }
        assert!(
            Instant::now() < deadline,
            "group got {:?}",
            got.iter().map(Vec::len).collect::<Vec<_>>()
        );
    }
    // Round robin in join order: member k gets k, k+3, k+6, ...
    for (k, g) in got.iter().enumerate() {
        let want: Vec<u32> = (0..300).filter(|i| i % 3 == k as u32).collect();
        assert_eq!(g, &want, "member {k}");
    }
    let mut all = Vec::new();
    drain(&mut outsider, &mut all, Duration::from_millis(300));
    assert_eq!(all, (0..300).collect::<Vec<_>>());
    let mut audit = Vec::new();
    drain(&mut other_group, &mut audit, Duration::from_millis(300));
    assert_eq!(audit, (0..300).collect::<Vec<_>>());
}

#[test]
fn members_join_and_leave_while_messages_flow_and_none_is_lost_or_doubled() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let mut a = Client::connect(router.addr).unwrap();
    a.subscribe_shared("w", "t").unwrap();
    let mut p = Client::connect(router.addr).unwrap();
    publish_range(&mut p, "t", 0..100);
    let mut b = Client::connect(router.addr).unwrap();
    b.subscribe_shared("w", "t").unwrap();
    publish_range(&mut p, "t", 100..200);
    // a leaves (in order with what it already got), b carries on alone.
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    drain(&mut a, &mut got_a, Duration::from_millis(200));
    a.unsubscribe(&tickwire_client::shared_pattern("w", "t"))
        .unwrap();
    drain(&mut a, &mut got_a, Duration::from_millis(100));
    publish_range(&mut p, "t", 200..300);
    // A member that disconnects leaves too.
    let mut c = Client::connect(router.addr).unwrap();
    c.subscribe_shared("w", "t").unwrap();
    c.close().unwrap();
    publish_range(&mut p, "t", 300..400);
    let deadline = Instant::now() + Duration::from_secs(20);
    while got_a.len() + got_b.len() < 400 {
        drain(&mut b, &mut got_b, Duration::from_millis(50));
        assert!(
            Instant::now() < deadline,
            "a {} b {}",
            got_a.len(),
            got_b.len()
        );
    }
    drain(&mut a, &mut got_a, Duration::from_millis(100));
    let sa: BTreeSet<u32> = got_a.iter().copied().collect();
    let sb: BTreeSet<u32> = got_b.iter().copied().collect();
    assert!(sa.is_disjoint(&sb), "a message went to two members");
    assert_eq!(sa.len() + sb.len(), 400, "a {} b {}", sa.len(), sb.len());
    assert!(
        got_a.iter().all(|&i| i < 200),
        "a got messages after leaving"
    );
    assert!((0..100).all(|i| sa.contains(&i)), "a was alone for 0..100");
    assert!((200..400).all(|i| sb.contains(&i)), "b was alone from 200");
}

#[test]
fn a_member_that_stops_reading_is_cut_off_alone_and_the_others_carry_on() {
    let router = RouterProc::start(&[
        "--no-guaranteed",
        "--egress-limit",
        "256KiB",
        "--max-frame",
        "8KiB",
        "--slow-consumer",
        "disconnect",
    ]);
    let mut stuck = Raw::hello(router.addr, "stuck");
    stuck.subscribe(1, "$share/w/big");
    assert_eq!(stuck.next(Duration::from_secs(5)), Ok(Got::Ack(1)));
    let mut ok = Client::connect(router.addr).unwrap();
    ok.subscribe_shared("w", "big").unwrap();
    let n = 4000u32;
    // The index of the last message the reading member got, plus one: the publisher
    // keeps at most 48 messages (~192 KB, under the 256 KiB limit) ahead of it, so a
    // reader descheduled on a loaded machine is never cut off; the stuck one still is.
    let seen = Arc::new(AtomicU32::new(0));
    let seen_by_reader = seen.clone();
    // The reading member reads on its own thread, as fast as it can.
    let reader = std::thread::spawn(move || {
        let want_last = format!("{} ", n - 1).into_bytes();
        let (mut got, mut done) = (0u32, false);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done {
            ok.poll(Wait::Timeout(Duration::from_millis(50)), |m| {
                got += 1;
                done |= m.payload().starts_with(&want_last);
                let index = m.payload().split(|&b| b == b' ').next();
                if let Some(i) =
                    index.and_then(|i| std::str::from_utf8(i).ok()?.parse::<u32>().ok())
                {
                    seen_by_reader.fetch_max(i + 1, Ordering::Relaxed);
                }
            })
            .unwrap();
            assert!(
                Instant::now() < deadline,
                "the reading member stalled at {got}"
            );
        }
        got
    });
    let mut p = Client::connect(router.addr).unwrap();
    let payload = vec![b'x'; 4000];
    for i in 0..n {
        let mut body = i.to_string().into_bytes();
        body.push(b' ');
        body.extend_from_slice(&payload);
        p.publish("big", &body).unwrap();
        if i % 8 == 0 {
            // Paced so that a reader keeps up; the stuck member cannot.
            p.flush().unwrap();
            std::thread::sleep(Duration::from_micros(500));
            let deadline = Instant::now() + Duration::from_secs(60);
            while i > seen.load(Ordering::Relaxed) + 48 && !reader.is_finished() {
                assert!(Instant::now() < deadline, "the reading member stopped");
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    p.flush().unwrap();
    let got = reader.join().unwrap();
    // The reader got at least its half, and everything after the stuck one was cut off.
    assert!(got >= n / 2, "reader got {got} of {n}");
    assert!(got < n, "the stuck member got nothing at all?");
    // The stuck member: what was queued, then SLOW_CONSUMER.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match stuck.next(Duration::from_secs(5)) {
            Ok(Got::Message { .. }) => {}
            Ok(Got::Error {
                code, fatal: true, ..
            }) => {
                assert_eq!(code, ErrorCode::SLOW_CONSUMER);
                break;
            }
            other => panic!("expected messages then SLOW_CONSUMER, got {other:?}"),
        }
        assert!(Instant::now() < deadline);
    }
}

#[test]
fn tickwire_sub_group_members_share_the_stream() {
    let router = RouterProc::start(&["--no-guaranteed"]);
    let addr = router.addr_str();
    let spawn = || {
        common::cli(&[
            "sub", "--router", &addr, "jobs/>", "--group", "w", "--count", "5",
        ])
        .spawn()
        .unwrap()
    };
    let subs = [spawn(), spawn()];
    // Wait until both members are in (the stats count the group's members).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut stats = Client::connect(router.addr).unwrap();
    loop {
        let doc: serde_json::Value = serde_json::from_str(&stats.stats_json().unwrap()).unwrap();
        let subs_in = doc["clients"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["subscriptions"] == 1)
            .count();
        if subs_in == 2 {
            // The router's total counts the group's members too.
            assert_eq!(doc["router"]["subscriptions"], 2, "{doc}");
            break;
        }
        assert!(Instant::now() < deadline, "members never subscribed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut p = Client::connect(router.addr).unwrap();
    publish_range(&mut p, "jobs/x", 0..10);
    let mut lines = Vec::new();
    for s in subs {
        let out = s.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text.lines().count(), 5, "{text}");
        lines.extend(text.lines().map(str::to_owned));
    }
    lines.sort_by_key(|l| l[7..].parse::<u32>().unwrap());
    let want: Vec<String> = (0..10).map(|i| format!("jobs/x {i}")).collect();
    assert_eq!(lines, want);
    let (st, out, _) = run_cli(&["sub", "--help"], Duration::from_secs(30));
    assert!(st.success() && out.contains("--group"));
}
