//! QuickFIX XML data dictionaries and dictionary-driven repeating groups.
//!
//! # Design
//!
//! * **Loading** ([`Dictionary::from_file`], [`Dictionary::from_xml`]) reads the QuickFIX
//!   XML format (`<fix type major minor>` with `<header>`, `<trailer>`, `<messages>`,
//!   `<components>`, `<fields>`) into a small DOM, then builds the tables the way
//!   QuickFIX's `DataDictionary::readFromDocument` does: components are expanded in
//!   place (recursively), groups nest, the first member of a group is its delimiter, and
//!   the "required" flags combine exactly as QuickFIX combines them (a required field of a
//!   component counts only when the component itself is required; required members of a
//!   group count only when the group is required). FIX 5.0 and later application
//!   dictionaries have no header/trailer; the transport dictionary (FIXT.1.1) has them.
//!   Every error names the file and the line.
//! * **Querying** happens on the hot path, so everything is a flat table: field
//!   definitions are found through a `Vec` indexed by tag, message definitions by binary
//!   search on the MsgType bytes, and each message body / group entry is a [`Layout`]:
//!   sorted member tags (plus a bitset of those below 2048, so membership is one load),
//!   sorted required tags and its groups sorted by NumInGroup tag. Nothing allocates
//!   after loading.
//! * **Repeating groups** are resolved over a parsed [`MessageRef`]'s flat field table
//!   with the same rule as QuickFIX's `Message::setGroup`: an entry starts at the
//!   delimiter, or at a member field already present in the current entry (or the first
//!   member when there is no entry yet); the group ends at the first field that is not a
//!   member. [`GroupIter`] yields one [`GroupEntry`] (a sub-slice of the field table,
//!   nested groups included) per entry. Without a dictionary the fields simply stay flat.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::path::Path;

use crate::codec::{Field, MessageRef};

/// Errors loading a dictionary: the file cannot be read, or its content is not a valid
/// QuickFIX dictionary (with the line where the problem is).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DictError {
    /// The file could not be read.
    #[error("{path}: cannot read data dictionary: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The XML is malformed or does not describe a valid dictionary.
    #[error("{path}:{line}: {message}")]
    Invalid {
        /// The file (or `<memory>`).
        path: String,
        /// 1-based line of the element at fault (0 when unknown).
        line: u32,
        /// What is wrong.
        message: String,
    },
}

/// The value type of a field, as QuickFIX maps the XML `type` attribute
/// (`XMLTypeToType`): types QuickFIX does not know become [`FieldType::Unknown`] and are
/// not format-checked. Before FIX.4.2, `CHAR` is treated as `STRING`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FieldType {
    /// STRING (any text).
    String,
    /// CHAR: exactly one character.
    Char,
    /// PRICE (decimal).
    Price,
    /// INT (signed 32-bit).
    Int,
    /// AMT (decimal).
    Amt,
    /// QTY (decimal).
    Qty,
    /// CURRENCY (text).
    Currency,
    /// MULTIPLEVALUESTRING (space-separated values).
    MultipleValueString,
    /// MULTIPLESTRINGVALUE (space-separated values).
    MultipleStringValue,
    /// MULTIPLECHARVALUE (space-separated values).
    MultipleCharValue,
    /// EXCHANGE (text).
    Exchange,
    /// UTCTIMESTAMP (and TIME): `YYYYMMDD-HH:MM:SS[.f{1,9}]`.
    UtcTimestamp,
    /// BOOLEAN: `Y` or `N`.
    Boolean,
    /// LOCALMKTDATE (not format-checked by QuickFIX).
    LocalMktDate,
    /// DATA (raw bytes).
    Data,
    /// FLOAT (decimal).
    Float,
    /// PRICEOFFSET (decimal).
    PriceOffset,
    /// MONTHYEAR (not format-checked by QuickFIX).
    MonthYear,
    /// DAYOFMONTH (not format-checked by QuickFIX).
    DayOfMonth,
    /// UTCDATE: `YYYYMMDD`.
    UtcDate,
    /// UTCDATEONLY (not format-checked by QuickFIX 1.16).
    UtcDateOnly,
    /// UTCTIMEONLY: `HH:MM:SS[.f{1,9}]`.
    UtcTimeOnly,
    /// NUMINGROUP (signed 32-bit integer).
    NumInGroup,
    /// PERCENTAGE (decimal).
    Percentage,
    /// SEQNUM (unsigned 64-bit integer).
    SeqNum,
    /// LENGTH (signed 32-bit integer).
    Length,
    /// COUNTRY (text).
    Country,
    /// Any other XML type (not format-checked).
    Unknown,
}

impl FieldType {
    /// QuickFIX's mapping of an XML type name for a dictionary of `begin_string`.
    pub fn from_xml(xml_type: &str, begin_string: &str) -> FieldType {
        if xml_type == "CHAR" && begin_string < "FIX.4.2" {
            return FieldType::String;
        }
        match xml_type {
            "STRING" => FieldType::String,
            "CHAR" => FieldType::Char,
            "PRICE" => FieldType::Price,
            "INT" => FieldType::Int,
            "AMT" => FieldType::Amt,
            "QTY" => FieldType::Qty,
            "CURRENCY" => FieldType::Currency,
            "MULTIPLEVALUESTRING" => FieldType::MultipleValueString,
            "MULTIPLESTRINGVALUE" => FieldType::MultipleStringValue,
            "MULTIPLECHARVALUE" => FieldType::MultipleCharValue,
            "EXCHANGE" => FieldType::Exchange,
            "UTCTIMESTAMP" | "TIME" => FieldType::UtcTimestamp,
            "BOOLEAN" => FieldType::Boolean,
            "LOCALMKTDATE" => FieldType::LocalMktDate,
            "DATA" => FieldType::Data,
            "FLOAT" => FieldType::Float,
            "PRICEOFFSET" => FieldType::PriceOffset,
            "MONTHYEAR" => FieldType::MonthYear,
            "DAYOFMONTH" => FieldType::DayOfMonth,
            "UTCDATE" => FieldType::UtcDate,
            "UTCDATEONLY" => FieldType::UtcDateOnly,
            "UTCTIMEONLY" => FieldType::UtcTimeOnly,
            "NUMINGROUP" => FieldType::NumInGroup,
            "PERCENTAGE" => FieldType::Percentage,
            "SEQNUM" => FieldType::SeqNum,
            "LENGTH" => FieldType::Length,
            "COUNTRY" => FieldType::Country,
            _ => FieldType::Unknown,
        }
    }

    /// True for the multiple-value types whose enumerations are checked value by value.
    pub fn is_multiple_value(self) -> bool {
        matches!(
            self,
            FieldType::MultipleValueString
                | FieldType::MultipleStringValue
                | FieldType::MultipleCharValue
        )
    }
}

/// One enumerated value of a field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnumValue {
    /// The wire value (`enum` attribute).
    pub value: String,
    /// Its description, when the dictionary gives one.
    pub description: Option<String>,
}

/// One `<field>` of the `<fields>` section.
#[derive(Clone, Debug)]
pub struct FieldDef {
    /// Tag number.
    pub tag: u32,
    /// Field name (e.g. `ClOrdID`).
    pub name: String,
    /// The XML type name as written (e.g. `UTCTIMESTAMP`).
    pub xml_type: String,
    /// The type QuickFIX validates against.
    pub field_type: FieldType,
    /// Enumerated values, sorted by value (empty: any value allowed).
    values: Vec<EnumValue>,
    /// `prefix_key` of each value, same order.
    value_keys: Vec<u64>,
    /// The one-byte values, one bit per byte: most enumerations (Side, MsgType's admin
    /// types, MDUpdateAction) are single characters, checked with one load instead of a
    /// binary search.
    single_bytes: [u64; 4],
}

impl FieldDef {
    /// The enumerated values, sorted by value; empty when any value is allowed.
    pub fn values(&self) -> &[EnumValue] {
        &self.values
    }

    /// The description of one enumerated value.
    pub fn value_description(&self, value: &[u8]) -> Option<&str> {
        self.find_value(value)
            .and_then(|v| v.description.as_deref())
    }

    fn find_value(&self, value: &[u8]) -> Option<&EnumValue> {
        find_sorted(&self.value_keys, |i| &self.values[i].value, value)
            .and_then(|i| self.values.get(i))
    }

    /// Whether `value` is one of the enumerated values (a one-byte value by the bitset,
    /// any other by binary search).
    #[inline]
    fn has_value(&self, value: &[u8]) -> bool {
        match value {
            [b] => self
                .single_bytes
                .get(usize::from(*b / 64))
                .is_some_and(|w| w & (1 << (b % 64)) != 0),
            _ => self.find_value(value).is_some(),
        }
    }

    /// Whether `value` is allowed by the enumeration (always true without one). Values of
    /// multiple-value types are checked one by one, split on spaces, as QuickFIX does.
    pub fn allows(&self, value: &[u8]) -> bool {
        if self.values.is_empty() {
            return true;
        }
        if self.field_type.is_multiple_value() {
            value.split(|&b| b == b' ').all(|v| self.has_value(v))
        } else {
            self.has_value(value)
        }
    }
}

/// The bitset of [`FieldDef::has_value`]: one bit per enumerated value of one byte.
fn single_byte_bits(values: &[EnumValue]) -> [u64; 4] {
    let mut bits = [0u64; 4];
    for v in values {
        if let [b] = v.value.as_bytes() {
            if let Some(w) = bits.get_mut(usize::from(*b / 64)) {
                *w |= 1 << (b % 64);
            }
        }
    }
    bits
}

/// Admin or application message (`msgcat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgCategory {
    /// `msgcat="admin"`.
    Admin,
    /// `msgcat="app"` (or anything else).
    App,
}

/// The members of a header, trailer, message body or group entry.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// Member tags in dictionary order (components expanded; group count tags included,
    /// group members not), without duplicates.
    order: Vec<u32>,
    /// The same tags, sorted, for lookup.
    sorted: Vec<u32>,
    /// The member tags below [`LAYOUT_BITSET_TAGS`] as a bitset (one bit per tag, only as many
    /// words as the largest such member needs): membership is one load, not a binary
    /// search, on the validation path of every field.
    member_bits: TagBits,
    /// The same for the groups' NumInGroup tags: most fields are not one.
    group_bits: TagBits,
    /// Required tags, sorted (QuickFIX reports the smallest missing one).
    required: Vec<u32>,
    /// Groups directly in this layout, sorted by NumInGroup tag.
    groups: Vec<GroupDef>,
}

impl Layout {
    /// Member tags in dictionary order.
    pub fn members(&self) -> &[u32] {
        &self.order
    }

    /// Whether `tag` is a direct member (a group's NumInGroup tag is; its members are not).
    #[inline]
    pub fn contains(&self, tag: u32) -> bool {
        match self.member_bits.get(tag) {
            Some(member) => member,
            None => self.sorted.binary_search(&tag).is_ok(),
        }
    }

    /// Required tags, ascending.
    pub fn required(&self) -> &[u32] {
        &self.required
    }

    /// Whether `tag` is required here.
    pub fn is_required(&self, tag: u32) -> bool {
        self.required.binary_search(&tag).is_ok()
    }

    /// The group whose NumInGroup tag is `count_tag`.
    #[inline]
    pub fn group(&self, count_tag: u32) -> Option<&GroupDef> {
        if self.group_bits.get(count_tag) == Some(false) {
            return None;
        }
        self.groups
            .binary_search_by_key(&count_tag, |g| g.count_tag)
            .ok()
            .and_then(|i| self.groups.get(i))
    }

    /// The groups directly in this layout, by NumInGroup tag.
    pub fn groups(&self) -> &[GroupDef] {
        &self.groups
    }

    /// Every tag of this layout and of its nested groups.
    fn collect_tags(&self, out: &mut Vec<u32>) {
        out.extend_from_slice(&self.order);
        for g in &self.groups {
            g.layout.collect_tags(out);
        }
    }

    fn add_member(&mut self, tag: u32) {
        // `sorted` is kept sorted while building (`finish` sets it again): a lookup is a
        // binary search, not a scan of `order` (review: a component of 10,000 fields
        // used 800 times, within MAX_EXPANSION, was 4·10^10 comparisons).
        if let Err(i) = self.sorted.binary_search(&tag) {
            self.sorted.insert(i, tag);
            self.order.push(tag);
        }
    }

    fn add_required(&mut self, tag: u32) {
        self.required.push(tag);
    }

    fn add_group(&mut self, group: GroupDef) {
        // QuickFIX keeps the last definition of a group in the same scope.
        self.groups.retain(|g| g.count_tag != group.count_tag);
        self.groups.push(group);
    }

    fn finish(&mut self) {
        self.sorted = self.order.clone();
        self.sorted.sort_unstable();
        self.member_bits = TagBits::of(&self.sorted);
        self.required.sort_unstable();
        self.required.dedup();
        self.groups.sort_by_key(|g| g.count_tag);
        let count_tags: Vec<u32> = self.groups.iter().map(|g| g.count_tag).collect();
        self.group_bits = TagBits::of(&count_tags);
        for g in &mut self.groups {
            g.layout.finish();
            let mut nested = Vec::new();
            for n in &g.layout.groups {
                n.layout.collect_tags(&mut nested);
            }
            g.flat_members = !nested.iter().any(|t| g.layout.contains(*t));
        }
    }
}

/// The first 8 bytes of `s`, big-endian, zero-padded. Comparing two keys compares the
/// strings' first 8 bytes in lexicographic order (a string that ends early sorts first),
/// so a binary search over sorted strings compares integers and needs the bytes only
/// when two keys tie.
fn prefix_key(s: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = s.len().min(8);
    b[..n].copy_from_slice(&s[..n]);
    u64::from_be_bytes(b)
}

/// Binary search for `probe` in a list of strings sorted by their bytes, given their
/// `keys` (`keys[i] == prefix_key(text(i))`). Returns the index of the equal string.
fn find_sorted<'a>(keys: &[u64], text: impl Fn(usize) -> &'a str, probe: &[u8]) -> Option<usize> {
    use std::cmp::Ordering;
    let probe_key = prefix_key(probe);
    let (mut lo, mut hi) = (0, keys.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let order = keys[mid].cmp(&probe_key).then_with(|| {
            let t = text(mid).as_bytes();
            if t.len() <= 8 && probe.len() <= 8 {
                // Equal keys: equal bytes up to the shorter length, then zeros.
                t.len().cmp(&probe.len())
            } else {
                t.cmp(probe)
            }
        });
        match order {
            Ordering::Less => lo = mid + 1,
            Ordering::Greater => hi = mid,
            Ordering::Equal => return Some(mid),
        }
    }
    None
}

/// Tags at or above this are looked up by binary search instead of in a [`TagBits`]
/// (standard FIX tags are below it; user-defined ones, 5000 and up, rarely sit in a
/// layout that is validated per message).
const LAYOUT_BITSET_TAGS: u32 = 2048;

/// A set of tags below [`LAYOUT_BITSET_TAGS`], one bit each, sized to its largest tag.
#[derive(Clone, Debug, Default)]
struct TagBits(Vec<u64>);

impl TagBits {
    fn of(tags: &[u32]) -> TagBits {
        let small = || tags.iter().copied().filter(|&t| t < LAYOUT_BITSET_TAGS);
        let words = small().max().map_or(0, |t| t as usize / 64 + 1);
        let mut bits = vec![0u64; words];
        for t in small() {
            if let Some(w) = bits.get_mut(t as usize / 64) {
                *w |= 1 << (t % 64);
            }
        }
        TagBits(bits)
    }

    /// Whether `tag` is in the set; None for a tag at or above [`LAYOUT_BITSET_TAGS`] (ask the
    /// sorted list).
    #[inline]
    fn get(&self, tag: u32) -> Option<bool> {
        if tag >= LAYOUT_BITSET_TAGS {
            return None;
        }
        Some(
            self.0
                .get(tag as usize / 64)
                .is_some_and(|w| w & (1 << (tag % 64)) != 0),
        )
    }
}

/// What a dictionary knows of one tag ([`Dictionary::tag_class`]): whether it belongs to
/// the header or trailer (QuickFIX's fixed lists or the dictionary's sections) and whether
/// `<fields>` defines it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TagClass(u8);

impl TagClass {
    const STANDARD_HEADER: u8 = 1;
    const DICT_HEADER: u8 = 2;
    const STANDARD_TRAILER: u8 = 4;
    const DICT_TRAILER: u8 = 8;
    const FIELD: u8 = 16;

    /// In QuickFIX's fixed header list or the dictionary's `<header>`: a header field for
    /// the message structure.
    #[inline]
    pub fn is_header(self) -> bool {
        self.0 & (Self::STANDARD_HEADER | Self::DICT_HEADER) != 0
    }

    /// In QuickFIX's fixed trailer list or the dictionary's `<trailer>`.
    #[inline]
    pub fn is_trailer(self) -> bool {
        self.0 & (Self::STANDARD_TRAILER | Self::DICT_TRAILER) != 0
    }

    /// In the dictionary's own `<header>` or `<trailer>` ([`Dictionary::is_header_field`]
    /// or [`Dictionary::is_trailer_field`]).
    #[inline]
    pub fn in_dict_header_or_trailer(self) -> bool {
        self.0 & (Self::DICT_HEADER | Self::DICT_TRAILER) != 0
    }

    /// Defined in `<fields>` ([`Dictionary::is_field`]).
    #[inline]
    pub fn is_field(self) -> bool {
        self.0 & Self::FIELD != 0
    }
}

/// Tags up to this one are in QuickFIX's fixed header and trailer lists
/// (`validate::is_standard_header_tag`): the class table covers at least them.
const LARGEST_STANDARD_TAG: u32 = 1129;

/// A repeating group: its NumInGroup tag, delimiter and entry layout.
#[derive(Clone, Debug)]
pub struct GroupDef {
    /// The NumInGroup tag (e.g. 268 NoMDEntries).
    pub count_tag: u32,
    /// The first field of every entry (e.g. 279 MDUpdateAction in 4.4's 35=X).
    pub delimiter: u32,
    /// Whether the group itself was declared required (its members' required flags count
    /// only then, as in QuickFIX).
    pub required: bool,
    layout: Layout,
    /// No direct member tag also occurs in a nested group, so "does the entry already
    /// have this member" is a plain scan (set when loading).
    flat_members: bool,
}

impl GroupDef {
    /// The entry layout (member order, required members, nested groups).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
}

/// One `<message>`.
#[derive(Clone, Debug)]
pub struct MessageDef {
    /// MsgType (35) value.
    pub msg_type: String,
    /// Message name (e.g. `NewOrderSingle`).
    pub name: String,
    /// `msgcat`.
    pub category: MsgCategory,
    layout: Layout,
}

impl MessageDef {
    /// The body layout (allowed and required tags, groups).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
}

const NO_FIELD: u32 = u32::MAX;
/// Tags above this are refused when loading (the tag-indexed table would be too big).
const MAX_TAG: u32 = 1_000_000;

/// A loaded QuickFIX data dictionary (one XML file).
#[derive(Clone, Debug)]
pub struct Dictionary {
    begin_string: String,
    fixt: bool,
    major: u32,
    minor: u32,
    service_pack: u32,
    /// Index into `fields` by tag (`NO_FIELD` when undefined).
    field_index: Vec<u32>,
    /// [`TagClass`] bits by tag, for every tag up to the largest one the dictionary or
    /// QuickFIX's fixed header and trailer lists know (beyond it [`Dictionary::classify`]
    /// answers): the validation's section and definition questions in one load.
    tag_classes: Vec<u8>,
    fields: Vec<FieldDef>,
    names: HashMap<String, u32>,
    header: Layout,
    trailer: Layout,
    has_header: bool,
    /// Sorted by MsgType bytes.
    messages: Vec<MessageDef>,
    /// `prefix_key` of each MsgType, same order.
    message_keys: Vec<u64>,
    /// Index into `messages` of each one-byte MsgType, by byte (`NO_FIELD` when
    /// undefined): most messages (35=X, D, 8, the admin types) are found with one load.
    single_byte_messages: Vec<u32>,
}

impl Dictionary {
    /// Loads a dictionary file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Dictionary, DictError> {
        let path = path.as_ref();
        // The largest QuickFIX dictionary (FIX50SP2) is ~6 MB: 64 MiB is not one.
        let text =
            tickwire_rt::files::read_to_string_limited(path, 64 << 20).map_err(|source| {
                DictError::Io {
                    path: path.display().to_string(),
                    source,
                }
            })?;
        Dictionary::from_xml_named(&text, &path.display().to_string())
    }

    /// Loads a dictionary from XML text (errors name the source `<memory>`).
    pub fn from_xml(xml: &str) -> Result<Dictionary, DictError> {
        Dictionary::from_xml_named(xml, "<memory>")
    }

    /// Loads a dictionary from XML text; `source` names it in errors.
    pub fn from_xml_named(xml: &str, source: &str) -> Result<Dictionary, DictError> {
        let root = xml::parse(xml).map_err(|(line, message)| DictError::Invalid {
            path: source.to_string(),
            line,
            message,
        })?;
        Builder { root: &root }
            .build()
            .map_err(|(line, message)| DictError::Invalid {
                path: source.to_string(),
                line,
                message,
            })
    }

    /// The BeginString this dictionary describes, as QuickFIX spells it: `FIX.4.4`,
    /// `FIXT.1.1`, `FIX.5.0` (service packs do not change it).
    pub fn begin_string(&self) -> &str {
        &self.begin_string
    }

    /// True for a transport dictionary (`type="FIXT"`).
    pub fn is_fixt(&self) -> bool {
        self.fixt
    }

    /// `(major, minor, servicepack)` from the `<fix>` element.
    pub fn version(&self) -> (u32, u32, u32) {
        (self.major, self.minor, self.service_pack)
    }

    /// Whether the dictionary has header and trailer sections (FIX 4.x and FIXT; not the
    /// FIX 5.0+ application dictionaries).
    pub fn has_header(&self) -> bool {
        self.has_header
    }

    /// The definition of `tag`.
    #[inline]
    pub fn field(&self, tag: u32) -> Option<&FieldDef> {
        let i = *self.field_index.get(tag as usize)?;
        self.fields.get(i as usize)
    }

    /// Whether `tag` is defined in `<fields>`.
    #[inline]
    pub fn is_field(&self, tag: u32) -> bool {
        self.field(tag).is_some()
    }

    /// The tag of a field name.
    pub fn tag_of(&self, name: &str) -> Option<u32> {
        self.names.get(name).copied()
    }

    /// All field definitions, in file order.
    pub fn fields(&self) -> &[FieldDef] {
        &self.fields
    }

    /// The header layout (empty for FIX 5.0+ application dictionaries).
    pub fn header(&self) -> &Layout {
        &self.header
    }

    /// The trailer layout (empty for FIX 5.0+ application dictionaries).
    pub fn trailer(&self) -> &Layout {
        &self.trailer
    }

    /// What this dictionary (and QuickFIX's fixed header and trailer lists) know of
    /// `tag`, from a table built when loading: equal to [`Dictionary::classify`].
    #[inline]
    pub fn tag_class(&self, tag: u32) -> TagClass {
        match self.tag_classes.get(tag as usize) {
            Some(&bits) => TagClass(bits),
            None => self.classify(tag),
        }
    }

    /// [`Dictionary::tag_class`] computed from its definition (four lookups and two fixed
    /// lists); the table is built with it.
    pub fn classify(&self, tag: u32) -> TagClass {
        let mut bits = 0;
        if crate::validate::is_standard_header_tag(tag) {
            bits |= TagClass::STANDARD_HEADER;
        }
        if self.is_header_field(tag) {
            bits |= TagClass::DICT_HEADER;
        }
        if crate::validate::is_standard_trailer_tag(tag) {
            bits |= TagClass::STANDARD_TRAILER;
        }
        if self.is_trailer_field(tag) {
            bits |= TagClass::DICT_TRAILER;
        }
        if self.is_field(tag) {
            bits |= TagClass::FIELD;
        }
        TagClass(bits)
    }

    /// Whether this dictionary lists `tag` in its header.
    #[inline]
    pub fn is_header_field(&self, tag: u32) -> bool {
        self.header.contains(tag)
    }

    /// Whether this dictionary lists `tag` in its trailer.
    #[inline]
    pub fn is_trailer_field(&self, tag: u32) -> bool {
        self.trailer.contains(tag)
    }

    /// The definition of a message type.
    #[inline]
    pub fn message(&self, msg_type: &[u8]) -> Option<&MessageDef> {
        if let [b] = msg_type {
            let i = *self.single_byte_messages.get(usize::from(*b))?;
            return self.messages.get(i as usize);
        }
        find_sorted(&self.message_keys, |i| &self.messages[i].msg_type, msg_type)
            .and_then(|i| self.messages.get(i))
    }

    /// All message definitions, sorted by MsgType.
    pub fn messages(&self) -> &[MessageDef] {
        &self.messages
    }

    /// The layout that holds a field of `msg_type` at top level: the header or trailer
    /// for their fields, else the message body (None for an unknown message type).
    pub fn body_layout(&self, msg_type: &[u8]) -> Option<&Layout> {
        self.message(msg_type).map(|m| &m.layout)
    }

    /// The entries of the first top-level occurrence of group `count_tag` in `msg`,
    /// resolved with this dictionary: body groups of the message's type, or header /
    /// trailer groups. None when the field is absent or is not a group here.
    pub fn group_entries<'d, 'm>(
        &'d self,
        msg: &MessageRef<'m>,
        count_tag: u32,
    ) -> Option<GroupIter<'d, 'm>> {
        let body = self.body_layout(msg.msg_type());
        let fields = msg.fields();
        let mut i = 0;
        while let Some(f) = fields.get(i) {
            let def = if self.is_header_field(f.tag) {
                self.header.group(f.tag)
            } else if self.is_trailer_field(f.tag) {
                self.trailer.group(f.tag)
            } else {
                body.and_then(|b| b.group(f.tag))
            };
            match def {
                Some(g) if f.tag == count_tag => {
                    return Some(GroupIter::new(g, fields, i + 1));
                }
                Some(g) => i = scan_group(g, fields, i + 1).end,
                None => i += 1,
            }
        }
        None
    }
}

/// Where a group ends in a field table and how many entries it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupScan {
    /// Index one past the group's last field (its nested groups included).
    pub end: usize,
    /// The number of entries found.
    pub entries: usize,
}

/// Scans the group `group` whose entries start at `fields[start]` (just after the
/// NumInGroup field), with QuickFIX's rule; see the module docs.
pub fn scan_group(group: &GroupDef, fields: &[Field], start: usize) -> GroupScan {
    scan_group_entries(group, fields, start, |_| {})
}

/// [`scan_group`], handing each entry to `each` as it is found (the entries a
/// [`GroupIter`] over the group would give, without scanning them a second time).
pub fn scan_group_entries<'d, 'm>(
    group: &'d GroupDef,
    fields: &'m [Field],
    start: usize,
    mut each: impl FnMut(GroupEntry<'d, 'm>),
) -> GroupScan {
    let mut pos = start;
    let mut entries = 0;
    while pos < fields.len() {
        let next = entry_end(group, fields, pos);
        if next == pos {
            break;
        }
        if let Some(entry) = fields.get(pos..next) {
            each(GroupEntry {
                group,
                fields: entry,
            });
        }
        entries += 1;
        pos = next;
    }
    GroupScan { end: pos, entries }
}

/// If an entry of `group` starts at `fields[start]`, the index one past its end; else
/// `start`.
fn entry_end(group: &GroupDef, fields: &[Field], start: usize) -> usize {
    let Some(first) = fields.get(start) else {
        return start;
    };
    if !group.layout.contains(first.tag) && first.tag != group.delimiter {
        return start;
    }
    let mut pos = start;
    // One bit per field of `fields[start..pos]` (tag mod 64, nested groups' fields
    // included): a clear bit proves no field there has the tag, so `entry_has` only
    // runs on a possible repeat.
    let mut seen = 0u64;
    while let Some(f) = fields.get(pos) {
        let tag = f.tag;
        let bit = 1u64 << (tag % 64);
        if pos > start {
            let member = group.layout.contains(tag);
            if !member {
                break;
            }
            if tag == group.delimiter
                || (seen & bit != 0 && entry_has(group, fields, start, pos, tag))
            {
                break; // next entry
            }
        }
        seen |= bit;
        pos += 1;
        if let Some(nested) = group.layout.group(tag) {
            let end = scan_group(nested, fields, pos).end;
            for f in fields.get(pos..end).unwrap_or(&[]) {
                seen |= 1u64 << (f.tag % 64);
            }
            pos = end;
        }
    }
    pos
}

/// Whether the entry `fields[start..pos]` already holds `tag` as a direct member (the
/// fields of nested groups are skipped).
fn entry_has(group: &GroupDef, fields: &[Field], start: usize, pos: usize, tag: u32) -> bool {
    if group.flat_members {
        // Linear, so scanning stays O(entry) per field whatever the nesting.
        return fields
            .get(start..pos)
            .is_some_and(|entry| entry.iter().any(|f| f.tag == tag));
    }
    let mut i = start;
    while i < pos {
        let Some(f) = fields.get(i) else { break };
        if f.tag == tag {
            return true;
        }
        i += 1;
        if let Some(nested) = group.layout.group(f.tag) {
            i = scan_group(nested, fields, i).end.min(pos);
        }
    }
    false
}

/// Iterator over the entries of one occurrence of a repeating group.
#[derive(Clone, Debug)]
pub struct GroupIter<'d, 'm> {
    group: &'d GroupDef,
    fields: &'m [Field],
    pos: usize,
}

impl<'d, 'm> GroupIter<'d, 'm> {
    /// Entries of `group` starting at `fields[start]` (just after its NumInGroup field).
    pub fn new(group: &'d GroupDef, fields: &'m [Field], start: usize) -> Self {
        GroupIter {
            group,
            fields,
            pos: start,
        }
    }

    /// The group definition.
    pub fn def(&self) -> &'d GroupDef {
        self.group
    }
}

impl<'d, 'm> Iterator for GroupIter<'d, 'm> {
    type Item = GroupEntry<'d, 'm>;

    fn next(&mut self) -> Option<Self::Item> {
        let start = self.pos;
        let end = entry_end(self.group, self.fields, start);
        if end == start {
            return None;
        }
        self.pos = end;
        Some(GroupEntry {
            group: self.group,
            fields: self.fields.get(start..end)?,
        })
    }
}

/// One entry of a repeating group: its fields in wire order, nested groups included.
#[derive(Clone, Copy, Debug)]
pub struct GroupEntry<'d, 'm> {
    group: &'d GroupDef,
    fields: &'m [Field],
}

impl<'d, 'm> GroupEntry<'d, 'm> {
    /// The group this entry belongs to.
    pub fn def(&self) -> &'d GroupDef {
        self.group
    }

    /// The entry's fields (read values with [`MessageRef::value`]).
    pub fn fields(&self) -> &'m [Field] {
        self.fields
    }

    /// The first direct (not nested) field with `tag`.
    pub fn field(&self, tag: u32) -> Option<&'m Field> {
        self.direct().find(|f| f.tag == tag)
    }

    /// The entry's direct fields (nested groups' members skipped).
    pub fn direct(&self) -> impl Iterator<Item = &'m Field> + 'd
    where
        'm: 'd,
    {
        let group = self.group;
        let fields = self.fields;
        let mut i = 0;
        std::iter::from_fn(move || {
            let f = fields.get(i)?;
            i += 1;
            if let Some(nested) = group.layout.group(f.tag) {
                i = scan_group(nested, fields, i).end;
            }
            Some(f)
        })
    }

    /// The entries of the nested group `count_tag` in this entry.
    pub fn group(&self, count_tag: u32) -> Option<GroupIter<'d, 'm>> {
        let nested = self.group.layout.group(count_tag)?;
        let i = self.fields.iter().position(|f| f.tag == count_tag)?;
        Some(GroupIter::new(nested, self.fields, i + 1))
    }
}

/// Builds a [`Dictionary`] from the DOM, mirroring QuickFIX's reader.
struct Builder<'x> {
    root: &'x xml::Node,
}

type BuildResult<T> = Result<T, (u32, String)>;

/// Components nest; a cycle in a broken file must not recurse forever.
const MAX_DEPTH: u32 = 64;

/// Field, group and component references the expansion of all messages may visit.
/// Components are expanded where they are used, so a component used twice in one that
/// is used twice ... costs 2^depth: a hostile-input probe's 1.3 KB of such nesting had
/// a load burn 17 s of CPU and counting. The largest standard dictionary (FIX50SP2)
/// visits 339,728; the bound is 23 times that, ~0.4 s of loading.
pub const MAX_EXPANSION: u64 = 8_000_000;

struct Ctx<'x> {
    names: HashMap<String, u32>,
    components: HashMap<&'x str, &'x xml::Node>,
    /// References visited so far (see [`MAX_EXPANSION`]).
    expanded: std::cell::Cell<u64>,
}

impl Ctx<'_> {
    /// Counts `n` more references visited; an error past [`MAX_EXPANSION`].
    fn expand(&self, node: &xml::Node, n: usize) -> BuildResult<()> {
        let total = self.expanded.get().saturating_add(n as u64);
        self.expanded.set(total);
        if total > MAX_EXPANSION {
            return Err((
                node.line,
                format!(
                    "the messages expand to more than {MAX_EXPANSION} field references \
                     (components used many times within components used many times?)"
                ),
            ));
        }
        Ok(())
    }
}

impl<'x> Ctx<'x> {
    fn lookup(&self, node: &xml::Node) -> BuildResult<u32> {
        let name = node
            .attr("name")
            .ok_or_else(|| (node.line, format!("<{}> has no name attribute", node.name)))?;
        self.names.get(name).copied().ok_or_else(|| {
            (
                node.line,
                format!("Field {name} not defined in fields section"),
            )
        })
    }
}

fn is_required(node: &xml::Node) -> bool {
    matches!(node.attr("required"), Some("Y" | "y"))
}

impl<'x> Builder<'x> {
    fn build(self) -> BuildResult<Dictionary> {
        let root = self.root;
        if root.name != "fix" {
            return Err((root.line, "no <fix> element at the root".into()));
        }
        let kind = root.attr("type").unwrap_or("FIX");
        if kind != "FIX" && kind != "FIXT" {
            return Err((root.line, "type attribute must be FIX or FIXT".into()));
        }
        let num = |attr: &str, required: bool| -> BuildResult<u32> {
            match root.attr(attr) {
                Some(v) => v.trim().parse().map_err(|_| {
                    (
                        root.line,
                        format!("{attr} attribute of <fix> is not a number"),
                    )
                }),
                None if required => {
                    Err((root.line, format!("{attr} attribute not found on <fix>")))
                }
                None => Ok(0),
            }
        };
        let major = num("major", true)?;
        let minor = num("minor", true)?;
        let service_pack = num("servicepack", false)?;
        let begin_string = format!("{kind}.{major}.{minor}");
        let fixt = kind == "FIXT";

        // FIELDS
        let fields_node = root.child("fields").ok_or((
            root.line,
            "<fields> section not found in data dictionary".to_string(),
        ))?;
        let mut fields: Vec<FieldDef> = Vec::new();
        let mut names: HashMap<String, u32> = HashMap::new();
        let mut max_tag = 0;
        for f in fields_node.children.iter().filter(|n| n.name == "field") {
            let name = f
                .attr("name")
                .ok_or((f.line, "<field> does not have a name attribute".to_string()))?;
            let number = f.attr("number").ok_or_else(|| {
                (
                    f.line,
                    format!("<field> {name} does not have a number attribute"),
                )
            })?;
            let tag: u32 = number
                .trim()
                .parse()
                .ok()
                .filter(|&t| t > 0 && t <= MAX_TAG)
                .ok_or_else(|| {
                    (
                        f.line,
                        format!("<field> {name} has an invalid number {number:?}"),
                    )
                })?;
            let xml_type = f.attr("type").ok_or_else(|| {
                (
                    f.line,
                    format!("<field> {name} does not have a type attribute"),
                )
            })?;
            if names.insert(name.to_string(), tag).is_some() {
                return Err((f.line, format!("Field named {name} defined multiple times")));
            }
            let mut values = Vec::new();
            for v in f.children.iter().filter(|n| n.name == "value") {
                let value = v.attr("enum").ok_or_else(|| {
                    (
                        v.line,
                        format!("<value> does not have enum attribute in field {name}"),
                    )
                })?;
                values.push(EnumValue {
                    value: value.to_string(),
                    description: v.attr("description").map(str::to_string),
                });
            }
            values.sort_by(|a, b| a.value.cmp(&b.value));
            values.dedup_by(|a, b| a.value == b.value);
            max_tag = max_tag.max(tag);
            fields.push(FieldDef {
                tag,
                name: name.to_string(),
                xml_type: xml_type.to_string(),
                field_type: FieldType::from_xml(xml_type, &begin_string),
                value_keys: values
                    .iter()
                    .map(|v| prefix_key(v.value.as_bytes()))
                    .collect(),
                single_bytes: single_byte_bits(&values),
                values,
            });
        }
        if fields.is_empty() {
            return Err((fields_node.line, "No fields defined".into()));
        }
        let mut field_index = vec![NO_FIELD; max_tag as usize + 1];
        for (i, f) in fields.iter().enumerate() {
            if let Some(slot) = field_index.get_mut(f.tag as usize) {
                // A tag defined twice under two names: the later definition wins.
                *slot = i as u32;
            }
        }

        let mut components = HashMap::new();
        if let Some(c) = root.child("components") {
            for comp in c.children.iter().filter(|n| n.name == "component") {
                if let Some(name) = comp.attr("name") {
                    components.insert(name, comp);
                }
            }
        }
        let ctx = Ctx {
            names,
            components,
            expanded: std::cell::Cell::new(0),
        };

        // HEADER / TRAILER
        let has_header = fixt || major < 5;
        let mut header = Layout::default();
        let mut trailer = Layout::default();
        if has_header {
            for (section, layout) in [("header", &mut header), ("trailer", &mut trailer)] {
                let node = root.child(section).ok_or_else(|| {
                    (
                        root.line,
                        format!("<{section}> section not found in data dictionary"),
                    )
                })?;
                let mut ignored = Layout::default();
                for n in &node.children {
                    if n.name == "field" || n.name == "group" {
                        let tag = ctx.lookup(n)?;
                        layout.add_member(tag);
                        if is_required(n) {
                            layout.add_required(tag);
                        }
                    }
                    if n.name == "group" {
                        add_group(&ctx, n, layout, &mut ignored, is_required(n), 0)?;
                    }
                }
                layout.finish();
            }
        }

        // MESSAGES
        let messages_node = root.child("messages").ok_or((
            root.line,
            "<messages> section not found in data dictionary".to_string(),
        ))?;
        let mut messages: Vec<MessageDef> = Vec::new();
        for m in messages_node
            .children
            .iter()
            .filter(|n| n.name == "message")
        {
            let msg_type = m.attr("msgtype").ok_or((
                m.line,
                "<message> does not have a msgtype attribute".to_string(),
            ))?;
            let mut layout = Layout::default();
            let mut required = Vec::new();
            for n in &m.children {
                match n.name.as_str() {
                    "field" | "group" => {
                        let tag = ctx.lookup(n)?;
                        layout.add_member(tag);
                        if is_required(n) {
                            required.push(tag);
                        }
                        if n.name == "group" {
                            let mut req = Layout::default();
                            add_group(&ctx, n, &mut layout, &mut req, is_required(n), 0)?;
                            required.extend(req.required);
                        }
                    }
                    "component" => {
                        let mut req = Layout::default();
                        add_component(&ctx, n, &mut layout, &mut req, is_required(n), 0)?;
                        required.extend(req.required);
                    }
                    _ => {}
                }
            }
            layout.required = required;
            layout.finish();
            let def = MessageDef {
                msg_type: msg_type.to_string(),
                name: m.attr("name").unwrap_or("").to_string(),
                category: if m.attr("msgcat") == Some("admin") {
                    MsgCategory::Admin
                } else {
                    MsgCategory::App
                },
                layout,
            };
            messages.push(def);
        }
        if messages.is_empty() {
            return Err((messages_node.line, "No messages defined".into()));
        }
        // Stable: the definitions of one message type stay in file order.
        messages.sort_by(|a, b| a.msg_type.as_bytes().cmp(b.msg_type.as_bytes()));
        // A message type defined twice: QuickFIX merges; the later one wins here. Once
        // after sorting (a `retain` per definition was quadratic in messages).
        let messages = messages.into_iter().fold(Vec::new(), |mut kept, m| {
            if kept
                .last()
                .is_some_and(|k: &MessageDef| k.msg_type == m.msg_type)
            {
                kept.pop();
            }
            kept.push(m);
            kept
        });

        let mut dict = Dictionary {
            begin_string,
            fixt,
            major,
            minor,
            service_pack,
            field_index,
            tag_classes: Vec::new(),
            fields,
            names: ctx.names,
            header,
            trailer,
            has_header,
            message_keys: messages
                .iter()
                .map(|m| prefix_key(m.msg_type.as_bytes()))
                .collect(),
            messages,
            single_byte_messages: Vec::new(),
        };
        dict.single_byte_messages = vec![NO_FIELD; 256];
        for (i, m) in dict.messages.iter().enumerate() {
            if let [b] = m.msg_type.as_bytes() {
                if let Some(slot) = dict.single_byte_messages.get_mut(usize::from(*b)) {
                    *slot = i as u32;
                }
            }
        }
        // Header and trailer members are defined fields, so the larger of the two covers
        // every tag with a bit set.
        dict.tag_classes = (0..=max_tag.max(LARGEST_STANDARD_TAG))
            .map(|t| dict.classify(t).0)
            .collect();
        Ok(dict)
    }
}

/// Expands component `node` into `target`. Required fields of the component go to
/// `root_required` (the message's required set, as in QuickFIX), only when the component
/// is required. Returns the component's first field (0 if none), which is the delimiter
/// when a group starts with this component.
fn add_component(
    ctx: &Ctx<'_>,
    node: &xml::Node,
    target: &mut Layout,
    root_required: &mut Layout,
    component_required: bool,
    depth: u32,
) -> BuildResult<u32> {
    if depth > MAX_DEPTH {
        return Err((node.line, "components nested too deeply (a cycle?)".into()));
    }
    let name = node
        .attr("name")
        .ok_or((node.line, "No name given to component".to_string()))?;
    let comp = ctx
        .components
        .get(name)
        .ok_or_else(|| (node.line, format!("Component not found: {name}")))?;
    ctx.expand(node, comp.children.len())?;
    let mut first = 0;
    for n in &comp.children {
        match n.name.as_str() {
            "field" | "group" => {
                let tag = ctx.lookup(n)?;
                if first == 0 {
                    first = tag;
                }
                if is_required(n) && component_required {
                    root_required.add_required(tag);
                }
                target.add_member(tag);
                if n.name == "group" {
                    add_group(ctx, n, target, root_required, is_required(n), depth + 1)?;
                }
            }
            "component" => {
                add_component(ctx, n, target, root_required, is_required(n), depth + 1)?;
            }
            _ => {}
        }
    }
    Ok(first)
}

/// Builds group `node` and registers it in `target`.
fn add_group(
    ctx: &Ctx<'_>,
    node: &xml::Node,
    target: &mut Layout,
    root_required: &mut Layout,
    group_required: bool,
    depth: u32,
) -> BuildResult<()> {
    if depth > MAX_DEPTH {
        return Err((node.line, "groups nested too deeply (a cycle?)".into()));
    }
    let count_tag = ctx.lookup(node)?;
    ctx.expand(node, node.children.len())?;
    let mut layout = Layout::default();
    let mut delimiter = 0;
    for n in &node.children {
        let field = match n.name.as_str() {
            "field" => {
                let tag = ctx.lookup(n)?;
                layout.add_member(tag);
                if is_required(n) && group_required {
                    layout.add_required(tag);
                }
                tag
            }
            "component" => add_component(ctx, n, &mut layout, root_required, false, depth + 1)?,
            "group" => {
                let tag = ctx.lookup(n)?;
                layout.add_member(tag);
                if is_required(n) && group_required {
                    layout.add_required(tag);
                }
                add_group(
                    ctx,
                    n,
                    &mut layout,
                    root_required,
                    is_required(n),
                    depth + 1,
                )?;
                tag
            }
            _ => continue,
        };
        if delimiter == 0 {
            delimiter = field;
        }
    }
    if delimiter != 0 {
        target.add_group(GroupDef {
            count_tag,
            delimiter,
            required: group_required,
            layout,
            flat_members: false,
        });
    }
    Ok(())
}

/// A minimal DOM over quick-xml, keeping line numbers for error messages.
mod xml {
    use quick_xml::events::{BytesStart, Event};
    use quick_xml::Reader;

    /// One element.
    pub(super) struct Node {
        pub name: String,
        pub attrs: Vec<(String, String)>,
        pub children: Vec<Node>,
        pub line: u32,
    }

    impl Node {
        pub fn attr(&self, name: &str) -> Option<&str> {
            self.attrs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        }

        pub fn child(&self, name: &str) -> Option<&Node> {
            self.children.iter().find(|c| c.name == name)
        }
    }

    struct Lines<'a> {
        text: &'a [u8],
        pos: usize,
        line: u32,
    }

    impl Lines<'_> {
        fn at(&mut self, pos: usize) -> u32 {
            let pos = pos.min(self.text.len());
            if pos >= self.pos {
                let add = self.text[self.pos..pos]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count();
                self.line += add as u32;
            } else {
                self.line = 1 + self.text[..pos].iter().filter(|&&b| b == b'\n').count() as u32;
            }
            self.pos = pos;
            self.line
        }
    }

    fn element(e: &BytesStart<'_>, line: u32) -> Result<Node, (u32, String)> {
        let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
        let mut attrs = Vec::new();
        for a in e.attributes() {
            let a = a.map_err(|err| (line, format!("bad attribute in <{name}>: {err}")))?;
            let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
            let value = a
                .unescape_value()
                .map_err(|err| (line, format!("bad attribute value in <{name}>: {err}")))?
                .into_owned();
            attrs.push((key, value));
        }
        Ok(Node {
            name,
            attrs,
            children: Vec::new(),
            line,
        })
    }

    /// Elements nested at most this deep (QuickFIX's dictionaries nest about 6 deep):
    /// the tree is built, and dropped, recursively, and a hostile-input probe's
    /// million nested elements (7 MB) overflowed the stack.
    pub(super) const MAX_XML_DEPTH: usize = 256;

    /// Parses the document and returns its root element.
    pub(super) fn parse(text: &str) -> Result<Node, (u32, String)> {
        let mut reader = Reader::from_str(text);
        let mut lines = Lines {
            text: text.as_bytes(),
            pos: 0,
            line: 1,
        };
        let mut stack: Vec<Node> = Vec::new();
        let mut root: Option<Node> = None;
        loop {
            let start = reader.buffer_position() as usize;
            let event = reader.read_event().map_err(|e| {
                let line = lines.at(reader.error_position() as usize);
                (line, format!("malformed XML: {e}"))
            })?;
            // The element starts after any whitespace preceding `<`.
            let tag_pos = text
                .as_bytes()
                .get(start..)
                .and_then(|s| s.iter().position(|&b| b == b'<'))
                .map_or(start, |p| start + p);
            match event {
                Event::Start(e) => {
                    let line = lines.at(tag_pos);
                    if stack.len() >= MAX_XML_DEPTH {
                        return Err((
                            line,
                            format!("elements nested more than {MAX_XML_DEPTH} deep"),
                        ));
                    }
                    stack.push(element(&e, line)?);
                }
                Event::Empty(e) => {
                    let line = lines.at(tag_pos);
                    let node = element(&e, line)?;
                    match stack.last_mut() {
                        Some(parent) => parent.children.push(node),
                        None if root.is_none() => root = Some(node),
                        None => return Err((line, "more than one root element".into())),
                    }
                }
                Event::End(_) => {
                    let line = lines.at(tag_pos);
                    let node = stack
                        .pop()
                        .ok_or((line, "closing tag without an opening tag".to_string()))?;
                    match stack.last_mut() {
                        Some(parent) => parent.children.push(node),
                        None if root.is_none() => root = Some(node),
                        None => return Err((line, "more than one root element".into())),
                    }
                }
                Event::Eof => {
                    let line = lines.at(text.len());
                    if let Some(open) = stack.last() {
                        return Err((
                            line,
                            format!(
                                "unexpected end of file: <{}> (line {}) not closed",
                                open.name, open.line
                            ),
                        ));
                    }
                    return root.ok_or((line, "empty document: no <fix> element".to_string()));
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Short strings over a small alphabet (NUL included, though dictionaries never
    /// hold it: a hostile probe may), so prefixes and 8-byte ties are common.
    fn text() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            prop::sample::select(vec![0u8, b'1', b'A', b'B', b'z']),
            0..12,
        )
    }

    proptest! {
        #[test]
        fn find_sorted_agrees_with_a_binary_search_on_the_bytes(
            set in prop::collection::btree_set(text(), 0..40),
            probes in prop::collection::vec(text(), 1..20),
        ) {
            // Lossless: the alphabet is ASCII.
            let sorted: Vec<String> = set
                .iter()
                .map(|b| String::from_utf8(b.clone()).expect("ascii"))
                .collect();
            let keys: Vec<u64> = sorted.iter().map(|s| prefix_key(s.as_bytes())).collect();
            let members = sorted.iter().map(|s| s.as_bytes().to_vec());
            for probe in probes.iter().cloned().chain(members) {
                let want = sorted.binary_search_by(|s| s.as_bytes().cmp(&probe[..])).ok();
                prop_assert_eq!(find_sorted(&keys, |i| &sorted[i], &probe), want);
            }
        }

        #[test]
        fn tag_bits_agree_with_the_tag_list(
            tags in prop::collection::btree_set(1u32..3000, 0..60),
            probes in prop::collection::vec(0u32..3000, 1..50),
        ) {
            let list: Vec<u32> = tags.iter().copied().collect();
            let bits = TagBits::of(&list);
            for t in probes.iter().copied().chain(list.iter().copied()) {
                let want = list.binary_search(&t).is_ok();
                match bits.get(t) {
                    Some(got) => prop_assert_eq!(got, want),
                    None => prop_assert!(t >= LAYOUT_BITSET_TAGS),
                }
            }
        }
    }
}
