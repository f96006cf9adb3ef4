//! Metered prices (x402 `upto`): a contract priced per unit of verified work instead of a
//! fixed amount.
//!
//! The signed terms pin the unit, its price and the most units the seeker pays for; the
//! contract's [`Price`](crate::money::Price) is then the maximum (`unit_price × max_units`),
//! which is what the seeker authorizes. After verification only the units the gateway itself
//! verified are paid: [`Metering::amount_for`]. What the worker says it did (a count in its
//! metadata, a `progress` figure) is never a unit.
//!
//! | unit | what is counted |
//! |---|---|
//! | `item` | the items of the delivered `multiple` output (a single output is one item) that each pass the contract's verification on their own |

use serde::{Deserialize, Serialize};

use crate::deliverable::MAX_ITEMS;
use crate::money::AtomicAmount;

/// What one unit of a metered contract is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeterUnit {
    /// One item of the deliverable that passes verification on its own.
    Item,
}

impl MeterUnit {
    /// The wire name.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Item => "item",
        }
    }

    /// The most units a contract may be metered in: a `multiple` output holds at most
    /// [`MAX_ITEMS`] items.
    #[must_use]
    pub const fn max_units(&self) -> u32 {
        match self {
            Self::Item => MAX_ITEMS as u32,
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
            json!({"unit": "token", "unit_price": "1", "max_units": 5}),
            json!({"unit": "item", "unit_price": "1", "max_units": 5, "x": 1}),
            json!({"unit": "item", "unit_price": u128::MAX.to_string(), "max_units": 2}),
        ] {
            assert!(
                serde_json::from_value::<Metering>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }
}
