//! What the session asks of its driver and tells its application, in order.
//!
//! Every output (a message to send, a disconnect, an event) is appended to one FIFO;
//! message bytes and event payloads live in one byte buffer that is reused: it is
//! cleared whenever the FIFO has been drained, so a driver that drains after every
//! call never makes it grow beyond one call's worth of output.

use std::collections::VecDeque;
use std::io::Write as _;
use std::ops::Range;

use crate::codec::{Field, MessageRef};

/// One thing the driver must do or the application may want to know, returned by
/// [`Session::poll`](super::Session::poll) in the order it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Output<'a> {
    /// Write these bytes (one complete FIX message) to the connection.
    Send(&'a [u8]),
    /// Close the connection (after writing everything sent before). The session has
    /// already done its disconnect bookkeeping; calling
    /// [`Session::handle_disconnected`](super::Session::handle_disconnected) afterwards is
    /// harmless.
    Disconnect,
    /// Initiator only: open a connection now, then call
    /// [`Session::handle_connected`](super::Session::handle_connected), or
    /// [`Session::handle_disconnected`](super::Session::handle_disconnected) if it fails.
    Connect,
    /// Something for the application.
    Event(Event<'a>),
}

/// Application-level notifications (QuickFIX's `Application` callbacks and its
/// `onEvent` log lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'a> {
    /// Logged on: Logons were exchanged (QuickFIX `onLogon`).
    LoggedOn,
    /// The session ended after a Logon had been sent or received (QuickFIX
    /// `onLogout`, also called when the logon never completed).
    LoggedOut,
    /// An administrative message (Logon, Heartbeat, TestRequest, ResendRequest,
    /// Reject, SequenceReset, Logout) passed the session checks (`fromAdmin`).
    FromAdmin(&'a [u8]),
    /// An application message passed the session checks, in sequence (`fromApp`).
    /// Read PossDupFlag (43) / PossResend (97) from it when duplicates matter.
    FromApp(&'a [u8]),
    /// A state transition or protocol problem worth logging, with QuickFIX's wording
    /// where QuickFIX logs the same thing ("MsgSeqNum too high, expecting 5 but
    /// received 7", "Sent ResendRequest FROM: 5 TO: 0", ...). Never per steady-state
    /// message.
    Note(&'a str),
}

#[derive(Debug, Clone)]
enum Action {
    Send(Range<usize>),
    Disconnect,
    Connect,
    LoggedOn,
    LoggedOut,
    /// The message's bytes and its field table (offsets relative to the message).
    FromAdmin(Range<usize>, Range<usize>),
    FromApp(Range<usize>, Range<usize>),
    Note(Range<usize>),
}

/// The FIFO of outputs plus the byte buffer their payloads live in, and the field
/// tables of the messages delivered to the application (so that a driver hands the
/// application the message the session parsed, instead of parsing it again).
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    actions: VecDeque<Action>,
    buf: Vec<u8>,
    fields: Vec<Field>,
    /// The field table of the FromApp / FromAdmin event last polled.
    polled_fields: Range<usize>,
    /// The bytes of the FromApp / FromAdmin event last polled.
    polled_msg: Range<usize>,
}

impl Outbox {
    /// Forgets the payload bytes if everything has been polled (called at the start
    /// of every session entry point).
    pub fn recycle(&mut self) {
        if self.actions.is_empty() {
            self.buf.clear();
            self.fields.clear();
            self.polled_fields = 0..0;
            self.polled_msg = 0..0;
            // A large resend or message can leave megabytes behind; steady state needs
            // little.
            const KEEP: usize = super::KEEP_BYTES;
            if self.buf.capacity() > 2 * KEEP {
                self.buf.shrink_to(KEEP);
                self.actions.shrink_to(KEEP / 256);
            }
            if self.fields.capacity() > super::KEEP_FIELDS {
                self.fields.shrink_to(super::KEEP_FIELDS);
            }
        }
    }

    fn copy(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        start..self.buf.len()
    }

    pub fn send(&mut self, msg: &[u8]) {
        let r = self.copy(msg);
        self.actions.push_back(Action::Send(r));
    }

    pub fn disconnect(&mut self) {
        self.actions.push_back(Action::Disconnect);
    }

    pub fn connect(&mut self) {
        self.actions.push_back(Action::Connect);
    }

    pub fn logged_on(&mut self) {
        self.actions.push_back(Action::LoggedOn);
    }

    pub fn logged_out(&mut self) {
        self.actions.push_back(Action::LoggedOut);
    }

    fn copy_message(&mut self, m: &MessageRef<'_>) -> (Range<usize>, Range<usize>) {
        let start = self.fields.len();
        self.fields.extend_from_slice(m.fields());
        (self.copy(m.raw()), start..self.fields.len())
    }

    pub fn deliver_admin(&mut self, m: &MessageRef<'_>) {
        let (r, f) = self.copy_message(m);
        self.actions.push_back(Action::FromAdmin(r, f));
    }

    pub fn deliver_app(&mut self, m: &MessageRef<'_>) {
        let (r, f) = self.copy_message(m);
        self.actions.push_back(Action::FromApp(r, f));
    }

    /// The field table of the FromApp / FromAdmin event last returned by
    /// [`Outbox::poll`] (empty after any other output).
    pub fn polled_fields(&self) -> &[Field] {
        self.fields
            .get(self.polled_fields.clone())
            .unwrap_or_default()
    }

    /// Queues a note formatted in place (no allocation once the buffer has grown).
    pub fn note(&mut self, args: std::fmt::Arguments<'_>) {
        let start = self.buf.len();
        // Writing to a Vec<u8> cannot fail.
        let _ = self.buf.write_fmt(args);
        self.actions.push_back(Action::Note(start..self.buf.len()));
    }

    /// Moves the bytes and field table of the FromApp / FromAdmin event last polled
    /// into `bytes` and `fields` (replacing their contents; empty after any other
    /// output). When nothing else is queued and the message starts both buffers, the
    /// buffers are swapped (the caller's, emptied, become the outbox's), not copied.
    pub fn take_polled(&mut self, bytes: &mut Vec<u8>, fields: &mut Vec<Field>) {
        let msg = std::mem::replace(&mut self.polled_msg, 0..0);
        let table = std::mem::replace(&mut self.polled_fields, 0..0);
        bytes.clear();
        fields.clear();
        if self.actions.is_empty() && msg.start == 0 && table.start == 0 {
            std::mem::swap(&mut self.buf, bytes);
            std::mem::swap(&mut self.fields, fields);
            bytes.truncate(msg.end);
            fields.truncate(table.end);
        } else {
            bytes.extend_from_slice(self.buf.get(msg).unwrap_or_default());
            fields.extend_from_slice(self.fields.get(table).unwrap_or_default());
        }
    }

    pub fn poll(&mut self) -> Option<Output<'_>> {
        self.polled_fields = 0..0;
        self.polled_msg = 0..0;
        let Some(action) = self.actions.pop_front() else {
            self.buf.clear();
            self.fields.clear();
            return None;
        };
        let buf = &self.buf;
        // Ranges were produced by `copy`/`note` on this buffer, which is only cleared
        // when the FIFO is empty, so they are always in bounds; `get` keeps that
        // invariant from turning into a panic if it were ever broken.
        let slice = |r: Range<usize>| buf.get(r).unwrap_or_default();
        Some(match action {
            Action::Send(r) => Output::Send(slice(r)),
            Action::Disconnect => Output::Disconnect,
            Action::Connect => Output::Connect,
            Action::LoggedOn => Output::Event(Event::LoggedOn),
            Action::LoggedOut => Output::Event(Event::LoggedOut),
            Action::FromAdmin(r, f) => {
                self.polled_fields = f;
                self.polled_msg = r.clone();
                Output::Event(Event::FromAdmin(slice(r)))
            }
            Action::FromApp(r, f) => {
                self.polled_fields = f;
                self.polled_msg = r.clone();
                Output::Event(Event::FromApp(slice(r)))
            }
            Action::Note(r) => Output::Event(Event::Note(
                std::str::from_utf8(slice(r)).unwrap_or("(note not UTF-8)"),
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Fields;

    #[test]
    fn a_delivered_message_comes_back_with_the_field_table_it_was_parsed_with() {
        let raw = b"8=FIX.4.4\x019=41\x0135=D\x0134=2\x0149=A\x0152=20261124-10:00:00\x0156=B\x0110=000\x01";
        let mut fields = Fields::new();
        let mut out = Outbox::default();
        let m = crate::codec::parse_unchecked(raw, &mut fields).expect("parses");
        out.note(format_args!("before"));
        out.deliver_app(&m);
        out.send(b"8=FIX.4.4\x01");
        assert!(matches!(
            out.poll(),
            Some(Output::Event(Event::Note("before")))
        ));
        assert!(out.polled_fields().is_empty());
        match out.poll() {
            Some(Output::Event(Event::FromApp(b))) => assert_eq!(b, &raw[..]),
            other => panic!("{other:?}"),
        }
        assert_eq!(out.polled_fields(), m.fields());
        let again = MessageRef::from_parts(&raw[..], out.polled_fields());
        assert_eq!(again.get(35), Some(&b"D"[..]));
        assert!(matches!(out.poll(), Some(Output::Send(_))));
        assert!(
            out.polled_fields().is_empty(),
            "only for the event just polled"
        );
        assert!(out.poll().is_none());
    }

    /// `take_polled` gives what `poll` and `polled_fields` give, whether it swaps (the
    /// event is the last output and starts the buffers) or copies (something precedes
    /// or follows it), and the outputs after it are intact.
    #[test]
    fn a_taken_message_equals_the_polled_one_swapped_or_copied() {
        let raw = b"8=FIX.4.4\x019=41\x0135=D\x0134=2\x0149=A\x0152=20261124-10:00:00\x0156=B\x0110=000\x01";
        let mut fields = Fields::new();
        let m = crate::codec::parse_unchecked(raw, &mut fields).expect("parses");
        let (mut bytes, mut table) = (b"old".to_vec(), vec![m.fields()[0]; 3]);
        for case in 0..4 {
            let mut out = Outbox::default();
            if case == 1 {
                out.note(format_args!("before"));
            }
            out.deliver_app(&m);
            if case == 2 {
                out.send(b"after");
            }
            if case == 3 {
                out.deliver_admin(&m);
            }
            if case == 1 {
                assert!(matches!(
                    out.poll(),
                    Some(Output::Event(Event::Note("before")))
                ));
            }
            let polled = match out.poll() {
                Some(Output::Event(Event::FromApp(b))) => b.to_vec(),
                other => panic!("{other:?}"),
            };
            assert_eq!(out.polled_fields(), m.fields());
            out.take_polled(&mut bytes, &mut table);
            assert_eq!(bytes, polled, "case {case}");
            assert_eq!(bytes, &raw[..]);
            assert_eq!(table, m.fields(), "case {case}");
            assert!(out.polled_fields().is_empty());
            match case {
                2 => assert_eq!(out.poll(), Some(Output::Send(b"after"))),
                3 => {
                    assert!(
                        matches!(out.poll(), Some(Output::Event(Event::FromAdmin(b))) if b == &raw[..])
                    );
                    assert_eq!(out.polled_fields(), m.fields());
                }
                _ => {}
            }
            assert!(out.poll().is_none());
            // Nothing polled: empty.
            out.take_polled(&mut bytes, &mut table);
            assert!(bytes.is_empty() && table.is_empty());
            // The outbox still works after a swap.
            out.recycle();
            out.deliver_app(&m);
            assert!(matches!(out.poll(), Some(Output::Event(Event::FromApp(b))) if b == &raw[..]));
            assert_eq!(out.polled_fields(), m.fields());
        }
    }
}
