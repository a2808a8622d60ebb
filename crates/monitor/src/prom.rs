//! Prometheus text exposition format (version 0.0.4): `# HELP`, `# TYPE`, samples.
//!
//! Names follow the Prometheus conventions: a `tickwire_` prefix, base units in the
//! name (`_seconds`, `_bytes`), `_total` on counters. Label values are escaped;
//! callers bound the label sets (see docs/monitoring.md, "Cardinality").

use std::fmt::Write;

/// A metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (name ends in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Quantiles with `_sum` and `_count`.
    Summary,
}

/// A document being written.
#[derive(Debug, Default)]
pub struct Text {
    out: String,
}

impl Text {
    /// An empty document.
    pub fn new() -> Text {
        Text::default()
    }

    /// Starts a family: its HELP and TYPE lines. Each name once per document.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Text {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Summary => "summary",
        };
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        self
    }

    /// One sample of the current family.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Text {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
        self
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) -> &mut Text {
        self.family(name, kind, help).sample(name, &[], value)
    }

    /// The document.
    pub fn finish(self) -> String {
        self.out
    }
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_escapes() {
        let mut t = Text::new();
        t.single("tickwire_up", Kind::Gauge, "Up.", 1.0);
        t.family("tickwire_x_total", Kind::Counter, "X\nY.").sample(
            "tickwire_x_total",
            &[("name", "a\"b\\c\nd")],
            2.5,
        );
        assert_eq!(
            t.finish(),
            "# HELP tickwire_up Up.\n# TYPE tickwire_up gauge\ntickwire_up 1\n\
             # HELP tickwire_x_total X\\nY.\n# TYPE tickwire_x_total counter\n\
             tickwire_x_total{name=\"a\\\"b\\\\c\\nd\"} 2.5\n"
        );
        assert_eq!(number(f64::NAN), "NaN");
    }
}
