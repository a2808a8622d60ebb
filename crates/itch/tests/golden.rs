//! Golden vectors (testdata/, built from the specification layouts by gen_vectors.py):
//! each decodes to the listed field values and re-encodes byte-identically.

// A test fails loudly on the first surprise: unwrap/expect are its asserts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tickwire_itch::*;

const TS: u64 = 34_200_123_456_789;

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(rel)
}

/// The hex before each `#` of every line, as bytes.
fn read_hex(rel: &str) -> Vec<u8> {
    let text = std::fs::read_to_string(testdata(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let mut out = Vec::new();
    for line in text.lines() {
        let hex = line.split('#').next().unwrap_or("");
        for tok in hex.split_whitespace() {
            out.push(u8::from_str_radix(tok, 16).unwrap_or_else(|e| panic!("{rel}: {tok}: {e}")));
        }
    }
    out
}

fn h(stock_locate: u16, tracking_number: u16) -> Header {
    Header {
        stock_locate,
        tracking_number,
        timestamp: TS,
    }
}

fn sym(s: &str) -> Symbol {
    Symbol::new(s).unwrap()
}

/// The values each vector file must decode to (see gen_vectors.py).
fn expected() -> Vec<(&'static str, Message)> {
    vec![
        (
            "S_system_event",
            SystemEvent {
                header: h(0, 1),
                event_code: b'Q',
            }
            .into(),
        ),
        (
            "R_stock_directory",
            StockDirectory::common_stock(h(42, 2), sym("AAPL")).into(),
        ),
        (
            "H_stock_trading_action",
            StockTradingAction {
                header: h(42, 3),
                stock: sym("AAPL"),
                trading_state: b'T',
                reserved: b' ',
                reason: *b"    ",
            }
            .into(),
        ),
        (
            "Y_reg_sho_restriction",
            RegShoRestriction {
                header: h(42, 4),
                stock: sym("AAPL"),
                reg_sho_action: b'1',
            }
            .into(),
        ),
        (
            "L_market_participant_position",
            MarketParticipantPosition {
                header: h(42, 5),
                mpid: *b"GSCO",
                stock: sym("AAPL"),
                primary_market_maker: b'Y',
                market_maker_mode: b'N',
                market_participant_state: b'A',
            }
            .into(),
        ),
        (
            "V_mwcb_decline_level",
            MwcbDeclineLevel {
                header: h(0, 6),
                level1: Price8(3_710_123_000_000),
                level2: Price8(3_450_414_390_000),
                level3: Price8(3_190_705_780_000),
            }
            .into(),
        ),
        (
            "W_mwcb_status",
            MwcbStatus {
                header: h(0, 7),
                breached_level: b'1',
            }
            .into(),
        ),
        (
            "K_ipo_quoting_period_update",
            IpoQuotingPeriodUpdate {
                header: h(0, 8),
                stock: sym("NEWCO"),
                ipo_quotation_release_time: 41_400,
                ipo_quotation_release_qualifier: b'A',
                ipo_price: Price(210_000),
            }
            .into(),
        ),
        (
            "J_luld_auction_collar",
            LuldAuctionCollar {
                header: h(42, 9),
                stock: sym("AAPL"),
                auction_collar_reference_price: Price(1_895_000),
                upper_auction_collar_price: Price(1_989_750),
                lower_auction_collar_price: Price(1_800_250),
                auction_collar_extension: 2,
            }
            .into(),
        ),
        (
            "h_operational_halt",
            OperationalHalt {
                header: h(42, 10),
                stock: sym("AAPL"),
                market_code: b'Q',
                operational_halt_action: b'H',
            }
            .into(),
        ),
        (
            "A_add_order",
            AddOrder {
                header: h(42, 11),
                order_ref: 0x0123_4567_89AB_CDEF,
                side: Side::Buy,
                shares: 300,
                stock: sym("AAPL"),
                price: Price(1_895_100),
            }
            .into(),
        ),
        (
            "F_add_order_mpid",
            AddOrderMpid {
                header: h(42, 12),
                order_ref: 7_000_001,
                side: Side::Sell,
                shares: 1_000,
                stock: sym("MSFT"),
                price: Price(4_201_500),
                attribution: *b"MSCO",
            }
            .into(),
        ),
        (
            "E_order_executed",
            OrderExecuted {
                header: h(42, 13),
                order_ref: 0x0123_4567_89AB_CDEF,
                executed_shares: 100,
                match_number: 900_000_001,
            }
            .into(),
        ),
        (
            "C_order_executed_with_price",
            OrderExecutedWithPrice {
                header: h(42, 14),
                order_ref: 7_000_001,
                executed_shares: 250,
                match_number: 900_000_002,
                printable: b'Y',
                execution_price: Price(4_201_400),
            }
            .into(),
        ),
        (
            "X_order_cancel",
            OrderCancel {
                header: h(42, 15),
                order_ref: 7_000_001,
                cancelled_shares: 50,
            }
            .into(),
        ),
        (
            "D_order_delete",
            OrderDelete {
                header: h(42, 16),
                order_ref: 7_000_001,
            }
            .into(),
        ),
        (
            "U_order_replace",
            OrderReplace {
                header: h(42, 17),
                original_order_ref: 0x0123_4567_89AB_CDEF,
                new_order_ref: 0x0123_4567_89AB_CDF0,
                shares: 200,
                price: Price(1_895_200),
            }
            .into(),
        ),
        (
            "P_trade",
            Trade {
                header: h(42, 18),
                order_ref: 0,
                side: Side::Buy,
                shares: 75,
                stock: sym("AAPL"),
                price: Price(1_895_050),
                match_number: 900_000_003,
            }
            .into(),
        ),
        (
            "Q_cross_trade",
            CrossTrade {
                header: h(42, 19),
                shares: 5_000_000_000,
                stock: sym("AAPL"),
                cross_price: Price(1_895_000),
                match_number: 900_000_004,
                cross_type: b'O',
            }
            .into(),
        ),
        (
            "B_broken_trade",
            BrokenTrade {
                header: h(42, 20),
                match_number: 900_000_003,
            }
            .into(),
        ),
        (
            "I_noii",
            Noii {
                header: h(42, 21),
                paired_shares: 1_200_000,
                imbalance_shares: 35_000,
                imbalance_direction: b'S',
                stock: sym("AAPL"),
                far_price: Price(1_890_000),
                near_price: Price(1_893_000),
                current_reference_price: Price(1_894_500),
                cross_type: b'C',
                price_variation_indicator: b'L',
            }
            .into(),
        ),
        (
            "N_rpii",
            Rpii {
                header: h(42, 22),
                stock: sym("AAPL"),
                interest_flag: b'A',
            }
            .into(),
        ),
        (
            "O_dlcr_price_discovery",
            DlcrPriceDiscovery {
                header: h(77, 23),
                stock: sym("DLCR"),
                open_eligibility_status: b'Y',
                minimum_allowable_price: Price(80_000),
                maximum_allowable_price: Price(270_000),
                near_execution_price: Price(150_000),
                near_execution_time: 36_000_000_000_000,
                lower_price_range_collar: Price(135_000),
                upper_price_range_collar: Price(165_000),
            }
            .into(),
        ),
    ]
}

/// Lengths printed in the ITCH 5.0 specification.
const SPEC_LENGTHS: [(u8, usize); 23] = [
    (b'S', 12),
    (b'R', 39),
    (b'H', 25),
    (b'Y', 20),
    (b'L', 26),
    (b'V', 35),
    (b'W', 12),
    (b'K', 28),
    (b'J', 35),
    (b'h', 21),
    (b'A', 36),
    (b'F', 40),
    (b'E', 31),
    (b'C', 36),
    (b'X', 23),
    (b'D', 19),
    (b'U', 35),
    (b'P', 44),
    (b'Q', 40),
    (b'B', 19),
    (b'I', 50),
    (b'N', 20),
    (b'O', 48),
];

#[test]
fn every_vector_decodes_to_its_fields_and_reencodes_identically() {
    let cases = expected();
    assert_eq!(cases.len(), 23, "one vector per ITCH 5.0 message type");
    for (name, want) in cases {
        let bytes = read_hex(&format!("itch/{name}.hex"));
        assert_eq!(bytes[0], want.msg_type(), "{name}: type byte");
        let got = decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, want, "{name}: decoded fields");
        let mut out = [0u8; 64];
        let n = want.encode(&mut out).unwrap();
        assert_eq!(&out[..n], &bytes[..], "{name}: re-encoding");
        let mut v = vec![0xEE];
        assert_eq!(want.encode_to_vec(&mut v).unwrap(), n);
        assert_eq!(&v[1..], &bytes[..], "{name}: encode_to_vec appends");
    }
}

#[test]
fn every_message_type_has_its_specified_length() {
    let cases = expected();
    for (ty, len) in SPEC_LENGTHS {
        assert_eq!(
            message_len(ty),
            Some(len),
            "message_len('{}')",
            char::from(ty)
        );
        let (name, msg) = cases
            .iter()
            .find(|(_, m)| m.msg_type() == ty)
            .unwrap_or_else(|| panic!("no vector for '{}'", char::from(ty)));
        assert_eq!(msg.encoded_len(), len, "{name}");
        assert_eq!(msg.to_bytes().unwrap().1, len, "{name}: encoded bytes");
        assert_eq!(
            read_hex(&format!("itch/{name}.hex")).len(),
            len,
            "{name}: vector"
        );
    }
    // The public table agrees, covers exactly these types, and the named constants too.
    let table: Vec<(u8, usize)> = MESSAGE_TYPES.iter().map(|&(t, l, _)| (t, l)).collect();
    assert_eq!(table, SPEC_LENGTHS.to_vec());
    assert_eq!(
        [
            SYSTEM_EVENT_LEN,
            STOCK_DIRECTORY_LEN,
            STOCK_TRADING_ACTION_LEN,
            REG_SHO_RESTRICTION_LEN,
            MARKET_PARTICIPANT_POSITION_LEN,
            MWCB_DECLINE_LEVEL_LEN,
            MWCB_STATUS_LEN,
            IPO_QUOTING_PERIOD_UPDATE_LEN,
            LULD_AUCTION_COLLAR_LEN,
            OPERATIONAL_HALT_LEN,
            ADD_ORDER_LEN,
            ADD_ORDER_MPID_LEN,
            ORDER_EXECUTED_LEN,
            ORDER_EXECUTED_WITH_PRICE_LEN,
            ORDER_CANCEL_LEN,
            ORDER_DELETE_LEN,
            ORDER_REPLACE_LEN,
            TRADE_LEN,
            CROSS_TRADE_LEN,
            BROKEN_TRADE_LEN,
            NOII_LEN,
            RPII_LEN,
            DLCR_PRICE_DISCOVERY_LEN
        ],
        SPEC_LENGTHS.map(|(_, l)| l)
    );
    assert_eq!(
        MAX_MESSAGE_LEN,
        SPEC_LENGTHS.iter().map(|&(_, l)| l).max().unwrap()
    );
    let unknown = (0u8..=255).filter(|t| message_len(*t).is_none()).count();
    assert_eq!(unknown, 256 - 23);
}

#[test]
fn mold_packet_vector() {
    let bytes = read_hex("mold/packet_3_messages.hex");
    let p = MoldPacket::parse(&bytes).unwrap();
    assert_eq!(p.session(), Session::new("20261122A").unwrap());
    assert_eq!(p.session().as_str(), Some("20261122A"));
    assert_eq!(
        (p.sequence(), p.message_count(), p.kind()),
        (1000, 3, PacketKind::Messages)
    );
    assert_eq!(p.next_sequence(), 1003);
    let all = expected();
    let want: Vec<Message> = ["A_add_order", "E_order_executed", "D_order_delete"]
        .iter()
        .map(|n| all.iter().find(|(name, _)| name == n).unwrap().1)
        .collect();
    let got: Vec<(u64, Message)> = p
        .messages()
        .map(|b| {
            let b = b.unwrap();
            (b.sequence, decode(b.data).unwrap())
        })
        .collect();
    assert_eq!(got, vec![(1000, want[0]), (1001, want[1]), (1002, want[2])]);

    // The builder produces the same bytes.
    let mut builder = PacketBuilder::new(Session::new("20261122A").unwrap(), 1000, 1400);
    for m in &want {
        builder.push_message(m).unwrap();
    }
    assert_eq!(builder.finish(), &bytes[..]);
    let mut again = Vec::new();
    let raw: Vec<Vec<u8>> = want
        .iter()
        .map(|m| {
            let mut v = Vec::new();
            m.encode_to_vec(&mut v).unwrap();
            v
        })
        .collect();
    let n = encode_packet(
        &mut again,
        p.session(),
        1000,
        1400,
        raw.iter().map(Vec::as_slice),
    );
    assert_eq!((n, &again[..]), (3, &bytes[..]));
}

#[test]
fn mold_heartbeat_end_of_session_and_request_vectors() {
    let session = Session::new("20261122A").unwrap();

    let hb = read_hex("mold/heartbeat.hex");
    let p = MoldPacket::parse(&hb).unwrap();
    assert_eq!(
        (p.kind(), p.sequence(), p.next_sequence()),
        (PacketKind::Heartbeat, 1003, 1003)
    );
    assert_eq!(p.messages().count(), 0);

    let eos = read_hex("mold/end_of_session.hex");
    let p = MoldPacket::parse(&eos).unwrap();
    assert_eq!(
        (p.kind(), p.sequence(), p.message_count()),
        (PacketKind::EndOfSession, 1003, 0)
    );
    assert!(p.validate().is_ok());

    // A builder that has sent 1000..=1002 announces 1003 in both.
    let mut b = PacketBuilder::new(session, 1000, 1400);
    for _ in 0..3 {
        b.push(b"x").unwrap();
    }
    b.finish();
    assert_eq!(&b.heartbeat()[..], &hb[..]);
    assert_eq!(&b.end_of_session()[..], &eos[..]);

    let rq = read_hex("mold/request.hex");
    let r = RetransmitRequest::decode(&rq).unwrap();
    assert_eq!(
        r,
        RetransmitRequest {
            session,
            sequence: 998,
            count: 5
        }
    );
    assert_eq!(&r.to_bytes()[..], &rq[..]);
    let mut out = [0u8; 32];
    assert_eq!(r.encode(&mut out), Ok(REQUEST_LEN));
    assert_eq!(&out[..REQUEST_LEN], &rq[..]);
}
