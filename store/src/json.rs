//! [`JsonText`]: how every JSON value is bound to and read from the store, on both backends, and
//! [`diagnostic`]: how the gateway's own error texts are bound.
//!
//! A JSON value is stored as the text `serde_json` writes for it, in a TEXT column on SQLite
//! and PostgreSQL alike (migration 0008), and read back by parsing that text: what a seeker,
//! worker or the gateway stored is what it reads back, to the byte of its serialization, on
//! either backend. PostgreSQL's jsonb would not give that: it refuses U+0000 in any string or
//! key (a proposal whose input held `"\u0000"` was a 500 there and fine on SQLite), and it
//! rewrites numbers (`-0.0` reads back as `0.0`, the float `1e16` as an integer). Escaping
//! U+0000 into jsonb would have kept jsonb's operators, but the numbers would still drift, and
//! no query looks inside these columns (the webhook outbox trigger reads a plain
//! `contract.webhook_url` column since migration 0008).
//!
//! `serde_json` escapes control characters, so the stored text never holds a NUL byte, which
//! PostgreSQL's TEXT could not hold either.
//!
//! Reading lifts `serde_json`'s nesting limit of 128: request bodies are parsed with that
//! limit, and the gateway then nests them a level or two deeper (terms wrap the input, events
//! wrap details), so a value accepted at the edge must not become unreadable once stored. A
//! stored text nested deeper than [`MAX_STORED_DEPTH`] (only a hand-edited row could be) is
//! refused before parsing, so the unbounded parser never recurses far.

use std::borrow::Cow;

use serde::{Serialize, de::DeserializeOwned};
use sqlx::{Database, Decode, Encode, Type, encode::IsNull, error::BoxDynError};

/// Deepest nesting of arrays and objects read back from a JSON column: well above what the
/// API accepts (128) plus the gateway's own wrapping.
pub(crate) const MAX_STORED_DEPTH: usize = 512;

/// A JSON value bound as its serialized text (see the module docs). Bind `JsonText(&value)`;
/// read `JsonText<Value>` (or any deserializable type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JsonText<T>(pub T);

impl<T, DB> Type<DB> for JsonText<T>
where
    DB: Database,
    String: Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <String as Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <String as Type<DB>>::compatible(ty)
    }
}

impl<'q, T, DB> Encode<'q, DB> for JsonText<T>
where
    T: Serialize,
    DB: Database,
    String: Encode<'q, DB>,
{
    fn encode_by_ref(
        &self,
        buf: &mut <DB as Database>::ArgumentBuffer<'q>,
    ) -> Result<IsNull, BoxDynError> {
        let text = serde_json::to_string(&self.0)?;
        <String as Encode<'q, DB>>::encode(text, buf)
    }
}

impl<'r, T, DB> Decode<'r, DB> for JsonText<T>
where
    T: DeserializeOwned,
    DB: Database,
    &'r str: Decode<'r, DB>,
{
    fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <&'r str as Decode<'r, DB>>::decode(value)?;
        Ok(Self(parse(text)?))
    }
}

/// Parse stored JSON text without `serde_json`'s nesting limit, after checking its depth (what
/// reading a [`JsonText`] does, for text read as a plain string).
pub(crate) fn parse<T: DeserializeOwned>(text: &str) -> Result<T, BoxDynError> {
    let depth = nesting_depth(text);
    if depth > MAX_STORED_DEPTH {
        return Err(format!(
            "stored JSON is nested {depth} levels deep (at most {MAX_STORED_DEPTH} are read)"
        )
        .into());
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.disable_recursion_limit();
    let value = T::deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// Deepest `[`/`{` nesting of JSON text, brackets inside strings not counted. Malformed text
/// gets some number; the parser then reports what is wrong with it.
fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0_usize, 0_usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in text.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The gateway's own diagnostic text (a job's, a probe's or a webhook delivery's last error)
/// as stored: U+0000 becomes U+FFFD on both backends. These texts sometimes quote what a
/// remote answered; they are for operators to read, not data anyone gets back, and
/// PostgreSQL's TEXT cannot hold NUL. Client and worker data never goes through here: JSON is
/// stored whole ([`JsonText`]), and plain-text fields refuse U+0000 where they enter.
pub(crate) fn diagnostic(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn depth_ignores_brackets_in_strings() {
        assert_eq!(nesting_depth(r#"{"a":[1,{"b":"[[[{{\"]]"}]}"#), 3);
        assert_eq!(nesting_depth("1"), 0);
    }

    #[test]
    fn deep_values_read_back_and_deeper_ones_are_refused() {
        let mut deep = json!("\u{0}");
        for _ in 0..300 {
            deep = json!([deep]);
        }
        let text = serde_json::to_string(&deep).unwrap();
        assert_eq!(parse::<Value>(&text).unwrap(), deep);
        let too_deep = format!("{}{}", "[".repeat(600), "]".repeat(600));
        assert!(parse::<Value>(&too_deep).is_err());
        assert!(parse::<Value>("[1] x").is_err());
    }

    #[test]
    fn diagnostics_lose_only_nul() {
        assert_eq!(diagnostic("a\0b\u{FFFF}"), "a\u{FFFD}b\u{FFFF}");
        assert!(matches!(diagnostic("plain"), Cow::Borrowed(_)));
    }
}
