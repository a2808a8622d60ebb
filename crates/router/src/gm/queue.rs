//! Queue definitions (what `tickwire queue create` sends, and what the spool keeps).

use serde::{Deserialize, Serialize};

/// What happens to a publish when a matching queue is at its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum FullPolicy {
    /// Refuse the publish with PUB_NACK `queue-full` (the default).
    #[default]
    Reject,
    /// Make room by removing the queue's oldest undelivered message (counted).
    DiscardOldest,
}

/// Exclusive (one active consumer, the others standby in bind order) or non-exclusive
/// (messages shared among the consumers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// One active consumer at a time.
    Exclusive,
    /// Round robin among consumers with window space.
    #[default]
    NonExclusive,
}

/// Where a new queue's content starts: `"now"`, `"beginning"`, `{"id": N}`,
/// `{"time_ns": T}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StartAt {
    /// Only messages published after the queue exists.
    #[default]
    Now,
    /// Every retained message matching its subscriptions.
    Beginning,
    /// Retained messages from this id.
    Id(u64),
    /// Retained messages that arrived at or after this UTC time (ns).
    TimeNs(u64),
}

/// The name of the dead-message queue used when a queue names none.
pub const DEFAULT_DMQ: &str = "#DEAD_MSG_QUEUE";

/// The shortest non-zero `ack_timeout_ms` a definition may have. Every delivery not
/// acknowledged in time costs the router a redelivery, so a client that chose 1 ms and
/// never acknowledged made it redeliver its whole window every millisecond (2.6 M
/// deliveries/s for 20,000 messages in flight, the loop busy for everyone else). At 50 ms
/// one message in flight costs at most 20 redeliveries a second; a healthy consumer
/// acknowledges well within that (a scheduling hiccup or a LAN round trip is far
/// shorter), and one that wants a message again sooner NACKs it (`redeliver`).
pub const MIN_ACK_TIMEOUT_MS: u64 = 50;

/// One queue's definition. Every field but the name has a default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueDef {
    /// 1 to 64 bytes of letters, digits and `-_.#`.
    pub name: String,
    /// Topic patterns (as for SUBSCRIBE); a guaranteed publish matching any is spooled here.
    pub subscriptions: Vec<String>,
    /// Exclusive or non-exclusive.
    pub access: Access,
    /// Most messages held (0: no limit). Default 1,000,000.
    pub max_messages: u64,
    /// Most bytes (topic + payload) held (0: no limit). Default 1 GiB.
    pub max_bytes: u64,
    /// Largest message accepted (0: the router's max frame). Default 0.
    pub max_message_size: u64,
    /// Time to live in ms (0: forever): older undelivered messages go to the dead-message queue.
    pub ttl_ms: u64,
    /// Redeliveries before a message goes to the dead-message queue: given back after
    /// `max_redeliveries + 1` deliveries, it is dead-lettered. Default 16. Any `u32`
    /// (4294967295: in effect never): what a redelivery costs the router is bounded by
    /// [`MIN_ACK_TIMEOUT_MS`] and the redeliveries per timer turn, not by this count.
    pub max_redeliveries: u32,
    /// Redeliver a delivered, unacknowledged message after this long (0: only when its
    /// consumer goes away). Default 30,000 ms; at least [`MIN_ACK_TIMEOUT_MS`] if not 0.
    pub ack_timeout_ms: u64,
    /// Full-queue policy.
    pub full_policy: FullPolicy,
    /// Where dead messages go (default `#DEAD_MSG_QUEUE`, created on first use).
    pub dead_letter_queue: String,
    /// Where a new queue's content starts.
    pub start: StartAt,
    /// Set by the router: the first message id this queue may hold (unless `start`
    /// filled it from retained messages). JSON `first_message_id`; spools written
    /// before it was renamed call it `created_at`, which is still read.
    #[serde(rename = "first_message_id", alias = "created_at")]
    pub created_at: u64,
}

impl Default for QueueDef {
    fn default() -> Self {
        QueueDef {
            name: String::new(),
            subscriptions: Vec::new(),
            access: Access::NonExclusive,
            max_messages: 1_000_000,
            max_bytes: 1 << 30,
            max_message_size: 0,
            ttl_ms: 0,
            max_redeliveries: 16,
            ack_timeout_ms: 30_000,
            full_policy: FullPolicy::Reject,
            dead_letter_queue: DEFAULT_DMQ.to_owned(),
            start: StartAt::Now,
            created_at: 0,
        }
    }
}

/// Checks a queue name: 1 to 64 bytes of ASCII letters, digits and `-_.#`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.#".contains(&b))
}

impl QueueDef {
    /// Checks everything but the subscriptions' syntax (checked by the caller).
    pub fn check(&self) -> Result<(), String> {
        if !valid_name(&self.name) {
            return Err(format!(
                "invalid queue name {:?}: 1 to 64 bytes of letters, digits and -_.#",
                self.name
            ));
        }
        if !valid_name(&self.dead_letter_queue) {
            return Err(format!(
                "invalid dead_letter_queue {:?}",
                self.dead_letter_queue
            ));
        }
        if self.subscriptions.len() > 256 {
            return Err("at most 256 subscriptions per queue".into());
        }
        for p in &self.subscriptions {
            if let Err(e) = tickwire_wire::topic::validate_pattern(p.as_bytes()) {
                return Err(format!("invalid subscription {p:?}: {e}"));
            }
        }
        if self.ack_timeout_ms != 0 && self.ack_timeout_ms < MIN_ACK_TIMEOUT_MS {
            return Err(format!(
                "ack_timeout_ms {} is below the floor of {MIN_ACK_TIMEOUT_MS} ms \
                 (0: redeliver only when the consumer goes away)",
                self.ack_timeout_ms
            ));
        }
        Ok(())
    }

    /// Raises a non-zero `ack_timeout_ms` below [`MIN_ACK_TIMEOUT_MS`] to it: for a
    /// definition loaded from the spool, stored before the floor existed (it is not
    /// refused: the router must start with the queues it has). True when it changed.
    pub fn raise_to_floors(&mut self) -> bool {
        if self.ack_timeout_ms != 0 && self.ack_timeout_ms < MIN_ACK_TIMEOUT_MS {
            self.ack_timeout_ms = MIN_ACK_TIMEOUT_MS;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_message_id_is_written_under_its_name_and_read_under_both() {
        let def = QueueDef {
            name: "q".into(),
            created_at: 42,
            ..QueueDef::default()
        };
        let json = serde_json::to_value(&def).unwrap();
        assert_eq!(json["first_message_id"], 42);
        assert!(json.get("created_at").is_none());
        // A spool written before the rename.
        let old: QueueDef = serde_json::from_str(r#"{"name":"q","created_at":7}"#).unwrap();
        assert_eq!(old.created_at, 7);
        let new: QueueDef = serde_json::from_str(r#"{"name":"q","first_message_id":9}"#).unwrap();
        assert_eq!(new.created_at, 9);
    }

    fn def(ack_timeout_ms: u64) -> QueueDef {
        QueueDef {
            name: "q".into(),
            ack_timeout_ms,
            ..QueueDef::default()
        }
    }

    /// Regression: `ack_timeout_ms: 1` with a consumer that never acknowledged made the
    /// router redeliver the whole window every millisecond.
    #[test]
    fn an_ack_timeout_below_the_floor_is_refused_naming_field_value_and_floor() {
        let e = def(1).check().unwrap_err();
        assert_eq!(
            e,
            "ack_timeout_ms 1 is below the floor of 50 ms \
             (0: redeliver only when the consumer goes away)"
        );
        let e = def(MIN_ACK_TIMEOUT_MS - 1).check().unwrap_err();
        assert!(e.contains("ack_timeout_ms 49"), "{e}");
        assert_eq!(
            def(0).check(),
            Ok(()),
            "0: only when the consumer goes away"
        );
        assert_eq!(def(MIN_ACK_TIMEOUT_MS).check(), Ok(()));
        assert_eq!(def(u64::MAX).check(), Ok(()));
    }

    /// `max_redeliveries` is any u32: the timeout floor and the per-turn budget bound
    /// what redelivering costs, not the count.
    #[test]
    fn any_max_redeliveries_is_accepted() {
        let d = QueueDef {
            max_redeliveries: u32::MAX,
            ..def(MIN_ACK_TIMEOUT_MS)
        };
        assert_eq!(d.check(), Ok(()));
    }

    #[test]
    fn a_stored_definition_below_the_floor_is_raised_to_it_and_others_are_kept() {
        let mut old: QueueDef = serde_json::from_str(
            r#"{"name":"q","ack_timeout_ms":1,"max_redeliveries":4294967295}"#,
        )
        .unwrap();
        assert!(old.raise_to_floors());
        assert_eq!(old.ack_timeout_ms, MIN_ACK_TIMEOUT_MS);
        assert_eq!(old.max_redeliveries, u32::MAX);
        assert_eq!(old.check(), Ok(()));
        for ms in [0, MIN_ACK_TIMEOUT_MS, 30_000] {
            let mut d = def(ms);
            assert!(!d.raise_to_floors());
            assert_eq!(d.ack_timeout_ms, ms);
        }
    }
}
