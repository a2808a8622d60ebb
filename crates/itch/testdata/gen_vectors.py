#!/usr/bin/env python3
"""Writes the golden vectors in this directory from the ITCH 5.0 / MoldUDP64 layouts.

The layouts below are transcribed from the NASDAQ TotalView-ITCH 5.0 and MoldUDP64
specifications independently of the Rust code (which the vectors test). Each vector
file lists one field per line: hex bytes, then `# name = value`. Lines starting with
`#` are comments; the Rust test reads the hex before each `#`.

Run: python3 crates/itch/testdata/gen_vectors.py
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))

TS = 34_200_123_456_789  # 09:30:00.123456789


def alpha(s, n):
    b = s.encode("ascii")
    assert len(b) <= n
    return b + b" " * (n - len(b))


def field(kind, value):
    """(bytes, shown value) for a field kind: 'a<n>' alpha, 'u<n>' big-endian int of n bytes."""
    if kind[0] == "a":
        n = int(kind[1:])
        return alpha(value, n), repr(value)
    n = int(kind[1:])
    return value.to_bytes(n, "big"), str(value)


def header(t, locate, tracking, ts=TS):
    return [
        ("message_type", "a1", t),
        ("stock_locate", "u2", locate),
        ("tracking_number", "u2", tracking),
        ("timestamp", "u6", ts),
    ]


# (file name, type, locate, body fields) -- body field: (name, kind, value)
MESSAGES = [
    ("S_system_event", "S", 0, [("event_code", "a1", "Q")]),
    ("R_stock_directory", "R", 42, [
        ("stock", "a8", "AAPL"), ("market_category", "a1", "Q"),
        ("financial_status_indicator", "a1", "N"), ("round_lot_size", "u4", 100),
        ("round_lots_only", "a1", "N"), ("issue_classification", "a1", "C"),
        ("issue_sub_type", "a2", "Z"), ("authenticity", "a1", "P"),
        ("short_sale_threshold_indicator", "a1", "N"), ("ipo_flag", "a1", "N"),
        ("luld_reference_price_tier", "a1", "1"), ("etp_flag", "a1", "N"),
        ("etp_leverage_factor", "u4", 0), ("inverse_indicator", "a1", "N")]),
    ("H_stock_trading_action", "H", 42, [
        ("stock", "a8", "AAPL"), ("trading_state", "a1", "T"), ("reserved", "a1", " "),
        ("reason", "a4", "")]),
    ("Y_reg_sho_restriction", "Y", 42, [("stock", "a8", "AAPL"), ("reg_sho_action", "a1", "1")]),
    ("L_market_participant_position", "L", 42, [
        ("mpid", "a4", "GSCO"), ("stock", "a8", "AAPL"), ("primary_market_maker", "a1", "Y"),
        ("market_maker_mode", "a1", "N"), ("market_participant_state", "a1", "A")]),
    ("V_mwcb_decline_level", "V", 0, [
        ("level1", "u8", 3_710_123_000_000), ("level2", "u8", 3_450_414_390_000),
        ("level3", "u8", 3_190_705_780_000)]),
    ("W_mwcb_status", "W", 0, [("breached_level", "a1", "1")]),
    ("K_ipo_quoting_period_update", "K", 0, [
        ("stock", "a8", "NEWCO"), ("ipo_quotation_release_time", "u4", 41_400),
        ("ipo_quotation_release_qualifier", "a1", "A"), ("ipo_price", "u4", 210_000)]),
    ("J_luld_auction_collar", "J", 42, [
        ("stock", "a8", "AAPL"), ("auction_collar_reference_price", "u4", 1_895_000),
        ("upper_auction_collar_price", "u4", 1_989_750), ("lower_auction_collar_price", "u4", 1_800_250),
        ("auction_collar_extension", "u4", 2)]),
    ("h_operational_halt", "h", 42, [
        ("stock", "a8", "AAPL"), ("market_code", "a1", "Q"), ("operational_halt_action", "a1", "H")]),
    ("A_add_order", "A", 42, [
        ("order_ref", "u8", 0x0123_4567_89AB_CDEF), ("side", "a1", "B"), ("shares", "u4", 300),
        ("stock", "a8", "AAPL"), ("price", "u4", 1_895_100)]),
    ("F_add_order_mpid", "F", 42, [
        ("order_ref", "u8", 7_000_001), ("side", "a1", "S"), ("shares", "u4", 1_000),
        ("stock", "a8", "MSFT"), ("price", "u4", 4_201_500), ("attribution", "a4", "MSCO")]),
    ("E_order_executed", "E", 42, [
        ("order_ref", "u8", 0x0123_4567_89AB_CDEF), ("executed_shares", "u4", 100),
        ("match_number", "u8", 900_000_001)]),
    ("C_order_executed_with_price", "C", 42, [
        ("order_ref", "u8", 7_000_001), ("executed_shares", "u4", 250),
        ("match_number", "u8", 900_000_002), ("printable", "a1", "Y"),
        ("execution_price", "u4", 4_201_400)]),
    ("X_order_cancel", "X", 42, [("order_ref", "u8", 7_000_001), ("cancelled_shares", "u4", 50)]),
    ("D_order_delete", "D", 42, [("order_ref", "u8", 7_000_001)]),
    ("U_order_replace", "U", 42, [
        ("original_order_ref", "u8", 0x0123_4567_89AB_CDEF), ("new_order_ref", "u8", 0x0123_4567_89AB_CDF0),
        ("shares", "u4", 200), ("price", "u4", 1_895_200)]),
    ("P_trade", "P", 42, [
        ("order_ref", "u8", 0), ("side", "a1", "B"), ("shares", "u4", 75), ("stock", "a8", "AAPL"),
        ("price", "u4", 1_895_050), ("match_number", "u8", 900_000_003)]),
    ("Q_cross_trade", "Q", 42, [
        ("shares", "u8", 5_000_000_000), ("stock", "a8", "AAPL"), ("cross_price", "u4", 1_895_000),
        ("match_number", "u8", 900_000_004), ("cross_type", "a1", "O")]),
    ("B_broken_trade", "B", 42, [("match_number", "u8", 900_000_003)]),
    ("I_noii", "I", 42, [
        ("paired_shares", "u8", 1_200_000), ("imbalance_shares", "u8", 35_000),
        ("imbalance_direction", "a1", "S"), ("stock", "a8", "AAPL"), ("far_price", "u4", 1_890_000),
        ("near_price", "u4", 1_893_000), ("current_reference_price", "u4", 1_894_500),
        ("cross_type", "a1", "C"), ("price_variation_indicator", "a1", "L")]),
    ("N_rpii", "N", 42, [("stock", "a8", "AAPL"), ("interest_flag", "a1", "A")]),
    ("O_dlcr_price_discovery", "O", 77, [
        ("stock", "a8", "DLCR"), ("open_eligibility_status", "a1", "Y"),
        ("minimum_allowable_price", "u4", 80_000), ("maximum_allowable_price", "u4", 270_000),
        ("near_execution_price", "u4", 150_000), ("near_execution_time", "u8", 36_000_000_000_000),
        ("lower_price_range_collar", "u4", 135_000), ("upper_price_range_collar", "u4", 165_000)]),
]

# Lengths printed in the specification, to check the transcription above.
SPEC_LEN = {"S": 12, "R": 39, "H": 25, "Y": 20, "L": 26, "V": 35, "W": 12, "K": 28, "J": 35,
            "h": 21, "A": 36, "F": 40, "E": 31, "C": 36, "X": 23, "D": 19, "U": 35, "P": 44,
            "Q": 40, "B": 19, "I": 50, "N": 20, "O": 48}


def render(fields):
    out, lines, off = b"", [], 0
    for name, kind, value in fields:
        b, shown = field(kind, value)
        lines.append(f"{b.hex(' '):<24} # [{off:2}..{off + len(b):2}] {name} = {shown}")
        out += b
        off += len(b)
    return out, lines


def write(path, title, lines):
    with open(path, "w") as f:
        f.write(f"# {title}\n")
        f.write("# Built from the specification layout by gen_vectors.py; hex before '#', one field a line.\n")
        for line in lines:
            f.write(line + "\n")


encoded = {}
for i, (name, t, locate, body) in enumerate(MESSAGES):
    data, lines = render(header(t, locate, i + 1) + body)
    assert len(data) == SPEC_LEN[t], (name, len(data))
    encoded[name] = data
    write(os.path.join(HERE, "itch", name + ".hex"), f"ITCH 5.0 '{t}' ({len(data)} bytes)", lines)


def mold_header(session, seq, count):
    return [("session", "a10", session), ("sequence_number", "u8", seq), ("message_count", "u2", count)]


# A downstream packet of three messages, sequence 1000..1002.
blocks = ["A_add_order", "E_order_executed", "D_order_delete"]
_, lines = render(mold_header("20261122A", 1000, len(blocks)))
for n in blocks:
    lines.append(f"{len(encoded[n]).to_bytes(2, 'big').hex(' '):<24} # message_length = {len(encoded[n])}")
    lines.append(f"{encoded[n].hex(' '):<24} # message = {n}")
write(os.path.join(HERE, "mold", "packet_3_messages.hex"), "MoldUDP64 downstream packet, 3 messages", lines)

_, lines = render(mold_header("20261122A", 1003, 0))
write(os.path.join(HERE, "mold", "heartbeat.hex"), "MoldUDP64 heartbeat (count 0, next sequence 1003)", lines)

_, lines = render(mold_header("20261122A", 1003, 0xFFFF))
write(os.path.join(HERE, "mold", "end_of_session.hex"), "MoldUDP64 end of session (count 0xFFFF)", lines)

_, lines = render(mold_header("20261122A", 998, 5))
write(os.path.join(HERE, "mold", "request.hex"), "MoldUDP64 re-request: 5 messages from 998", lines)
