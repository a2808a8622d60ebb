//! NASDAQ TotalView-ITCH 5.0 and MoldUDP64 codecs (pure: bytes in, values out; no IO).
//!
//! - [`message`]: every ITCH 5.0 message type as a small `Copy` struct, the [`Message`]
//!   enum, allocation-free [`decode`] and [`Message::encode`] / [`Message::encode_to_vec`],
//!   and the field helpers [`Price`] (4 implied decimals), [`Price8`], [`Symbol`], [`Side`].
//! - [`mold`]: MoldUDP64 downstream packets ([`MoldPacket`] view with a checked block
//!   iterator, [`PacketBuilder`]), heartbeats, end of session and re-request packets
//!   ([`RetransmitRequest`]).
//!
//! Neither module reads a clock, touches a socket or allocates per message; decoders
//! return typed errors on any malformed input and never panic.
//!
//! # ITCH 5.0 message types
//!
//! All fields are big-endian. Every message starts with the 11-byte common header:
//! type (1), stock locate (2), tracking number (2), timestamp (6, ns since midnight).
//! Lengths include the header.
//!
//! | Type | Message                                         | Struct                          | Length |
//! |------|-------------------------------------------------|---------------------------------|-------:|
//! | `S`  | System Event                                    | [`SystemEvent`]                 | 12     |
//! | `R`  | Stock Directory                                 | [`StockDirectory`]              | 39     |
//! | `H`  | Stock Trading Action                            | [`StockTradingAction`]          | 25     |
//! | `Y`  | Reg SHO Short Sale Price Test Restricted        | [`RegShoRestriction`]           | 20     |
//! | `L`  | Market Participant Position                     | [`MarketParticipantPosition`]   | 26     |
//! | `V`  | MWCB Decline Level                              | [`MwcbDeclineLevel`]            | 35     |
//! | `W`  | MWCB Status                                     | [`MwcbStatus`]                  | 12     |
//! | `K`  | IPO Quoting Period Update                       | [`IpoQuotingPeriodUpdate`]      | 28     |
//! | `J`  | LULD Auction Collar                             | [`LuldAuctionCollar`]           | 35     |
//! | `h`  | Operational Halt                                | [`OperationalHalt`]             | 21     |
//! | `A`  | Add Order (no MPID)                             | [`AddOrder`]                    | 36     |
//! | `F`  | Add Order with MPID attribution                 | [`AddOrderMpid`]                | 40     |
//! | `E`  | Order Executed                                  | [`OrderExecuted`]               | 31     |
//! | `C`  | Order Executed With Price                       | [`OrderExecutedWithPrice`]      | 36     |
//! | `X`  | Order Cancel                                    | [`OrderCancel`]                 | 23     |
//! | `D`  | Order Delete                                    | [`OrderDelete`]                 | 19     |
//! | `U`  | Order Replace                                   | [`OrderReplace`]                | 35     |
//! | `P`  | Trade (non-cross)                               | [`Trade`]                       | 44     |
//! | `Q`  | Cross Trade                                     | [`CrossTrade`]                  | 40     |
//! | `B`  | Broken Trade / Order Execution                  | [`BrokenTrade`]                 | 19     |
//! | `I`  | Net Order Imbalance Indicator (NOII)            | [`Noii`]                        | 50     |
//! | `N`  | Retail Price Improvement Indicator (RPII)       | [`Rpii`]                        | 20     |
//! | `O`  | Direct Listing with Capital Raise Price Discovery | [`DlcrPriceDiscovery`]        | 48     |
//!
//! # MoldUDP64
//!
//! | Packet          | Layout                                                                   |
//! |-----------------|--------------------------------------------------------------------------|
//! | Downstream      | Session (10) · SequenceNumber (u64) · MessageCount (u16) · blocks        |
//! | Message block   | MessageLength (u16) · message bytes                                      |
//! | Heartbeat       | header with MessageCount = 0                                             |
//! | End of Session  | header with MessageCount = 0xFFFF                                        |
//! | Re-request      | Session (10) · SequenceNumber (u64) · RequestedMessageCount (u16)        |
//!
//! # Example
//!
//! ```
//! use tickwire_itch::{decode, AddOrder, Header, Message, MoldPacket, PacketBuilder, Price,
//!     Session, Side, Symbol};
//!
//! let add = Message::from(AddOrder {
//!     header: Header { stock_locate: 1, tracking_number: 0, timestamp: 34_200_000_000_000 },
//!     order_ref: 42,
//!     side: Side::Buy,
//!     shares: 100,
//!     stock: Symbol::new("AAPL").unwrap(),
//!     price: Price(1_895_000),
//! });
//! let mut builder = PacketBuilder::new(Session::new("S1").unwrap(), 1, 1400);
//! builder.push_message(&add).unwrap();
//! let packet = MoldPacket::parse(builder.finish()).unwrap();
//! for block in packet.messages() {
//!     let block = block.unwrap();
//!     assert_eq!(block.sequence, 1);
//!     assert_eq!(decode(block.data).unwrap(), add);
//! }
//! ```

#![warn(missing_docs)]
// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

pub mod message;
pub mod mold;

pub use message::*;
pub use mold::*;
