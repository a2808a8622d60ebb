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
