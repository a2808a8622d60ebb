//! Loading the standard QuickFIX dictionaries (fetched by scripts/fetch-fix-spec.sh) and
//! resolving repeating groups with them.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/spec.rs"]
mod spec;

use tickwire_fix::codec::{parse, Encoder, Fields};
use tickwire_fix::dict::{DictError, Dictionary, FieldType, MsgCategory};

fn load(name: &str) -> Dictionary {
    Dictionary::from_file(spec::spec_file(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_standard_dictionary_loads_with_its_version_and_message_count() {
    let expected = [
        ("FIX40.xml", "FIX.4.0", 27, true),
        ("FIX41.xml", "FIX.4.1", 28, true),
        ("FIX42.xml", "FIX.4.2", 46, true),
        ("FIX43.xml", "FIX.4.3", 68, true),
        ("FIX44.xml", "FIX.4.4", 93, true),
        ("FIX50.xml", "FIX.5.0", 93, false),
        ("FIX50SP1.xml", "FIX.5.0", 105, false),
        ("FIX50SP2.xml", "FIX.5.0", 156, false),
        ("FIXT11.xml", "FIXT.1.1", 8, true),
    ];
    for (file, begin, messages, has_header) in expected {
        let d = load(file);
        assert_eq!(d.begin_string(), begin, "{file}");
        assert_eq!(d.messages().len(), messages, "{file}");
        assert_eq!(d.has_header(), has_header, "{file}");
        assert_eq!(d.is_fixt(), file == "FIXT11.xml", "{file}");
        if has_header {
            for tag in [8, 9, 35, 49, 56, 34, 52] {
                assert!(d.header().is_required(tag), "{file}: header {tag}");
            }
            assert!(d.trailer().is_required(10), "{file}");
        } else {
            assert!(d.header().members().is_empty(), "{file}");
        }
    }
    assert_eq!(load("FIX50SP2.xml").version(), (5, 0, 2));
    assert_eq!(load("FIX50SP1.xml").version(), (5, 0, 1));
}

#[test]
fn fields_have_names_types_and_enumerations() {
    let d = load("FIX44.xml");
    let side = d.field(54).expect("Side");
    assert_eq!(side.name, "Side");
    assert_eq!(side.field_type, FieldType::Char);
    assert_eq!(side.value_description(b"1"), Some("BUY"));
    assert!(side.allows(b"2"));
    assert!(!side.allows(b"Z"));
    assert_eq!(d.tag_of("ClOrdID"), Some(11));
    assert_eq!(
        d.field(52).map(|f| f.field_type),
        Some(FieldType::UtcTimestamp)
    );
    assert_eq!(
        d.field(268).map(|f| f.field_type),
        Some(FieldType::NumInGroup)
    );
    assert!(d.field(0).is_none() && d.field(4_000_000).is_none());
    // MULTIPLEVALUESTRING enumerations are checked value by value (ExecInst 18).
    let exec_inst = d.field(18).expect("ExecInst");
    assert!(exec_inst.allows(b"1 2"));
    assert!(!exec_inst.allows(b"1 ?"));
    // Before FIX.4.2 QuickFIX treats CHAR as STRING.
    assert_eq!(
        load("FIX41.xml").field(54).map(|f| f.field_type),
        Some(FieldType::String)
    );
}

#[test]
fn new_order_single_required_fields_differ_between_42_and_44() {
    let d42 = load("FIX42.xml");
    let nos42 = d42.message(b"D").expect("D in 4.2");
    assert_eq!(nos42.name, "NewOrderSingle");
    assert_eq!(nos42.category, MsgCategory::App);
    assert_eq!(nos42.layout().required(), &[11, 21, 40, 54, 55, 60]);
    // 4.4: HandlInst is optional and Symbol sits in the Instrument component, whose
    // fields are all optional in QuickFIX's FIX44.xml.
    let d44 = load("FIX44.xml");
    let nos44 = d44.message(b"D").expect("D in 4.4");
    assert_eq!(nos44.layout().required(), &[11, 40, 54, 60]);
    assert!(nos44.layout().contains(55), "component fields are expanded");
    assert!(nos44.layout().contains(453), "group count tag is a member");
    assert!(!nos44.layout().contains(448), "group members are not");
    assert_eq!(
        d44.message(b"A").map(|m| m.category),
        Some(MsgCategory::Admin)
    );
    assert!(d44.message(b"ZZ").is_none());
}

#[test]
fn market_data_incremental_refresh_group_members_in_44() {
    let d = load("FIX44.xml");
    let x = d.message(b"X").expect("35=X");
    assert_eq!(x.layout().required(), &[268]);
    let g = x.layout().group(268).expect("NoMDEntries");
    assert_eq!(g.delimiter, 279);
    assert!(g.required);
    assert_eq!(&g.layout().members()[..6], &[279, 285, 269, 278, 280, 55]);
    for tag in [270, 271, 272, 273, 290] {
        assert!(g.layout().contains(tag), "{tag}");
    }
    assert_eq!(g.layout().required(), &[279]);
    // Instrument's nested SecAltIDGrp is a group inside each entry.
    assert_eq!(g.layout().group(454).map(|n| n.delimiter), Some(455));
}

#[test]
fn nested_party_groups_in_44() {
    let d = load("FIX44.xml");
    let parties = d
        .message(b"D")
        .and_then(|m| m.layout().group(453))
        .expect("NoPartyIDs");
    assert_eq!(parties.delimiter, 448);
    assert_eq!(parties.layout().members(), &[448, 447, 452, 802]);
    let sub = parties.layout().group(802).expect("NoPartySubIDs");
    assert_eq!(sub.delimiter, 523);
    assert_eq!(sub.layout().members(), &[523, 803]);
}

#[test]
fn fixt_transport_and_fix50sp2_application_dictionaries() {
    let t = load("FIXT11.xml");
    assert!(t.is_header_field(1128), "ApplVerID is a FIXT header field");
    assert!(t.message(b"A").is_some() && t.message(b"D").is_none());
    assert!(t.field(1137).is_some(), "DefaultApplVerID");
    let app = load("FIX50SP2.xml");
    assert!(app.message(b"D").is_some() && app.message(b"X").is_some());
    assert!(
        app.message(b"A").is_none(),
        "no session messages in the application dictionary"
    );
    assert!(app
        .message(b"X")
        .and_then(|m| m.layout().group(268))
        .is_some());
}

#[test]
fn bad_xml_is_reported_with_file_and_line() {
    let err = Dictionary::from_xml(
        "<fix major='4' minor='4'>\n<fields>\n<field name='A' number='1' type='INT'>\n</fix>",
    )
    .unwrap_err();
    match &err {
        DictError::Invalid {
            path,
            line,
            message,
        } => {
            assert_eq!(path, "<memory>");
            assert_eq!(*line, 4, "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    let xml = "<fix major='4' minor='2'>\n <header><field name='BeginString' required='Y'/></header>\n \
               <trailer><field name='CheckSum' required='Y'/></trailer>\n <messages>\n  \
               <message name='X' msgtype='X' msgcat='app'>\n   <field name='Nope' required='Y'/>\n  \
               </message>\n </messages>\n <fields>\n  <field number='8' name='BeginString' type='STRING'/>\n  \
               <field number='10' name='CheckSum' type='STRING'/>\n </fields>\n</fix>\n";
    let err = Dictionary::from_xml_named(xml, "custom.xml")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "custom.xml:6: Field Nope not defined in fields section"
    );
    let err = Dictionary::from_file("/nonexistent/FIX44.xml").unwrap_err();
    assert!(matches!(err, DictError::Io { .. }));
}

/// Hostile-input probe: a dictionary of a million nested elements (7 MB) overflowed the
/// stack and aborted the process; one whose components each use the next twice, 40
/// deep (1.3 KB), kept a load busy for 17 s and counting. Both are now errors that name
/// the line, found at once.
#[test]
fn deep_nesting_and_exponential_components_are_refused_with_the_line() {
    let deep = format!(
        "<fix major='4' minor='4'>\n{}{}</fix>\n",
        "<x>".repeat(1_000_000),
        "</x>".repeat(1_000_000)
    );
    let err = Dictionary::from_xml(&deep).unwrap_err().to_string();
    assert!(err.contains("nested more than 256 deep"), "{err}");
    assert!(err.starts_with("<memory>:2:"), "{err}");

    let mut xml = String::from(
        "<fix major='4' minor='4'>\n <header><field name='BeginString' required='Y'/></header>\n \
         <trailer><field name='CheckSum' required='Y'/></trailer>\n <messages>\n  \
         <message name='X' msgtype='X' msgcat='app'><component name='C0' required='N'/></message>\n \
         </messages>\n <components>\n",
    );
    for i in 0..40 {
        xml.push_str(&format!(
            "  <component name='C{i}'><component name='C{n}' required='N'/><component name='C{n}' required='N'/></component>\n",
            n = i + 1
        ));
    }
    xml.push_str(
        "  <component name='C40'><field name='Text' required='N'/></component>\n </components>\n \
         <fields>\n  <field number='8' name='BeginString' type='STRING'/>\n  \
         <field number='10' name='CheckSum' type='STRING'/>\n  \
         <field number='58' name='Text' type='STRING'/>\n </fields>\n</fix>\n",
    );
    let err = Dictionary::from_xml(&xml).unwrap_err().to_string();
    assert!(
        err.contains("expand to more than 8000000 field references"),
        "{err}"
    );
}

/// A message type defined more than once: the last definition wins (QuickFIX merges
/// them; ours keeps the last whole), whatever else lies between. The duplicates are
/// now dropped in one pass after sorting (a `retain` per `<message>` was quadratic in
/// the number of messages).
#[test]
fn a_message_type_defined_twice_keeps_its_last_definition() {
    let mut xml = String::from(
        "<fix major='4' minor='4'>\n <header><field name='BeginString' required='Y'/></header>\n \
         <trailer><field name='CheckSum' required='Y'/></trailer>\n <messages>\n",
    );
    for (name, msg_type, field) in [
        ("X1", "X", "Text"),
        ("Y", "Y", "Text"),
        ("X2", "X", "Account"),
        ("A", "A", "Text"),
        ("X3", "X", "Symbol"),
    ] {
        xml.push_str(&format!(
            "  <message name='{name}' msgtype='{msg_type}' msgcat='app'><field name='{field}' required='Y'/></message>\n"
        ));
    }
    xml.push_str(
        " </messages>\n <fields>\n  <field number='1' name='Account' type='STRING'/>\n  \
         <field number='8' name='BeginString' type='STRING'/>\n  \
         <field number='10' name='CheckSum' type='STRING'/>\n  \
         <field number='55' name='Symbol' type='STRING'/>\n  \
         <field number='58' name='Text' type='STRING'/>\n </fields>\n</fix>\n",
    );
    let d = Dictionary::from_xml(&xml).unwrap();
    let types: Vec<&str> = d.messages().iter().map(|m| m.msg_type.as_str()).collect();
    assert_eq!(types, ["A", "X", "Y"]);
    let x = d.message(b"X").unwrap();
    assert_eq!(x.name, "X3");
    assert_eq!(x.layout().required(), [55]);
    assert_eq!(d.message(b"Y").unwrap().layout().required(), [58]);
}

/// A 35=X with three entries; the second has a nested SecAltIDGrp (454) of two entries.
fn market_data_x() -> Vec<u8> {
    let mut e = Encoder::new("FIX.4.4");
    e.begin(b"X");
    for (tag, v) in [
        (49, "VENUE"),
        (56, "ALGO"),
        (34, "7"),
        (52, "20240102-03:04:05.000"),
        (262, "req1"),
        (268, "3"),
        (279, "0"),
        (269, "0"),
        (55, "AAA"),
        (270, "10.5"),
        (271, "100"),
        (279, "1"),
        (269, "1"),
        (55, "BBB"),
        (454, "2"),
        (455, "B1"),
        (456, "1"),
        (455, "B2"),
        (456, "2"),
        (270, "11"),
        (271, "200"),
        (279, "2"),
        (269, "0"),
        (55, "CCC"),
        (270, "12.25"),
        (813, "4"),
    ] {
        e.field_str(tag, v);
    }
    e.finish().to_vec()
}

#[test]
fn group_iteration_over_market_data_with_three_entries() {
    let d = load("FIX44.xml");
    let raw = market_data_x();
    let mut fields = Fields::new();
    let msg = parse(&raw, &mut fields).expect("parse");
    let entries: Vec<_> = d.group_entries(&msg, 268).expect("group 268").collect();
    assert_eq!(entries.len(), 3);
    let val = |e: &tickwire_fix::dict::GroupEntry<'_, '_>, tag| {
        e.field(tag)
            .map(|f| std::str::from_utf8(msg.value(f)).unwrap().to_string())
    };
    assert_eq!(val(&entries[0], 55).as_deref(), Some("AAA"));
    assert_eq!(val(&entries[0], 270).as_deref(), Some("10.5"));
    assert_eq!(val(&entries[1], 279).as_deref(), Some("1"));
    assert_eq!(val(&entries[1], 270).as_deref(), Some("11"));
    assert_eq!(val(&entries[2], 270).as_deref(), Some("12.25"));
    assert_eq!(val(&entries[2], 271), None);
    // ApplQueueDepth (813) is not a member: it ends the last entry.
    assert!(entries[2].fields().iter().all(|f| f.tag != 813));
    assert_eq!(entries[0].fields().len(), 5);
    assert_eq!(entries[1].fields().len(), 10);
    // The nested group in entry 2, and its direct fields without the nested members.
    let nested: Vec<_> = entries[1].group(454).expect("454").collect();
    assert_eq!(nested.len(), 2);
    assert_eq!(nested[1].field(455).map(|f| msg.value(f)), Some(&b"B2"[..]));
    assert!(entries[1].direct().all(|f| f.tag != 455));
    assert!(entries[0].group(454).is_none());
    // Without a dictionary the fields stay flat.
    assert_eq!(msg.get_all(270).count(), 3);
    assert!(d.group_entries(&msg, 453).is_none());
}

#[test]
fn a_repeated_member_starts_a_new_entry_even_without_the_delimiter() {
    // QuickFIX's rule: a member already present in the current entry starts a new one.
    let d = load("FIX44.xml");
    let mut e = Encoder::new("FIX.4.4");
    e.begin(b"X");
    for (tag, v) in [
        (49, "A"),
        (56, "B"),
        (34, "2"),
        (52, "20240102-03:04:05"),
        (268, "2"),
        (279, "0"),
        (270, "1"),
        (270, "2"),
    ] {
        e.field_str(tag, v);
    }
    let raw = e.finish().to_vec();
    let mut fields = Fields::new();
    let msg = parse(&raw, &mut fields).expect("parse");
    let sizes: Vec<usize> = d
        .group_entries(&msg, 268)
        .unwrap()
        .map(|e| e.fields().len())
        .collect();
    assert_eq!(sizes, vec![2, 1]);
}

/// The class table (`Dictionary::tag_class`, one load per field on the validation path)
/// agrees with the four lookups and two fixed lists it replaces, on every tag every
/// standard dictionary defines or lists, every member of every message type, and the
/// tags around the table's end.
#[test]
fn tag_class_table_agrees_with_the_lookups_it_replaces() {
    use tickwire_fix::validate::{is_standard_header_tag, is_standard_trailer_tag};
    for file in spec::SPEC_FILES {
        let d = load(file);
        let max = d.fields().iter().map(|f| f.tag).max().unwrap();
        let mut tags: Vec<u32> = (0..=max.max(1129) + 2048).collect();
        for m in d.messages() {
            tags.extend_from_slice(m.layout().members());
        }
        tags.extend([u32::MAX, u32::MAX - 1, 1 << 20, 65_535, 65_536]);
        for tag in tags {
            let c = d.tag_class(tag);
            assert_eq!(c, d.classify(tag), "{file}: {tag}");
            assert_eq!(
                c.is_header(),
                is_standard_header_tag(tag) || d.is_header_field(tag),
                "{file}: {tag}"
            );
            assert_eq!(
                c.is_trailer(),
                is_standard_trailer_tag(tag) || d.is_trailer_field(tag),
                "{file}: {tag}"
            );
            assert_eq!(
                c.in_dict_header_or_trailer(),
                d.is_header_field(tag) || d.is_trailer_field(tag),
                "{file}: {tag}"
            );
            assert_eq!(c.is_field(), d.is_field(tag), "{file}: {tag}");
        }
    }
}

proptest::proptest! {
    /// Any tag at all: the table (or its fallback beyond the table) answers as the lookups.
    #[test]
    fn tag_class_agrees_on_any_tag(tag in proptest::prelude::any::<u32>(), small in 0u32..70_000) {
        use tickwire_fix::validate::{is_standard_header_tag, is_standard_trailer_tag};
        static DICTS: std::sync::OnceLock<Vec<Dictionary>> = std::sync::OnceLock::new();
        let dicts = DICTS.get_or_init(|| ["FIX42.xml", "FIX44.xml", "FIXT11.xml", "FIX50SP2.xml"].map(load).into());
        for d in dicts {
            for t in [tag, small] {
                let c = d.tag_class(t);
                proptest::prop_assert_eq!(c.is_header(), is_standard_header_tag(t) || d.is_header_field(t));
                proptest::prop_assert_eq!(c.is_trailer(), is_standard_trailer_tag(t) || d.is_trailer_field(t));
                proptest::prop_assert_eq!(c.in_dict_header_or_trailer(), d.is_header_field(t) || d.is_trailer_field(t));
                proptest::prop_assert_eq!(c.is_field(), d.is_field(t));
            }
        }
    }
}

/// The one-byte fast paths (MsgType by byte, enumerated values by bitset) answer as a
/// linear search over the definitions, for every byte and every standard dictionary.
#[test]
fn one_byte_lookups_agree_with_a_linear_search() {
    for file in spec::SPEC_FILES {
        let d = load(file);
        for m in d.messages() {
            let found = d.message(m.msg_type.as_bytes()).unwrap();
            assert_eq!(found.msg_type, m.msg_type, "{file}");
        }
        for b in 0..=255u8 {
            let linear = d.messages().iter().find(|m| m.msg_type.as_bytes() == [b]);
            assert_eq!(
                d.message(&[b]).map(|m| &m.msg_type),
                linear.map(|m| &m.msg_type),
                "{file}: 35={b}"
            );
        }
        for f in d.fields().iter().filter(|f| !f.values().is_empty()) {
            for b in 0..=255u8 {
                let listed = f.values().iter().any(|v| v.value.as_bytes() == [b]);
                assert_eq!(f.allows(&[b]), listed, "{file}: {}={b}", f.tag);
            }
            for v in f.values() {
                assert!(
                    f.allows(v.value.as_bytes()),
                    "{file}: {}={}",
                    f.tag,
                    v.value
                );
            }
            assert!(!f.allows(b"\xff\xfe"), "{file}: {}", f.tag);
        }
    }
}
