//! NASDAQ TotalView-ITCH 5.0 and MoldUDP64 codecs (pure: bytes in, values out; no IO).
