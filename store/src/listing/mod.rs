//! A worker listing as the store keeps it: [`model`] (endpoint, protocol, catalog of task
//! types and prices, payment schemes, fee, health), the metadata shown to seekers
//! ([`metadata`]: name, description, input schema, examples) and the one error their parses
//! answer with ([`invalid::InvalidField`]). Registering, probing and discovering listings is
//! the engine's (`hiregate_engine::registry`).

pub mod invalid;
pub mod metadata;
pub mod model;
