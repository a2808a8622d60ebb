//! FIX session-layer test case 14 (field-level errors) with a real QuickFIX data
//! dictionary (FIX44.xml, fetched by the test support, never committed): the
//! session's validation hook turns `validate.rs` failures into QuickFIX's Rejects.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_harness;
#[path = "support/spec.rs"]
mod spec;

use std::sync::Arc;

use session_harness::*;
use tickwire_fix::dict::Dictionary;
use tickwire_fix::session::{Role, Session, Validation};
use tickwire_fix::store::MemoryStore;
use tickwire_fix::validate::ValidationOptions;

fn validating_acceptor() -> Harness {
    let dict = Dictionary::from_file(spec::spec_dir().join("FIX44.xml")).expect("FIX44.xml");
    let mut h = Harness::acceptor("FIX.4.4");
    let cfg = Harness::config("FIX.4.4", Role::Acceptor);
    h.s = Session::new(cfg, MemoryStore::new(T0))
        .unwrap()
        .with_validation(Validation::single(
            Arc::new(dict),
            ValidationOptions::default(),
        ));
    h.logon_as_acceptor();
    h
}

const ORDER: &str = "11=ORD1|21=1|38=100|40=1|54=1|55=IBM|60=20261120-08:00:00.000|";

#[test]
fn case_14_valid_order_passes_the_dictionary() {
    let mut h = validating_acceptor();
    let m = h.build("D", 2, ORDER);
    assert_eq!(h.feed(&m), vec![Act::FromApp(pretty(&m))]);
}

#[test]
fn case_14b_required_body_tag_missing_is_rejected() {
    let mut h = validating_acceptor();
    let out = h.recv(
        "D",
        "21=1|38=100|40=1|54=1|55=IBM|60=20261120-08:00:00.000|",
    );
    assert_eq!(
        sends(&out),
        vec![format!(
            "35=3|{}45=2|58=Required tag missing|371=11|372=D|373=1|",
            h.hdr(2)
        )]
    );
    assert_eq!(h.seqs(), (3, 3));
}

#[test]
fn case_14c_tag_not_defined_for_message_type_is_rejected() {
    let mut h = validating_acceptor();
    let out = h.recv("D", &format!("{ORDER}108=30|"));
    assert_eq!(
        sends(&out),
        vec![format!(
            "35=3|{}45=2|58=Tag not defined for this message type|371=108|372=D|373=2|",
            h.hdr(2)
        )]
    );
}

#[test]
fn case_14e_value_not_in_enumeration_is_rejected() {
    let mut h = validating_acceptor();
    let out = h.recv("D", &ORDER.replace("54=1", "54=Z"));
    assert_eq!(
        sends(&out),
        vec![format!(
            "35=3|{}45=2|58=Value is incorrect (out of range) for this tag|371=54|372=D|373=5|",
            h.hdr(2)
        )]
    );
}

#[test]
fn case_2i_invalid_msg_type_is_rejected() {
    let mut h = validating_acceptor();
    let out = h.recv("ZZ", "");
    assert_eq!(
        sends(&out),
        vec![format!(
            "35=3|{}45=2|58=Invalid MsgType|372=ZZ|373=11|",
            h.hdr(2)
        )]
    );
    assert_eq!(h.seqs(), (3, 3));
}

#[test]
fn with_length_and_checksum_validation_off_a_bad_checksum_is_accepted() {
    // QuickFIX ValidateLengthAndChecksum=N.
    let dict = Dictionary::from_file(spec::spec_dir().join("FIX44.xml")).expect("FIX44.xml");
    let mut h = Harness::acceptor("FIX.4.4");
    let cfg = Harness::config("FIX.4.4", Role::Acceptor);
    let options = ValidationOptions {
        validate_length_and_checksum: false,
        ..ValidationOptions::default()
    };
    h.s = Session::new(cfg, MemoryStore::new(T0))
        .unwrap()
        .with_validation(Validation::single(Arc::new(dict), options));
    h.logon_as_acceptor();
    let mut m = h.build("D", 2, ORDER);
    // "10=NNN<SOH>": change the last digit of the checksum.
    let at = m.len() - 2;
    m[at] = if m[at] == b'0' { b'1' } else { b'0' };
    assert_eq!(h.feed(&m), vec![Act::FromApp(pretty(&m))]);
    assert_eq!(h.seqs(), (2, 3));
}

/// A FIXT.1.1 acceptor with FIX.5.0 as its DefaultApplVerID's (and default)
/// application dictionary and FIX.5.0 SP2 under `AppDataDictionary.FIX.5.0SP2`.
fn fixt_acceptor() -> Harness {
    let spec = spec::spec_dir();
    let load = |f: &str| Arc::new(Dictionary::from_file(spec.join(f)).expect(f));
    let fix50 = load("FIX50.xml");
    let v = Validation::fixt(
        load("FIXT11.xml"),
        fix50.clone(),
        ValidationOptions::default(),
    )
    .with_app_for("FIX.5.0", fix50)
    .with_app_for("FIX.5.0SP2", load("FIX50SP2.xml"));
    let mut h = Harness::acceptor("FIXT.1.1");
    let cfg = Harness::config("FIXT.1.1", Role::Acceptor);
    h.s = Session::new(cfg, MemoryStore::new(T0))
        .unwrap()
        .with_validation(v);
    h
}

/// CopyMsgIndicator (797) is a field of FIX.5.0 but not of its NewOrderSingle; SP2's
/// NewOrderSingle has it.
const SP2_ORDER: &str = "11=ORD1|21=1|38=100|40=1|54=1|55=IBM|60=20261120-08:00:00.000|797=Y|";

#[test]
fn fixt_application_messages_are_validated_with_the_dictionary_of_their_appl_ver_id() {
    // As QuickFIX's Session::next: the counterparty's DefaultApplVerID (its Logon's
    // 1137) selects the dictionary, ApplVerID (1128) in a message overrides it.
    let mut h = fixt_acceptor();
    h.logon_with("98=0|108=30|1137=7|");
    let out = h.recv("D", SP2_ORDER);
    assert_eq!(
        sends(&out),
        vec![format!(
            "35=3|{}45=2|58=Tag not defined for this message type|371=797|372=D|373=2|",
            h.hdr(2)
        )],
        "FIX.5.0's NewOrderSingle has no 797"
    );
    let m = h.build("D", 3, &format!("1128=9|{SP2_ORDER}"));
    h.peer_seq = 4;
    assert_eq!(h.feed(&m), vec![Act::FromApp(pretty(&m))], "1128=9: SP2's");
}

#[test]
fn fixt_logon_default_appl_ver_id_selects_the_dictionary_until_the_next_logon() {
    let mut h = fixt_acceptor();
    h.logon_with("98=0|108=30|1137=9|");
    let m = h.build("D", 2, SP2_ORDER);
    h.peer_seq = 3;
    assert_eq!(h.feed(&m), vec![Act::FromApp(pretty(&m))], "1137=9: SP2's");
    // 1128 still overrides, back to FIX.5.0.
    let out = h.recv("D", &format!("1128=7|{SP2_ORDER}"));
    assert_eq!(
        sends(&out),
        vec![format!(
            "35=3|{}45=3|58=Tag not defined for this message type|371=797|372=D|373=2|",
            h.hdr(2)
        )]
    );
    // A version without a dictionary of its own gets the default one (FIX.5.0).
    let out = h.recv("D", &format!("1128=8|{SP2_ORDER}"));
    assert_eq!(sends(&out).len(), 1);
    assert!(sends(&out)[0].contains("|371=797|"), "{out:?}");
}

#[test]
fn fixt_session_adopting_the_counterpartys_default_appl_ver_id_answers_with_it() {
    // What QuickFIX's acceptance-test application does in fromAdmin
    // (setSenderDefaultApplVerID): the Logon answer carries the initiator's 1137.
    let mut h = fixt_acceptor();
    let mut cfg = Harness::config("FIXT.1.1", Role::Acceptor);
    cfg.adopt_counterparty_default_appl_ver_id = true;
    let v = h.s.validation().unwrap().clone();
    h.s = Session::new(cfg, MemoryStore::new(T0))
        .unwrap()
        .with_validation(v);
    let out = h.logon_with("98=0|108=30|1137=9|");
    let logon = sends(&out)
        .into_iter()
        .find(|m| m.starts_with("35=A|"))
        .unwrap();
    assert!(logon.ends_with("|98=0|108=30|1137=9|"), "{logon}");
    // Without the flag (QuickFIX's session alone): its own DefaultApplVerID.
    let mut h = fixt_acceptor();
    let out = h.logon_with("98=0|108=30|1137=9|");
    let logon = sends(&out)
        .into_iter()
        .find(|m| m.starts_with("35=A|"))
        .unwrap();
    assert!(logon.ends_with("|98=0|108=30|1137=7|"), "{logon}");
}
