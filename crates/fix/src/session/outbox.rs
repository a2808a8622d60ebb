//! What the session asks of its driver and tells its application, in order.
//!
//! Every output (a message to send, a disconnect, an event) is appended to one FIFO;
//! message bytes and event payloads live in one byte buffer that is reused: it is
//! cleared whenever the FIFO has been drained, so a driver that drains after every
//! call never makes it grow beyond one call's worth of output.

use std::collections::VecDeque;
use std::io::Write as _;
use std::ops::Range;

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
    FromAdmin(Range<usize>),
    FromApp(Range<usize>),
    Note(Range<usize>),
}

/// The FIFO of outputs plus the byte buffer their payloads live in.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    actions: VecDeque<Action>,
    buf: Vec<u8>,
}

impl Outbox {
    /// Forgets the payload bytes if everything has been polled (called at the start
    /// of every session entry point).
    pub fn recycle(&mut self) {
        if self.actions.is_empty() {
            self.buf.clear();
            // A large resend can leave megabytes behind; steady state needs little.
            const KEEP: usize = 1 << 20;
            if self.buf.capacity() > 16 * KEEP {
                self.buf.shrink_to(KEEP);
                self.actions.shrink_to(KEEP / 256);
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

    pub fn deliver_admin(&mut self, msg: &[u8]) {
        let r = self.copy(msg);
        self.actions.push_back(Action::FromAdmin(r));
    }

    pub fn deliver_app(&mut self, msg: &[u8]) {
        let r = self.copy(msg);
        self.actions.push_back(Action::FromApp(r));
    }

    /// Queues a note formatted in place (no allocation once the buffer has grown).
    pub fn note(&mut self, args: std::fmt::Arguments<'_>) {
        let start = self.buf.len();
        // Writing to a Vec<u8> cannot fail.
        let _ = self.buf.write_fmt(args);
        self.actions.push_back(Action::Note(start..self.buf.len()));
    }

    pub fn poll(&mut self) -> Option<Output<'_>> {
        let Some(action) = self.actions.pop_front() else {
            self.buf.clear();
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
            Action::FromAdmin(r) => Output::Event(Event::FromAdmin(slice(r))),
            Action::FromApp(r) => Output::Event(Event::FromApp(slice(r))),
            Action::Note(r) => Output::Event(Event::Note(
                std::str::from_utf8(slice(r)).unwrap_or("(note not UTF-8)"),
            )),
        })
    }
}
