//! Protocol-specific choices pinned in the terms at proposal ([`ExecutionTerms`]), so every
//! attempt asks the worker the same way and a changed listing cannot change a signed contract.
//!
//! - **WattSwarm** `profile`: the proposal may name one of the executor's declared profiles
//!   (`GET /capabilities`, read now); by default the first declared one (`default` when the
//!   executor declares none). An undeclared one is 422 `profile_not_declared`. The
//!   executor's `provider_family` and `model_id` are pinned beside it: an answer naming
//!   another runtime is a failed attempt (`runtime_mismatch`).
//! - **Superwire** `workflow_digest`: `sha256:` of the listing's workflow source; an attempt
//!   finding another source in the listing is refused (`workflow_changed`).
//!   `reuse_cached_outputs` (proposal flag, default false): a retry may reuse the agent
//!   outputs cached by earlier attempts; without it each attempt has its own `cache_key`.
//!
//! A `profile` for a non-WattSwarm worker or `reuse_cached_outputs` for a non-Superwire one
//! is 422 `option_not_supported`: the seeker asked for something this worker cannot do.

use hiregate_contracts::{terms::ExecutionTerms, wire::wattswarm::Capabilities};
use serde_json::json;

use super::error::{ErrorCode, HireError};
use crate::{
    adapters::{read_capabilities, wattswarm::DEFAULT_PROFILE},
    outbound::OutboundClient,
};
use hiregate_store::listing::model::{Protocol, WorkerListing};

/// What the seeker asked for, as far as execution choices go.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExecutionChoices<'a> {
    /// WattSwarm profile named in the proposal.
    pub profile: Option<&'a str>,
    /// Superwire: allow retries to reuse cached agent outputs.
    pub reuse_cached_outputs: Option<bool>,
}

/// The [`ExecutionTerms`] of a contract with `listing`, or the 422 explaining why not.
pub async fn pin(
    client: &OutboundClient,
    listing: &WorkerListing,
    choices: ExecutionChoices<'_>,
) -> Result<ExecutionTerms, HireError> {
    let unsupported = |field: &str| {
        HireError::unprocessable(
            ErrorCode::OptionNotSupported,
            format!(
                "`{field}` does not apply to a `{}` worker",
                listing.protocol.as_str()
            ),
        )
        .with_details(json!({"field": field, "protocol": listing.protocol.as_str()}))
    };
    if choices.profile.is_some() && listing.protocol != Protocol::Wattswarm {
        return Err(unsupported("profile"));
    }
    if choices.reuse_cached_outputs.is_some() && listing.protocol != Protocol::Superwire {
        return Err(unsupported("reuse_cached_outputs"));
    }
    match listing.protocol {
        Protocol::Hire => Ok(ExecutionTerms::default()),
        Protocol::Superwire => Ok(ExecutionTerms {
            workflow_digest: listing
                .protocol_options
                .workflow_source_base64
                .as_ref()
                .map(|source| source.digest()),
            reuse_cached_outputs: choices.reuse_cached_outputs.unwrap_or(false),
            ..ExecutionTerms::default()
        }),
        Protocol::Wattswarm => {
            let capabilities = capabilities(client, listing).await?;
            let profile = match choices.profile {
                Some(wanted) if capabilities.profiles.iter().any(|p| p == wanted) => {
                    wanted.to_owned()
                }
                Some(wanted) => {
                    return Err(HireError::unprocessable(
                        ErrorCode::ProfileNotDeclared,
                        format!(
                            "the executor does not declare the profile `{wanted}` in its \
                             /capabilities"
                        ),
                    )
                    .with_details(json!({"profile": wanted, "declared": capabilities.profiles})));
                }
                None => capabilities
                    .profiles
                    .first()
                    .cloned()
                    .unwrap_or_else(|| DEFAULT_PROFILE.to_owned()),
            };
            Ok(ExecutionTerms {
                profile: Some(profile),
                provider_family: Some(capabilities.provider_family),
                model_id: Some(capabilities.model_id),
                ..ExecutionTerms::default()
            })
        }
    }
}

/// The WattSwarm executor's `/capabilities`, read now.
async fn capabilities(
    client: &OutboundClient,
    listing: &WorkerListing,
) -> Result<Capabilities, HireError> {
    let unavailable = |why: String| {
        HireError::unavailable(
            ErrorCode::WorkerCapabilitiesUnavailable,
            format!("the executor's /capabilities could not be read: {why}"),
            5,
        )
    };
    read_capabilities(client, &listing.endpoint)
        .await
        .map_err(unavailable)
}
