//! Decodes arbitrary bytes as a sequence of frames, as a peer would receive them.
//!
//! Input: 2 bytes choosing `max_frame` (8 ..= 65 543), then the bytes to decode.
//!
//! Checks, for every frame decoded:
//! - `decode` never panics and reports a length `n` with `8 <= n <= max_frame`,
//!   `n <= input`, equal to the frame's own length field;
//! - control frames re-encode to exactly the same bytes (where the encoder can
//!   express the decoded values);
//! - a PUBLISH turns into a MESSAGE through `encode_message_from_publish` that decodes
//!   back with the same topic, payload, sequence number, discard count and stamps;
//! - a MESSAGE with a DISCARDS field takes `add_discards` and keeps its other fields;
//! - the receivers' shortcuts `plain_publish` and `plain_message` answer exactly as
//!   `decode` does: a frame without flags, or nothing (also where `decode` stops).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tickwire_wire::frame::{
    add_discards, decode, encode_ack, encode_auth, encode_cached_message, encode_close,
    encode_error, encode_hello_caps, encode_message_from_publish, encode_ping, encode_pong,
    encode_publish_reply, encode_stats_reply, encode_stats_request, encode_subscribe_image,
    encode_unsubscribe, encode_welcome_caps, flags, plain_message, plain_publish, Frame, Msg,
    PublishOptions, Stamps, HEADER_LEN, MAX_AUTH_LEN, MAX_TEXT_LEN, PROTOCOL_VERSION,
};

fuzz_target!(|data: &[u8]| {
    let Some((head, mut buf)) = data.split_first_chunk::<2>() else {
        return;
    };
    let max_frame = HEADER_LEN as u32 + u32::from(u16::from_le_bytes(*head));
    // The router-side values written into MESSAGE frames; arbitrary but fixed.
    let discarded = u64::from(head[0] & 0x0f);
    let (router_in, router_out) = (0x1122_3344_5566_7788, u64::MAX);

    while let Ok(Some((frame, n))) = decode(buf, max_frame) {
        assert!(
            n >= HEADER_LEN && n <= buf.len(),
            "n = {n}, input {}",
            buf.len()
        );
        assert!(n as u64 <= u64::from(max_frame));
        let len_field = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        assert_eq!(n, len_field as usize);
        let bytes = &buf[..n];
        let publish = plain_publish(buf, max_frame);
        let message = plain_message(bytes, max_frame);
        match &frame {
            Frame::Publish(p) if p.flags == 0 => {
                assert_eq!(publish, Some((n, p.topic, p.payload)));
                assert_eq!(message, None);
            }
            Frame::Message(m) if m.flags == 0 => {
                assert_eq!(message, Some((m.topic, m.payload)));
                assert_eq!(publish, None);
            }
            _ => assert_eq!((publish, message), (None, None)),
        }
        match frame {
            Frame::Publish(p) => check_publish(bytes, p, discarded, router_in, router_out),
            Frame::Message(m) => check_message(bytes, m),
            other => check_control(bytes, other),
        }
        buf = &buf[n..];
    }
    // Where decode stops (a partial frame or an error), neither shortcut takes a frame.
    assert_eq!(plain_publish(buf, max_frame), None);
    assert_eq!(plain_message(buf, max_frame), None);
});

fn check_publish(bytes: &[u8], p: Msg<'_>, discarded: u64, router_in: u64, router_out: u64) {
    assert_eq!(p.flags, bytes[5]);
    assert_eq!(p.flags & !flags::PUBLISH_ALLOWED, 0);
    assert_eq!(p.discarded, 0);
    assert!(!p.topic.is_empty());
    assert_eq!(
        p.topic.len(),
        usize::from(u16::from_le_bytes([bytes[6], bytes[7]]))
    );
    // Topic and payload end the frame, in that order.
    assert_eq!(
        p.topic.len() + p.payload.len() + fixed_fields(p.flags, p.reply.map_or(0, |r| r.to.len())),
        bytes.len()
    );
    assert!(bytes.ends_with(p.payload));

    // What the router does with it.
    let mut out = vec![0xAA; 3]; // non-empty: the encoder must append, not overwrite
    let written = encode_message_from_publish(&mut out, bytes, discarded, router_in, router_out);
    assert_eq!(written, out.len() - 3);
    let message = &out[3..];
    // DISCARDS adds 8 bytes, so a MESSAGE may be up to max_frame + 8.
    let Ok(Some((Frame::Message(m), n))) = decode(message, u32::MAX) else {
        panic!("MESSAGE made from a PUBLISH does not decode");
    };
    assert_eq!(n, message.len());
    assert_eq!(m.topic, p.topic);
    assert_eq!(m.payload, p.payload);
    assert_eq!(m.seq, p.seq);
    assert_eq!(m.reply, p.reply);
    assert_eq!(m.discarded, discarded);
    assert_eq!(m.flags & flags::DISCARDS != 0, discarded != 0);
    // The MESSAGE copy of a guaranteed publish does not carry GUARANTEED.
    assert_eq!(m.flags & !flags::DISCARDS, p.flags & !flags::GUARANTEED);
    let want_stamps = p.stamps.map(|s| Stamps {
        publisher_send: s.publisher_send,
        router_in,
        router_out,
    });
    assert_eq!(m.stamps, want_stamps);
    check_message(message, m);

    // What the router's cache sends for it.
    let mut cached = Vec::new();
    let n = encode_cached_message(&mut cached, bytes, router_in);
    assert_eq!(n, bytes.len() + 8);
    let Ok(Some((Frame::Message(c), _))) = decode(&cached, u32::MAX) else {
        panic!("cached MESSAGE made from a PUBLISH does not decode");
    };
    assert_eq!(c.cached, Some(router_in));
    assert_eq!(
        (c.topic, c.payload, c.seq, c.reply),
        (p.topic, p.payload, p.seq, p.reply)
    );
    assert_eq!(c.stamps, p.stamps);
    assert_eq!(c.flags, (p.flags & !flags::GUARANTEED) | flags::CACHED);
    check_message(&cached, c);

    // A publisher's encoder produces the same bytes (when it could have sent them).
    let zero_router_stamps = p
        .stamps
        .is_none_or(|s| s.router_in == 0 && s.router_out == 0);
    if let (true, Ok(topic)) = (zero_router_stamps, std::str::from_utf8(p.topic)) {
        let opts = PublishOptions {
            seq: p.seq,
            publisher_send: p.stamps.map(|s| s.publisher_send),
        };
        let mut again = Vec::new();
        encode_publish_reply(
            &mut again,
            topic,
            p.payload,
            opts,
            p.reply,
            bytes.len() as u32,
        )
        .expect("re-encoding a decoded PUBLISH fits its own size");
        // A guaranteed publish is a PUBLISH with the GUARANTEED bit set on top.
        again[5] |= p.flags & flags::GUARANTEED;
        assert_eq!(again, bytes);
    }
}

fn check_message(bytes: &[u8], m: Msg<'_>) {
    assert_eq!(m.flags, bytes[5]);
    assert_eq!(m.flags & !flags::MESSAGE_ALLOWED, 0);
    assert!(!m.topic.is_empty());
    assert_eq!(
        m.topic.len() + m.payload.len() + fixed_fields(m.flags, m.reply.map_or(0, |r| r.to.len())),
        bytes.len()
    );
    assert!(bytes.ends_with(m.payload));
    let mut copy = bytes.to_vec();
    let had = add_discards(&mut copy, 5);
    assert_eq!(had, m.flags & flags::DISCARDS != 0);
    let Ok(Some((Frame::Message(after), _))) = decode(&copy, u32::MAX) else {
        panic!("MESSAGE no longer decodes after add_discards");
    };
    let want = if had {
        m.discarded.saturating_add(5)
    } else {
        m.discarded
    };
    assert_eq!(after.discarded, want);
    assert_eq!(
        (after.seq, after.stamps, after.reply, after.cached),
        (m.seq, m.stamps, m.reply, m.cached)
    );
    assert_eq!((after.topic, after.payload), (m.topic, m.payload));
}

/// Header plus the optional fields the flags announce (a REPLY field's reply topic
/// is `reply_len` bytes).
fn fixed_fields(fl: u8, reply_len: usize) -> usize {
    let mut n = HEADER_LEN;
    if fl & flags::REPLY != 0 {
        n += 5 + reply_len;
    }
    if fl & flags::CACHED != 0 {
        n += 8;
    }
    if fl & flags::SEQ != 0 {
        n += 8;
    }
    if fl & flags::DISCARDS != 0 {
        n += 8;
    }
    if fl & flags::STAMPS != 0 {
        n += 24;
    }
    n
}

/// Re-encodes a control frame and compares bytes, where the encoder can express it.
fn check_control(bytes: &[u8], frame: Frame<'_>) {
    let mut out = Vec::new();
    match frame {
        Frame::Hello {
            version,
            capabilities,
            name,
        } => encode_hello_caps(&mut out, version, capabilities, name),
        Frame::Welcome {
            version: PROTOCOL_VERSION,
            client_id,
            max_frame,
            capabilities,
            name,
        } => encode_welcome_caps(&mut out, client_id, max_frame, capabilities, name),
        Frame::Auth(a) => {
            assert!(
                bytes.len() <= MAX_AUTH_LEN,
                "an AUTH of {} bytes",
                bytes.len()
            );
            if let Err(e) = encode_auth(&mut out, &a) {
                panic!("a decoded AUTH does not re-encode: {e}");
            }
        }
        Frame::Close { code, reason } if reason.len() <= MAX_TEXT_LEN => {
            encode_close(&mut out, code, reason)
        }
        Frame::Error {
            request_id,
            code,
            fatal,
            text,
        } if text.len() <= MAX_TEXT_LEN => encode_error(&mut out, request_id, code, fatal, text),
        Frame::Ping(token) => encode_ping(&mut out, token),
        Frame::Pong(token) => encode_pong(&mut out, token),
        Frame::Subscribe {
            request_id,
            pattern,
            image,
        } => match std::str::from_utf8(pattern) {
            Ok(p) => encode_subscribe_image(&mut out, request_id, p, image),
            Err(_) => return,
        },
        Frame::Unsubscribe {
            request_id,
            pattern,
        } => match std::str::from_utf8(pattern) {
            Ok(p) => encode_unsubscribe(&mut out, request_id, p),
            Err(_) => return,
        },
        Frame::Ack { request_id } => encode_ack(&mut out, request_id),
        Frame::StatsRequest { request_id } => encode_stats_request(&mut out, request_id),
        Frame::StatsReply { request_id, json } => encode_stats_reply(&mut out, request_id, json),
        _ => return,
    }
    assert_eq!(out, bytes, "{frame:?} re-encodes differently");
}
