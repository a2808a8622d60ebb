//! `tickwire_fix::order`: QuickFIX's field order, pinned to what a real QuickFIX sent
//! back (`testdata/quickfix/at_echo_*.txt`, recorded with `qf_peer --app at`) and
//! independent of the order fields are set in (proptest).

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/spec.rs"]
mod spec;

use proptest::prelude::*;
use tickwire_fix::codec::{parse_unchecked, Fields};
use tickwire_fix::dict::Dictionary;
use tickwire_fix::order::{QuickFixBody, QuickFixOrder};

fn dict(file: &str) -> Dictionary {
    Dictionary::from_file(spec::spec_dir().join(file)).expect("dictionary")
}

fn bars(b: &[u8]) -> String {
    String::from_utf8_lossy(b).replace('\x01', "|")
}

/// What QuickFIX's echo carries after the session's own header fields (34, 49, 52,
/// 56): `97=N|115=OBO|11=...|` up to the trailer.
fn after_session_header(line: &str) -> String {
    let start = line.find("|56=").unwrap() + 1;
    let rest = &line[start..];
    let rest = &rest[rest.find('|').unwrap() + 1..];
    rest[..rest.rfind("10=").unwrap()].to_string()
}

#[test]
fn parsed_messages_come_out_as_quickfix_sent_them_back() {
    let d44 = dict("FIX44.xml");
    let d42 = dict("FIX42.xml");
    let mut order = QuickFixOrder::new();
    let mut compared = 0;
    for name in [
        "at_echo_field_order",
        "at_echo_field_order_fix42",
        "at_echo_groups",
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/quickfix")
            .join(format!("{name}.txt"));
        let text = std::fs::read_to_string(path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(sent) = line.strip_prefix(">> ") else {
                continue;
            };
            let Some(echo) = lines.get(i + 1).and_then(|l| l.strip_prefix("<< ")) else {
                continue;
            };
            if !sent.contains("|35=D|") && !sent.contains("|35=d|") {
                continue;
            }
            let raw = sent.replace('|', "\x01").into_bytes();
            let mut fields = Fields::new();
            let msg = parse_unchecked(&raw, &mut fields).unwrap();
            let d = if sent.starts_with("8=FIX.4.2") {
                &d42
            } else {
                &d44
            };
            let mut body = Vec::new();
            order.write_body(&msg, Some(d), &mut body);
            assert_eq!(bars(&body), after_session_header(echo), "{name}: {sent}");
            compared += 1;
        }
    }
    assert_eq!(compared, 8, "messages compared");
}

#[test]
fn without_a_dictionary_every_field_is_sorted_by_tag_as_quickfix_does() {
    let mut b = QuickFixBody::new();
    b.field(453, b"1")
        .field(448, b"P1")
        .field(447, b"D")
        .field(11, b"ID")
        .field(97, b"Y");
    let mut out = Vec::new();
    b.write(b"D", None, &mut out);
    assert_eq!(bars(&out), "97=Y|11=ID|447=D|448=P1|453=1|");
}

/// The body of the recorded `at_echo_groups` order with the nested group, as units a
/// QuickFIX application could set in any order: plain fields, and the Parties group
/// (count, one entry whose delimiter comes first, the rest of the entry in any order,
/// the nested PartySubIDs group as one piece).
/// Fields that are set together (one field, or a nested group as a whole).
type Unit = Vec<(u32, &'static str)>;

fn units() -> (Vec<Unit>, Vec<Unit>) {
    let top = vec![
        vec![(11, "ID")],
        vec![(21, "3")],
        vec![(38, "100")],
        vec![(40, "1")],
        vec![(54, "1")],
        vec![(55, "INTC")],
        vec![(60, "20240101-00:00:00.000")],
        vec![(97, "N")],
    ];
    let entry_rest = vec![
        vec![(447, "D")],
        vec![(452, "1")],
        vec![(802, "2"), (523, "S1"), (803, "1"), (523, "S2"), (803, "2")],
    ];
    (top, entry_rest)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_order_fields_are_set_in_does_not_matter(
        top_perm in Just((0..9usize).collect::<Vec<_>>()).prop_shuffle(),
        entry_perm in Just((0..3usize).collect::<Vec<_>>()).prop_shuffle(),
    ) {
        let d44 = dict("FIX44.xml");
        let (top, rest) = units();
        let mut b = QuickFixBody::new();
        for &i in &top_perm {
            if i == 8 {
                // The Parties group: count, delimiter, then the entry in any order.
                b.field(453, b"1").field(448, b"P1");
                for &j in &entry_perm {
                    for (t, v) in &rest[j] {
                        b.field(*t, v.as_bytes());
                    }
                }
            } else {
                for (t, v) in &top[i] {
                    b.field(*t, v.as_bytes());
                }
            }
        }
        let mut out = Vec::new();
        b.write(b"D", Some(&d44), &mut out);
        prop_assert_eq!(
            bars(&out),
            "97=N|11=ID|21=3|38=100|40=1|54=1|55=INTC|60=20240101-00:00:00.000|\
             453=1|448=P1|447=D|452=1|802=2|523=S1|803=1|523=S2|803=2|"
        );
    }
}
