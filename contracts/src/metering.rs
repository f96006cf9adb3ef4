//! Metered prices (x402 `upto`): a contract priced per unit of verified work instead of a
//! fixed amount.
//!
//! The signed terms pin the unit, its price and the most units the seeker pays for; the
//! contract's [`Price`](crate::money::Price) is then the maximum (`unit_price × max_units`),
//! which is what the seeker authorizes. After verification only the units the gateway itself
//! counted or bounded are paid: [`Metering::amount_for`]. What the worker says it did is never
//! a unit on its own: a figure it reports ([`reported_usage`], `metadata.usage.<unit>s`) is
//! paid only up to what the gateway measured ([`MeterReadings`]).
//!
//! | unit | what is counted |
//! |---|---|
//! | `item` | the items of the delivered `multiple` output (a single output is one item) that each pass the contract's verification on their own |
//! | `event` | the stream events the gateway relayed for the attempt (`done`/`error` are not units), when the assembled output passes verification; a stream cut before its `done` is delivered as a partial and paid for the events relayed before the cut |
//! | `second` | the seconds the worker reports (`metadata.usage.seconds`), at most the attempt's wall time as the gateway measured it (from opening the attempt to storing its delivery), rounded up to whole seconds |
//! | `token` | the output tokens the worker reports (`metadata.usage.tokens`), at most [`token_bound`] of the delivered output: its UTF-8 byte count |
//!
//! The token bound: every token a byte-level tokenizer emits (BPE with byte fallback, as GPT,
//! Llama and Claude tokenizers are) decodes to at least one byte of text, so a text of `n` UTF-8
//! bytes took at most `n` tokens to write. The bound is loose on purpose: it needs no tokenizer
//! (the gateway cannot know the worker's model) and it is never below the truth. Only output
//! tokens are metered, and only output the gateway holds: inline text and JSON (its compact
//! serialization), not files by URL.

use serde::{Deserialize, Serialize};

use serde_json::Value;

use crate::deliverable::{MAX_ITEMS, Output};
use crate::money::AtomicAmount;

/// Most stream events one contract may be metered in.
pub const MAX_EVENTS: u32 = 1_000_000;
/// Most seconds one contract may be metered in: a week.
pub const MAX_SECONDS: u32 = 7 * 24 * 60 * 60;
/// Most tokens one contract may be metered in.
pub const MAX_TOKENS: u32 = 100_000_000;

/// What one unit of a metered contract is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeterUnit {
    /// One item of the deliverable that passes verification on its own.
    Item,
    /// One stream event the gateway relayed (not `done` nor `error`).
    Event,
    /// One second of work the worker reports, within the attempt's measured wall time.
    Second,
    /// One output token the worker reports, within [`token_bound`] of its output.
    Token,
}

impl MeterUnit {
    /// The wire name.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Item => "item",
            Self::Event => "event",
            Self::Second => "second",
            Self::Token => "token",
        }
    }

    /// The most units a contract may be metered in: a `multiple` output holds at most
    /// [`MAX_ITEMS`] items; the others are bounded by [`MAX_EVENTS`], [`MAX_SECONDS`] and
    /// [`MAX_TOKENS`].
    #[must_use]
    pub const fn max_units(&self) -> u32 {
        match self {
            Self::Item => MAX_ITEMS as u32,
            Self::Event => MAX_EVENTS,
            Self::Second => MAX_SECONDS,
            Self::Token => MAX_TOKENS,
        }
    }

    /// The field of the worker's `metadata.usage` that reports this unit (`items`, `events`,
    /// `seconds`, `tokens`).
    #[must_use]
    pub const fn usage_field(&self) -> &'static str {
        match self {
            Self::Item => "items",
            Self::Event => "events",
            Self::Second => "seconds",
            Self::Token => "tokens",
        }
    }
}

/// The figure the worker reports for `unit` beside its deliverable: `metadata.usage.<field>`
/// ([`MeterUnit::usage_field`]) when it is a non-negative integer; `None` otherwise. Only the
/// `second` and `token` units pay it, and only within what the gateway measured.
#[must_use]
pub fn reported_usage(unit: MeterUnit, metadata: Option<&Value>) -> Option<u64> {
    metadata?.get("usage")?.get(unit.usage_field())?.as_u64()
}

/// The most output tokens `output` can have taken to write: its UTF-8 byte count (a text's
/// bytes, a JSON value's compact serialization, a `multiple`'s items summed). A file or stream
/// by URL counts nothing: the gateway does not hold its bytes. See the module docs for why a
/// byte bounds a token.
#[must_use]
pub fn token_bound(output: &Output) -> u64 {
    match output {
        Output::Text { content } => content.len() as u64,
        Output::Json { content } => serde_json::to_string(content).map_or(0, |s| s.len() as u64),
        Output::Multiple { items } => items.iter().map(token_bound).sum(),
        Output::File(_) | Output::Stream { .. } => 0,
    }
}

/// What the gateway measured of the attempt being judged, and what the worker reported: the
/// inputs of a metered verdict besides the deliverable. Read from the gateway's own records
/// (the attempt's times, the contract's event log), so judging again gives the same count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeterReadings {
    /// Stream events the gateway relayed for the attempt, `done` and `error` not counted.
    pub relayed_events: u64,
    /// The attempt's wall time as the gateway measured it (opened → delivery stored), ms.
    pub wall_time_ms: u64,
    /// The worker's figure for the contract's unit ([`reported_usage`]).
    pub reported: Option<u64>,
}

impl MeterReadings {
    /// The attempt's wall time in whole seconds, rounded up: a second begun is a second the
    /// worker may bill (the gateway's clock starts before the worker's and stops after it).
    #[must_use]
    pub const fn wall_seconds(&self) -> u64 {
        self.wall_time_ms.div_ceil(1000)
    }

    /// The units of `unit` the gateway counts for `output`, before verification and before
    /// the terms' `max_units`: `(bound, counted)`, where `bound` is the gateway's own
    /// measurement and `counted` what it accepts of the worker's figure. `item` is counted by
    /// verification alone (`None`).
    #[must_use]
    pub fn count(&self, unit: MeterUnit, output: &Output) -> Option<(u64, u64)> {
        let capped = |bound: u64| (bound, self.reported.unwrap_or(0).min(bound));
        match unit {
            MeterUnit::Item => None,
            MeterUnit::Event => Some((self.relayed_events, self.relayed_events)),
            MeterUnit::Second => Some(capped(self.wall_seconds())),
            MeterUnit::Token => Some(capped(token_bound(output))),
        }
    }
}

/// Why a metering was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeteringError {
    /// The unit price is zero.
    #[error("metering.unit_price must be greater than zero")]
    ZeroUnitPrice,
    /// `max_units` is zero or more than the unit allows.
    #[error("metering.max_units must be 1..={limit} for unit `{unit}`")]
    MaxUnitsOutOfRange {
        /// The unit.
        unit: &'static str,
        /// Its limit.
        limit: u32,
    },
    /// `unit_price × max_units` does not fit the contract's amount.
    #[error("metering.unit_price × metering.max_units is larger than 2^128 - 1")]
    MaximumOverflows,
}

/// How a metered contract is paid: `unit_price` per verified `unit`, at most `max_units`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "MeteringWire")]
pub struct Metering {
    unit: MeterUnit,
    unit_price: AtomicAmount,
    max_units: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MeteringWire {
    unit: MeterUnit,
    unit_price: AtomicAmount,
    max_units: u32,
}

impl TryFrom<MeteringWire> for Metering {
    type Error = MeteringError;
    fn try_from(wire: MeteringWire) -> Result<Self, Self::Error> {
        Self::new(wire.unit, wire.unit_price, wire.max_units)
    }
}

impl Metering {
    /// A metering; refuses a zero unit price, a `max_units` outside `1..=unit.max_units()` and
    /// a maximum that does not fit 128 bits.
    pub fn new(
        unit: MeterUnit,
        unit_price: AtomicAmount,
        max_units: u32,
    ) -> Result<Self, MeteringError> {
        if unit_price.is_zero() {
            return Err(MeteringError::ZeroUnitPrice);
        }
        if max_units == 0 || max_units > unit.max_units() {
            return Err(MeteringError::MaxUnitsOutOfRange {
                unit: unit.as_str(),
                limit: unit.max_units(),
            });
        }
        unit_price
            .units()
            .checked_mul(u128::from(max_units))
            .ok_or(MeteringError::MaximumOverflows)?;
        Ok(Self {
            unit,
            unit_price,
            max_units,
        })
    }

    /// The unit.
    #[must_use]
    pub const fn unit(&self) -> MeterUnit {
        self.unit
    }

    /// Price of one unit, atomic units.
    #[must_use]
    pub const fn unit_price(&self) -> AtomicAmount {
        self.unit_price
    }

    /// The most units paid for.
    #[must_use]
    pub const fn max_units(&self) -> u32 {
        self.max_units
    }

    /// What the seeker authorizes: `unit_price × max_units` (checked at construction).
    #[must_use]
    pub fn maximum(&self) -> AtomicAmount {
        self.amount_for(self.max_units)
    }

    /// The units paid for when `verified` units were verified: at most `max_units`.
    #[must_use]
    pub fn billable_units(&self, verified: u32) -> u32 {
        verified.min(self.max_units)
    }

    /// What `verified` verified units cost: `unit_price × min(verified, max_units)`.
    #[must_use]
    pub fn amount_for(&self, verified: u32) -> AtomicAmount {
        AtomicAmount::new(
            self.unit_price
                .units()
                .saturating_mul(u128::from(self.billable_units(verified))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pays_the_verified_units_never_more_than_the_maximum() {
        let metering = Metering::new(MeterUnit::Item, AtomicAmount::new(250_000), 5).unwrap();
        assert_eq!(metering.maximum(), AtomicAmount::new(1_250_000));
        assert_eq!(metering.amount_for(3), AtomicAmount::new(750_000));
        assert_eq!(metering.amount_for(0), AtomicAmount::new(0));
        // More verified units than pinned (a worker delivering more than asked) pay the maximum.
        assert_eq!(metering.amount_for(9), metering.maximum());
        assert_eq!(metering.billable_units(9), 5);
    }

    #[test]
    fn round_trips_and_refuses_what_cannot_be_paid() {
        let metering = Metering::new(MeterUnit::Item, AtomicAmount::new(7), 64).unwrap();
        let value = serde_json::to_value(metering).unwrap();
        assert_eq!(
            value,
            json!({"unit": "item", "unit_price": "7", "max_units": 64})
        );
        assert_eq!(serde_json::from_value::<Metering>(value).unwrap(), metering);
        for bad in [
            json!({"unit": "item", "unit_price": "0", "max_units": 5}),
            json!({"unit": "item", "unit_price": "1", "max_units": 0}),
            json!({"unit": "item", "unit_price": "1", "max_units": 65}),
            json!({"unit": "hour", "unit_price": "1", "max_units": 5}),
            json!({"unit": "second", "unit_price": "1", "max_units": MAX_SECONDS + 1}),
            json!({"unit": "item", "unit_price": "1", "max_units": 5, "x": 1}),
            json!({"unit": "item", "unit_price": u128::MAX.to_string(), "max_units": 2}),
        ] {
            assert!(
                serde_json::from_value::<Metering>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_unit_round_trips_under_its_wire_name() {
        for (unit, name) in [
            (MeterUnit::Item, "item"),
            (MeterUnit::Event, "event"),
            (MeterUnit::Second, "second"),
            (MeterUnit::Token, "token"),
        ] {
            assert_eq!(unit.as_str(), name);
            let metering = Metering::new(unit, AtomicAmount::new(3), unit.max_units()).unwrap();
            let value = serde_json::to_value(metering).unwrap();
            assert_eq!(value["unit"], name);
            assert_eq!(serde_json::from_value::<Metering>(value).unwrap(), metering);
        }
    }

    #[test]
    fn a_reported_figure_is_paid_only_within_what_the_gateway_measured() {
        let text = Output::Text {
            content: "héllo".to_owned(),
        };
        // Six UTF-8 bytes (é is two): at most six tokens.
        assert_eq!(token_bound(&text), 6);
        let json = Output::Json {
            content: json!({"a": [1, 2]}),
        };
        assert_eq!(token_bound(&json), r#"{"a":[1,2]}"#.len() as u64);
        let both = Output::Multiple {
            items: vec![text.clone(), json],
        };
        assert_eq!(token_bound(&both), 6 + 11);

        let metadata = json!({"usage": {"tokens": 1_000_000, "seconds": 2, "events": 100}});
        let readings = MeterReadings {
            relayed_events: 40,
            wall_time_ms: 2_400,
            reported: reported_usage(MeterUnit::Token, Some(&metadata)),
        };
        assert_eq!(readings.reported, Some(1_000_000));
        // Over-reported tokens pay the bound; the worker's event count is never read.
        assert_eq!(readings.count(MeterUnit::Token, &text), Some((6, 6)));
        assert_eq!(readings.count(MeterUnit::Event, &text), Some((40, 40)));
        assert_eq!(readings.count(MeterUnit::Item, &text), None);
        // 2.4 s measured is three seconds begun; an under-report is paid as reported.
        let seconds = MeterReadings {
            reported: reported_usage(MeterUnit::Second, Some(&metadata)),
            ..readings
        };
        assert_eq!(seconds.count(MeterUnit::Second, &text), Some((3, 2)));
        let over = MeterReadings {
            reported: Some(3_600),
            ..readings
        };
        assert_eq!(over.count(MeterUnit::Second, &text), Some((3, 3)));
        // No figure, or one that is not a count: nothing is paid.
        for metadata in [
            json!({}),
            json!({"usage": {"tokens": -1}}),
            json!({"usage": {"tokens": "9"}}),
        ] {
            assert_eq!(reported_usage(MeterUnit::Token, Some(&metadata)), None);
        }
        let silent = MeterReadings {
            reported: None,
            ..readings
        };
        assert_eq!(silent.count(MeterUnit::Token, &text), Some((6, 0)));
    }
}
