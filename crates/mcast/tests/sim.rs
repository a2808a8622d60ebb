//! The protocol cores end to end over a simulated network with a fake clock: a sender,
//! several receivers, loss chosen by the test (proptest), NAKs and retransmissions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;
use tickwire_mcast::packet::{self, Header, Kind, HEADER_LEN};
use tickwire_mcast::{
    Event, MonoNanos, Receiver, ReceiverConfig, Sender, SenderConfig, SenderEvent, SessionId,
};
use tickwire_wire::frame::PublishOptions;

const STEP: u64 = 100_000; // 100 µs of fake time per step

fn sender_addr() -> SocketAddr {
    "127.0.0.1:5000".parse().unwrap()
}

/// What one receiver saw.
#[derive(Debug, Default)]
struct Seen {
    messages: Vec<(u64, Vec<u8>)>,
    gaps: Vec<(u64, u64)>,
    recovered: u64,
}

struct Net {
    now: MonoNanos,
    tx: Sender,
    rx: Vec<Receiver>,
    seen: Vec<Seen>,
    /// Per receiver: which of its next datagrams are lost (true = lost), then none.
    drops: Vec<std::vec::IntoIter<bool>>,
    /// Per receiver: deaf (every datagram lost) while the sender's next message index
    /// is in this range.
    deaf: Vec<std::ops::Range<u64>>,
    sender_events: Vec<SenderEvent>,
}

impl Net {
    fn new(scfg: SenderConfig, receivers: usize, drops: Vec<Vec<bool>>) -> Net {
        let now = MonoNanos(1_000_000_000);
        let rx = (0..receivers)
            .map(|i| {
                let cfg = ReceiverConfig {
                    receiver_id: i as u64 + 1,
                    seed: i as u64 + 7,
                    ..ReceiverConfig::default()
                };
                Receiver::new(cfg, now).unwrap()
            })
            .collect();
        Net {
            now,
            tx: Sender::new(scfg, now).unwrap(),
            rx,
            seen: (0..receivers).map(|_| Seen::default()).collect(),
            drops: drops.into_iter().map(|d| d.into_iter()).collect(),
            deaf: vec![0..0; receivers],
            sender_events: Vec::new(),
        }
    }

    /// Moves every datagram the sender queued to the receivers, and back.
    fn pump(&mut self) {
        while let Some(d) = self.tx.poll_transmit() {
            let d = d.to_vec();
            for (i, rx) in self.rx.iter_mut().enumerate() {
                let lost = self.drops[i].next().unwrap_or(false)
                    || self.deaf[i].contains(&self.tx.next_msg());
                if !lost {
                    rx.handle_datagram(self.now, sender_addr(), &d).unwrap();
                }
            }
        }
        for (i, rx) in self.rx.iter_mut().enumerate() {
            drain(rx, &mut self.seen[i]);
            rx.handle_timer(self.now);
            while let Some((to, d)) = rx.poll_transmit() {
                assert_eq!(to, sender_addr());
                self.tx.handle_nak(self.now, d).unwrap();
            }
            drain(rx, &mut self.seen[i]);
        }
        while let Some(e) = self.tx.poll_event() {
            self.sender_events.push(e);
        }
    }

    fn tick(&mut self) {
        self.now = self.now.add_nanos(STEP);
        self.tx.handle_timer(self.now);
        self.pump();
    }

    fn publish(&mut self, n: u64, batch: usize) {
        for i in 0..n {
            let payload = i.to_le_bytes();
            self.tx
                .publish(self.now, "md/X", &payload, PublishOptions::default())
                .unwrap();
            if (i as usize + 1) % batch == 0 {
                self.tx.flush(self.now);
                self.tick();
            }
        }
        self.tx.flush(self.now);
        self.tick();
    }

    /// Runs the clock until every receiver delivered (or gapped) all `n` messages.
    fn settle(&mut self, n: u64) {
        for _ in 0..200_000 {
            if self.seen.iter().all(|s| accounted(s) == n) {
                return;
            }
            self.tick();
        }
        panic!(
            "not settled: {:?}",
            self.seen.iter().map(accounted).collect::<Vec<_>>()
        );
    }
}

fn accounted(s: &Seen) -> u64 {
    s.messages.len() as u64 + s.gaps.iter().map(|g| g.1).sum::<u64>()
}

fn drain(rx: &mut Receiver, seen: &mut Seen) {
    while let Some(ev) = rx.poll_event() {
        match ev {
            Event::Message { index, msg } => seen.messages.push((index, msg.payload.to_vec())),
            Event::Gap {
                first_msg,
                messages,
                ..
            } => seen.gaps.push((first_msg, messages)),
            Event::Recovered { .. } => seen.recovered += 1,
            Event::Joined { first_msg, .. } => assert_eq!(first_msg, 0),
        }
    }
}

fn assert_all_in_order(seen: &Seen, n: u64) {
    assert!(seen.gaps.is_empty(), "gaps {:?}", seen.gaps);
    assert_eq!(seen.messages.len() as u64, n);
    for (i, (index, payload)) in seen.messages.iter().enumerate() {
        assert_eq!(*index, i as u64);
        assert_eq!(payload[..], (i as u64).to_le_bytes());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any loss pattern, in any receiver, of datagrams the buffer still holds: every
    /// message is delivered, in order, to every receiver; nothing is reported lost.
    #[test]
    fn loss_within_the_buffer_is_always_recovered(
        n in 1u64..400,
        batch in 1usize..8,
        drops in proptest::collection::vec(proptest::collection::vec(proptest::bool::weighted(0.3), 0..300), 3),
    ) {
        let mut net = Net::new(SenderConfig::default(), 3, drops);
        net.publish(n, batch);
        net.settle(n);
        for s in &net.seen {
            assert_all_in_order(s, n);
        }
    }

    /// A receiver deaf for longer than the buffer: the gap is reported with the exact
    /// number of messages lost, and it carries on with every later message in order.
    #[test]
    fn loss_beyond_the_buffer_is_a_counted_gap_and_delivery_goes_on(
        deaf_from in 10u64..50,
        deaf_len in 40u64..120,
        n in 200u64..300,
    ) {
        let cfg = SenderConfig { buffer_datagrams: 16, ..SenderConfig::default() };
        let mut net = Net::new(cfg, 2, vec![vec![], vec![]]);
        net.deaf[1] = deaf_from..deaf_from + deaf_len;
        net.publish(n, 1);
        net.settle(n);
        assert_all_in_order(&net.seen[0], n);
        let s = &net.seen[1];
        prop_assert_eq!(s.gaps.len(), 1);
        let (first, lost) = s.gaps[0];
        prop_assert!(lost > 0);
        let mut want: Vec<u64> = (0..first).collect();
        want.extend(first + lost..n);
        let got: Vec<u64> = s.messages.iter().map(|m| m.0).collect();
        prop_assert_eq!(got, want);
        for (index, payload) in &s.messages {
            prop_assert_eq!(&payload[..], &index.to_le_bytes()[..]);
        }
        prop_assert_eq!(net.rx[1].stats().lost_messages, lost);
    }
}

#[test]
fn one_loss_seen_by_every_receiver_costs_one_retransmission() {
    // Every receiver loses datagram 1 (the sender's own loss, say).
    let drops = vec![vec![false, true]; 8];
    let mut net = Net::new(SenderConfig::default(), 8, drops);
    net.publish(5, 1);
    net.settle(5);
    for s in &net.seen {
        assert_all_in_order(s, 5);
        assert_eq!(s.recovered, 1);
    }
    let st = net.tx.stats();
    assert_eq!(st.retransmitted, 1, "{st:?}");
    assert!(st.naks >= 1);
    assert_eq!(st.naks, 1 + st.nak_suppressed, "{st:?}");
}

#[test]
fn a_heartbeat_reveals_loss_at_the_tail() {
    // The last datagram is lost and nothing follows it but heartbeats.
    let mut net = Net::new(SenderConfig::default(), 1, vec![vec![false, false, true]]);
    net.publish(3, 1);
    assert_eq!(net.seen[0].messages.len(), 2);
    net.settle(3);
    assert_all_in_order(&net.seen[0], 3);
    assert!(net.tx.stats().heartbeats >= 1);
}

#[test]
fn flow_reports_tell_the_sender_how_far_each_receiver_is() {
    let mut net = Net::new(SenderConfig::default(), 2, vec![vec![], vec![]]);
    net.publish(10, 1);
    for _ in 0..2000 {
        net.tick();
    }
    let reports = net.tx.receivers();
    assert_eq!(reports.len(), 2);
    for r in reports {
        assert_eq!((r.expected, r.delivered, r.behind), (10, 10, 0));
    }
}

fn data(session: u32, seq: u64, first_msg: u64, low: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0; HEADER_LEN];
    tickwire_wire::frame::encode_publish(&mut out, "t", payload, PublishOptions::default(), 9999)
        .unwrap();
    packet::write_header(
        &mut out,
        Header {
            kind: Kind::Data,
            flags: 0,
            session,
            count: 1,
            a: seq,
            b: first_msg,
            c: low,
        },
    );
    out
}

fn events(rx: &mut Receiver) -> Vec<String> {
    let mut v = Vec::new();
    while let Some(e) = rx.poll_event() {
        v.push(match e {
            Event::Message { index, msg } => {
                format!("msg {index} {}", String::from_utf8_lossy(msg.payload))
            }
            Event::Gap {
                first_msg,
                messages,
                datagrams,
            } => format!("gap {first_msg}+{messages} ({datagrams} datagrams)"),
            Event::Recovered { seq, .. } => format!("recovered {seq}"),
            Event::Joined { session, first_msg } => format!("joined {session} at {first_msg}"),
        });
    }
    v
}

#[test]
fn a_stray_sender_with_another_session_is_ignored() {
    let now = MonoNanos(1);
    let mut rx = Receiver::new(ReceiverConfig::default(), now).unwrap();
    let a = sender_addr();
    let b: SocketAddr = "127.0.0.1:6000".parse().unwrap();
    rx.handle_datagram(now, a, &data(7, 0, 0, 0, b"a0"))
        .unwrap();
    rx.handle_datagram(now, b, &data(8, 0, 0, 0, b"stray"))
        .unwrap();
    rx.handle_datagram(now, b, &data(7, 1, 1, 0, b"spoof"))
        .unwrap();
    rx.handle_datagram(now, a, &data(7, 1, 1, 0, b"a1"))
        .unwrap();
    assert_eq!(
        events(&mut rx),
        ["joined 00000007 at 0", "msg 0 a0", "msg 1 a1"]
    );
    assert_eq!(rx.stats().strays, 2);
    assert_eq!(rx.session(), Some(SessionId(7)));
}

#[test]
fn a_new_session_after_the_old_one_fell_silent_counts_what_was_missed() {
    // README's multicast tour: a receiver still joined to a finished session ignores
    // the next session's first datagrams for `session_timeout`; switching, it must
    // not pretend they never existed.
    let t0 = MonoNanos(1);
    let mut rx = Receiver::new(ReceiverConfig::default(), t0).unwrap();
    let a = sender_addr();
    rx.handle_datagram(t0, a, &data(7, 0, 0, 0, b"old"))
        .unwrap();
    assert_eq!(events(&mut rx), ["joined 00000007 at 0", "msg 0 old"]);
    // Session 8 starts at once: its datagrams 0..=99 are strays while 7 holds on.
    for seq in 0..100 {
        rx.handle_datagram(t0, a, &data(8, seq, seq, 0, b"early"))
            .unwrap();
    }
    assert_eq!(rx.stats().strays, 100);
    // Past the timeout, datagram 100 (the sender no longer holds below 90) switches.
    let later = t0.add_nanos(3_000_000_000);
    rx.handle_datagram(later, a, &data(8, 100, 100, 90, b"m100"))
        .unwrap();
    assert_eq!(rx.session(), Some(SessionId(8)));
    // The receiver asks for 90..100; the sender answers (retransmissions).
    for seq in 90..100 {
        rx.handle_datagram(later, a, &data(8, seq, seq, 90, b"again"))
            .unwrap();
    }
    let ev = events(&mut rx);
    assert_eq!(ev[0], "joined 00000008 at 0");
    assert!(ev.contains(&"gap 0+90 (0 datagrams)".to_string()), "{ev:?}");
    assert!(ev.contains(&"msg 90 again".to_string()), "{ev:?}");
    assert_eq!(ev.last().map(String::as_str), Some("msg 100 m100"));
    assert_eq!(rx.stats().lost_messages, 90);
}

#[test]
fn a_flow_report_counts_the_adopted_sessions_messages_only() {
    // A receiver that delivered an earlier session's messages reports to the next
    // sender what it delivered of that sender's, not its total since it started.
    let t0 = MonoNanos(1);
    let mut rx = Receiver::new(ReceiverConfig::default(), t0).unwrap();
    let a = sender_addr();
    for seq in 0..3 {
        rx.handle_datagram(t0, a, &data(7, seq, seq, 0, b"old"))
            .unwrap();
    }
    assert_eq!(events(&mut rx).len(), 4, "joined and 3 messages");
    let later = t0.add_nanos(3_000_000_000);
    for seq in 0..5 {
        rx.handle_datagram(later, a, &data(8, seq, seq, 0, b"new"))
            .unwrap();
    }
    assert_eq!(rx.session(), Some(SessionId(8)));
    assert_eq!(events(&mut rx).len(), 6, "joined and 5 messages");
    assert_eq!(rx.stats().delivered, 8);
    rx.handle_close(later);
    let mut reports = Vec::new();
    while let Some((_, d)) = rx.poll_transmit() {
        if let packet::Datagram::Status {
            session,
            expected,
            delivered,
            ..
        } = packet::decode(d).unwrap()
        {
            reports.push((session, expected, delivered));
        }
    }
    assert_eq!(reports, [(8, 5, 5)]);
}

#[test]
fn a_configured_session_refuses_every_other() {
    let now = MonoNanos(1);
    let cfg = ReceiverConfig {
        session: Some(SessionId(9)),
        ..ReceiverConfig::default()
    };
    let mut rx = Receiver::new(cfg, now).unwrap();
    rx.handle_datagram(now, sender_addr(), &data(7, 0, 0, 0, b"x"))
        .unwrap();
    assert!(events(&mut rx).is_empty());
    assert_eq!(rx.stats().strays, 1);
}

/// Hostile-input probe: three consecutive forged datagrams far ahead (from the
/// sender's spoofed address) had been believed while the real stream went on: the
/// receiver counted 10^9 (or ~2^62) datagrams lost and delivered nothing after. A jump
/// now needs the stream silent for `jump_quiet`; the live stream's next datagram
/// discards it, however many forged ones arrive at once.
#[test]
fn forged_datagrams_far_ahead_never_move_a_live_stream() {
    let mut now = MonoNanos(1);
    let mut rx = Receiver::new(ReceiverConfig::default(), now).unwrap();
    let a = sender_addr();
    let mut delivered = 0;
    for i in 0..200u64 {
        now = now.add_nanos(20_000_000);
        rx.handle_datagram(now, a, &data(7, i, i, 0, b"real"))
            .unwrap();
        if i % 10 == 5 {
            for far in [1_000_000_000u64, packet::MAX_SEQ - 100] {
                for k in 0..8 {
                    let d = data(7, far + k, far + k, 0, b"forged");
                    rx.handle_datagram(now.add_nanos(1_000), a, &d).unwrap();
                }
            }
        }
        delivered += events(&mut rx)
            .iter()
            .filter(|e| e.starts_with("msg") && e.ends_with("real"))
            .count();
    }
    assert_eq!(delivered, 200, "every real message, in order");
    assert_eq!(rx.behind(), 0);
}

/// A forged HEARTBEAT of the adopted session (`next`, `next_msg`, low mark `low`).
fn heartbeat(session: u32, next: u64, next_msg: u64, low: u64) -> Vec<u8> {
    let mut out = vec![0; HEADER_LEN];
    packet::write_header(
        &mut out,
        Header {
            kind: Kind::Heartbeat,
            flags: 0,
            session,
            count: 0,
            a: next,
            b: next_msg,
            c: low,
        },
    );
    out
}

/// A hostile-input probe (2026-12-05): 50 spoofed heartbeats, each 60,000 beyond the
/// one before (within `max_jump` of the position the one before had given, its low
/// mark just below its `next`), moved a live 2,000-datagram-a-second stream 30 million
/// ahead at once: the receiver reported the loss and delivered nothing after. Now a
/// skip is taken back when the sender's next datagram shows it inside the range.
#[test]
fn a_chain_of_forged_low_marks_neither_moves_nor_wedges_a_live_stream() {
    let mut now = MonoNanos(1);
    let mut rx = Receiver::new(ReceiverConfig::default(), now).unwrap();
    let a = sender_addr();
    let mut delivered = 0;
    let mut bursts = 0;
    for i in 0..300u64 {
        now = now.add_nanos(20_000_000);
        rx.handle_datagram(now, a, &data(7, i, i, 0, b"real"))
            .unwrap();
        let mut ev = events(&mut rx);
        if i % 10 == 5 {
            bursts += 1;
            for k in 1..=50u64 {
                let next = i + 1 + k * 60_000;
                let hb = heartbeat(7, next, next, next - 1);
                rx.handle_datagram(now.add_nanos(1_000 + k), a, &hb)
                    .unwrap();
            }
        }
        rx.handle_timer(now.add_nanos(10_000_000));
        while rx.poll_transmit().is_some() {}
        ev.extend(events(&mut rx));
        delivered += ev
            .iter()
            .filter(|e| e.starts_with("msg") && e.ends_with("real"))
            .count();
    }
    let st = rx.stats();
    assert_eq!(delivered, 300, "every real message: {st:?}");
    assert_eq!(st.false_skips, bursts, "{st:?}");
    assert_eq!((st.gaps, st.lost_messages), (0, 0), "{st:?}");
    assert_eq!(rx.behind(), 0, "{st:?}");
}

#[test]
fn an_implausible_jump_is_ignored_until_confirmed() {
    let now = MonoNanos(1);
    let cfg = ReceiverConfig {
        hold_datagrams: 64,
        max_jump: 1000,
        confirm: 2,
        ..ReceiverConfig::default()
    };
    let mut rx = Receiver::new(cfg, now).unwrap();
    let a = sender_addr();
    rx.handle_datagram(now, a, &data(7, 0, 0, 0, b"a")).unwrap();
    rx.handle_datagram(now, a, &data(7, 1_000_000, 5, 0, b"far"))
        .unwrap();
    assert_eq!(events(&mut rx), ["joined 00000007 at 0", "msg 0 a"]);
    assert_eq!(rx.stats().implausible, 1);
    assert_eq!(rx.behind(), 0);
    // Two consecutive datagrams agree and the stream shows no life for `jump_quiet`
    // (500 ms) after the first: the jump is real; the range below the sender's low mark
    // is reported lost, and delivery goes on.
    rx.handle_datagram(now, a, &data(7, 2_000_000, 5, 2_000_000, b"j0"))
        .unwrap();
    let now = now.add_nanos(600_000_000);
    rx.handle_datagram(now, a, &data(7, 2_000_001, 6, 2_000_000, b"j1"))
        .unwrap();
    assert_eq!(events(&mut rx), Vec::<String>::new());
    // Datagram 2,000,000 was not believed: it comes back by NAK.
    rx.handle_timer(now.add_nanos(5_000_000));
    let (_, nak) = rx.poll_transmit().unwrap();
    assert_eq!(
        packet::decode(nak).unwrap(),
        packet::Datagram::Nak {
            session: 7,
            from: 2_000_000,
            count: 1,
            receiver: 1
        }
    );
    rx.handle_datagram(now, a, &data(7, 2_000_000, 5, 2_000_000, b"j0"))
        .unwrap();
    assert_eq!(
        events(&mut rx),
        [
            "recovered 2000000",
            "gap 1+4 (1999999 datagrams)",
            "msg 5 j0",
            "msg 6 j1"
        ]
    );
}

#[test]
fn a_hole_filled_before_the_nak_delay_is_not_naked() {
    let now = MonoNanos(1_000_000);
    let cfg = ReceiverConfig {
        nak_delay: Duration::from_millis(5),
        ..ReceiverConfig::default()
    };
    let mut rx = Receiver::new(cfg, now).unwrap();
    let a = sender_addr();
    rx.handle_datagram(now, a, &data(7, 0, 0, 0, b"0")).unwrap();
    rx.handle_datagram(now, a, &data(7, 2, 2, 0, b"2")).unwrap();
    // Another receiver's NAK brought the retransmission: ours is suppressed.
    rx.handle_datagram(now.add_nanos(10), a, &data(7, 1, 1, 0, b"1"))
        .unwrap();
    rx.handle_timer(now.add_nanos(6_000_000));
    assert_eq!(rx.stats().naks_sent, 0);
    assert_eq!(
        events(&mut rx),
        [
            "joined 00000007 at 0",
            "recovered 1",
            "msg 0 0",
            "msg 1 1",
            "msg 2 2"
        ]
    );
}

#[test]
fn hostile_datagrams_are_counted_and_never_break_the_stream() {
    let now = MonoNanos(1);
    let mut rx = Receiver::new(ReceiverConfig::default(), now).unwrap();
    let a = sender_addr();
    rx.handle_datagram(now, a, &data(7, 0, 0, 0, b"0")).unwrap();
    let mut bad = data(7, 1, 1, 0, b"1");
    bad[12] = 3; // claims 3 frames
    assert!(rx.handle_datagram(now, a, &bad).is_err());
    assert!(rx.handle_datagram(now, a, b"junk").is_err());
    rx.handle_datagram(now, a, &data(7, 1, 1, 0, b"1")).unwrap();
    assert_eq!(
        events(&mut rx),
        ["joined 00000007 at 0", "msg 0 0", "msg 1 1"]
    );
    assert_eq!(rx.stats().malformed, 2);
}

#[test]
fn retransmissions_are_rate_limited_and_lingered() {
    let now = MonoNanos(1_000_000_000);
    let cfg = SenderConfig {
        retransmit_burst: 3000,
        retransmit_rate: 1000,
        ..SenderConfig::default()
    };
    let mut tx = Sender::new(cfg, now).unwrap();
    for i in 0..10u64 {
        tx.publish(now, "t", &[0; 1000], PublishOptions::default())
            .unwrap();
        tx.flush(now);
        let _ = i;
    }
    while tx.poll_transmit().is_some() {}
    let mut nak = [0u8; HEADER_LEN];
    packet::write_header(
        &mut nak,
        Header {
            kind: Kind::Nak,
            flags: 0,
            session: tx.session().0,
            count: 10,
            a: 0,
            b: 1,
            c: 0,
        },
    );
    let later = now.add_nanos(10_000_000);
    tx.handle_nak(later, &nak).unwrap();
    let mut n = 0;
    while tx.poll_transmit().is_some() {
        n += 1;
    }
    // A 3000-byte burst holds two 1000-byte datagrams with their headers.
    assert_eq!(n, 2);
    assert_eq!(tx.stats().nak_rate_limited, 8);
    // Asked again at once: the two just sent linger, the rest are still over budget.
    tx.handle_nak(later, &nak).unwrap();
    assert_eq!(tx.stats().nak_suppressed, 2);
}

/// Found by fuzzing: a receiver that never heard a sender kept a deadline in the past
/// after its first report period, so a driver waiting for it spun.
#[test]
fn a_receiver_waiting_for_a_sender_keeps_its_deadline_in_the_future() {
    let now = MonoNanos(1);
    let mut rx = Receiver::new(ReceiverConfig::default(), now).unwrap();
    let later = now.add_nanos(5_000_000_000);
    rx.handle_timer(later);
    assert!(rx.poll_timeout() > later);
    assert!(rx.poll_transmit().is_none());
}

/// Found by fuzzing: a DATA datagram with sequence 2^64 - 1 overflowed `seq + 1`.
#[test]
fn sequences_near_the_top_of_u64_are_refused_not_overflowed() {
    let now = MonoNanos(1);
    let mut rx = Receiver::new(ReceiverConfig::default(), now).unwrap();
    let d = data(7, u64::MAX, 0, 0, b"x");
    assert!(rx.handle_datagram(now, sender_addr(), &d).is_err());
    assert_eq!(rx.stats().malformed, 1);
    assert!(rx.poll_event().is_none());
}

/// The last sequence a datagram may carry is `MAX_SEQ - 1`; a receiver that got it
/// expects `MAX_SEQ` next, and its flow report (STATUS) and a sender's HEARTBEAT after
/// it carry that position: they decode (found by the `mcast_input` fuzz target: the
/// receiver's STATUS was refused as "sequence out of range").
#[test]
fn the_position_after_the_last_sequence_is_reported_and_decodes() {
    let mut now = MonoNanos(1);
    let mut rx = Receiver::new(ReceiverConfig::default(), now).unwrap();
    let last = packet::MAX_SEQ - 1;
    rx.handle_datagram(now, sender_addr(), &data(7, last, 5, last, b"x"))
        .unwrap();
    assert_eq!(events(&mut rx), ["joined 00000007 at 5", "msg 5 x"]);
    let mut hb = [0u8; HEADER_LEN];
    packet::write_header(
        &mut hb,
        Header {
            kind: Kind::Heartbeat,
            flags: 0,
            session: 7,
            count: 0,
            a: packet::MAX_SEQ,
            b: 6,
            c: last,
        },
    );
    assert!(
        packet::decode(&hb).is_ok(),
        "a heartbeat after the last sequence"
    );
    rx.handle_datagram(now, sender_addr(), &hb).unwrap();
    let mut sent = 0;
    for _ in 0..3 {
        now = rx.poll_timeout().max(now.add_nanos(1));
        rx.handle_timer(now);
        while let Some((_, d)) = rx.poll_transmit() {
            let d = packet::decode(d).expect("the receiver sends what decodes");
            if let packet::Datagram::Status { expected, .. } = d {
                assert_eq!(expected, packet::MAX_SEQ);
            }
            sent += 1;
        }
    }
    assert!(sent > 0, "a flow report was sent");
    assert_eq!(rx.stats().malformed, 0);
}

#[test]
fn a_start_position_from_the_router_is_received_from_there() {
    // The router announced (datagram 3, message 3); the first datagram heard is 5.
    let now = MonoNanos(1);
    let cfg = ReceiverConfig {
        session: Some(SessionId(7)),
        start: Some((3, 3)),
        ..ReceiverConfig::default()
    };
    let mut rx = Receiver::new(cfg, now).unwrap();
    let a = sender_addr();
    rx.handle_datagram(now, a, &data(7, 5, 5, 0, b"m5"))
        .unwrap();
    assert_eq!(events(&mut rx), ["joined 00000007 at 3"]);
    // Datagrams 3 and 4 are asked for, not skipped.
    rx.handle_timer(MonoNanos(now.0 + 2_000_000));
    let naks: Vec<_> = std::iter::from_fn(|| rx.poll_transmit().map(|(_, d)| d.to_vec()))
        .filter(|d| d[5] == Kind::Nak as u8)
        .collect();
    assert_eq!(naks.len(), 1, "one NAK for the run 3..=4");
    rx.handle_datagram(now, a, &data(7, 3, 3, 0, b"m3"))
        .unwrap();
    rx.handle_datagram(now, a, &data(7, 4, 4, 0, b"m4"))
        .unwrap();
    let got = events(&mut rx).join(", ");
    assert_eq!(
        got,
        "recovered 3, recovered 4, msg 3 m3, msg 4 m4, msg 5 m5"
    );
}

#[test]
fn a_start_position_the_sender_no_longer_holds_is_a_counted_gap() {
    let now = MonoNanos(1);
    let cfg = ReceiverConfig {
        start: Some((1, 1)),
        ..ReceiverConfig::default()
    };
    let mut rx = Receiver::new(cfg, now).unwrap();
    // Low mark 4: datagrams 1..=3 are gone.
    rx.handle_datagram(now, sender_addr(), &data(7, 4, 4, 4, b"m4"))
        .unwrap();
    assert_eq!(
        events(&mut rx),
        ["joined 00000007 at 1", "gap 1+3 (3 datagrams)", "msg 4 m4"]
    );
}

/// Hostile-input probe: one forged DATA and one HEARTBEAT announcing 60,000 datagrams
/// (97 bytes, no sender behind them) had the receiver NAK the forged source for 32 s,
/// a hold window at a time (3,068 NAKs), before it reported the gap. A sender not heard
/// from at all for `session_timeout` (2 s) now has the whole announced hole given up at
/// once, when its current run is given up.
#[test]
fn a_hole_announced_by_a_silent_sender_is_given_up_at_once_not_a_window_at_a_time() {
    let mut now = MonoNanos(1);
    let mut rx = Receiver::new(ReceiverConfig::default(), now).unwrap();
    let a = sender_addr();
    rx.handle_datagram(now, a, &data(7, 0, 0, 0, b"first"))
        .unwrap();
    rx.handle_datagram(now, a, &heartbeat(7, 60_000, 60_000, 0))
        .unwrap();
    let mut ev = events(&mut rx);
    let mut reported_at = None;
    for ms in 1..=40_000u64 {
        now = MonoNanos(1 + ms * 1_000_000);
        rx.handle_timer(now);
        while rx.poll_transmit().is_some() {}
        let more = events(&mut rx);
        if reported_at.is_none() && more.iter().any(|e| e.starts_with("gap")) {
            reported_at = Some(ms);
        }
        ev.extend(more);
        if reported_at.is_some_and(|r| ms > r + 1_000) {
            break;
        }
    }
    let st = rx.stats();
    let at = reported_at.expect("the gap is reported");
    assert!(
        at < 3_000,
        "reported after {at} ms (session_timeout 2 s, then the run's NAK tries): {st:?}"
    );
    assert!(
        ev.contains(&"gap 1+59999 (59999 datagrams)".to_string()),
        "{ev:?}"
    );
    assert!(
        st.naks_sent <= 300,
        "{} NAKs for one forged hole: {st:?}",
        st.naks_sent
    );
    assert_eq!(rx.behind(), 0, "{st:?}");
}
