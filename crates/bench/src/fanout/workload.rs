//! The fan-out workload, pure: presets, rate parsing, topic names, the subscription
//! mapping and the payload header. No IO, no clock.

use std::net::SocketAddr;

use serde::Serialize;

use crate::schedule::{RatePattern, Schedule, SizeMix};

/// Bytes at the front of every payload: publisher id (u32), topic index (u32),
/// sequence number per (publisher, topic) (u64), intended send time (u64, ns of
/// CLOCK_MONOTONIC), all little-endian.
pub const HEADER_LEN: usize = 24;

/// The published workloads (docs/benchmarking.md family A).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// 500k msg/s steady + 500k msg/s bursts (1 s every other second), 100:67,600:33.
    Pattern1,
    /// 1M msg/s steady + the same 500k msg/s bursts, 100:67,600:33.
    Pattern2,
    /// 100-byte messages, 12-byte topics, 10 publishers x 10 topics x 10 subscribers,
    /// 1M msg/s steady (the low end of the published 1M..5M sweep).
    Mdd,
}

impl Preset {
    /// What the preset fixes; the user's flags override each part.
    pub fn defaults(self) -> Knobs {
        let mix = SizeMix {
            parts: vec![(100, 67), (600, 33)],
        };
        match self {
            Preset::Pattern1 => Knobs {
                rate: Some(500_000.0),
                burst: Some(500_000.0),
                mix: Some(mix),
                ..Knobs::default()
            },
            Preset::Pattern2 => Knobs {
                rate: Some(1_000_000.0),
                burst: Some(500_000.0),
                mix: Some(mix),
                ..Knobs::default()
            },
            Preset::Mdd => Knobs {
                rate: Some(1_000_000.0),
                burst: Some(0.0),
                mix: Some(SizeMix::single(100)),
                publishers: Some(10),
                topics: Some(10),
                subscribers: Some(10),
                topic_len: Some(12),
                ..Knobs::default()
            },
        }
    }
}

/// The workload knobs as given (by flags or a preset); `None` = not given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Knobs {
    pub rate: Option<f64>,
    pub burst: Option<f64>,
    pub mix: Option<SizeMix>,
    pub publishers: Option<usize>,
    pub topics: Option<usize>,
    pub subscribers: Option<usize>,
    pub sub_topics: Option<usize>,
    pub topic_len: Option<usize>,
}

/// Built-in defaults when neither a flag nor a preset sets a knob.
pub const DEFAULT_RATE: f64 = 10_000.0;
pub const DEFAULT_MIX: &str = "100:67,600:33";
pub const DEFAULT_PUBLISHERS: usize = 2;
pub const DEFAULT_TOPICS: usize = 10;
pub const DEFAULT_SUBSCRIBERS: usize = 2;
pub const DEFAULT_TOPIC_LEN: usize = 12;

/// Where the messages go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Target {
    /// A tickwire router: started by the bench (`addr` None) or at `--router ADDR`.
    Tickwire { addr: Option<SocketAddr> },
    /// The raw fan-out floor: `tickwire bench fanout-relay`, started like the router.
    Raw,
    /// A core NATS server at this URL (`nats://HOST:PORT`).
    Nats { url: String },
}

impl Target {
    /// Parses `--target`: `tickwire` (the default), `raw` or `nats://HOST:PORT`.
    pub fn parse(s: &str) -> Result<Target, String> {
        match s {
            "tickwire" => return Ok(Target::Tickwire { addr: None }),
            "raw" => return Ok(Target::Raw),
            _ => {}
        }
        let rest = s.strip_prefix("nats://").ok_or_else(|| {
            format!("{s:?}: expected tickwire, raw or nats://HOST:PORT (for a running tickwire router use --router ADDR)")
        })?;
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("{s:?}: expected nats://HOST:PORT (the port is required)"))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(format!("{s:?}: expected nats://HOST:PORT"));
        }
        Ok(Target::Nats { url: s.to_owned() })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Target::Tickwire { .. } => "tickwire",
            Target::Raw => "raw",
            Target::Nats { .. } => "NATS",
        }
    }
}

/// A fully resolved workload: what every thread runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workload {
    pub preset: Option<Preset>,
    /// `--scale`: every rate is multiplied by it.
    pub scale: f64,
    /// Base rate before scaling (msg/s, all publishers together).
    pub published_rate: f64,
    /// Burst rate before scaling (extra msg/s every other second).
    pub published_burst: f64,
    /// The pattern actually run (scaled).
    pub pattern: RatePattern,
    pub mix: SizeMix,
    pub publishers: usize,
    pub topics: usize,
    pub subscribers: usize,
    /// Topics each subscriber subscribes to (see [`subscriber_topics`]).
    pub sub_topics: usize,
    pub topic_len: usize,
    pub warmup_ns: u64,
    pub duration_ns: u64,
}

impl Workload {
    /// Merges flags over the preset over the built-in defaults and checks the result.
    pub fn resolve(
        preset: Option<Preset>,
        flags: Knobs,
        scale: f64,
        warmup_s: f64,
        duration_s: f64,
    ) -> Result<Workload, String> {
        let p = preset.map(Preset::defaults).unwrap_or_default();
        let mix = match flags.mix.or(p.mix) {
            Some(m) => m,
            None => SizeMix::parse(DEFAULT_MIX)?,
        };
        let published_rate = flags.rate.or(p.rate).unwrap_or(DEFAULT_RATE);
        let published_burst = flags.burst.or(p.burst).unwrap_or(0.0);
        let publishers = flags
            .publishers
            .or(p.publishers)
            .unwrap_or(DEFAULT_PUBLISHERS);
        let topics = flags.topics.or(p.topics).unwrap_or(DEFAULT_TOPICS);
        let subscribers = flags
            .subscribers
            .or(p.subscribers)
            .unwrap_or(DEFAULT_SUBSCRIBERS);
        let sub_topics = flags.sub_topics.or(p.sub_topics).unwrap_or(topics);
        let topic_len = flags.topic_len.or(p.topic_len).unwrap_or(DEFAULT_TOPIC_LEN);

        if !(scale > 0.0 && scale.is_finite()) {
            return Err(format!("--scale must be above 0 (got {scale})"));
        }
        if !(published_rate > 0.0 && published_rate.is_finite()) {
            return Err("--rate must be above 0".into());
        }
        if !(published_burst >= 0.0 && published_burst.is_finite()) {
            return Err("--burst must be 0 or more".into());
        }
        if !(0.0..=3600.0).contains(&warmup_s) {
            return Err("--warmup must be between 0 and 3600 seconds".into());
        }
        if !(duration_s > 0.0 && duration_s <= 24.0 * 3600.0) {
            return Err("--duration must be above 0 and at most a day".into());
        }
        if publishers == 0 || topics == 0 || subscribers == 0 {
            return Err("--publishers, --topics and --subscribers must be at least 1".into());
        }
        if publishers > 1000 || subscribers > 1000 {
            return Err("at most 1000 publishers and 1000 subscribers (one thread each)".into());
        }
        if sub_topics == 0 || sub_topics > topics {
            return Err(format!(
                "--sub-topics must be between 1 and --topics ({topics})"
            ));
        }
        let min_size = mix.parts.iter().map(|p| p.0).min().unwrap_or(0);
        if min_size < HEADER_LEN {
            return Err(format!(
                "every message size must be at least {HEADER_LEN} bytes (the header: publisher, topic, sequence, intended send time); the mix has {min_size}"
            ));
        }
        topic_name(topics - 1, topic_len)?;

        let base = RatePattern::Steady {
            rate: published_rate,
        };
        let pattern = if published_burst > 0.0 {
            RatePattern::Bursts {
                base: published_rate,
                burst: published_burst,
            }
        } else {
            base
        }
        .scaled(scale);
        Ok(Workload {
            preset,
            scale,
            published_rate,
            published_burst,
            pattern,
            mix,
            publishers,
            topics,
            subscribers,
            sub_topics,
            topic_len,
            warmup_ns: secs_to_ns(warmup_s),
            duration_ns: secs_to_ns(duration_s),
        })
    }

    pub fn schedule(&self) -> Schedule {
        Schedule {
            pattern: self.pattern,
            warmup_ns: self.warmup_ns,
            duration_ns: self.duration_ns,
        }
    }

    /// Topic names in the tickwire syntax, index = topic id.
    pub fn topic_names(&self) -> Vec<String> {
        (0..self.topics)
            .map(|i| topic_name(i, self.topic_len).unwrap_or_default())
            .collect()
    }

    /// How many subscribers receive topic `t`.
    pub fn subscribers_of(&self, t: usize) -> u64 {
        (0..self.subscribers)
            .filter(|&s| subscriber_topics(s, self.topics, self.sub_topics).any(|x| x == t))
            .count() as u64
    }
}

fn secs_to_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

/// Topic `i` as a tickwire topic of exactly `len` bytes: `t/` then the index,
/// zero-padded (`t/0000000001` for len 12). Errors if the index does not fit.
pub fn topic_name(i: usize, len: usize) -> Result<String, String> {
    let digits = len.saturating_sub(2);
    let s = format!("t/{i:0digits$}");
    if digits == 0 || s.len() != len {
        return Err(format!(
            "--topic-len {len} is too short for topic {i} (names are `t/` and the zero-padded index)"
        ));
    }
    Ok(s)
}

/// The same topic as a NATS subject: levels separated by `.` instead of `/`.
pub fn nats_subject(topic: &str) -> String {
    topic.replace('/', ".")
}

/// The topics subscriber `s` subscribes to: `k` consecutive topics starting at
/// `s % topics` (wrapping). With `k == topics` every subscriber gets every message.
pub fn subscriber_topics(s: usize, topics: usize, k: usize) -> impl Iterator<Item = usize> {
    (0..k.min(topics)).map(move |j| (s + j) % topics)
}

/// The topic of publisher `p`'s `j`-th message: each publisher cycles through every
/// topic, starting at its own offset so the publishers do not move in lockstep.
pub fn publisher_topic(p: usize, j: u64, topics: usize) -> usize {
    ((p as u64 + j) % topics as u64) as usize
}

/// What every payload starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub publisher: u32,
    pub topic: u32,
    pub seq: u64,
    pub intended_ns: u64,
}

impl Header {
    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf` (which must be
    /// at least that long; the workload guarantees every size is).
    pub fn encode(&self, buf: &mut [u8]) {
        buf[0..4].copy_from_slice(&self.publisher.to_le_bytes());
        buf[4..8].copy_from_slice(&self.topic.to_le_bytes());
        buf[8..16].copy_from_slice(&self.seq.to_le_bytes());
        buf[16..24].copy_from_slice(&self.intended_ns.to_le_bytes());
    }

    /// Reads a header; `None` if the payload is too short.
    pub fn decode(buf: &[u8]) -> Option<Header> {
        let h = buf.get(..HEADER_LEN)?;
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[i..i + 8]);
            u64::from_le_bytes(b)
        };
        Some(Header {
            publisher: u32_at(0),
            topic: u32_at(4),
            seq: u64_at(8),
            intended_ns: u64_at(16),
        })
    }
}

pub use crate::schedule::parse_rate;

/// Parses `--burst`: `+500k` or `500k` (the `+` says it adds to the base rate); `0`
/// for no bursts.
pub fn parse_burst(s: &str) -> Result<f64, String> {
    parse_rate(s.trim().strip_prefix('+').unwrap_or(s))
}

/// Parses `--scale`: a fraction such as `0.05` or a percentage such as `5%`.
pub fn parse_scale(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("{s:?} is not a scale factor (examples: 0.05, 5%, 1)"))?;
    if !(v > 0.0 && v <= 100.0) {
        return Err(format!("{s:?}: the scale must be above 0 and at most 100"));
    }
    Ok(v)
}

/// Parses `--mix` through [`SizeMix::parse`].
pub fn parse_mix(s: &str) -> Result<SizeMix, String> {
    SizeMix::parse(s)
}

/// `1500000` → `1.5M`, `50000` → `50k`: rates for humans.
pub fn human_rate(r: f64) -> String {
    if r >= 1e6 {
        trim_float(r / 1e6) + "M"
    } else if r >= 1e3 {
        trim_float(r / 1e3) + "k"
    } else {
        trim_float(r)
    }
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_have_the_requested_length() {
        assert_eq!(topic_name(1, 12).unwrap(), "t/0000000001");
        assert_eq!(topic_name(0, 3).unwrap(), "t/0");
        assert_eq!(topic_name(12345, 40).unwrap().len(), 40);
        assert!(topic_name(10, 3).is_err());
        assert!(topic_name(0, 2).is_err());
        assert_eq!(nats_subject("t/0000000001"), "t.0000000001");
    }

    #[test]
    fn header_round_trips_and_short_payloads_are_refused() {
        let h = Header {
            publisher: 7,
            topic: 3,
            seq: u64::MAX - 1,
            intended_ns: 123_456_789_012,
        };
        let mut buf = vec![0xAAu8; 100];
        h.encode(&mut buf);
        assert_eq!(Header::decode(&buf), Some(h));
        assert_eq!(Header::decode(&buf[..HEADER_LEN]), Some(h));
        assert_eq!(Header::decode(&buf[..HEADER_LEN - 1]), None);
        assert_eq!(buf[HEADER_LEN], 0xAA);
    }

    #[test]
    fn rates_parse_with_suffixes() {
        assert_eq!(parse_rate("2000"), Ok(2000.0));
        assert_eq!(parse_rate("500k"), Ok(500_000.0));
        assert_eq!(parse_rate("1.5M"), Ok(1_500_000.0));
        assert_eq!(parse_rate("10k/s"), Ok(10_000.0));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("-5").is_err());
        assert_eq!(parse_burst("+500k"), Ok(500_000.0));
        assert_eq!(parse_burst("0"), Ok(0.0));
        assert_eq!(parse_scale("0.05"), Ok(0.05));
        assert_eq!(parse_scale("5%"), Ok(0.05));
        assert!(parse_scale("0").is_err());
        assert_eq!(human_rate(1_500_000.0), "1.5M");
        assert_eq!(human_rate(25_000.0), "25k");
        assert_eq!(human_rate(512.0), "512");
    }

    #[test]
    fn targets_parse() {
        assert_eq!(
            Target::parse("nats://127.0.0.1:4222"),
            Ok(Target::Nats {
                url: "nats://127.0.0.1:4222".into()
            })
        );
        assert_eq!(
            Target::parse("tickwire"),
            Ok(Target::Tickwire { addr: None })
        );
        assert_eq!(Target::parse("raw"), Ok(Target::Raw));
        assert!(Target::parse("nats://127.0.0.1").is_err());
        assert!(Target::parse("127.0.0.1:4222").is_err());
    }

    fn resolve(preset: Option<Preset>, flags: Knobs, scale: f64) -> Workload {
        Workload::resolve(preset, flags, scale, 2.0, 10.0).unwrap()
    }

    #[test]
    fn presets_expand_to_the_published_workloads() {
        let w = resolve(Some(Preset::Pattern1), Knobs::default(), 1.0);
        assert_eq!(
            w.pattern,
            RatePattern::Bursts {
                base: 500_000.0,
                burst: 500_000.0
            }
        );
        assert_eq!(w.mix.parts, vec![(100, 67), (600, 33)]);

        let w = resolve(Some(Preset::Pattern2), Knobs::default(), 1.0);
        assert_eq!(
            w.pattern,
            RatePattern::Bursts {
                base: 1_000_000.0,
                burst: 500_000.0
            }
        );

        let w = resolve(Some(Preset::Mdd), Knobs::default(), 1.0);
        assert_eq!((w.publishers, w.topics, w.subscribers), (10, 10, 10));
        assert_eq!(w.topic_len, 12);
        assert_eq!(w.mix.parts, vec![(100, 1)]);
        assert_eq!(w.pattern, RatePattern::Steady { rate: 1_000_000.0 });
        assert_eq!(w.topic_names()[9], "t/0000000009");
    }

    #[test]
    fn flags_override_presets_and_scale_multiplies_every_rate() {
        let flags = Knobs {
            subscribers: Some(3),
            burst: Some(100_000.0),
            ..Knobs::default()
        };
        let w = resolve(Some(Preset::Pattern1), flags, 0.05);
        assert_eq!(w.subscribers, 3);
        assert_eq!(w.published_rate, 500_000.0);
        match w.pattern {
            RatePattern::Bursts { base, burst } => {
                assert!((base - 25_000.0).abs() < 1e-6);
                assert!((burst - 5_000.0).abs() < 1e-6);
            }
            p => panic!("unexpected pattern {p:?}"),
        }
        let w = resolve(None, Knobs::default(), 0.5);
        assert_eq!(w.pattern, RatePattern::Steady { rate: 5_000.0 });
        assert_eq!((w.publishers, w.topics, w.subscribers), (2, 10, 2));
    }

    #[test]
    fn bad_workloads_are_refused_with_a_reason() {
        let r = |f: Knobs| Workload::resolve(None, f, 1.0, 1.0, 1.0);
        assert!(r(Knobs {
            mix: Some(SizeMix::single(16)),
            ..Knobs::default()
        })
        .unwrap_err()
        .contains("at least 24"));
        assert!(r(Knobs {
            topics: Some(1000),
            topic_len: Some(4),
            ..Knobs::default()
        })
        .is_err());
        assert!(r(Knobs {
            sub_topics: Some(11),
            ..Knobs::default()
        })
        .is_err());
        assert!(Workload::resolve(None, Knobs::default(), 0.0, 1.0, 1.0).is_err());
        assert!(Workload::resolve(None, Knobs::default(), 1.0, 1.0, 0.0).is_err());
    }

    #[test]
    fn subscription_mapping_and_expected_fanout() {
        let w = resolve(
            None,
            Knobs {
                topics: Some(4),
                subscribers: Some(3),
                sub_topics: Some(2),
                ..Knobs::default()
            },
            1.0,
        );
        assert_eq!(subscriber_topics(0, 4, 2).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(subscriber_topics(3, 4, 2).collect::<Vec<_>>(), vec![3, 0]);
        // Topic 1 is taken by subscribers 0 and 1; topic 3 by subscriber 2 only.
        assert_eq!(w.subscribers_of(1), 2);
        assert_eq!(w.subscribers_of(3), 1);
        // Every subscriber on every topic by default.
        let all = resolve(None, Knobs::default(), 1.0);
        assert!((0..10).all(|t| all.subscribers_of(t) == 2));
        // Each publisher visits every topic, from its own offset.
        assert_eq!(publisher_topic(1, 0, 4), 1);
        assert_eq!(publisher_topic(1, 3, 4), 0);
    }
}
