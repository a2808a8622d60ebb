//! Message validation against QuickFIX data dictionaries, with QuickFIX's switches,
//! defaults, reject reasons and texts.
//!
//! # What runs, in which order
//!
//! [`validate`] mirrors QuickFIX/C++ 1.16 (`DataDictionary::validate` and the parsing in
//! `Message::setString`), so the first problem reported — and therefore the Reject a
//! counterparty sees — is the one QuickFIX would report:
//!
//! 1. **Structure** (`ValidateFieldsOutOfOrder`): a header field after a body or trailer
//!    field, or a body field after a trailer field → 14 "Tag specified out of required
//!    order" with that tag.
//! 2. **MsgType** not in the (application) dictionary → 11 "Invalid MsgType".
//! 3. **Required fields**: header, trailer, body (smallest missing tag first), then the
//!    required members of each group entry (groups by NumInGroup tag) → 1 "Required tag
//!    missing". As in QuickFIX, a component's required fields count only when the
//!    component is required, and a group's only when the group is required.
//! 4. **Each top-level field** of the header and trailer (transport dictionary), then of
//!    the body (application dictionary), in QuickFIX's sorted order: repeated tag → 13,
//!    empty value (`ValidateFieldsHaveValues`) → 4, data format → 6, enumeration → 5,
//!    tag not in the dictionary → 0 "Invalid tag number", body tag not defined for the
//!    message type → 2, NumInGroup not equal to the number of entries → 16. The last two
//!    are skipped for tags below 5000 when `AllowUnknownMsgFields` is set, and for
//!    user-defined tags (>= 5000) when `ValidateUserDefinedFields` is off.
//!
//! Like QuickFIX 1.16, the members of repeating groups are checked for presence (step 3)
//! but not for format, enumeration or nested counts (its field iteration does not descend
//! into groups). Group members are found with the dictionary (see `dict.rs`).
//!
//! CompID and SendingTime checks belong to the session (QuickFIX runs them in
//! `Session::verify`, after validation): [`check_comp_ids`], [`check_sending_time`].
//!
//! # Cost
//!
//! One walk over the field table with a 128-byte bitset on the stack for duplicate and
//! presence checks (a second 896-byte one only for messages with tags from 1024 to 8191,
//! a third 7 KiB one only for tags from 8192 to 65535; tags beyond, never standard, are
//! collected once per message into a sorted list and looked up by binary search, so
//! the cost stays O(n log n) whatever their number and order); one load per field for
//! its section and definition (`Dictionary::tag_class`); no panic on any input. No
//! allocation, except the sorted list of a message with tags beyond 65535: in a buffer
//! [`ShapeCache`] keeps across messages (up to 1,024 entries) for [`validate_cached`],
//! a fresh one for [`validate`].
//!
//! A stream of messages of few shapes (market data, orders) is cheaper with
//! [`validate_cached`]: same answer, and a message of the shape last accepted (same
//! MsgType, same tags in the same order) gets only the checks that depend on the values
//! of its top-level fields, with what the dictionary says of each field known from the
//! shape ([`ShapeCache`]).

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use crate::codec::{self, Field, Fields, MessageRef, ParseError};
use crate::dict::{
    Dictionary, FieldDef, FieldType, GroupDef, GroupEntry, GroupIter, GroupScan, Layout,
};

/// SessionRejectReason (373) values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionRejectReason {
    /// 0: tag not defined in the dictionary.
    InvalidTagNumber,
    /// 1.
    RequiredTagMissing,
    /// 2.
    TagNotDefinedForThisMessageType,
    /// 3 (QuickFIX never sends it).
    UndefinedTag,
    /// 4.
    TagSpecifiedWithoutAValue,
    /// 5: value not in the enumeration.
    ValueIsIncorrect,
    /// 6.
    IncorrectDataFormatForValue,
    /// 7.
    DecryptionProblem,
    /// 8.
    SignatureProblem,
    /// 9.
    CompIdProblem,
    /// 10.
    SendingTimeAccuracyProblem,
    /// 11.
    InvalidMsgType,
    /// 13.
    TagAppearsMoreThanOnce,
    /// 14.
    TagSpecifiedOutOfRequiredOrder,
    /// 15 (QuickFIX/J's `ValidateUnorderedGroupFields`; QuickFIX/C++ never sends it).
    RepeatingGroupFieldsOutOfOrder,
    /// 16.
    IncorrectNumInGroupCountForRepeatingGroup,
    /// 99: no SessionRejectReason is sent (e.g. "Unsupported message type" before 4.2).
    Other,
}

impl SessionRejectReason {
    /// The numeric value of tag 373.
    pub fn code(self) -> u32 {
        match self {
            SessionRejectReason::InvalidTagNumber => 0,
            SessionRejectReason::RequiredTagMissing => 1,
            SessionRejectReason::TagNotDefinedForThisMessageType => 2,
            SessionRejectReason::UndefinedTag => 3,
            SessionRejectReason::TagSpecifiedWithoutAValue => 4,
            SessionRejectReason::ValueIsIncorrect => 5,
            SessionRejectReason::IncorrectDataFormatForValue => 6,
            SessionRejectReason::DecryptionProblem => 7,
            SessionRejectReason::SignatureProblem => 8,
            SessionRejectReason::CompIdProblem => 9,
            SessionRejectReason::SendingTimeAccuracyProblem => 10,
            SessionRejectReason::InvalidMsgType => 11,
            SessionRejectReason::TagAppearsMoreThanOnce => 13,
            SessionRejectReason::TagSpecifiedOutOfRequiredOrder => 14,
            SessionRejectReason::RepeatingGroupFieldsOutOfOrder => 15,
            SessionRejectReason::IncorrectNumInGroupCountForRepeatingGroup => 16,
            SessionRejectReason::Other => 99,
        }
    }

    /// The text QuickFIX/C++ puts in Text (58) for this reason (`Session::generateReject`);
    /// empty for the reasons it sends without a text (3, 7, 8, 99). Reason 15 carries
    /// QuickFIX/J's text.
    pub fn text(self) -> &'static str {
        match self {
            SessionRejectReason::InvalidTagNumber => "Invalid tag number",
            SessionRejectReason::RequiredTagMissing => "Required tag missing",
            SessionRejectReason::TagNotDefinedForThisMessageType => {
                "Tag not defined for this message type"
            }
            SessionRejectReason::TagSpecifiedWithoutAValue => "Tag specified without a value",
            SessionRejectReason::ValueIsIncorrect => {
                "Value is incorrect (out of range) for this tag"
            }
            SessionRejectReason::IncorrectDataFormatForValue => "Incorrect data format for value",
            SessionRejectReason::CompIdProblem => "CompID problem",
            SessionRejectReason::SendingTimeAccuracyProblem => "SendingTime accuracy problem",
            SessionRejectReason::InvalidMsgType => "Invalid MsgType",
            SessionRejectReason::TagAppearsMoreThanOnce => "Tag appears more than once",
            SessionRejectReason::TagSpecifiedOutOfRequiredOrder => {
                "Tag specified out of required order"
            }
            SessionRejectReason::RepeatingGroupFieldsOutOfOrder => {
                "Repeating group fields out of order"
            }
            SessionRejectReason::IncorrectNumInGroupCountForRepeatingGroup => {
                "Incorrect NumInGroup count for repeating group"
            }
            SessionRejectReason::UndefinedTag
            | SessionRejectReason::DecryptionProblem
            | SessionRejectReason::SignatureProblem
            | SessionRejectReason::Other => "",
        }
    }
}

/// BusinessRejectReason (380) 3, with QuickFIX's text.
pub const BUSINESS_REJECT_UNSUPPORTED_MESSAGE_TYPE: u32 = 3;

/// Why a message is refused, with everything the session needs to answer exactly as
/// QuickFIX does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reject {
    /// SessionRejectReason (373).
    pub reason: SessionRejectReason,
    /// The offending tag (RefTagID 371 from FIX.4.2 on; appended to the text before).
    pub ref_tag: Option<u32>,
    /// Exactly the Text (58) QuickFIX sends (without the " (tag)" suffix it adds before
    /// FIX.4.2 or in a BusinessMessageReject; see [`Reject::write_text`]).
    pub text: &'static str,
    /// BusinessRejectReason (380) when the answer is a BusinessMessageReject (35=j).
    pub business_reason: Option<u32>,
}

impl Reject {
    /// A session-level Reject (35=3) with QuickFIX's text for `reason`.
    pub fn new(reason: SessionRejectReason, ref_tag: Option<u32>) -> Reject {
        Reject {
            reason,
            ref_tag,
            text: reason.text(),
            business_reason: None,
        }
    }

    /// QuickFIX's answer to an application message the application does not support
    /// (`UnsupportedMessageType`): from FIX.4.2 on (FIXT included) a
    /// BusinessMessageReject (35=j) with BusinessRejectReason 3 "Unsupported Message
    /// Type"; before, a Reject (35=3) with text "Unsupported message type" and no 373.
    pub fn unsupported_message_type(begin_string: &[u8]) -> Reject {
        if begin_string >= b"FIX.4.2".as_slice() {
            Reject {
                reason: SessionRejectReason::Other,
                ref_tag: None,
                text: "Unsupported Message Type",
                business_reason: Some(BUSINESS_REJECT_UNSUPPORTED_MESSAGE_TYPE),
            }
        } else {
            Reject {
                reason: SessionRejectReason::Other,
                ref_tag: None,
                text: "Unsupported message type",
                business_reason: None,
            }
        }
    }

    /// True when QuickFIX answers with a BusinessMessageReject (35=j), not a Reject (35=3).
    pub fn is_business(&self) -> bool {
        self.business_reason.is_some()
    }

    /// The MsgType of the answer: `j` or `3`.
    pub fn msg_type(&self) -> &'static [u8] {
        if self.is_business() {
            b"j"
        } else {
            b"3"
        }
    }

    /// Whether QuickFIX sets SessionRejectReason (373) in the Reject for this session
    /// version: from FIX.4.3 always, in FIX.4.2 only for codes up to 11, never before
    /// (and never for a BusinessMessageReject or a text-only reject).
    pub fn sends_reason(&self, begin_string: &[u8]) -> bool {
        if self.is_business() || self.reason == SessionRejectReason::Other {
            return false;
        }
        begin_string > b"FIX.4.2".as_slice()
            || (begin_string == b"FIX.4.2" && self.reason.code() <= 11)
    }

    /// RefTagID (371) as QuickFIX sends it: only in a Reject (35=3) from FIX.4.2 on,
    /// when there is a tag.
    pub fn ref_tag_id(&self, begin_string: &[u8]) -> Option<u32> {
        if self.is_business() || begin_string < b"FIX.4.2".as_slice() || self.text.is_empty() {
            return None;
        }
        self.ref_tag
    }

    /// Appends the exact Text (58) value QuickFIX sends: the text, followed by
    /// ` (tag)` when the tag cannot go in RefTagID (before FIX.4.2, or in a
    /// BusinessMessageReject).
    pub fn write_text(&self, begin_string: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(self.text.as_bytes());
        if let Some(tag) = self.ref_tag {
            if !self.text.is_empty() && self.ref_tag_id(begin_string).is_none() {
                out.extend_from_slice(b" (");
                // As a C `int`, like 371: `-1=HI` reads "Invalid tag number (-1)"
                // (QuickFIX's acceptance test fix40/14a_BadField).
                out.extend_from_slice(itoa::Buffer::new().format(tag as i32).as_bytes());
                out.push(b')');
            }
        }
    }
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ref_tag {
            Some(t) => write!(f, "{} ({}): {t}", self.text, self.reason.code()),
            None => write!(f, "{} ({})", self.text, self.reason.code()),
        }
    }
}

impl std::error::Error for Reject {}

/// QuickFIX's validation switches, with its defaults ([`Default`]). Field names are the
/// settings keys in snake case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidationOptions {
    /// `UseDataDictionary` (Y): without it nothing is validated and groups stay flat.
    pub use_data_dictionary: bool,
    /// `ValidateFieldsOutOfOrder` (Y): header/body/trailer order.
    pub validate_fields_out_of_order: bool,
    /// `ValidateFieldsHaveValues` (Y): empty values are rejected (4).
    pub validate_fields_have_values: bool,
    /// `ValidateUserDefinedFields` (Y): tags >= 5000 must be in the dictionary and the
    /// message.
    pub validate_user_defined_fields: bool,
    /// `AllowUnknownMsgFields` (N): tags < 5000 unknown to the dictionary or the message
    /// type are let through.
    pub allow_unknown_msg_fields: bool,
    /// `ValidateUnorderedGroupFields`: a QuickFIX/J setting (default Y there) that
    /// rejects group members out of the dictionary's order (15). QuickFIX/C++ 1.16 has
    /// no such check, so the default here is N, which behaves as QuickFIX/C++.
    pub validate_unordered_group_fields: bool,
    /// `ValidateLengthAndChecksum` (Y): BodyLength and CheckSum are verified when parsing
    /// ([`ValidationOptions::parse`]).
    pub validate_length_and_checksum: bool,
    /// `CheckCompID` (Y): the session calls [`check_comp_ids`].
    pub check_comp_id: bool,
    /// `CheckLatency` (Y): the session calls [`check_sending_time`].
    pub check_latency: bool,
    /// `MaxLatency` (120 seconds).
    pub max_latency: u32,
}

impl Default for ValidationOptions {
    fn default() -> Self {
        ValidationOptions {
            use_data_dictionary: true,
            validate_fields_out_of_order: true,
            validate_fields_have_values: true,
            validate_user_defined_fields: true,
            allow_unknown_msg_fields: false,
            validate_unordered_group_fields: false,
            validate_length_and_checksum: true,
            check_comp_id: true,
            check_latency: true,
            max_latency: 120,
        }
    }
}

impl ValidationOptions {
    /// Parses `raw` with or without CheckSum verification according to
    /// `ValidateLengthAndChecksum`.
    pub fn parse<'a>(
        &self,
        raw: &'a [u8],
        fields: &'a mut Fields,
    ) -> Result<MessageRef<'a>, ParseError> {
        if self.validate_length_and_checksum {
            codec::parse(raw, fields)
        } else {
            codec::parse_unchecked(raw, fields)
        }
    }
}

/// The dictionaries a session validates with: one for FIX.4.x (`single`); for FIXT the
/// transport dictionary (FIXT.1.1: header, trailer, admin messages) and the application
/// dictionary selected by ApplVerID / DefaultApplVerID.
#[derive(Clone, Copy, Debug)]
pub struct Dictionaries<'a> {
    /// Header, trailer and admin messages.
    pub transport: &'a Dictionary,
    /// Application messages' bodies.
    pub app: &'a Dictionary,
}

impl<'a> Dictionaries<'a> {
    /// One dictionary for everything (FIX.4.0 to 4.4).
    pub fn single(dict: &'a Dictionary) -> Self {
        Dictionaries {
            transport: dict,
            app: dict,
        }
    }

    /// FIXT: transport plus application dictionary.
    pub fn fixt(transport: &'a Dictionary, app: &'a Dictionary) -> Self {
        Dictionaries { transport, app }
    }
}

/// QuickFIX's `Message::isAdminMsgType`: one character among `0A12345`.
pub fn is_admin_msg_type(msg_type: &[u8]) -> bool {
    matches!(msg_type, [b'0' | b'A' | b'1' | b'2' | b'3' | b'4' | b'5'])
}

/// QuickFIX's fixed list of header tags (`Message::isHeaderField`), used in addition to
/// the dictionary's header.
pub fn is_standard_header_tag(tag: u32) -> bool {
    matches!(
        tag,
        8 | 9
            | 35
            | 49
            | 56
            | 115
            | 128
            | 90
            | 34
            | 50
            | 142
            | 57
            | 143
            | 116
            | 144
            | 129
            | 145
            | 43
            | 97
            | 52
            | 122
            | 212
            | 213
            | 347
            | 369
            | 370
            | 1128
            | 1129
            | 627
    )
}

/// QuickFIX's fixed list of trailer tags (`Message::isTrailerField`).
pub fn is_standard_trailer_tag(tag: u32) -> bool {
    matches!(tag, 93 | 89 | 10)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Section {
    Header,
    Body,
    Trailer,
}

/// QuickFIX's section of a tag: its fixed header list or the transport dictionary's
/// header, else its fixed trailer list or the dictionary's trailer, else the body (one
/// load from the dictionary's class table).
#[inline]
fn section_of(tag: u32, transport: &Dictionary) -> Section {
    let class = transport.tag_class(tag);
    if class.is_header() {
        Section::Header
    } else if class.is_trailer() {
        Section::Trailer
    } else {
        Section::Body
    }
}

/// The order in which QuickFIX reports the field errors of each section: header,
/// trailer, body.
#[inline]
fn slot_of(section: Section) -> u8 {
    match section {
        Section::Header => 0,
        Section::Trailer => 1,
        Section::Body => 2,
    }
}

/// Position of a tag in QuickFIX's sorted order within its section.
fn sort_key(section: Section, tag: u32) -> u64 {
    let tag = u64::from(tag);
    match section {
        Section::Header => match tag {
            8 => 0,
            9 => 1,
            35 => 2,
            t => t + 3,
        },
        Section::Trailer => match tag {
            93 => 0,
            89 => 1,
            10 => u64::MAX,
            t => t + 2,
        },
        Section::Body => tag,
    }
}

/// Tags below this are tracked in the small stack bitset (always zeroed: 128 bytes; the
/// FIX.4.x standard tags fit).
const SMALL_TAGS: u32 = 1024;
/// Tags below this are tracked in a second bitset, zeroed only when a message has such a
/// tag (FIXT's ApplVerID 1128, FIX 5.0's fields).
const MEDIUM_TAGS: u32 = 8192;
/// Tags below this are tracked too, in a third bitset zeroed only when a message has
/// such a tag; the standard dictionaries stop at 50002.
const BITSET_TAGS: u32 = 65536;

struct TagSet {
    small: [u64; (SMALL_TAGS / 64) as usize],
    medium: Option<[u64; ((MEDIUM_TAGS - SMALL_TAGS) / 64) as usize]>,
    large: Option<[u64; ((BITSET_TAGS - MEDIUM_TAGS) / 64) as usize]>,
}

impl TagSet {
    fn new() -> TagSet {
        TagSet {
            small: [0; (SMALL_TAGS / 64) as usize],
            medium: None,
            large: None,
        }
    }

    /// Inserts `tag`; Some(whether it was there), None beyond the bitsets.
    fn insert(&mut self, tag: u32) -> Option<bool> {
        let (words, t) = if tag < SMALL_TAGS {
            (&mut self.small[..], tag)
        } else if tag < MEDIUM_TAGS {
            let medium = self
                .medium
                .get_or_insert([0; ((MEDIUM_TAGS - SMALL_TAGS) / 64) as usize]);
            (&mut medium[..], tag - SMALL_TAGS)
        } else if tag < BITSET_TAGS {
            let large = self
                .large
                .get_or_insert([0; ((BITSET_TAGS - MEDIUM_TAGS) / 64) as usize]);
            (&mut large[..], tag - MEDIUM_TAGS)
        } else {
            return None;
        };
        let w = words.get_mut((t / 64) as usize)?;
        let bit = 1u64 << (t % 64);
        let had = *w & bit != 0;
        *w |= bit;
        Some(had)
    }

    /// Whether `tag` was inserted; None beyond the bitsets.
    fn contains(&self, tag: u32) -> Option<bool> {
        let (words, t): (&[u64], u32) = if tag < SMALL_TAGS {
            (&self.small, tag)
        } else if tag < MEDIUM_TAGS {
            match &self.medium {
                Some(m) => (m, tag - SMALL_TAGS),
                None => return Some(false),
            }
        } else if tag < BITSET_TAGS {
            match &self.large {
                Some(l) => (l, tag - MEDIUM_TAGS),
                None => return Some(false),
            }
        } else {
            return None;
        };
        words
            .get((t / 64) as usize)
            .map(|w| w & (1u64 << (t % 64)) != 0)
    }
}

/// The top-level fields whose tags are beyond the bitsets (>= 65536: never a standard
/// tag), for the repeat and presence checks of [`validate_full`]: `(tag, index)` of
/// each, sorted, collected by one [`walk`] at the first such field met (the top-level
/// fields depend only on the tags and the dictionaries). Each question is then a binary
/// search. Before, every such field scanned the fields before it (and walked them again
/// when its tag was among them): 320,000 distinct tags in descending order froze the
/// engine for 25.4 s (hostile-input report F2).
///
/// The list lives in a buffer the caller lends ([`ShapeCache`] keeps one across
/// messages), so a stream of messages with a few such tags allocates nothing once the
/// buffer has grown.
struct LargeTags<'s> {
    sorted: &'s mut Vec<(u32, usize)>,
    /// Whether `sorted` has been filled for this message.
    filled: bool,
}

impl<'s> LargeTags<'s> {
    fn new(buf: &'s mut Vec<(u32, usize)>) -> LargeTags<'s> {
        buf.clear();
        LargeTags {
            sorted: buf,
            filled: false,
        }
    }

    /// Collects the top-level large tags of `fields` (once per message).
    fn fill(&mut self, fields: &[Field], transport: &Dictionary, body: Option<&Layout>) {
        if self.filled {
            return;
        }
        self.filled = true;
        let sorted = &mut *self.sorted;
        walk(fields, transport, body, false, |i, f, _, _| {
            if f.tag >= BITSET_TAGS {
                sorted.push((f.tag, i));
            }
        });
        #[cfg(test)]
        large_work::add(fields.len());
        sorted.sort_unstable();
    }

    /// Whether a top-level field before `fields[index]` has `tag` (a large one).
    fn before(
        &mut self,
        fields: &[Field],
        transport: &Dictionary,
        body: Option<&Layout>,
        tag: u32,
        index: usize,
    ) -> bool {
        self.fill(fields, transport, body);
        let p = self.sorted.partition_point(|&e| e < (tag, index));
        p > 0 && self.sorted.get(p - 1).is_some_and(|&(t, _)| t == tag)
    }

    /// Whether a top-level field has `tag` (a large one). Fills the list if no repeat
    /// check did (an earlier error in the section skips those: review, a required
    /// 70002 that was present read as missing behind a repeated 55).
    fn has(
        &mut self,
        fields: &[Field],
        transport: &Dictionary,
        body: Option<&Layout>,
        tag: u32,
    ) -> bool {
        self.fill(fields, transport, body);
        let p = self.sorted.partition_point(|&(t, _)| t < tag);
        self.sorted.get(p).is_some_and(|&(t, _)| t == tag)
    }
}

#[cfg(test)]
work_counter!(
    /// The fields [`LargeTags::fill`] walks.
    large_work
);

/// A NumInGroup field met by [`walk`]: its group's definition, the scan of its entries
/// and, when asked for, the first required member missing from them.
type WalkedGroup<'d> = (&'d GroupDef, GroupScan, Option<Reject>);

/// Walks the top-level fields (group members skipped), calling
/// `f(index, field, section, group)`; `group` is set when the field is a NumInGroup field
/// resolved with the dictionaries. With `check_required`, the required members of each
/// body group's entries are checked during its scan (QuickFIX's `checkHasRequired` per
/// entry, as `group_missing` does with a second scan), so the entries are scanned once.
fn walk<'d>(
    fields: &[Field],
    transport: &'d Dictionary,
    body: Option<&'d Layout>,
    check_required: bool,
    mut f: impl FnMut(usize, &Field, Section, Option<WalkedGroup<'d>>),
) {
    let mut i = 0;
    while let Some(field) = fields.get(i) {
        let section = section_of(field.tag, transport);
        let def = match section {
            Section::Header => transport.header().group(field.tag),
            Section::Trailer => transport.trailer().group(field.tag),
            Section::Body => body.and_then(|b| b.group(field.tag)),
        };
        let scan = def.map(|g| {
            let mut missing = None;
            let scan = if check_required && section == Section::Body {
                crate::dict::scan_group_entries(g, fields, i + 1, |entry| {
                    if missing.is_none() {
                        missing = entry_missing(&entry);
                    }
                })
            } else {
                crate::dict::scan_group(g, fields, i + 1)
            };
            (g, scan, missing)
        });
        let end = scan.map(|(_, s, _)| s.end);
        f(i, field, section, scan);
        i = match end {
            Some(end) => end.max(i + 1),
            None => i + 1,
        };
    }
}

/// Whether every empty value of `msg` (parsed with
/// [`crate::codec::parse_keeping_empty`]) sits inside a repeating group: QuickFIX's
/// `ValidateFieldsHaveValues` looks at the header, body and trailer fields only
/// (recorded: `empty_values`, `453=1|448=|447=D|452=1` is accepted and echoed).
pub fn empty_values_only_in_groups(msg: &MessageRef<'_>, dicts: &Dictionaries<'_>) -> bool {
    let msg_type = msg.msg_type();
    let app = if is_admin_msg_type(msg_type) {
        dicts.transport
    } else {
        dicts.app
    };
    let body = app.message(msg_type).map(|m| m.layout());
    let mut top_level_empty = false;
    walk(msg.fields(), dicts.transport, body, false, |_, f, _, _| {
        top_level_empty |= f.start == f.end;
    });
    !top_level_empty
}

/// Most fields of a message whose shape [`ShapeCache`] keeps; longer messages are
/// always validated in full.
const SHAPE_FIELDS: usize = 64;
/// Most entries of the large-tag buffer a [`ShapeCache`] keeps between messages (16
/// KiB): a hostile message with more tags beyond 65535 gets a buffer of its own.
const LARGE_TAGS_KEPT: usize = 1024;
/// Longest MsgType a [`ShapeCache`] keeps.
const SHAPE_MSG_TYPE: usize = 8;
/// [`ValueCheck::entries`] when no NumInGroup count is compared.
const NOT_COUNTED: u32 = u32::MAX;

/// The value checks of one top-level field of an accepted message.
#[derive(Clone, Copy, Debug)]
struct ValueCheck {
    /// Index of the field in the message's field table.
    index: u8,
    /// Header, trailer or body: the dictionary the value is checked with (the
    /// application dictionary for the body) and the first part of QuickFIX's order.
    section: Section,
    /// The second part of QuickFIX's order ([`sort_key`]).
    key: u64,
    /// The entries its NumInGroup value is compared with, or [`NOT_COUNTED`].
    entries: u32,
    /// Its type, when [`valid_format`] checks it ([`format_checked`]).
    format: Option<FieldType>,
    /// Its definition has an enumeration ([`FieldDef::allows`] can refuse a value).
    enumerated: bool,
}

const NO_CHECK: ValueCheck = ValueCheck {
    index: 0,
    section: Section::Body,
    key: 0,
    entries: NOT_COUNTED,
    format: None,
    enumerated: false,
};

/// The shape of the last message [`validate_cached`] accepted, and the checks of its
/// fields that depend on their values, in the order QuickFIX runs them.
///
/// Everything [`validate`] checks apart from the values of top-level fields depends
/// only on the MsgType, the tags in wire order, the dictionaries and the options: the
/// header/body/trailer structure, repeated tags, required fields and group members,
/// where each group ends and how many entries it has, whether a tag is defined for the
/// message. A message that was accepted passed all of them, so a message of the same
/// shape passes them too, and the only Reject it can get is one of its top-level
/// fields' empty value (4), data format (6), enumeration (5) or NumInGroup count (16).
/// The first of these in QuickFIX's order (header, trailer, body; sorted within each,
/// as [`validate`] picks) is the answer; `checks` holds that order.
///
/// Fixed-size (1,440 bytes) apart from the buffer it lends to the validation of messages
/// with tags beyond 65535 (none is allocated until such a message comes; one grown past
/// 1,024 entries by a message is dropped after it). Messages of more than 64 fields or
/// with a MsgType longer than 8 bytes are validated in full every time.
#[derive(Clone, Debug)]
pub struct ShapeCache {
    /// Whether the fields below describe an accepted message.
    accepted: bool,
    /// The addresses of the transport and application dictionaries it was accepted
    /// with (identity only, never dereferenced).
    dicts: (usize, usize),
    opts: ValidationOptions,
    msg_type: [u8; SHAPE_MSG_TYPE],
    msg_type_len: u8,
    tags: [u32; SHAPE_FIELDS],
    tags_len: u8,
    checks: [ValueCheck; SHAPE_FIELDS],
    checks_len: u8,
    /// Once accepted: `checks[..valued]` are the checks that can refuse a non-empty
    /// value (a checked format, an enumeration or a NumInGroup count), in QuickFIX's
    /// order; `empty_only` the field indexes of the others, which can only refuse an
    /// empty value (`checks[valued..checks_len]` is then stale).
    valued: u8,
    empty_only: [u8; SHAPE_FIELDS],
    empty_only_len: u8,
    /// A check could not be recorded: the shape is not kept.
    incomplete: bool,
    /// The date and time of the last valid UTCTimestamp value checked on a hit.
    stamps: StampMemo,
    /// The buffer [`LargeTags`] fills for messages with tags beyond 65535, kept across
    /// messages (empty, unallocated, until such a message comes).
    large_tags: Vec<(u32, usize)>,
}

impl Default for ShapeCache {
    fn default() -> Self {
        ShapeCache::new()
    }
}

impl ShapeCache {
    /// An empty cache (the first message is validated in full).
    pub fn new() -> ShapeCache {
        ShapeCache {
            accepted: false,
            dicts: (0, 0),
            opts: ValidationOptions::default(),
            msg_type: [0; SHAPE_MSG_TYPE],
            msg_type_len: 0,
            tags: [0; SHAPE_FIELDS],
            tags_len: 0,
            checks: [NO_CHECK; SHAPE_FIELDS],
            checks_len: 0,
            valued: 0,
            empty_only: [0; SHAPE_FIELDS],
            empty_only_len: 0,
            incomplete: false,
            stamps: StampMemo::default(),
            large_tags: Vec::new(),
        }
    }

    /// Forgets the shape (the next message is validated in full).
    pub fn clear(&mut self) {
        self.accepted = false;
    }

    fn dict_ids(dicts: &Dictionaries<'_>) -> (usize, usize) {
        (
            std::ptr::from_ref(dicts.transport).addr(),
            std::ptr::from_ref(dicts.app).addr(),
        )
    }

    /// Whether `msg` has the accepted shape, with the same dictionaries and options.
    #[inline]
    fn matches(
        &self,
        msg: &MessageRef<'_>,
        dicts: &Dictionaries<'_>,
        opts: &ValidationOptions,
    ) -> bool {
        let fields = msg.fields();
        self.accepted
            && fields.len() == usize::from(self.tags_len)
            && self.msg_type.get(..usize::from(self.msg_type_len)) == Some(msg.msg_type())
            && self.dicts == ShapeCache::dict_ids(dicts)
            && self.opts == *opts
            && fields.iter().zip(&self.tags).all(|(f, &t)| f.tag == t)
    }

    /// During a full validation: the top-level field `fields[index]`, defined (or not) by
    /// `def` in the dictionary its section is checked with, passed its checks.
    fn record(
        &mut self,
        index: usize,
        section: Section,
        key: u64,
        counted: Option<usize>,
        def: Option<&FieldDef>,
    ) {
        let n = usize::from(self.checks_len);
        let entries = match counted.map(u32::try_from) {
            None => Some(NOT_COUNTED),
            Some(Ok(e)) if e != NOT_COUNTED => Some(e),
            Some(_) => None,
        };
        // Never fails for the messages of at most SHAPE_FIELDS fields recorded; if it
        // did, the shape is not kept.
        match (self.checks.get_mut(n), u8::try_from(index), entries) {
            (Some(slot), Ok(index), Some(entries)) => {
                *slot = ValueCheck {
                    index,
                    section,
                    key,
                    entries,
                    format: def.map(|d| d.field_type).filter(|&ty| format_checked(ty)),
                    enumerated: def.is_some_and(|d| !d.values().is_empty()),
                };
                self.checks_len += 1;
            }
            _ => self.incomplete = true,
        }
    }

    /// After a full validation with `record` that accepted `msg`: keeps its shape, the
    /// recorded checks in QuickFIX's order.
    fn accept(&mut self, msg: &MessageRef<'_>, dicts: &Dictionaries<'_>, opts: &ValidationOptions) {
        let fields = msg.fields();
        let msg_type = msg.msg_type();
        let (Ok(tags_len), Ok(msg_type_len)) =
            (u8::try_from(fields.len()), u8::try_from(msg_type.len()))
        else {
            return;
        };
        let (Some(tags), Some(mt)) = (
            self.tags.get_mut(..fields.len()),
            self.msg_type.get_mut(..msg_type.len()),
        ) else {
            return;
        };
        for (t, f) in tags.iter_mut().zip(fields) {
            *t = f.tag;
        }
        mt.copy_from_slice(msg_type);
        let checks = self
            .checks
            .get_mut(..usize::from(self.checks_len))
            .unwrap_or_default();
        if self.incomplete {
            return;
        }
        checks.sort_unstable_by_key(|c| (slot_of(c.section), c.key));
        // Stable split: the checks that can refuse a non-empty value keep their order
        // at the front; the others leave only their field index.
        let mut valued = 0;
        let mut empty_only = 0;
        for i in 0..checks.len() {
            let c = checks[i];
            if c.format.is_some() || c.enumerated || c.entries != NOT_COUNTED {
                checks[valued] = c;
                valued += 1;
            } else {
                self.empty_only[empty_only] = c.index;
                empty_only += 1;
            }
        }
        // Both at most `checks_len` (a u8).
        self.valued = valued as u8;
        self.empty_only_len = empty_only as u8;
        self.tags_len = tags_len;
        self.msg_type_len = msg_type_len;
        self.dicts = ShapeCache::dict_ids(dicts);
        self.opts = *opts;
        self.accepted = true;
    }

    /// [`validate_full`] with this cache's buffer for the large tags, recording the
    /// value checks when `record`. The buffer is kept for the next message unless a
    /// message made it larger than [`LARGE_TAGS_KEPT`] entries.
    fn validate_full(
        &mut self,
        msg: &MessageRef<'_>,
        dicts: &Dictionaries<'_>,
        opts: &ValidationOptions,
        record: bool,
    ) -> Result<(), Reject> {
        let mut large_tags = std::mem::take(&mut self.large_tags);
        let r = validate_full(
            msg,
            dicts,
            opts,
            record.then_some(&mut *self),
            &mut large_tags,
        );
        if large_tags.capacity() <= LARGE_TAGS_KEPT {
            self.large_tags = large_tags;
        }
        r
    }

    /// The value checks of a message of the accepted shape, first failure first.
    fn check_values(
        &mut self,
        msg: &MessageRef<'_>,
        dicts: &Dictionaries<'_>,
        opts: &ValidationOptions,
    ) -> Result<(), Reject> {
        let app = if is_admin_msg_type(msg.msg_type()) {
            dicts.transport
        } else {
            dicts.app
        };
        let fields = msg.fields();
        let have_values = opts.validate_fields_have_values;
        // A field whose only check is for an empty value passes it when its value is
        // not empty; if none is empty, the first failure in QuickFIX's order is the
        // first of the other checks, which keep that order. A message of this shape
        // with such an empty field (rare: the parser refuses empty values outside
        // groups unless asked to keep them) is validated in full, which gives the
        // same answer.
        if have_values
            && self
                .empty_only
                .get(..usize::from(self.empty_only_len))
                .unwrap_or(&[])
                .iter()
                .any(|&i| {
                    fields
                        .get(usize::from(i))
                        .is_none_or(|f| msg.value(f).is_empty())
                })
        {
            return self.validate_full(msg, dicts, opts, false);
        }
        // check_value's checks, with what the definition decides known from the shape:
        // most fields have neither a checked format nor an enumeration.
        for c in self.checks.get(..usize::from(self.valued)).unwrap_or(&[]) {
            let Some(field) = fields.get(usize::from(c.index)) else {
                continue;
            };
            let tag = field.tag;
            let value = msg.value(field);
            if have_values && value.is_empty() {
                return Err(Reject::new(
                    SessionRejectReason::TagSpecifiedWithoutAValue,
                    Some(tag),
                ));
            }
            if let Some(ty) = c.format {
                let valid = if ty == FieldType::UtcTimestamp {
                    self.stamps.valid(value)
                } else {
                    valid_format(ty, value)
                };
                if !valid {
                    return Err(Reject::new(
                        SessionRejectReason::IncorrectDataFormatForValue,
                        Some(tag),
                    ));
                }
            }
            if c.enumerated {
                let dict = if c.section == Section::Body {
                    app
                } else {
                    dicts.transport
                };
                if dict.field(tag).is_some_and(|def| !def.allows(value)) {
                    return Err(Reject::new(
                        SessionRejectReason::ValueIsIncorrect,
                        Some(tag),
                    ));
                }
            }
            if c.entries != NOT_COUNTED {
                check_count(tag, value, c.entries as usize)?;
            }
        }
        Ok(())
    }
}

/// [`valid_format`] for UTCTimestamp values, remembering the `YYYYMMDD-HH:MM:SS` of the
/// last valid one: a value of 17 to 27 bytes that starts with it is valid exactly when
/// the rest is empty or a `.` and digits (the fraction part of `valid_time`), so the
/// date and time are checked once per second of SendingTime, not once per message.
#[derive(Clone, Debug, Default)]
struct StampMemo {
    /// Whether `prefix` holds the first 17 bytes of a valid value.
    known: bool,
    prefix: [u8; 17],
}

impl StampMemo {
    #[inline]
    fn valid(&mut self, v: &[u8]) -> bool {
        if self.known && (17..=27).contains(&v.len()) {
            if let (Some(prefix), Some(rest)) = (v.get(..17), v.get(17..)) {
                if prefix == self.prefix {
                    return match rest {
                        [] => true,
                        [b'.', digits @ ..] => digits.iter().all(u8::is_ascii_digit),
                        _ => false,
                    };
                }
            }
        }
        let valid = valid_utc_timestamp(v);
        if let (true, Some(prefix)) = (valid, v.get(..17)) {
            self.prefix.copy_from_slice(prefix);
            self.known = true;
        }
        valid
    }
}

/// Keeps the error QuickFIX would meet first.
struct Best(Option<(u64, u8, Reject)>);

impl Best {
    fn offer(&mut self, key: u64, second: u8, reject: Reject) {
        match &self.0 {
            Some((k, s, _)) if (*k, *s) <= (key, second) => {}
            _ => self.0 = Some((key, second, reject)),
        }
    }

    fn beats(&self, key: u64, second: u8) -> bool {
        matches!(&self.0, Some((k, s, _)) if (*k, *s) <= (key, second))
    }
}

/// Validates a parsed message as QuickFIX does with `UseDataDictionary=Y` (see the module
/// docs for the checks and their order). Returns the Reject QuickFIX would send.
///
/// The BeginString must already have been compared with the session's (QuickFIX logs
/// out with "Incorrect BeginString" before validating).
pub fn validate(
    msg: &MessageRef<'_>,
    dicts: &Dictionaries<'_>,
    opts: &ValidationOptions,
) -> Result<(), Reject> {
    if !opts.use_data_dictionary {
        return Ok(());
    }
    validate_full(msg, dicts, opts, None, &mut Vec::new())
}

/// [`validate`] for a stream of messages of few shapes: gives the same answer, and
/// when `msg` has the shape of the last message `cache` saw accepted (same MsgType, same
/// tags in the same order; same dictionaries and options), runs only the checks that
/// depend on field values (see [`ShapeCache`]).
pub fn validate_cached(
    msg: &MessageRef<'_>,
    dicts: &Dictionaries<'_>,
    opts: &ValidationOptions,
    cache: &mut ShapeCache,
) -> Result<(), Reject> {
    if !opts.use_data_dictionary {
        return Ok(());
    }
    if cache.matches(msg, dicts, opts) {
        return cache.check_values(msg, dicts, opts);
    }
    cache.accepted = false;
    cache.checks_len = 0;
    cache.incomplete = false;
    if msg.fields().len() > SHAPE_FIELDS || msg.msg_type().len() > SHAPE_MSG_TYPE {
        return cache.validate_full(msg, dicts, opts, false);
    }
    cache.validate_full(msg, dicts, opts, true)?;
    cache.accept(msg, dicts, opts);
    Ok(())
}

/// [`validate`] with `UseDataDictionary` on; with `record`, the value checks of every
/// top-level field that passed all its checks are written to its `checks` (in walk
/// order; [`ShapeCache::accept`] sorts them).
fn validate_full(
    msg: &MessageRef<'_>,
    dicts: &Dictionaries<'_>,
    opts: &ValidationOptions,
    mut record: Option<&mut ShapeCache>,
    large_tags: &mut Vec<(u32, usize)>,
) -> Result<(), Reject> {
    let fields = msg.fields();
    let msg_type = msg.msg_type();
    let transport = dicts.transport;
    let app = if is_admin_msg_type(msg_type) {
        transport
    } else {
        dicts.app
    };
    let message = app.message(msg_type);
    let body = message.map(|m| m.layout());

    let mut seen = TagSet::new();
    let mut large = LargeTags::new(large_tags);
    let mut state = Section::Header;
    let mut out_of_order: Option<u32> = None;
    let mut group_order: Option<Reject> = None;
    let mut group_required = Best(None);
    let mut errors = [Best(None), Best(None), Best(None)]; // header, trailer, body

    walk(fields, transport, body, true, |i, field, section, group| {
        let tag = field.tag;
        // 1. structure (Message::setString)
        match section {
            Section::Header if state != Section::Header => {
                out_of_order.get_or_insert(tag);
            }
            Section::Header => {}
            Section::Trailer => state = Section::Trailer,
            Section::Body => {
                if state == Section::Trailer {
                    out_of_order.get_or_insert(tag);
                }
                state = Section::Body;
            }
        }
        let key = sort_key(section, tag);
        let slot = usize::from(slot_of(section));
        let repeated = match seen.insert(tag) {
            Some(r) => r,
            // Beyond 65535 (never a standard tag): looked up in the sorted list, only
            // when it could change the outcome (as before: a third copy of a tag whose
            // second already gave 13 is not counted as a repeat, so its other checks
            // run).
            None => !errors[slot].beats(key, 1) && large.before(fields, transport, body, tag, i),
        };
        let best = &mut errors[slot];
        if repeated {
            best.offer(
                key,
                1,
                Reject::new(SessionRejectReason::TagAppearsMoreThanOnce, Some(tag)),
            );
        } else if !best.beats(key, 0) {
            let dict = if section == Section::Body {
                app
            } else {
                transport
            };
            match check_field(
                dict,
                section,
                body,
                tag,
                msg.value(field),
                group.map(|g| g.1),
                opts,
            ) {
                Err(r) => best.offer(key, 0, r),
                Ok(counted) => {
                    if let Some(cache) = record.as_deref_mut() {
                        cache.record(i, section, key, counted, dict.field(tag));
                    }
                }
            }
        }
        if let Some((def, scan, missing)) = group {
            // `missing` is set for body groups only (walk's `check_required`).
            if let Some(r) = missing {
                group_required.offer(u64::from(tag), 0, r);
            }
            if opts.validate_unordered_group_fields && group_order.is_none() {
                let entries = fields.get(i + 1..scan.end).unwrap_or(&[]);
                group_order = group_out_of_order(def, entries);
            }
        }
    });

    if opts.validate_fields_out_of_order {
        if let Some(tag) = out_of_order {
            return Err(Reject::new(
                SessionRejectReason::TagSpecifiedOutOfRequiredOrder,
                Some(tag),
            ));
        }
    }
    if let Some(r) = group_order {
        return Err(r);
    }
    if message.is_none() {
        return Err(Reject::new(SessionRejectReason::InvalidMsgType, None));
    }
    // 3. required fields: header, trailer (application dictionary, as QuickFIX), body.
    let mut has = |tag: u32| match seen.contains(tag) {
        Some(b) => b,
        None => large.has(fields, transport, body, tag),
    };
    for layout in [app.header(), app.trailer()].into_iter().chain(body) {
        if let Some(&tag) = layout.required().iter().find(|&&t| !has(t)) {
            return Err(Reject::new(
                SessionRejectReason::RequiredTagMissing,
                Some(tag),
            ));
        }
    }
    if let Some((_, _, r)) = group_required.0 {
        return Err(r);
    }
    // 4. field by field: header, trailer, body.
    for best in errors {
        if let Some((_, _, r)) = best.0 {
            return Err(r);
        }
    }
    Ok(())
}

/// The per-field checks of QuickFIX's `DataDictionary::iterate` (after the repeat check),
/// in its order: [`check_value`], then [`check_tag`], then the NumInGroup count. On
/// success, the number of entries the count was compared with (None when it was not).
fn check_field(
    dict: &Dictionary,
    section: Section,
    body: Option<&Layout>,
    tag: u32,
    value: &[u8],
    group: Option<GroupScan>,
    opts: &ValidationOptions,
) -> Result<Option<usize>, Reject> {
    check_value(dict, tag, value, opts)?;
    if !check_tag(dict, section, body, tag, opts)? {
        return Ok(None);
    }
    match group {
        Some(scan) => {
            check_count(tag, value, scan.entries)?;
            Ok(Some(scan.entries))
        }
        None => Ok(None),
    }
}

/// The checks of one field that depend on its value: empty (4), data format (6),
/// enumeration (5).
#[inline]
fn check_value(
    dict: &Dictionary,
    tag: u32,
    value: &[u8],
    opts: &ValidationOptions,
) -> Result<(), Reject> {
    if opts.validate_fields_have_values && value.is_empty() {
        return Err(Reject::new(
            SessionRejectReason::TagSpecifiedWithoutAValue,
            Some(tag),
        ));
    }
    if let Some(def) = dict.field(tag) {
        if !valid_format(def.field_type, value) {
            return Err(Reject::new(
                SessionRejectReason::IncorrectDataFormatForValue,
                Some(tag),
            ));
        }
        if !def.allows(value) {
            return Err(Reject::new(
                SessionRejectReason::ValueIsIncorrect,
                Some(tag),
            ));
        }
    }
    Ok(())
}

/// The checks of one field that depend on its tag only (QuickFIX's `shouldCheckTag`,
/// then 0 "Invalid tag number" and 2 "Tag not defined for this message type"). Ok(true)
/// when QuickFIX goes on to compare a NumInGroup count (a body field defined for the
/// message type).
fn check_tag(
    dict: &Dictionary,
    section: Section,
    body: Option<&Layout>,
    tag: u32,
    opts: &ValidationOptions,
) -> Result<bool, Reject> {
    let user_defined = tag >= 5000;
    // QuickFIX's shouldCheckTag.
    let skip = if user_defined {
        !opts.validate_user_defined_fields
    } else {
        opts.allow_unknown_msg_fields
    };
    if skip {
        return Ok(false);
    }
    if dict.field(tag).is_none() {
        return Err(Reject::new(
            SessionRejectReason::InvalidTagNumber,
            Some(tag),
        ));
    }
    let header_or_trailer =
        section != Section::Body || dict.tag_class(tag).in_dict_header_or_trailer();
    if header_or_trailer {
        return Ok(false);
    }
    if !body.is_some_and(|b| b.contains(tag)) {
        return Err(Reject::new(
            SessionRejectReason::TagNotDefinedForThisMessageType,
            Some(tag),
        ));
    }
    Ok(true)
}

/// 16 "Incorrect NumInGroup count" unless the NumInGroup value is `entries`.
#[inline]
fn check_count(tag: u32, value: &[u8], entries: usize) -> Result<(), Reject> {
    let declared = parse_int::<i32>(value).and_then(|v| usize::try_from(v).ok());
    if declared != Some(entries) {
        return Err(Reject::new(
            SessionRejectReason::IncorrectNumInGroupCountForRepeatingGroup,
            Some(tag),
        ));
    }
    Ok(())
}

/// The first missing required member in the entries of a group (QuickFIX's
/// `checkHasRequired` on each entry: required members ascending, then nested groups by
/// NumInGroup tag). [`validate`] gets the same answer from [`walk`]'s single scan; this
/// two-scan form is the reference its test compares with.
#[cfg(test)]
fn group_missing(def: &GroupDef, entries: &[Field]) -> Option<Reject> {
    for entry in GroupIter::new(def, entries, 0) {
        if let Some(r) = entry_missing(&entry) {
            return Some(r);
        }
    }
    None
}

fn entry_missing(entry: &GroupEntry<'_, '_>) -> Option<Reject> {
    let layout = entry.def().layout();
    let fields = entry.fields();
    // Without a nested group's NumInGroup field every field of the entry is direct and
    // no nested group has entries: a plain scan answers, and the nested loop is moot.
    let has_nested = fields.iter().any(|f| layout.group(f.tag).is_some());
    let has = |t: u32| {
        if has_nested {
            entry.field(t).is_some()
        } else {
            fields.iter().any(|f| f.tag == t)
        }
    };
    if let Some(&tag) = layout.required().iter().find(|&&t| !has(t)) {
        return Some(Reject::new(
            SessionRejectReason::RequiredTagMissing,
            Some(tag),
        ));
    }
    if !has_nested {
        return None;
    }
    for nested in layout.groups() {
        if let Some(iter) = entry.group(nested.count_tag) {
            for e in iter {
                if let Some(r) = entry_missing(&e) {
                    return Some(r);
                }
            }
        }
    }
    None
}

/// QuickFIX/J's `ValidateUnorderedGroupFields`: within each entry the direct members
/// must follow the dictionary's member order.
fn group_out_of_order(def: &GroupDef, entries: &[Field]) -> Option<Reject> {
    entries_out_of_order(GroupIter::new(def, entries, 0))
}

fn entries_out_of_order(iter: GroupIter<'_, '_>) -> Option<Reject> {
    for entry in iter {
        let layout = entry.def().layout();
        let members = layout.members();
        let mut last: Option<usize> = None;
        for f in entry.direct() {
            if let Some(pos) = members.iter().position(|&t| t == f.tag) {
                if last.is_some_and(|l| pos <= l) {
                    return Some(Reject::new(
                        SessionRejectReason::RepeatingGroupFieldsOutOfOrder,
                        Some(f.tag),
                    ));
                }
                last = Some(pos);
            }
        }
        for nested in layout.groups() {
            if let Some(r) = entry.group(nested.count_tag).and_then(entries_out_of_order) {
                return Some(r);
            }
        }
    }
    None
}

/// Checks the CompIDs of a received message (QuickFIX's `CheckCompID`): its
/// SenderCompID (49) must be `expected_sender` (the session's TargetCompID) and its
/// TargetCompID (56) `expected_target` (the session's SenderCompID). QuickFIX answers a
/// mismatch with Reject 9 "CompID problem" (no RefTagID) followed by a Logout. A missing
/// field gives 1 "Required tag missing".
pub fn check_comp_ids(
    msg: &MessageRef<'_>,
    expected_sender: &[u8],
    expected_target: &[u8],
) -> Result<(), Reject> {
    let sender = msg.get(49).ok_or(Reject::new(
        SessionRejectReason::RequiredTagMissing,
        Some(49),
    ))?;
    let target = msg.get(56).ok_or(Reject::new(
        SessionRejectReason::RequiredTagMissing,
        Some(56),
    ))?;
    if sender != expected_sender || target != expected_target {
        return Err(Reject::new(SessionRejectReason::CompIdProblem, None));
    }
    Ok(())
}

/// Checks SendingTime (52) against `now` (QuickFIX's `CheckLatency`/`MaxLatency`): the
/// difference in whole seconds (both times truncated to the second, as QuickFIX's
/// `DateTime` subtraction does) must not exceed `max_latency_secs`. QuickFIX answers with
/// Reject 10 "SendingTime accuracy problem" (no RefTagID) and a Logout. A missing field
/// gives 1 "Required tag missing", an unparsable one 6 "Incorrect data format for value".
pub fn check_sending_time(
    msg: &MessageRef<'_>,
    now_unix_nanos: u64,
    max_latency_secs: u32,
) -> Result<(), Reject> {
    let raw = msg.get(52).ok_or(Reject::new(
        SessionRejectReason::RequiredTagMissing,
        Some(52),
    ))?;
    let sent = codec::parse_utc_timestamp(raw).ok_or(Reject::new(
        SessionRejectReason::IncorrectDataFormatForValue,
        Some(52),
    ))?;
    let now_s = now_unix_nanos / 1_000_000_000;
    let sent_s = sent / 1_000_000_000;
    if now_s.abs_diff(sent_s) > u64::from(max_latency_secs) {
        return Err(Reject::new(
            SessionRejectReason::SendingTimeAccuracyProblem,
            None,
        ));
    }
    Ok(())
}

/// Whether `value` has the format QuickFIX's converter for `ty` accepts
/// (`DataDictionary::checkValidFormat`). Types QuickFIX treats as strings always pass.
pub fn valid_format(ty: FieldType, value: &[u8]) -> bool {
    match ty {
        // `short_digits` first: the common value, which the converters accept.
        FieldType::Int | FieldType::NumInGroup | FieldType::Length => {
            short_digits(value) || parse_int::<i32>(value).is_some()
        }
        FieldType::SeqNum => {
            short_digits(value)
                || (value.first() != Some(&b'-') && parse_int::<u64>(value).is_some())
        }
        FieldType::Price
        | FieldType::Amt
        | FieldType::Qty
        | FieldType::Float
        | FieldType::PriceOffset
        | FieldType::Percentage => valid_decimal(value),
        FieldType::Char => value.len() == 1,
        FieldType::Boolean => value == b"Y" || value == b"N",
        FieldType::UtcTimestamp => valid_utc_timestamp(value),
        FieldType::UtcTimeOnly => valid_utc_time_only(value),
        FieldType::UtcDate => valid_utc_date(value),
        _ => true,
    }
}

/// Whether [`valid_format`] can refuse a value of type `ty` (it refuses the empty value
/// of every such type and accepts any value of the others).
pub fn format_checked(ty: FieldType) -> bool {
    matches!(
        ty,
        FieldType::Int
            | FieldType::NumInGroup
            | FieldType::Length
            | FieldType::SeqNum
            | FieldType::Price
            | FieldType::Amt
            | FieldType::Qty
            | FieldType::Float
            | FieldType::PriceOffset
            | FieldType::Percentage
            | FieldType::Char
            | FieldType::Boolean
            | FieldType::UtcTimestamp
            | FieldType::UtcTimeOnly
            | FieldType::UtcDate
    )
}

/// One to nine ASCII digits: a value below 10^9, which every integer type's converter
/// accepts (i32, u64).
#[inline]
fn short_digits(v: &[u8]) -> bool {
    (1..=9).contains(&v.len()) && v.iter().all(u8::is_ascii_digit)
}

/// QuickFIX's integer converter: optional `-`, digits only, no overflow of `T`.
fn parse_int<T: TryFrom<i128>>(v: &[u8]) -> Option<T> {
    let (neg, digits) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, v),
    };
    // Every `T` used is narrower than u64, so an overflow of u64 is one of `T` too.
    let x = i128::from(codec::parse_u64(digits)?);
    T::try_from(if neg { -x } else { x }).ok()
}

/// QuickFIX's double converter: `-?digits*(.digits*)?` with at least one digit, where a
/// digit must follow the point if none precedes it.
fn valid_decimal(v: &[u8]) -> bool {
    let mut i = 0;
    if v.first() == Some(&b'-') {
        i = 1;
    }
    if i >= v.len() {
        return false;
    }
    let mut have_digit = false;
    while v.get(i).is_some_and(u8::is_ascii_digit) {
        have_digit = true;
        i += 1;
    }
    if v.get(i) == Some(&b'.') {
        i += 1;
        while v.get(i).is_some_and(u8::is_ascii_digit) {
            have_digit = true;
            i += 1;
        }
    }
    i == v.len() && have_digit
}

fn two_digits(v: &[u8], at: usize) -> Option<u32> {
    match (v.get(at), v.get(at + 1)) {
        (Some(a), Some(b)) if a.is_ascii_digit() && b.is_ascii_digit() => {
            Some(u32::from(a - b'0') * 10 + u32::from(b - b'0'))
        }
        _ => None,
    }
}

fn valid_date(v: &[u8]) -> bool {
    let year = two_digits(v, 0).zip(two_digits(v, 2));
    let month = two_digits(v, 4);
    let day = two_digits(v, 6);
    matches!((year, month, day), (Some(_), Some(m), Some(d)) if (1..=12).contains(&m) && (1..=31).contains(&d))
}

/// `HH:MM:SS` then an optional `.digits` fraction (up to the converter's length limit).
fn valid_time(v: &[u8], max_len: usize) -> bool {
    if v.len() < 8 || v.len() > max_len {
        return false;
    }
    let (Some(h), Some(m), Some(s)) = (two_digits(v, 0), two_digits(v, 3), two_digits(v, 6)) else {
        return false;
    };
    if v.get(2) != Some(&b':') || v.get(5) != Some(&b':') || h > 23 || m > 59 || s > 60 {
        return false;
    }
    match v.get(8..) {
        Some([]) | None => true,
        Some([b'.', rest @ ..]) => rest.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    }
}

fn valid_utc_timestamp(v: &[u8]) -> bool {
    v.len() >= 17
        && v.len() <= 27
        && valid_date(v)
        && v.get(8) == Some(&b'-')
        && valid_time(v.get(9..).unwrap_or(&[]), 18)
}

fn valid_utc_time_only(v: &[u8]) -> bool {
    valid_time(v, 18)
}

fn valid_utc_date(v: &[u8]) -> bool {
    v.len() == 8 && valid_date(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The remembered date and time change no answer of `valid_format`, whatever
        /// sequence of timestamps (valid, near-valid, of another second) it sees.
        #[test]
        fn stamp_memo_agrees_with_valid_format(
            stamps in proptest::collection::vec(
                "2024010[12]-0[34]:0[45]:0[56](\\.[0-9x]{0,10})?|[0-9:.-]{0,30}", 1..20)
        ) {
            let mut memo = StampMemo::default();
            for v in &stamps {
                proptest::prop_assert_eq!(
                    memo.valid(v.as_bytes()),
                    valid_format(FieldType::UtcTimestamp, v.as_bytes()),
                    "{}", v
                );
            }
        }

        /// The integer types' shortcut accepts only what their converters accept.
        #[test]
        fn short_digits_are_valid_integers(v in "[0-9]{0,12}|-?[0-9a]{0,10}") {
            if short_digits(v.as_bytes()) {
                proptest::prop_assert!(parse_int::<i32>(v.as_bytes()).is_some());
                proptest::prop_assert!(parse_int::<u64>(v.as_bytes()).is_some());
                proptest::prop_assert!(!v.starts_with('-'));
            }
        }
    }

    /// `format_checked` is what the shape cache relies on to skip `valid_format`: a type
    /// it leaves out accepts anything, a type it names refuses at least the empty value.
    #[test]
    fn format_checked_names_exactly_the_types_valid_format_can_refuse() {
        use FieldType as T;
        let all = [
            T::String,
            T::Char,
            T::Price,
            T::Int,
            T::Amt,
            T::Qty,
            T::Currency,
            T::MultipleValueString,
            T::MultipleStringValue,
            T::MultipleCharValue,
            T::Exchange,
            T::UtcTimestamp,
            T::Boolean,
            T::LocalMktDate,
            T::Data,
            T::Float,
            T::PriceOffset,
            T::MonthYear,
            T::DayOfMonth,
            T::UtcDate,
            T::UtcDateOnly,
            T::UtcTimeOnly,
            T::NumInGroup,
            T::Percentage,
            T::SeqNum,
            T::Length,
            T::Country,
            T::Unknown,
        ];
        for ty in all {
            assert_eq!(format_checked(ty), !valid_format(ty, b""), "{ty:?}");
            if !format_checked(ty) {
                for v in [&b"x"[..], b"-", b"1.5.", b"\xff", b"20241399-99:99:99"] {
                    assert!(valid_format(ty, v), "{ty:?}");
                }
            }
        }
    }

    /// A message type with a required group holding a nested group (tags 100-102,
    /// 200-202) and a body field 55.
    const NESTED_GROUPS: &str = r#"<fix type="FIX" major="4" minor="4" servicepack="0">
 <header><field name="BeginString" required="Y"/></header>
 <trailer><field name="CheckSum" required="Y"/></trailer>
 <messages>
  <message name="M" msgtype="X" msgcat="app">
   <field name="Symbol" required="N"/>
   <group name="NoA" required="Y">
    <field name="A1" required="Y"/>
    <field name="A2" required="Y"/>
    <group name="NoB" required="Y">
     <field name="B1" required="Y"/>
     <field name="B2" required="N"/>
    </group>
   </group>
  </message>
 </messages>
 <components/>
 <fields>
  <field number="8" name="BeginString" type="STRING"/>
  <field number="10" name="CheckSum" type="STRING"/>
  <field number="55" name="Symbol" type="STRING"/>
  <field number="100" name="NoA" type="NUMINGROUP"/>
  <field number="101" name="A1" type="STRING"/>
  <field number="102" name="A2" type="STRING"/>
  <field number="200" name="NoB" type="NUMINGROUP"/>
  <field number="201" name="B1" type="STRING"/>
  <field number="202" name="B2" type="STRING"/>
 </fields>
</fix>"#;

    proptest::proptest! {
        /// `walk`'s single scan finds the same first missing required member, group by
        /// group, as scanning each group's entries a second time (`group_missing`).
        #[test]
        fn walk_finds_missing_members_as_a_second_scan_does(
            tags in proptest::collection::vec(
                proptest::sample::select(vec![55u32, 100, 101, 102, 200, 201, 202]),
                0..24,
            )
        ) {
            let dict = Dictionary::from_xml(NESTED_GROUPS).map_err(|e| {
                proptest::test_runner::TestCaseError::fail(e.to_string())
            })?;
            let body = dict.message(b"X").map(|m| m.layout());
            let fields: Vec<Field> = tags
                .iter()
                .map(|&tag| Field { tag, start: 0, end: 0 })
                .collect();
            let mut groups = 0;
            walk(&fields, &dict, body, true, |i, _, section, group| {
                if let Some((def, scan, missing)) = group {
                    groups += 1;
                    let entries = fields.get(i + 1..scan.end).unwrap_or(&[]);
                    let reference = (section == Section::Body)
                        .then(|| group_missing(def, entries))
                        .flatten();
                    assert_eq!(missing, reference, "{tags:?} at {i}");
                }
            });
            let mut unchecked = 0;
            walk(&fields, &dict, body, false, |_, _, _, group| {
                if let Some((_, _, missing)) = group {
                    unchecked += 1;
                    assert_eq!(missing, None);
                }
            });
            proptest::prop_assert_eq!(groups, unchecked);
        }
    }

    #[test]
    fn formats_follow_quickfix_converters() {
        assert!(valid_format(FieldType::Int, b"-12"));
        assert!(!valid_format(FieldType::Int, b"1.5"));
        assert!(!valid_format(FieldType::Int, b"2147483648"));
        assert!(valid_format(FieldType::Int, b"-2147483648"));
        assert!(!valid_format(FieldType::SeqNum, b"-1"));
        assert!(valid_format(FieldType::Price, b"1."));
        assert!(valid_format(FieldType::Price, b"-.5"));
        assert!(!valid_format(FieldType::Price, b"."));
        assert!(!valid_format(FieldType::Price, b"1e5"));
        assert!(!valid_format(FieldType::Price, b"+1"));
        assert!(valid_format(FieldType::Boolean, b"Y"));
        assert!(!valid_format(FieldType::Boolean, b"y"));
        assert!(!valid_format(FieldType::Char, b"AB"));
        assert!(valid_format(FieldType::UtcTimestamp, b"20240102-03:04:05"));
        assert!(valid_format(
            FieldType::UtcTimestamp,
            b"20240102-03:04:05.123456789"
        ));
        assert!(!valid_format(FieldType::UtcTimestamp, b"20241302-03:04:05"));
        assert!(!valid_format(FieldType::UtcTimestamp, b"20240102 03:04:05"));
        assert!(!valid_format(FieldType::UtcTimestamp, b"20240102-24:04:05"));
        assert!(valid_format(FieldType::UtcTimeOnly, b"23:59:60.5"));
        assert!(valid_format(FieldType::UtcDate, b"20240229"));
        assert!(!valid_format(FieldType::UtcDate, b"2024022"));
        assert!(valid_format(FieldType::LocalMktDate, b"whatever"));
        assert!(valid_format(FieldType::MonthYear, b"x"));
    }

    #[test]
    fn reject_texts_and_fields_per_version() {
        let r = Reject::new(SessionRejectReason::RequiredTagMissing, Some(11));
        let mut t = Vec::new();
        r.write_text(b"FIX.4.4", &mut t);
        assert_eq!(t, b"Required tag missing");
        assert_eq!(r.ref_tag_id(b"FIX.4.4"), Some(11));
        t.clear();
        r.write_text(b"FIX.4.1", &mut t);
        assert_eq!(t, b"Required tag missing (11)");
        assert_eq!(r.ref_tag_id(b"FIX.4.1"), None);
        assert!(!r.sends_reason(b"FIX.4.1"));
        assert!(r.sends_reason(b"FIX.4.2"));
        let high = Reject::new(SessionRejectReason::TagAppearsMoreThanOnce, Some(55));
        assert!(!high.sends_reason(b"FIX.4.2"));
        assert!(high.sends_reason(b"FIX.4.3"));
        assert!(high.sends_reason(b"FIXT.1.1"));
        let u = Reject::unsupported_message_type(b"FIX.4.4");
        assert!(u.is_business());
        assert_eq!(u.msg_type(), b"j");
        assert_eq!(u.text, "Unsupported Message Type");
        let u = Reject::unsupported_message_type(b"FIX.4.1");
        assert!(!u.is_business());
        assert_eq!(u.text, "Unsupported message type");
        assert!(Reject::unsupported_message_type(b"FIXT.1.1").is_business());
    }

    /// A message type with a required body field beyond the bitsets (70002), a group
    /// (100) with a member beyond them (70001), and a header with the usual fields.
    const LARGE_TAGS: &str = r#"<fix type="FIX" major="4" minor="4" servicepack="0">
 <header>
  <field name="BeginString" required="Y"/>
  <field name="BodyLength" required="Y"/>
  <field name="MsgType" required="Y"/>
 </header>
 <trailer><field name="CheckSum" required="Y"/></trailer>
 <messages>
  <message name="M" msgtype="X" msgcat="app">
   <field name="Symbol" required="N"/>
   <field name="Big" required="Y"/>
   <group name="NoA" required="N">
    <field name="A1" required="Y"/>
    <field name="BigMember" required="N"/>
   </group>
  </message>
 </messages>
 <components/>
 <fields>
  <field number="8" name="BeginString" type="STRING"/>
  <field number="9" name="BodyLength" type="LENGTH"/>
  <field number="35" name="MsgType" type="STRING"/>
  <field number="10" name="CheckSum" type="STRING"/>
  <field number="55" name="Symbol" type="STRING"/>
  <field number="100" name="NoA" type="NUMINGROUP"/>
  <field number="101" name="A1" type="STRING"/>
  <field number="70001" name="BigMember" type="STRING"/>
  <field number="70002" name="Big" type="STRING"/>
 </fields>
</fix>"#;

    /// The scans `LargeTags` replaced: whether the top-level section holding `tag` has
    /// it, by a walk of `fields`.
    fn top_level_has_reference(
        fields: &[Field],
        transport: &Dictionary,
        body: Option<&Layout>,
        tag: u32,
    ) -> bool {
        let mut found = false;
        walk(fields, transport, body, false, |_, f, _, _| {
            found |= f.tag == tag
        });
        found
    }

    proptest::proptest! {
        /// `LargeTags` answers as the scans it replaced: for every top-level field, the
        /// scan of the fields before it and the walk of those; after the walk, the walk
        /// of the whole message.
        #[test]
        fn large_tags_answer_as_the_scans_they_replace(
            tags in proptest::collection::vec(
                proptest::sample::select(vec![
                    55u32, 100, 101, 70001, 70002, 80000, 80001, 65535, 65536,
                ]),
                0..30,
            )
        ) {
            let dict = Dictionary::from_xml(LARGE_TAGS).map_err(|e| {
                proptest::test_runner::TestCaseError::fail(e.to_string())
            })?;
            let body = dict.message(b"X").map(|m| m.layout());
            let fields: Vec<Field> = tags
                .iter()
                .map(|&tag| Field { tag, start: 0, end: 0 })
                .collect();
            let mut buf = vec![(1, 2)];
            let mut large = LargeTags::new(&mut buf);
            walk(&fields, &dict, body, true, |i, f, _, _| {
                if f.tag >= BITSET_TAGS {
                    let before = &fields[..i];
                    let reference = before.iter().any(|b| b.tag == f.tag)
                        && top_level_has_reference(before, &dict, body, f.tag);
                    assert_eq!(
                        large.before(&fields, &dict, body, f.tag, i),
                        reference,
                        "{tags:?} at {i}"
                    );
                }
            });
            for tag in [65536, 70001, 70002, 80000, 80001] {
                proptest::prop_assert_eq!(
                    large.has(&fields, &dict, body, tag),
                    top_level_has_reference(&fields, &dict, body, tag),
                    "{:?}: {}", tags, tag
                );
            }
        }
    }

    /// Validates `8=FIX.4.4|9=..|35=X|<body>10=..|` (`|` for SOH) against
    /// [`LARGE_TAGS`], without and with a [`ShapeCache`] (which must agree).
    fn validate_large(body: &str, user_defined: bool) -> Result<(), Reject> {
        let dict = Dictionary::from_xml(LARGE_TAGS).expect("the test dictionary loads");
        let body = format!("35=X|{body}").replace('|', "\x01");
        let mut raw = format!("8=FIX.4.4\x019={}\x01{body}", body.len()).into_bytes();
        codec::push_trailer(&mut raw, 0);
        let mut fields = Fields::new();
        let msg = codec::parse(&raw, &mut fields).expect("the test message parses");
        let opts = ValidationOptions {
            validate_user_defined_fields: user_defined,
            ..ValidationOptions::default()
        };
        let dicts = Dictionaries::single(&dict);
        let full = validate(&msg, &dicts, &opts);
        let mut cache = ShapeCache::new();
        assert_eq!(validate_cached(&msg, &dicts, &opts, &mut cache), full);
        full
    }

    fn reject(code: u32, tag: u32) -> Result<(u32, Option<u32>), Reject> {
        Ok((code, Some(tag)))
    }

    /// The repeat and presence checks of tags beyond 65535, edge by edge.
    #[test]
    fn large_tags_repeats_and_presence() {
        let code = |r: Result<(), Reject>| {
            r.map(|()| (0, None))
                .or_else(|r| Ok((r.reason.code(), r.ref_tag)))
        };
        assert_eq!(validate_large("70002=a|", true), Ok(()));
        // Required and missing (present only in a group does not count).
        assert_eq!(code(validate_large("55=x|", true)), reject(1, 70002));
        assert_eq!(
            code(validate_large("100=1|101=a|70002=b|", true)),
            Ok((0, None)),
            "70002 is not a member of 100: it ends the group"
        );
        assert_eq!(
            code(validate_large("100=1|101=a|70001=b|", true)),
            reject(1, 70002)
        );
        // Review: behind an earlier repeat (55), a present 70002 read as missing (the
        // list was filled only by repeat checks, which that error skipped).
        assert_eq!(
            code(validate_large("55=x|55=y|70002=a|", false)),
            reject(13, 55)
        );
        // Repeated at the top level: 13, in any order among other large tags.
        for body in [
            "70002=a|70002=b|",
            "70002=a|80000=1|70002=b|",
            "80001=1|70002=a|55=x|70002=b|80000=1|",
        ] {
            assert_eq!(
                code(validate_large(body, false)),
                reject(13, 70002),
                "{body}"
            );
        }
        // Once in a group and once at the top level: not a repeat.
        assert_eq!(
            code(validate_large(
                "70002=a|100=1|101=a|70001=b|55=x|70001=c|",
                false
            )),
            Ok((0, None)),
            "the top-level 70001 is not a repeat of the group's"
        );
        assert_eq!(
            code(validate_large(
                "70002=a|100=1|101=a|70001=b|55=x|70001=c|70001=d|",
                false
            )),
            reject(13, 70001),
            "but a second top-level one is"
        );
        // A third copy of an undefined user-defined tag: still 13 (its other checks,
        // which run again as before, find nothing with ValidateUserDefinedFields=N).
        assert_eq!(
            code(validate_large("70002=a|80000=1|80000=2|80000=3|", false)),
            reject(13, 80000)
        );
        // With ValidateUserDefinedFields=Y the first copy's own error comes first.
        let first = code(validate_large("70002=a|80000=1|80000=2|80000=3|", true));
        assert_eq!(first, code(validate_large("70002=a|80000=1|", true)));
        assert_ne!(first, reject(13, 80000));
    }

    /// Regression (hostile-input report F2): each tag beyond 65535 scanned the fields
    /// before it, and walked them again when its tag was among them: 320,000 distinct
    /// tags in descending order froze the engine for 25.4 s. Now the top-level fields
    /// are walked once more per message, however many such tags it has.
    #[test]
    fn regression_many_large_tags_validate_in_linear_work() {
        let n = 20_000;
        let distinct: String = (0..n).map(|i| format!("{}=a|", 100_000 + n - i)).collect();
        let twice: String = (0..n)
            .map(|i| format!("{}=a|", 100_000 + i % (n / 2)))
            .collect();
        for (body, want) in [(distinct, Ok(())), (twice, Err((13, Some(100_000))))] {
            large_work::take();
            let r = validate_large(&format!("70002=x|{body}"), false);
            // Two validations (plain and cached), one walk each.
            assert!(large_work::take() <= 2 * (n + 10));
            assert_eq!(r.map_err(|r| (r.reason.code(), r.ref_tag)), want);
        }
    }
}
