//! The application API: QuickFIX's callbacks ([`Application`]) and the context
//! ([`Ctx`]) through which a callback acts on any session.

use tickwire_fix::codec::{Encoder, MessageRef};
use tickwire_fix::settings::SessionId;
use tickwire_rt::UtcNanos;

use crate::engine::{SendError, Slot};

/// A session of an [`crate::Engine`]: its index in the order the sessions were given
/// (settings file order). Cheap to copy; valid for the engine's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey(pub usize);

/// QuickFIX's `Application` callbacks. Every method has an empty default.
///
/// All callbacks run on the engine thread, in the order things happened. Messages are
/// borrowed [`MessageRef`]s over engine buffers (no allocation per message): copy what
/// must outlive the call.
///
/// Callbacks that may act get a [`Ctx`]: sending on any session from there is the
/// lowest-latency path (the message goes out in the same loop turn). `to_admin` and
/// `to_app` observe outgoing messages only: the session core has already encoded and
/// stored them (QuickFIX lets `toAdmin` modify them; not offered here).
// `from_app` / `from_admin` are QuickFIX's names, kept on purpose.
#[allow(clippy::wrong_self_convention)]
pub trait Application {
    /// A session was created (QuickFIX `onCreate`), once per session at engine start.
    fn on_create(&mut self, session: SessionKey, id: &SessionId) {
        let _ = (session, id);
    }

    /// Logons were exchanged (QuickFIX `onLogon`).
    fn on_logon(&mut self, ctx: &mut Ctx<'_>, session: SessionKey) {
        let _ = (ctx, session);
    }

    /// The session ended after a Logon was sent or received (QuickFIX `onLogout`).
    fn on_logout(&mut self, ctx: &mut Ctx<'_>, session: SessionKey) {
        let _ = (ctx, session);
    }

    /// An administrative message is being sent (QuickFIX `toAdmin`, observe only).
    /// Called only when [`Application::observe_outgoing`] is true.
    fn to_admin(&mut self, session: SessionKey, msg: &MessageRef<'_>) {
        let _ = (session, msg);
    }

    /// An application message is being sent or resent (QuickFIX `toApp`, observe
    /// only). Called only when [`Application::observe_outgoing`] is true.
    fn to_app(&mut self, session: SessionKey, msg: &MessageRef<'_>) {
        let _ = (session, msg);
    }

    /// An administrative message passed the session checks (QuickFIX `fromAdmin`).
    fn from_admin(&mut self, ctx: &mut Ctx<'_>, session: SessionKey, msg: &MessageRef<'_>) {
        let _ = (ctx, session, msg);
    }

    /// An application message passed the session checks, in sequence (QuickFIX
    /// `fromApp`). Unsupported types are answered with [`Ctx::reject_unsupported`].
    fn from_app(&mut self, ctx: &mut Ctx<'_>, session: SessionKey, msg: &MessageRef<'_>) {
        let _ = (ctx, session, msg);
    }

    /// A session or engine event worth logging (QuickFIX `onEvent` wording where
    /// QuickFIX logs the same thing). Never per steady-state message.
    fn on_event(&mut self, session: SessionKey, text: &str) {
        let _ = (session, text);
    }

    /// Whether `to_admin` / `to_app` are called. Each call parses the outgoing message
    /// once (~100 ns); return false on the latency-critical path. Default true.
    fn observe_outgoing(&self) -> bool {
        true
    }
}

/// What a callback may do: send on any session, reject, log out, stop the engine.
/// Outputs produced here are written in the same loop turn.
pub struct Ctx<'a> {
    pub(crate) slots: &'a mut [Slot],
    pub(crate) now: UtcNanos,
    pub(crate) stop: &'a mut bool,
}

impl Ctx<'_> {
    /// The time of this loop turn (wall-clock UTC).
    pub fn now(&self) -> UtcNanos {
        self.now
    }

    /// The slot of `session`, marked touched (its outputs are drained this turn), and
    /// the time to act at.
    fn touch(&mut self, session: SessionKey) -> Result<(UtcNanos, &mut Slot), SendError> {
        let now = self.now;
        let slot = self
            .slots
            .get_mut(session.0)
            .ok_or(SendError::UnknownSession(session))?;
        slot.touched = true;
        Ok((now, slot))
    }

    /// Sends an application message: `body` is `tag=value<SOH>...` without header
    /// or trailer (header fields the application sets, e.g. 97 or 115, first). Returns
    /// its MsgSeqNum. Not logged on: stored for the next logon's resend, as QuickFIX.
    pub fn send(
        &mut self,
        session: SessionKey,
        msg_type: &[u8],
        body: &[u8],
    ) -> Result<u64, SendError> {
        self.send_with(session, msg_type, |enc| enc.raw_fields(body))
    }

    /// Like [`Ctx::send`], with the body written straight into the session's encoder
    /// (no intermediate buffer): `field*` / `raw_fields` calls only.
    pub fn send_with(
        &mut self,
        session: SessionKey,
        msg_type: &[u8],
        write_body: impl FnOnce(&mut Encoder),
    ) -> Result<u64, SendError> {
        let (now, slot) = self.touch(session)?;
        Ok(slot.session.send_app_with(now, msg_type, write_body)?)
    }

    /// The application dictionary `session` validates with (None without
    /// `UseDataDictionary`), e.g. for [`tickwire_fix::order::QuickFixOrder`]. FIXT:
    /// the default one; [`Ctx::dictionary_for`] gives the one of a received message.
    pub fn dictionary(&self, session: SessionKey) -> Option<&tickwire_fix::dict::Dictionary> {
        let slot = self.slots.get(session.0)?;
        slot.session.validation().map(|v| &*v.app)
    }

    /// The application dictionary message `msg`, received on `session`, was validated
    /// with: for FIXT the one of its ApplVerID (1128) or of the counterparty's
    /// DefaultApplVerID, as QuickFIX selects it (None without `UseDataDictionary`).
    pub fn dictionary_for(
        &self,
        session: SessionKey,
        msg: &MessageRef<'_>,
    ) -> Option<&tickwire_fix::dict::Dictionary> {
        self.slots.get(session.0)?.session.app_dictionary_for(msg)
    }

    /// Answers an application message the application does not support, as QuickFIX
    /// does (35=j 380=3 from FIX.4.2, a Reject before).
    pub fn reject_unsupported(
        &mut self,
        session: SessionKey,
        ref_seq: u64,
        ref_msg_type: &[u8],
    ) -> Result<(), SendError> {
        let (now, slot) = self.touch(session)?;
        Ok(slot
            .session
            .reject_unsupported(now, ref_seq, ref_msg_type)?)
    }

    /// Sends a BusinessMessageReject (35=j) with BusinessRejectReason `reason`.
    pub fn reject_business(
        &mut self,
        session: SessionKey,
        ref_seq: u64,
        ref_msg_type: &[u8],
        reason: u32,
        ref_tag: u32,
    ) -> Result<(), SendError> {
        let (now, slot) = self.touch(session)?;
        Ok(slot
            .session
            .reject_business(now, ref_seq, ref_msg_type, reason, ref_tag)?)
    }

    /// Logs the session out (58 = `text`) and disables it until [`Ctx::logon`].
    pub fn logout(&mut self, session: SessionKey, text: Option<&str>) -> Result<(), SendError> {
        let (now, slot) = self.touch(session)?;
        slot.session.logout(now, text);
        Ok(())
    }

    /// Enables a session again after [`Ctx::logout`].
    pub fn logon(&mut self, session: SessionKey) -> Result<(), SendError> {
        let (now, slot) = self.touch(session)?;
        slot.session.logon(now);
        Ok(())
    }

    /// Whether the session is logged on.
    pub fn is_logged_on(&self, session: SessionKey) -> bool {
        self.slots
            .get(session.0)
            .is_some_and(|s| s.session.is_logged_on())
    }

    /// The session's identity.
    pub fn session_id(&self, session: SessionKey) -> Option<&SessionId> {
        self.slots.get(session.0).map(|s| &s.id)
    }

    /// The session with this identity.
    pub fn find(&self, id: &SessionId) -> Option<SessionKey> {
        self.slots.iter().position(|s| &s.id == id).map(SessionKey)
    }

    /// The number of sessions (keys are `0..len`).
    pub fn session_count(&self) -> usize {
        self.slots.len()
    }

    /// Asks the engine to return from [`crate::Engine::run`] after this turn.
    pub fn stop(&mut self) {
        *self.stop = true;
    }
}
