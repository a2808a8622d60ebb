#!/usr/bin/env python3
"""Generates the FIX codec golden vectors in this directory (run once; output committed).

Each vector is NAME.fix (the input byte stream, `|` standing for SOH, one line) and
NAME.expect (the transcript the test's reference driver must produce when it feeds the
whole stream to `frame_len` with max_len = 4096, drops `skip` bytes on frame errors and
`parse`s every framed message):

    msg                 a message parsed; followed by its fields as tag=value lines
    frame_error=DEBUG   frame_len returned Err (Debug form of the error)
    parse_error=DEBUG   parse returned Err (Debug form of the error)
    incomplete=N        frame_len wants more bytes; N bytes are left over

The messages are written by hand from the FIX 4.2/4.4/FIXT.1.1 specifications; this
script only computes BodyLength (9) and CheckSum (10), independently of the Rust code.
"""
import os

SOH = b"\x01"
HERE = os.path.dirname(os.path.abspath(__file__))
MAX_LEN = 4096


def enc_fields(fields):
    return b"".join(str(t).encode() + b"=" + (v if isinstance(v, bytes) else v.encode()) + SOH
                    for t, v in fields)


def build(begin, body_fields, body_len_delta=0, checksum_delta=0):
    """Returns (bytes, all fields incl. 8/9/10)."""
    body = enc_fields(body_fields)
    bl = len(body) + body_len_delta
    head = enc_fields([(8, begin), (9, str(bl))])
    cs = (sum(head + body) + checksum_delta) % 256
    msg = head + body + b"10=%03d" % cs + SOH
    return msg, [(8, begin), (9, str(bl))] + list(body_fields) + [(10, "%03d" % cs)]


def field_lines(fields):
    out = ["msg"]
    for t, v in fields:
        v = v if isinstance(v, bytes) else v.encode()
        out.append("%d=%s" % (t, v.replace(SOH, b"|").decode()))
    return out


def write(name, stream, lines):
    assert b"|" not in stream.replace(SOH, b""), name
    with open(os.path.join(HERE, name + ".fix"), "wb") as f:
        f.write(stream.replace(SOH, b"|") + b"\n")
    with open(os.path.join(HERE, name + ".expect"), "w") as f:
        f.write("\n".join(lines) + "\n")


def hdr(seq, sender="CLIENT1", target="EXEC1", t="20240315-09:30:00.000"):
    return [(49, sender), (56, target), (34, str(seq)), (52, t)]


RAW = b"ab\x01cd=\x0110=123\x01x"
XML = b"<a>\x01b=1</a>"
ENC = b"\xe6\x97\xa5\x01"

GOOD = {
    "logon": ("FIX.4.4", [(35, "A")] + hdr(1) + [(98, "0"), (108, "30"), (141, "Y")]),
    "heartbeat": ("FIX.4.4", [(35, "0")] + hdr(2, t="20240315-09:30:30.001")),
    "heartbeat_fix42_seconds": ("FIX.4.2", [(35, "0")] + hdr(7, t="20240315-09:30:30")),
    "test_request": ("FIX.4.4", [(35, "1")] + hdr(3) + [(112, "TEST-20240315-1")]),
    "resend_request": ("FIX.4.4", [(35, "2")] + hdr(4) + [(7, "5"), (16, "0")]),
    "sequence_reset_gap_fill": ("FIX.4.4", [(35, "4")] + hdr(5) + [
        (43, "Y"), (122, "20240315-09:29:00.000"), (123, "Y"), (36, "10")]),
    "reject": ("FIX.4.4", [(35, "3")] + hdr(6) + [
        (45, "7"), (371, "44"), (372, "D"), (373, "6"),
        (58, "Incorrect data format for value")]),
    "logout": ("FIX.4.4", [(35, "5")] + hdr(8) + [(58, "Bye, see you tomorrow")]),
    "new_order_single": ("FIX.4.4", [(35, "D")] + hdr(9, t="20240315-09:30:01.123456") + [
        (11, "ORD-000001"), (21, "1"), (55, "AAPL"), (54, "1"),
        (60, "20240315-09:30:01.123456789"), (38, "100"), (40, "2"), (44, "187.25"),
        (59, "0")]),
    "execution_report": ("FIX.4.4", [(35, "8")] + hdr(10, "EXEC1", "CLIENT1") + [
        (37, "X-77"), (11, "ORD-000001"), (17, "E-1"), (150, "F"), (39, "2"),
        (55, "AAPL"), (54, "1"), (38, "100"), (44, "187.25"), (32, "100"), (31, "187.20"),
        (151, "0"), (14, "100"), (6, "187.20"), (60, "20240315-09:30:01.124")]),
    "md_incremental_refresh": ("FIX.4.4", [(35, "X")] + hdr(11, "VENUE", "ALGO") + [
        (262, "MDREQ-1"), (268, "2"),
        (279, "0"), (269, "0"), (55, "EURUSD"), (270, "1.08345"), (271, "1000000"),
        (273, "09:30:00.250"), (279, "1"), (269, "1"), (55, "EURUSD"), (270, "1.08350"),
        (271, "500000"), (273, "09:30:00.250")]),
    # RawData (96) holding SOH, '=' and something that looks like a trailer.
    "logon_raw_data_with_soh": ("FIX.4.4", [(35, "A")] + hdr(1) + [
        (98, "0"), (108, "30"), (95, str(len(RAW))), (96, RAW),
        (141, "Y")]),
    # XmlData (213) in the header and EncodedText (355) in the body.
    "news_xml_encoded_text": ("FIX.4.4", [(35, "B")] + hdr(12) + [
        (212, str(len(XML))), (213, XML), (148, "Headline"), (33, "1"),
        (58, "plain"), (354, str(len(ENC))), (355, ENC)]),
    "fixt_logon": ("FIXT.1.1", [(35, "A")] + hdr(1) + [
        (98, "0"), (108, "30"), (1137, "9")]),
}


def main():
    for name, (begin, body) in GOOD.items():
        msg, fields = build(begin, body)
        write(name, msg, field_lines(fields))

    logon, logon_fields = build(*GOOD["logon"])
    hb, hb_fields = build(*GOOD["heartbeat"])
    tr, tr_fields = build(*GOOD["test_request"])

    # Several messages back to back.
    write("three_messages", hb + tr + logon,
          field_lines(hb_fields) + field_lines(tr_fields) + field_lines(logon_fields))

    # CheckSum off by one: framed fine, parse rejects.
    bad, f = build(*GOOD["logon"], checksum_delta=1)
    good_cs = int(logon_fields[-1][1])
    write("bad_checksum", bad,
          ["parse_error=BadCheckSum { declared: %d, computed: %d }" % ((good_cs + 1) % 256, good_cs)])

    # BodyLength 5 too large: the trailer lands inside the next message; resync there.
    bad, _ = build(*GOOD["logon"], body_len_delta=5)
    write("bad_body_length_then_good", bad + hb,
          ["frame_error=BodyLengthMismatch { skip: %d }" % len(bad)] + field_lines(hb_fields))

    # BodyLength 3 too small, alone: no 8=FIX after it, everything is skipped.
    bad, _ = build(*GOOD["heartbeat"], body_len_delta=-3)
    write("bad_body_length_short", bad,
          ["frame_error=BodyLengthMismatch { skip: %d }" % len(bad)])

    # Garbage before a message (with a false "8=" start in it).
    garbage = b"GARBAGE\x018=FIX\x0112=3\x01"
    write("garbage_prefix", garbage + hb,
          ["frame_error=Garbage { skip: 8 }",
           "frame_error=BadBodyLength { skip: %d }" % (len(garbage) - 8)]
          + field_lines(hb_fields))

    # A message cut short: framing waits for more.
    cut = logon[: len(logon) - 20]
    write("truncated", hb + cut, field_lines(hb_fields) + ["incomplete=%d" % len(cut)])

    # BodyLength announcing far more than max_len: rejected before buffering.
    huge = b"8=FIX.4.4\x019=999999999\x0135=A\x0149=X\x01"
    write("huge_body_length", huge,
          ["frame_error=TooLong { len: %d, max: %d, skip: %d }"
           % (len(b"8=FIX.4.4\x019=999999999\x01") + 999999999 + 7, MAX_LEN, len(huge))])

    # Field-level errors inside well-framed messages (QuickFIX answers with a Reject).
    msg, _ = build("FIX.4.4", [(35, "D")] + hdr(13) + [(0, "x"), (11, "A")])
    write("tag_zero", msg, ["parse_error=InvalidTagNumber { tag: 0 }"])
    msg, _ = build("FIX.4.4", [(35, "D")] + hdr(14) + [(11, "A"), (58, "")])
    write("empty_value", msg, ["parse_error=EmptyValue { tag: 58 }"])
    body = [(35, "D")] + hdr(15) + [(11, "A")]
    msg, _ = build("FIX.4.4", body + [("5x", "1")])
    offset = len(msg) - len(b"5x=1\x0110=000\x01")
    write("non_digit_tag", msg, ["parse_error=InvalidTag { offset: %d }" % offset])
    msg, _ = build("FIX.4.4", [(49, "CLIENT1"), (35, "0"), (56, "EXEC1"), (34, "1"),
                               (52, "20240315-09:30:00.000")])
    write("msg_type_not_third", msg, ["parse_error=MsgTypeNotThird"])
    msg, _ = build("FIX.4.4", [(35, "A")] + hdr(1) + [(95, "50"), (96, "short"), (98, "0")])
    write("raw_data_length_too_long", msg,
          ["parse_error=DataLengthMismatch { tag: 96, length_tag: 95 }"])
    msg, _ = build("FIX.4.4", [(35, "A")] + hdr(1) + [(95, "x"), (96, "short")])
    write("raw_data_length_not_numeric", msg,
          ["parse_error=IncorrectDataFormat { tag: 95 }"])


if __name__ == "__main__":
    main()
