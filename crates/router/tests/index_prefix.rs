//! Prefix patterns of the same length share a per-length count in the trie node
//! (found by the mutation-testing pass, docs/testing.md: removing one of two same-length
//! prefixes must leave the other matching).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tickwire_router::index::{Slot, SubscriptionIndex};

fn matches(index: &mut SubscriptionIndex, topic: &str) -> Vec<Slot> {
    let mut out = Vec::new();
    index.match_topic(topic, &mut out);
    out.sort();
    out
}

#[test]
fn removing_one_of_two_same_length_prefixes_keeps_the_other() {
    let mut index = SubscriptionIndex::new();
    assert!(index.subscribe(Slot(1), "md/AA*"));
    assert!(index.subscribe(Slot(2), "md/AB*"));
    assert!(index.subscribe(Slot(3), "md/ABC*"));
    assert_eq!(matches(&mut index, "md/AAPL"), [Slot(1)]);
    assert_eq!(matches(&mut index, "md/ABCD"), [Slot(2), Slot(3)]);
    assert!(index.unsubscribe(Slot(1), "md/AA*"));
    assert_eq!(matches(&mut index, "md/AAPL"), []);
    assert_eq!(
        matches(&mut index, "md/ABX"),
        [Slot(2)],
        "md/AB* stopped matching when md/AA* (same length) was removed"
    );
    assert_eq!(matches(&mut index, "md/ABCD"), [Slot(2), Slot(3)]);
    assert!(index.unsubscribe(Slot(2), "md/AB*"));
    assert_eq!(matches(&mut index, "md/ABCD"), [Slot(3)]);
}
