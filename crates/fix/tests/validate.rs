//! Validation against the standard QuickFIX dictionaries: one case per reject reason
//! (code, RefTagID, exact Text), the switches turning checks off, FIXT, and the session
//! helpers (CompID, SendingTime).

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/spec.rs"]
mod spec;

use std::sync::OnceLock;

use tickwire_fix::codec::{parse, Encoder, Fields};
use tickwire_fix::dict::Dictionary;
use tickwire_fix::validate::{
    check_comp_ids, check_sending_time, validate, Dictionaries, Reject, SessionRejectReason,
    ValidationOptions,
};

fn dict(name: &'static str) -> &'static Dictionary {
    static D44: OnceLock<Dictionary> = OnceLock::new();
    static T11: OnceLock<Dictionary> = OnceLock::new();
    static SP2: OnceLock<Dictionary> = OnceLock::new();
    let cell = match name {
        "FIX44.xml" => &D44,
        "FIXT11.xml" => &T11,
        "FIX50SP2.xml" => &SP2,
        other => panic!("no cell for {other}"),
    };
    cell.get_or_init(|| Dictionary::from_file(spec::spec_file(name)).expect(name))
}

const HEADER: [(u32, &str); 4] = [
    (49, "CLIENT"),
    (56, "BROKER"),
    (34, "2"),
    (52, "20240102-03:04:05.000"),
];

const NOS_BODY: [(u32, &str); 8] = [
    (11, "ord1"),
    (21, "1"),
    (55, "IBM"),
    (54, "1"),
    (60, "20240102-03:04:05"),
    (38, "100"),
    (40, "2"),
    (44, "10.5"),
];

fn build(begin: &str, msg_type: &str, fields: &[(u32, &str)]) -> Vec<u8> {
    let mut e = Encoder::new(begin);
    e.begin(msg_type.as_bytes());
    for &(tag, v) in HEADER.iter().chain(fields) {
        e.field_str(tag, v);
    }
    e.finish().to_vec()
}

fn nos_with(edit: impl FnOnce(&mut Vec<(u32, &'static str)>)) -> Vec<u8> {
    let mut body = NOS_BODY.to_vec();
    edit(&mut body);
    build("FIX.4.4", "D", &body)
}

fn check_with(raw: &[u8], dicts: Dictionaries<'_>, opts: &ValidationOptions) -> Result<(), Reject> {
    let mut fields = Fields::new();
    let msg = parse(raw, &mut fields).expect("test message parses");
    validate(&msg, &dicts, opts)
}

fn check44(raw: &[u8], opts: &ValidationOptions) -> Result<(), Reject> {
    check_with(raw, Dictionaries::single(dict("FIX44.xml")), opts)
}

fn expect_reject(raw: &[u8], code: u32, ref_tag: Option<u32>, text: &str) {
    let r = check44(raw, &ValidationOptions::default()).expect_err("must be rejected");
    assert_eq!(r.reason.code(), code, "{r:?}");
    assert_eq!(r.ref_tag, ref_tag, "{r:?}");
    assert_eq!(r.text, text);
    assert!(!r.is_business());
}

#[test]
fn a_valid_new_order_single_passes() {
    assert_eq!(
        check44(&nos_with(|_| {}), &ValidationOptions::default()),
        Ok(())
    );
}

#[test]
fn defaults_are_quickfix_defaults() {
    let o = ValidationOptions::default();
    assert!(o.use_data_dictionary && o.validate_fields_out_of_order);
    assert!(o.validate_fields_have_values && o.validate_user_defined_fields);
    assert!(!o.allow_unknown_msg_fields && o.validate_length_and_checksum);
    assert!(o.check_comp_id && o.check_latency);
    assert_eq!(o.max_latency, 120);
}

#[test]
fn reason_0_invalid_tag_number() {
    let raw = nos_with(|b| b.push((4999, "x")));
    expect_reject(&raw, 0, Some(4999), "Invalid tag number");
}

#[test]
fn reason_1_required_tag_missing() {
    let raw = nos_with(|b| b.retain(|&(t, _)| t != 54));
    expect_reject(&raw, 1, Some(54), "Required tag missing");
}

#[test]
fn reason_1_required_tag_missing_inside_a_required_group() {
    // 35=X: NoMDEntries is required, so its MDUpdateAction (279) is required per entry.
    let raw = build("FIX.4.4", "X", &[(268, "1"), (269, "0"), (270, "10")]);
    expect_reject(&raw, 1, Some(279), "Required tag missing");
}

#[test]
fn reason_2_tag_not_defined_for_this_message_type() {
    let raw = nos_with(|b| b.push((262, "mdreq")));
    expect_reject(&raw, 2, Some(262), "Tag not defined for this message type");
}

#[test]
fn reason_4_tag_without_a_value_is_caught_by_the_parser() {
    // The codec refuses `tag=<SOH>` while parsing, with reason 4; validate() has the same
    // check (ValidateFieldsHaveValues) for completeness.
    let mut raw = b"8=FIX.4.4\x019=10\x0135=0\x0158=\x01".to_vec();
    let sum = raw.iter().map(|&b| u32::from(b)).sum::<u32>() % 256;
    raw.extend_from_slice(format!("10={sum:03}\x01").as_bytes());
    let mut fields = Fields::new();
    let err = parse(&raw, &mut fields).expect_err("empty value");
    assert_eq!(err.session_reject_reason(), Some(4));
    assert_eq!(err.tag(), Some(58));
    assert_eq!(
        SessionRejectReason::TagSpecifiedWithoutAValue.text(),
        "Tag specified without a value"
    );
}

#[test]
fn reason_5_value_is_incorrect() {
    let raw = nos_with(|b| b.iter_mut().filter(|f| f.0 == 54).for_each(|f| f.1 = "Z"));
    expect_reject(
        &raw,
        5,
        Some(54),
        "Value is incorrect (out of range) for this tag",
    );
}

#[test]
fn reason_6_incorrect_data_format() {
    let raw = nos_with(|b| b.iter_mut().filter(|f| f.0 == 38).for_each(|f| f.1 = "12x"));
    expect_reject(&raw, 6, Some(38), "Incorrect data format for value");
    let raw = nos_with(|b| {
        b.iter_mut()
            .filter(|f| f.0 == 60)
            .for_each(|f| f.1 = "20241301-00:00:00")
    });
    expect_reject(&raw, 6, Some(60), "Incorrect data format for value");
}

#[test]
fn reason_11_invalid_msg_type() {
    let raw = build("FIX.4.4", "ZZ", &[(58, "hi")]);
    expect_reject(&raw, 11, None, "Invalid MsgType");
}

#[test]
fn reason_13_tag_appears_more_than_once() {
    let raw = nos_with(|b| b.push((55, "MSFT")));
    expect_reject(&raw, 13, Some(55), "Tag appears more than once");
}

#[test]
fn reason_14_tag_specified_out_of_required_order() {
    // OnBehalfOfCompID (115) is a header field sent after the body.
    let raw = nos_with(|b| b.push((115, "ON_BEHALF")));
    expect_reject(&raw, 14, Some(115), "Tag specified out of required order");
}

fn market_data(count: &'static str, entries: &[(u32, &'static str)]) -> Vec<u8> {
    let mut body = vec![(262, "req"), (268, count)];
    body.extend_from_slice(entries);
    build("FIX.4.4", "X", &body)
}

const THREE_ENTRIES: [(u32, &str); 9] = [
    (279, "0"),
    (269, "0"),
    (270, "10"),
    (279, "1"),
    (269, "1"),
    (270, "11"),
    (279, "2"),
    (269, "0"),
    (270, "12"),
];

#[test]
fn reason_16_incorrect_numingroup_count() {
    assert_eq!(
        check44(
            &market_data("3", &THREE_ENTRIES),
            &ValidationOptions::default()
        ),
        Ok(())
    );
    expect_reject(
        &market_data("2", &THREE_ENTRIES),
        16,
        Some(268),
        "Incorrect NumInGroup count for repeating group",
    );
    expect_reject(
        &market_data("4", &THREE_ENTRIES),
        16,
        Some(268),
        "Incorrect NumInGroup count for repeating group",
    );
}

/// A member repeated inside an entry starts the next entry even without the delimiter
/// (the entry scan's repeat check): that entry has no MDUpdateAction (279, required in
/// the required group), whatever the count says. A nested group inside an entry is
/// skipped over: its members are not the entry's own, and they repeat freely.
#[test]
fn entries_split_on_a_repeated_member_and_nested_groups_stay_inside_their_entry() {
    let opts = ValidationOptions::default();
    let repeated = [(279, "0"), (269, "0"), (270, "10"), (269, "1"), (270, "11")];
    for count in ["1", "2"] {
        expect_reject(
            &market_data(count, &repeated),
            1,
            Some(279),
            "Required tag missing",
        );
    }
    let nested = [
        (279, "0"),
        (269, "0"),
        (55, "ABC"),
        (454, "2"),
        (455, "A"),
        (456, "1"),
        (455, "B"),
        (456, "1"),
        (270, "10"),
        (279, "1"),
        (269, "1"),
        (270, "11"),
    ];
    assert_eq!(check44(&market_data("2", &nested), &opts), Ok(()));
    expect_reject(
        &market_data("1", &nested),
        16,
        Some(268),
        "Incorrect NumInGroup count for repeating group",
    );
    // 269 repeated after the nested group: a second entry without 279.
    let mut split = nested;
    split[9] = (269, "1");
    split[10] = (270, "12");
    split[11] = (271, "5");
    expect_reject(
        &market_data("2", &split),
        1,
        Some(279),
        "Required tag missing",
    );
}

#[test]
fn reason_9_comp_id_problem_and_reason_10_sending_time() {
    let raw = nos_with(|_| {});
    let mut fields = Fields::new();
    let msg = parse(&raw, &mut fields).unwrap();
    assert_eq!(check_comp_ids(&msg, b"CLIENT", b"BROKER"), Ok(()));
    let r = check_comp_ids(&msg, b"OTHER", b"BROKER").unwrap_err();
    assert_eq!(
        (r.reason.code(), r.ref_tag, r.text),
        (9, None, "CompID problem")
    );
    assert!(check_comp_ids(&msg, b"CLIENT", b"OTHER").is_err());

    // 52=20240102-03:04:05.000 is 1704164645 s after the epoch.
    let sent = 1_704_164_645u64 * 1_000_000_000;
    assert_eq!(
        check_sending_time(&msg, sent + 120_999_999_999, 120),
        Ok(())
    );
    assert_eq!(
        check_sending_time(&msg, sent - 120_000_000_000, 120),
        Ok(())
    );
    let r = check_sending_time(&msg, sent + 121_000_000_000, 120).unwrap_err();
    assert_eq!(
        (r.reason.code(), r.ref_tag, r.text),
        (10, None, "SendingTime accuracy problem")
    );
    assert!(check_sending_time(&msg, sent - 121_000_000_000, 120).is_err());
}

#[test]
fn unsupported_message_type_is_a_business_reject_from_42() {
    let r = Reject::unsupported_message_type(b"FIX.4.4");
    assert!(r.is_business());
    assert_eq!(r.business_reason, Some(3));
    assert_eq!(r.text, "Unsupported Message Type");
    let r = Reject::unsupported_message_type(b"FIX.4.0");
    assert!(!r.is_business());
    assert_eq!(r.msg_type(), b"3");
    assert_eq!(r.text, "Unsupported message type");
}

#[test]
fn switches_turn_checks_off() {
    let off = |f: fn(&mut ValidationOptions)| {
        let mut o = ValidationOptions::default();
        f(&mut o);
        o
    };
    // ValidateFieldsOutOfOrder
    let raw = nos_with(|b| b.push((115, "ON_BEHALF")));
    assert_eq!(
        check44(&raw, &off(|o| o.validate_fields_out_of_order = false)),
        Ok(())
    );
    // ValidateUserDefinedFields: 5001 is not in the dictionary.
    let raw = nos_with(|b| b.push((5001, "custom")));
    expect_reject(&raw, 0, Some(5001), "Invalid tag number");
    assert_eq!(
        check44(&raw, &off(|o| o.validate_user_defined_fields = false)),
        Ok(())
    );
    // AllowUnknownMsgFields: unknown and foreign tags below 5000 pass; 5000+ still checked.
    let opts = off(|o| o.allow_unknown_msg_fields = true);
    assert_eq!(check44(&nos_with(|b| b.push((262, "x"))), &opts), Ok(()));
    assert_eq!(check44(&nos_with(|b| b.push((4999, "x"))), &opts), Ok(()));
    assert!(check44(&nos_with(|b| b.push((5001, "x"))), &opts).is_err());
    // UseDataDictionary=N: nothing is validated.
    let opts = off(|o| o.use_data_dictionary = false);
    assert_eq!(
        check44(&build("FIX.4.4", "ZZ", &[(58, "hi")]), &opts),
        Ok(())
    );
    assert_eq!(
        check44(&nos_with(|b| b.retain(|f| f.0 != 11)), &opts),
        Ok(())
    );
    // ValidateUnorderedGroupFields (QuickFIX/J): MDEntryPx (270) before MDEntryType (269).
    let raw = market_data("1", &[(279, "0"), (270, "10"), (269, "0")]);
    assert_eq!(check44(&raw, &ValidationOptions::default()), Ok(()));
    let r = check44(&raw, &off(|o| o.validate_unordered_group_fields = true)).unwrap_err();
    assert_eq!((r.reason.code(), r.ref_tag), (15, Some(269)));
}

#[test]
fn fixt_validates_header_with_transport_and_body_with_application_dictionary() {
    let dicts = Dictionaries::fixt(dict("FIXT11.xml"), dict("FIX50SP2.xml"));
    let opts = ValidationOptions::default();
    let mut body = NOS_BODY.to_vec();
    body.retain(|f| f.0 != 21);
    body.insert(0, (1128, "9"));
    // ApplVerID (1128) is a header field: put it before the body.
    let mut e = Encoder::new("FIXT.1.1");
    e.begin(b"D");
    for &(tag, v) in HEADER
        .iter()
        .chain([(1128u32, "9")].iter())
        .chain(&body[1..])
    {
        e.field_str(tag, v);
    }
    let raw = e.finish().to_vec();
    assert_eq!(check_with(&raw, dicts, &opts), Ok(()));
    // Logon is an admin message: the transport dictionary has it.
    let logon = build("FIXT.1.1", "A", &[(98, "0"), (108, "30"), (1137, "9")]);
    assert_eq!(check_with(&logon, dicts, &opts), Ok(()));
    // A body error is found with the application dictionary.
    let bad = build(
        "FIXT.1.1",
        "D",
        &[(11, "x"), (55, "IBM"), (60, "20240102-03:04:05"), (40, "2")],
    );
    let r = check_with(&bad, dicts, &opts).unwrap_err();
    assert_eq!((r.reason.code(), r.ref_tag), (1, Some(54)));
}

#[test]
fn the_first_error_in_quickfix_sorted_order_wins() {
    // A bad Side (54) and a repeated OrderQty (38): QuickFIX checks body fields sorted by
    // tag, so the repeat of 38 is met first.
    let raw = nos_with(|b| {
        b.iter_mut().filter(|f| f.0 == 54).for_each(|f| f.1 = "Z");
        b.push((38, "5"));
    });
    expect_reject(&raw, 13, Some(38), "Tag appears more than once");
    // Header problems come before body problems whatever the wire order.
    let raw = build(
        "FIX.4.4",
        "D",
        &[
            (54, "Z"),
            (11, "a"),
            (21, "1"),
            (55, "X"),
            (60, "20240102-03:04:05"),
            (40, "1"),
            (97, "maybe"),
        ],
    );
    expect_reject(&raw, 14, Some(97), "Tag specified out of required order");
    let opts = ValidationOptions {
        validate_fields_out_of_order: false,
        ..ValidationOptions::default()
    };
    let r = check44(&raw, &opts).unwrap_err();
    assert_eq!(
        (r.reason.code(), r.ref_tag),
        (6, Some(97)),
        "PossResend is BOOLEAN"
    );
}

#[test]
fn repeated_large_tags_are_found() {
    let opts = ValidationOptions {
        validate_user_defined_fields: false,
        ..ValidationOptions::default()
    };
    for tag in [9000, 70000] {
        let raw = nos_with(|b| {
            b.push((tag, "a"));
            b.push((tag, "b"));
        });
        let r = check44(&raw, &opts).unwrap_err();
        assert_eq!((r.reason.code(), r.ref_tag), (13, Some(tag)));
        let raw = nos_with(|b| b.push((tag, "a")));
        assert_eq!(check44(&raw, &opts), Ok(()));
    }
}

/// The five validation switches the property tests vary, in this order: fields out of
/// order, fields have values, user-defined fields, unknown message fields, unordered
/// group fields.
fn options(flags: [bool; 5]) -> ValidationOptions {
    ValidationOptions {
        validate_fields_out_of_order: flags[0],
        validate_fields_have_values: flags[1],
        validate_user_defined_fields: flags[2],
        allow_unknown_msg_fields: flags[3],
        validate_unordered_group_fields: flags[4],
        ..ValidationOptions::default()
    }
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    const TAGS: [u32; 16] = [
        11, 21, 38, 40, 44, 54, 55, 60, 268, 269, 270, 279, 453, 448, 802, 523,
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Arbitrary field sequences (groups with wrong counts, members out of place,
        /// repeats, odd values) are validated without panicking, with any switches.
        #[test]
        fn on_arbitrary_field_sequences(
            msg_type in prop::sample::select(vec!["D", "X", "8", "ZZ", "0"]),
            body in prop::collection::vec(
                (prop_oneof![prop::sample::select(TAGS.to_vec()), 1u32..100_000],
                 "[0-9A-Z.:-]{1,6}"),
                0..40),
            flags in any::<[bool; 5]>(),
        ) {
            let body: Vec<(u32, &str)> = body.iter().map(|(t, v)| (*t, v.as_str())).collect();
            let raw = build("FIX.4.4", msg_type, &body);
            let opts = options(flags);
            // Random data-length tags (95, 212, ...) can make a message unparsable;
            // only parsed messages reach validation.
            let mut fields = Fields::new();
            let parsed = parse(&raw, &mut fields);
            prop_assume!(parsed.is_ok());
            if let Ok(msg) = parsed {
                let dicts = Dictionaries::single(dict("FIX44.xml"));
                if let Err(r) = validate(&msg, &dicts, &opts) {
                    prop_assert!(!r.text.is_empty());
                }
            }
        }
    }
}

/// `validate_cached` answers exactly as `validate` for streams of messages that share
/// shapes (the cache's hits) and that change shape, values, options or dictionaries
/// (its misses): same Ok, same reason, tag and text.
mod cached_agrees_with_full {
    use super::*;
    use proptest::prelude::*;
    use tickwire_fix::codec::parse_keeping_empty;
    use tickwire_fix::validate::{validate_cached, ShapeCache};

    const TAGS: [u32; 18] = [
        11, 21, 38, 40, 44, 54, 55, 60, 268, 269, 270, 271, 278, 279, 262, 97, 43, 122,
    ];
    /// Valid, invalid and empty values for every type the templates use.
    const VALUES: [&str; 18] = [
        "1",
        "0",
        "2",
        "3",
        "-1",
        "Z",
        "abc",
        "10.5",
        "1.",
        "-",
        "20240102-03:04:05",
        "20241302-03:04:05.123",
        "Y",
        "N",
        "",
        "99999999999",
        "ord1",
        "X",
    ];

    fn templates() -> Vec<Vec<(u32, &'static str)>> {
        let mut nos: Vec<(u32, &'static str)> = HEADER.to_vec();
        nos.extend_from_slice(&NOS_BODY);
        let mut md: Vec<(u32, &'static str)> = HEADER.to_vec();
        md.extend_from_slice(&[(262, "req"), (268, "3")]);
        md.extend_from_slice(&THREE_ENTRIES);
        // The tick-to-trade bench's market data.
        let mut tick: Vec<(u32, &'static str)> = HEADER.to_vec();
        tick.extend_from_slice(&[
            (268, "1"),
            (279, "0"),
            (269, "0"),
            (55, "IBM"),
            (270, "1.5"),
            (271, "100"),
            (278, "id"),
        ]);
        let mut nos_extra: Vec<(u32, &'static str)> = HEADER.to_vec();
        nos_extra.extend_from_slice(&[(97, "N"), (43, "Y"), (122, "20240102-03:04:05")]);
        nos_extra.extend_from_slice(&NOS_BODY);
        vec![nos, md, tick, HEADER.to_vec(), nos_extra]
    }

    fn encode(msg_type: &str, fields: &[(u32, &str)]) -> Vec<u8> {
        let mut e = Encoder::new("FIX.4.4");
        e.begin(msg_type.as_bytes());
        for &(tag, v) in fields {
            e.field_str(tag, v);
        }
        e.finish().to_vec()
    }

    /// A hit runs every value check: each failure below comes from the cache (the
    /// accepted message before it has the same shape), and equals the full answer.
    #[test]
    fn on_a_hit_every_value_check_runs() {
        let opts = ValidationOptions::default();
        let d44 = Dictionaries::single(dict("FIX44.xml"));
        let mut cache = ShapeCache::new();
        let tick = &templates()[2];
        let edits: [&[(u32, &str)]; 8] = [
            &[(268, "2")],
            // A group member: QuickFIX checks no value of it (accepted).
            &[(269, "Z")],
            &[(34, "x"), (268, "2")],
            &[(52, "20240102-25:04:05"), (49, "")],
            &[(56, ""), (268, "-1")],
            // An empty field whose only check is for emptiness, with a failing
            // value check before or after it (the cache's split lists, ordered).
            &[(34, "x"), (56, "")],
            &[(49, ""), (268, "2")],
            &[],
        ];
        let mut rejected = 0;
        for edit in edits {
            let ok = encode("X", tick);
            let mut table = Fields::new();
            let msg = parse_keeping_empty(&ok, &mut table, true).unwrap();
            assert_eq!(validate_cached(&msg, &d44, &opts, &mut cache), Ok(()));
            let mut fields = tick.clone();
            for &(tag, v) in edit {
                fields
                    .iter_mut()
                    .filter(|f| f.0 == tag)
                    .for_each(|f| f.1 = v);
            }
            let raw = encode("X", &fields);
            let mut table = Fields::new();
            let msg = parse_keeping_empty(&raw, &mut table, true).unwrap();
            let full = validate(&msg, &d44, &opts);
            assert_eq!(validate_cached(&msg, &d44, &opts, &mut cache), full);
            rejected += usize::from(full.is_err());
        }
        assert_eq!(rejected, 6);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        #[test]
        fn on_streams_of_messages(
            random_body in prop::collection::vec(
                (prop_oneof![prop::sample::select(TAGS.to_vec()), 1u32..100_000],
                 prop::sample::select(VALUES.to_vec())),
                0..20),
            stream in prop::collection::vec(
                (0usize..6,
                 prop::option::weighted(0.2, prop::sample::select(vec!["D", "X", "0", "8", "ZZ"])),
                 prop::collection::vec((0usize..40, prop::sample::select(VALUES.to_vec())), 0..4),
                 prop::bool::weighted(0.1),
                 prop::bool::weighted(0.1)),
                1..12),
            flags in any::<[bool; 5]>(),
            other_flags in any::<[bool; 5]>(),
        ) {
            let mut templates = templates();
            let mut random: Vec<(u32, &'static str)> = HEADER.to_vec();
            random.extend_from_slice(&random_body);
            templates.push(random);
            let types = ["D", "X", "X", "0", "D", "D"];
            let d44 = Dictionaries::single(dict("FIX44.xml"));
            let fixt = Dictionaries::fixt(dict("FIXT11.xml"), dict("FIX50SP2.xml"));
            let mut cache = ShapeCache::new();
            for (template, random_type, edits, switch_opts, switch_dicts) in stream {
                let mut fields = templates[template].clone();
                // Mostly the template's own type (a hit after the first), sometimes another.
                let msg_type = random_type.unwrap_or(types[template]);
                for (at, v) in edits {
                    let n = fields.len();
                    if let Some(f) = fields.get_mut(at % n.max(1)) {
                        f.1 = v;
                    }
                }
                let raw = encode(msg_type, &fields);
                let mut table = Fields::new();
                let Ok(msg) = parse_keeping_empty(&raw, &mut table, true) else {
                    continue;
                };
                let opts = options(if switch_opts { other_flags } else { flags });
                let dicts = if switch_dicts { fixt } else { d44 };
                let full = validate(&msg, &dicts, &opts);
                let cached = validate_cached(&msg, &dicts, &opts, &mut cache);
                prop_assert_eq!(cached, full, "{}", String::from_utf8_lossy(&raw));
            }
        }
    }
}
