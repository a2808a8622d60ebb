//! The feed-handler core against an independent reference model (`model/mod.rs`: a
//! `BTreeMap` book per symbol, written from the docs): for random sessions of the
//! synthetic exchange, cut into random packets and delivered reordered, duplicated and
//! mixed with stray sessions and far-ahead spoofs, the core publishes exactly the
//! trades and quotes the model derives from the ITCH input, field by field, and
//! applies every message once.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod model;
mod packets;

use packets::{answer, packetize};
use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tickwire_itch::{Message, PacketBuilder, Session};
use tickwire_md::feed::{FeedConfig, FeedHandler};
use tickwire_md::generator::{Generator, GeneratorConfig};
use tickwire_rt::MonoNanos;

fn session() -> Session {
    Session::new("MODEL").unwrap()
}

/// A one-message packet of `session` at `seq`.
fn stray(session: Session, seq: u64, m: &Message) -> Vec<u8> {
    let mut b = PacketBuilder::new(session, seq, 1400);
    b.push_message(m).unwrap();
    b.finish().to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn core_publishes_what_the_reference_model_derives_from_the_itch_input(
        seed in 0u64..10_000,
        symbols in 1u16..6,
        messages in 300u64..2_500,
        max_packet in 80usize..1400,
        window in 1usize..6,
        auto_session in any::<bool>(),
        noise in 0u32..15,
    ) {
        let gen = GeneratorConfig { symbols, messages, seed, ..GeneratorConfig::default() };
        let msgs: Vec<Message> = Generator::new(gen).unwrap().collect();
        let pkts = packetize(session(), 1, &msgs, max_packet);

        let mut reference = model::Model::new("NASDAQ");
        for (i, m) in msgs.iter().enumerate() {
            reference.apply(i as u64 + 1, m);
        }

        // Delivery order: shuffled within windows, some packets twice, stray sessions
        // and far-ahead spoofs (each far from the others: they never confirm a jump).
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
        let mut order: Vec<usize> = (0..pkts.len()).collect();
        for w in order.chunks_mut(window) {
            w.shuffle(&mut rng);
        }
        let cfg = FeedConfig {
            session: if auto_session { None } else { Some(session()) },
            order_capacity: 1 << 14,
            ..FeedConfig::default()
        };
        let mut f = FeedHandler::new(cfg).unwrap();
        let mut got: Vec<(String, Vec<u8>)> = Vec::new();
        let mut spoofs = 0u64;
        let mut strays = 0u64;
        let now = MonoNanos(1);
        for i in order {
            let mut sink = |t: &str, p: &[u8]| got.push((t.to_string(), p.to_vec()));
            let mut batch = vec![pkts[i].clone()];
            if rng.gen_ratio(noise, 100) {
                batch.push(pkts[i].clone());
            }
            // Before a session is adopted, at most two noise packets (a stray session
            // repeated `confirm_packets` times would rightly be adopted).
            let quiet = f.session().is_none() && strays + spoofs >= 2;
            if !quiet && rng.gen_ratio(noise, 200) {
                let name = format!("STRAY{strays}");
                batch.insert(0, stray(Session::new(&name).unwrap(), 1, &msgs[0]));
                strays += 1;
            }
            if !quiet && rng.gen_ratio(noise, 200) {
                spoofs += 1;
                let seq = f.expected_sequence() + spoofs * 1_000_000_000;
                batch.insert(0, stray(session(), seq, &msgs[0]));
            }
            for p in batch {
                f.handle_datagram(now, &p, &mut sink);
                while let Some(req) = f.poll_transmit() {
                    for a in answer(&msgs, req) {
                        f.handle_datagram(now, &a, &mut sink);
                    }
                }
            }
        }
        let trades = reference.out.iter().filter(|u| matches!(u, model::Update::Trade { .. }));
        prop_assert!(trades.count() > 0, "the session trades");
        let c = *f.counters();
        prop_assert_eq!(f.session(), Some(session()));
        prop_assert_eq!(c.messages, msgs.len() as u64, "{:?}", c);
        prop_assert_eq!(c.lost, 0);
        prop_assert_eq!(c.suspect_jumps, spoofs);
        prop_assert_eq!(c.foreign_session, strays);
        prop_assert_eq!(c.malformed, 0);
        prop_assert_eq!(f.expected_sequence(), msgs.len() as u64 + 1);
        prop_assert!(!f.recovering());
        prop_assert_eq!(c.published, got.len() as u64);
        let input = |seq: u64| format!("{:?}", msgs.get(seq as usize - 1));
        model::assert_stream_eq(&reference.out, &got, &input);
    }
}
