//! A queue consumer that survives router restarts: reconnect and bind again.

use std::time::Instant;

use tickwire_rt::StopFlag;

use tickwire_wire::frame::ErrorCode;
use tickwire_wire::gm::{NackAction, Start};

use crate::event::{Binding, Delivery, Event};
use crate::publisher::Outages;
use crate::{Client, Error, ReconnectOptions, Wait};

/// One binding to a queue, re-established after a lost connection.
///
/// Deliveries that were not acknowledged when the connection was lost are delivered
/// again by the router (with [`Delivery::redelivered`] set): a consumer sees every
/// message at least once. An acknowledgement for a delivery of the lost connection is
/// dropped by the router (it is redelivered instead); the "unknown delivery" error
/// that answers it is ignored here.
///
/// ```no_run
/// use std::time::Duration;
/// use tickwire_client::{QueueConsumer, ReconnectOptions, Start, Wait};
///
/// fn main() -> Result<(), tickwire_client::Error> {
///     let mut c = QueueConsumer::connect("127.0.0.1:7420", "orders", 64, Start::Queue, ReconnectOptions::default())?;
///     let mut handled = Vec::new();
///     loop {
///         c.poll(Wait::Timeout(Duration::from_millis(100)), |d| {
///             println!("{} {:?}", d.msg_id, d.payload);
///             handled.push(d.msg_id);
///         })?;
///         for id in handled.drain(..) {
///             c.ack(id)?;
///         }
///     }
/// }
/// ```
#[derive(Debug)]
pub struct QueueConsumer {
    addr: String,
    queue: String,
    window: u32,
    start: Start,
    opts: ReconnectOptions,
    client: Client,
    binding: Binding,
    reconnects: u64,
    /// The reconnections' durations and attempts.
    outages: Outages,
    /// Acknowledgements the router answered `UNKNOWN_DELIVERY`: the message was no
    /// longer this connection's (its ack timeout had passed: redelivered elsewhere or
    /// dead-lettered), so it was processed here and is still alive there.
    late_acks: u64,
    /// Told of a lost connection before reconnecting; false: do not reconnect.
    on_lost: Option<fn(&Error) -> bool>,
    /// Once set, reconnection attempts end (with the last error).
    stop: Option<StopFlag>,
}

impl QueueConsumer {
    /// Connects and binds to `queue` (see [`Client::bind`]); a first connection that
    /// fails is retried like a lost one, unless [`ReconnectOptions::retry_first`] is
    /// off. A replay binding ([`Start`] other than
    /// `Queue`) starts over from `start` after a reconnect.
    pub fn connect(
        addr: &str,
        queue: &str,
        window: u32,
        start: Start,
        opts: ReconnectOptions,
    ) -> Result<QueueConsumer, Error> {
        let (client, binding, _) = bind(addr, queue, window, start, &opts.for_first(), None)?;
        Ok(QueueConsumer {
            addr: addr.to_owned(),
            queue: queue.to_owned(),
            window,
            start,
            opts,
            client,
            binding,
            reconnects: 0,
            outages: Outages::default(),
            late_acks: 0,
            on_lost: None,
            stop: None,
        })
    }

    /// Calls `on_lost` with the cause when the connection is lost, before reconnecting
    /// (a command says so there: the reconnection may take a while); when it returns
    /// false, no reconnection is tried and the poll returns the cause.
    pub fn set_on_lost(&mut self, on_lost: fn(&Error) -> bool) {
        self.on_lost = Some(on_lost);
    }

    /// Ends the reconnection attempts (the poll returns the last error) promptly once
    /// `stop` is set: a Ctrl-C need not wait for `give_up_after`.
    pub fn set_stop(&mut self, stop: StopFlag) {
        self.stop = Some(stop);
    }

    /// Flushes acknowledgements, then calls `handler` for every delivery of this
    /// binding available, waiting per `wait`; returns how many. Reconnects and binds
    /// again as needed.
    pub fn poll<F: FnMut(Delivery<'_>)>(
        &mut self,
        wait: Wait,
        mut handler: F,
    ) -> Result<usize, Error> {
        loop {
            let id = self.binding.id;
            let mut activated = false;
            let mut n = 0;
            let res = self.client.poll_events(wait, |ev| match ev {
                Event::Delivery(d) if d.binding == id.0 => {
                    handler(d);
                    n += 1;
                }
                Event::Activated { binding } if binding == id => activated = true,
                _ => {}
            });
            if activated {
                self.binding.active = true;
            }
            match res {
                Ok(_) => return Ok(n),
                Err(Error::Rejected { code, .. }) if code == ErrorCode::UNKNOWN_DELIVERY => {
                    self.late_acks += 1;
                    if n > 0 {
                        return Ok(n);
                    }
                }
                Err(e) => self.recover(e)?,
            }
        }
    }

    /// Acknowledges one delivery (sent with the next poll or flush).
    pub fn ack(&mut self, msg_id: u64) -> Result<(), Error> {
        self.client.ack(self.binding.id, msg_id)
    }

    /// Acknowledges deliveries `first..=last`.
    pub fn ack_range(&mut self, first: u64, last: u64) -> Result<(), Error> {
        self.client.ack_range(self.binding.id, first, last)
    }

    /// Refuses one delivery.
    pub fn nack(&mut self, msg_id: u64, action: NackAction) -> Result<(), Error> {
        self.client.nack(self.binding.id, msg_id, action)
    }

    /// The current binding (its id changes after a reconnect).
    pub fn binding(&self) -> Binding {
        self.binding
    }

    /// Connections opened after the first.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// How long the reconnections took, and with how many attempts.
    pub fn outages(&self) -> Outages {
        self.outages
    }

    /// Acknowledgements (or NACKs) the router refused `UNKNOWN_DELIVERY` since the
    /// start: it no longer held those messages for this connection, mostly because
    /// their ack timeout had passed (they went to another consumer or the dead-letter
    /// queue, and will be or were seen again). At least once, not exactly once.
    pub fn late_acks(&self) -> u64 {
        self.late_acks
    }

    /// The current connection.
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Sends pending acknowledgements, unbinds (unacknowledged deliveries go back to
    /// the queue) and closes.
    pub fn close(mut self) -> Result<(), Error> {
        self.client.unbind(self.binding.id)?;
        self.client.close()
    }

    fn recover(&mut self, cause: Error) -> Result<(), Error> {
        // The queue was deleted: a new connection would find none to bind (new-user
        // pass: `sub --queue` said "reconnecting" and then failed on that).
        let deleted =
            matches!(&cause, Error::Closed { code, .. } if *code == ErrorCode::NO_SUCH_QUEUE);
        if deleted || !crate::publisher::worth_reconnecting(&cause) {
            return Err(cause);
        }
        self.client.abandon_tx();
        if let Some(on_lost) = self.on_lost {
            if !on_lost(&cause) {
                return Err(cause);
            }
        }
        let lost_at = Instant::now();
        let (client, binding, attempts) = bind(
            &self.addr,
            &self.queue,
            self.window,
            self.start,
            &self.opts,
            self.stop.as_ref(),
        )?;
        self.client = client;
        self.binding = binding;
        self.reconnects += 1;
        self.outages.record(lost_at.elapsed(), attempts);
        Ok(())
    }
}

/// Connects and binds, retrying with backoff (as [`crate::GuaranteedPublisher`]) until
/// `give_up_after` or `stop`.
fn bind(
    addr: &str,
    queue: &str,
    window: u32,
    start: Start,
    opts: &ReconnectOptions,
    stop: Option<&StopFlag>,
) -> Result<(Client, Binding, u32), Error> {
    let bound = crate::publisher::with_retries(
        opts,
        stop,
        crate::publisher::worth_reconnecting,
        |client| {
            let mut c = Client::connect_to(addr, client)?;
            match c.bind(queue, window, start) {
                Ok(b) => Ok((c, b)),
                Err(e) => {
                    c.abandon_tx();
                    Err(e)
                }
            }
        },
    );
    bound.map(|((c, b), attempts)| (c, b, attempts))
}
