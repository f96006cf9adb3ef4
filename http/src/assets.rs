//! `GET /v1/assets` (anyone, like discovery): the tokens the gateway's answers name by address,
//! with their symbol and decimals, so a client (the console) can show `1.25 USDC` instead of
//! `1250000` of `0x8335…`. Every amount elsewhere in the API stays in atomic units with its
//! asset address; this is the key to read them.
//!
//! Listed: the tokens of `[chains.*.tokens]`, those of every listing (retired ones included;
//! read from the chain once and cached when not configured) and any other token already read.
//! A listing's token the chain cannot describe right now is left out rather than failing the
//! answer.

use std::{str::FromStr as _, time::Duration};

use alloy::primitives::Address;
use axum::{Json, extract::State};
use serde::Serialize;

use super::routes::{Routes, get};
use crate::{error::ApiResult, state::AppState};
use hiregate_contracts::money::Network;
use hiregate_engine::assets::AssetInfo;

/// How long one token's metadata may take to read from its chain.
const LOOKUP_WAIT: Duration = Duration::from_secs(2);

/// The assets route.
pub fn router() -> Routes {
    Routes::new().route("/v1/assets", get(list_assets))
}

/// One token on one chain.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct AssetView {
    /// CAIP-2 network (`eip155:<chain id>`).
    #[schema(example = "eip155:8453")]
    network: String,
    /// Token contract, EIP-55 mixed case (the `asset` of offers, listings and payments, in any
    /// letter case).
    #[schema(example = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")]
    address: String,
    /// ERC-20 symbol.
    #[schema(example = "USDC")]
    symbol: String,
    /// ERC-20 decimals: an amount of `n` atomic units is `n / 10^decimals` tokens.
    #[schema(example = 6)]
    decimals: u8,
    /// EIP-712 domain name (the x402 offer's `extra.name`).
    name: String,
    /// EIP-712 domain version (the x402 offer's `extra.version`).
    version: String,
}

impl From<AssetInfo> for AssetView {
    fn from(info: AssetInfo) -> Self {
        Self {
            network: format!("eip155:{}", info.chain_id),
            address: info.address.to_checksum(None),
            symbol: info.symbol,
            decimals: info.decimals,
            name: info.name,
            version: info.version,
        }
    }
}

/// The known tokens.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct AssetList {
    /// Ordered by chain id, then address.
    assets: Vec<AssetView>,
}

/// `GET /v1/assets`: the symbol and decimals of every token the gateway's answers may name.
#[utoipa::path(
    get,
    path = "/v1/assets",
    tag = "workers",
    responses(
        (status = 200, description = "The known tokens", body = AssetList),
    ),
)]
pub(crate) async fn list_assets(State(state): State<AppState>) -> ApiResult<Json<AssetList>> {
    for (network, asset) in state.store.listing_assets().await? {
        let (Ok(chain), Ok(address)) = (network.parse::<Network>(), Address::from_str(&asset))
        else {
            continue;
        };
        // Cached after the first answer; a token the chain cannot describe now (or soon: a
        // silent node must not hold the answer) is left out.
        match tokio::time::timeout(LOOKUP_WAIT, state.assets.lookup(chain, address)).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                tracing::debug!(%network, %asset, %error, "asset metadata unavailable");
            }
            Err(_) => tracing::debug!(%network, %asset, "asset metadata: the node is slow"),
        }
    }
    Ok(Json(AssetList {
        assets: state
            .assets
            .known()
            .into_iter()
            .map(AssetView::from)
            .collect(),
    }))
}
