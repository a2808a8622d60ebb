//! QuickFIX/C++'s field order, for messages an application builds or sends on.
//!
//! QuickFIX keeps a message as sorted field maps and writes it out in their order,
//! whatever order the fields were set (or received) in (recorded:
//! `crates/fix/testdata/quickfix/at_echo_field_order.txt`, `at_echo_groups.txt`):
//!
//! - header: `8`, `9`, `35`, then the other header fields in ascending tag order;
//! - body: ascending tag order, each repeating group written at its NumInGroup tag;
//! - a group entry: the group's fields in dictionary order (delimiter first), fields
//!   the dictionary does not list after them in ascending tag order; nested groups at
//!   their NumInGroup tag, recursively;
//! - without a dictionary QuickFIX knows no groups: every body field is sorted by tag,
//!   repeated tags in the order received;
//! - trailer last (`10`).
//!
//! [`QuickFixOrder`] writes the fields of a parsed message (or of one the application
//! assembled in any order) in that order, into a body for `Session::send_app` /
//! `Ctx::send`: the header fields the session writes itself (8, 9, 35, 34, 49, 52, 56,
//! and 43/122, which QuickFIX's `Session::send` removes) and the trailer are left out,
//! the other header fields come first, ascending, as the session expects them. It
//! keeps its scratch space between calls: no allocation once warmed up.
//!
//! ```
//! use tickwire_fix::codec::{parse_unchecked, Fields};
//! use tickwire_fix::order::QuickFixOrder;
//! let raw = b"8=FIX.4.4\x019=52\x0135=D\x0149=A\x0156=B\x0134=2\x0152=20240101-00:00:00\x0155=X\x0111=ID\x0110=000\x01";
//! let mut fields = Fields::new();
//! let msg = parse_unchecked(raw, &mut fields).unwrap();
//! let mut order = QuickFixOrder::new();
//! let mut body = Vec::new();
//! order.write_body(&msg, None, &mut body);
//! assert_eq!(body, b"11=ID\x0155=X\x01");
//! ```

use crate::codec::{Field, MessageRef, SOH};
use crate::dict::{scan_group, Dictionary, GroupDef};
use crate::session::{is_header_tag, is_trailer_tag};

/// Writes messages in QuickFIX's field order; see the module docs. Reuse one per
/// thread: its scratch space is kept.
#[derive(Debug, Default)]
pub struct QuickFixOrder {
    units: Vec<Unit>,
}

/// One field, or one whole repeating group (count field and entries), to be sorted.
#[derive(Clone, Copy, Debug)]
struct Unit {
    key: u64,
    start: u32,
    end: u32,
    seq: u32,
}

/// Header fields the session writes itself (QuickFIX's `Session::send` fills 8, 49,
/// 56, 34, 52 and removes 43 and 122).
fn written_by_session(tag: u32) -> bool {
    matches!(tag, 8 | 9 | 35 | 34 | 43 | 49 | 52 | 56 | 122)
}

impl QuickFixOrder {
    /// An empty writer.
    pub fn new() -> QuickFixOrder {
        QuickFixOrder::default()
    }

    /// Appends to `out` the fields of `msg` that an application passes to
    /// `Session::send_app` (`tag=value<SOH>` each): its other header fields ascending,
    /// then its body in QuickFIX's order, groups resolved with `dict` (the session's
    /// application dictionary; None: no groups, as QuickFIX without a dictionary).
    pub fn write_body(
        &mut self,
        msg: &MessageRef<'_>,
        dict: Option<&Dictionary>,
        out: &mut Vec<u8>,
    ) {
        self.write_fields(msg.raw(), msg.fields(), msg.msg_type(), dict, out);
    }

    /// [`QuickFixOrder::write_body`] over a field table of `raw` (values at
    /// `raw[f.start..f.end]`) of a message of type `msg_type`.
    fn write_fields(
        &mut self,
        raw: &[u8],
        fields: &[Field],
        msg_type: &[u8],
        dict: Option<&Dictionary>,
        out: &mut Vec<u8>,
    ) {
        let is_header = |t: u32| {
            dict.map_or(is_header_tag(t), |d| {
                d.is_header_field(t) || is_header_tag(t)
            })
        };
        let is_trailer = |t: u32| {
            dict.map_or(is_trailer_tag(t), |d| {
                d.is_trailer_field(t) || is_trailer_tag(t)
            })
        };
        let body = dict.and_then(|d| d.body_layout(msg_type));
        self.units.clear();
        // Header units first (key: tag), then body units (key: 2^32 + tag), each group
        // with its entries as one unit.
        let mut i = 0;
        let mut seq = 0u32;
        while let Some(f) = fields.get(i) {
            let (key, end, skip) = if is_trailer(f.tag) {
                (0, i + 1, true)
            } else if is_header(f.tag) {
                let end = match dict.and_then(|d| d.header().group(f.tag)) {
                    Some(g) => scan_group(g, fields, i + 1).end,
                    None => i + 1,
                };
                (u64::from(f.tag), end, written_by_session(f.tag))
            } else {
                let end = match body.and_then(|b| b.group(f.tag)) {
                    Some(g) => scan_group(g, fields, i + 1).end,
                    None => i + 1,
                };
                ((1 << 32) | u64::from(f.tag), end, false)
            };
            if !skip {
                self.units.push(Unit {
                    key,
                    start: i as u32,
                    end: end as u32,
                    seq,
                });
                seq += 1;
            }
            i = end.max(i + 1);
        }
        self.units.sort_unstable_by_key(|u| (u.key, u.seq));
        let top = self.units.len();
        for k in 0..top {
            let u = self.units[k];
            let group = if u.end > u.start + 1 {
                let tag = fields[u.start as usize].tag;
                if u.key >> 32 == 0 {
                    dict.and_then(|d| d.header().group(tag))
                } else {
                    body.and_then(|b| b.group(tag))
                }
            } else {
                None
            };
            self.write_unit(raw, fields, u, group, out);
        }
        self.units.truncate(0);
    }

    /// Writes one unit: a field, or a group's count field and its entries in order.
    fn write_unit(
        &mut self,
        raw: &[u8],
        fields: &[Field],
        u: Unit,
        group: Option<&GroupDef>,
        out: &mut Vec<u8>,
    ) {
        let first = &fields[u.start as usize];
        write_field(raw, first, out);
        let Some(group) = group else {
            return;
        };
        // Entries: split like QuickFIX's parser (a new entry at the delimiter or at a
        // member the entry already has), then each entry's units sorted by group order.
        let mut pos = u.start as usize + 1;
        let end = u.end as usize;
        while pos < end {
            let entry_end = next_entry_end(group, fields, pos, end);
            self.write_entry(raw, fields, group, pos, entry_end, out);
            pos = entry_end.max(pos + 1);
        }
    }

    fn write_entry(
        &mut self,
        raw: &[u8],
        fields: &[Field],
        group: &GroupDef,
        start: usize,
        end: usize,
        out: &mut Vec<u8>,
    ) {
        let members = group.layout().members();
        let base = self.units.len();
        let mut i = start;
        let mut seq = 0u32;
        while i < end {
            let f = &fields[i];
            let unit_end = match group.layout().group(f.tag) {
                Some(nested) => scan_group(nested, fields, i + 1).end.min(end),
                None => i + 1,
            };
            let key = match members.iter().position(|&m| m == f.tag) {
                Some(p) => p as u64,
                None => (1 << 32) | u64::from(f.tag),
            };
            self.units.push(Unit {
                key,
                start: i as u32,
                end: unit_end as u32,
                seq,
            });
            seq += 1;
            i = unit_end.max(i + 1);
        }
        self.units[base..].sort_unstable_by_key(|u| (u.key, u.seq));
        let top = self.units.len();
        for k in base..top {
            let u = self.units[k];
            let nested = if u.end > u.start + 1 {
                group.layout().group(fields[u.start as usize].tag)
            } else {
                None
            };
            self.write_unit(raw, fields, u, nested, out);
        }
        self.units.truncate(base);
    }
}

/// The end of the group entry starting at `fields[start]` (bounded by `end`): the next
/// delimiter, or the next direct member the entry already holds.
fn next_entry_end(group: &GroupDef, fields: &[Field], start: usize, end: usize) -> usize {
    let mut pos = start + 1;
    while pos < end {
        let tag = fields[pos].tag;
        if tag == group.delimiter {
            return pos;
        }
        let mut i = start;
        let mut seen = false;
        while i < pos {
            if fields[i].tag == tag {
                seen = true;
                break;
            }
            i = match group.layout().group(fields[i].tag) {
                Some(nested) => scan_group(nested, fields, i + 1).end.min(pos),
                None => i + 1,
            };
        }
        if seen {
            return pos;
        }
        pos = match group.layout().group(tag) {
            Some(nested) => scan_group(nested, fields, pos + 1).end.min(end),
            None => pos + 1,
        };
    }
    end
}

fn write_field(raw: &[u8], f: &Field, out: &mut Vec<u8>) {
    // The tag's decimal digits, without allocating (a u32 has at most 10).
    let mut digits = [0u8; 10];
    let mut n = digits.len();
    let mut v = f.tag;
    loop {
        n -= 1;
        digits[n] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[n..]);
    out.push(b'=');
    out.extend_from_slice(
        raw.get(f.start as usize..f.end as usize)
            .unwrap_or_default(),
    );
    out.push(SOH);
}

/// A message body built field by field in any order and written in QuickFIX's order
/// (see the module docs): what a QuickFIX application gets from `FIX::Message::setField`
/// and `toString`. Header fields other than the session's (97, 115, ...) may be set too;
/// they are written first, ascending. Repeating groups: set the NumInGroup field, then
/// each entry's fields with the entry's delimiter first (the rest of an entry in any
/// order); entries are written in the order set. Fields are appended, not replaced: set
/// a tag once. Reuse one builder: [`QuickFixBody::clear`] keeps its buffers.
///
/// ```
/// use tickwire_fix::order::QuickFixBody;
/// let mut b = QuickFixBody::new();
/// b.field(55, b"IBM").field(11, b"ORD1").field(54, b"1").field(97, b"Y");
/// let mut body = Vec::new();
/// b.write(b"D", None, &mut body);
/// assert_eq!(body, b"97=Y\x0111=ORD1\x0154=1\x0155=IBM\x01");
/// ```
#[derive(Debug, Default)]
pub struct QuickFixBody {
    values: Vec<u8>,
    fields: Vec<Field>,
    order: QuickFixOrder,
}

impl QuickFixBody {
    /// An empty body.
    pub fn new() -> QuickFixBody {
        QuickFixBody::default()
    }

    /// Forgets the fields set; keeps the buffers.
    pub fn clear(&mut self) {
        self.values.clear();
        self.fields.clear();
    }

    /// Sets `tag` to `value` (appended; see the type docs for groups).
    pub fn field(&mut self, tag: u32, value: &[u8]) -> &mut QuickFixBody {
        let start = self.values.len();
        self.values.extend_from_slice(value);
        self.fields.push(Field {
            tag,
            start: start as u32,
            end: self.values.len() as u32,
        });
        self
    }

    /// Appends the body (`tag=value<SOH>...`, for `Session::send_app` / `Ctx::send`) of a
    /// message of type `msg_type` in QuickFIX's order, groups resolved with `dict`.
    pub fn write(&mut self, msg_type: &[u8], dict: Option<&Dictionary>, out: &mut Vec<u8>) {
        self.order
            .write_fields(&self.values, &self.fields, msg_type, dict, out);
    }
}
