//! Fetching what a deliverable points to (files, evidence artifacts) before it is judged.
//!
//! Every fetch goes through the SSRF-filtering outbound client with a size limit. The
//! contracts crate decides what an outcome means (unreachable → inconclusive, digest mismatch or
//! oversize → failed); here failures are only classified. The fetched bytes are kept with the
//! deliverable so a dispute can replay the verification on exactly what was judged.

use std::time::Duration;

use hiregate_contracts::{
    canonical::Digest,
    deliverable::EvidenceRequest,
    verify::{EvidenceFetch, EvidenceSet, FetchFailure},
};
use url::Url;

use crate::outbound::{OutboundClient, OutboundError};

/// One fetched piece, with its bytes.
#[derive(Clone)]
pub struct FetchedEvidence {
    /// Where it came from.
    pub url: Url,
    /// The bytes.
    pub bytes: Vec<u8>,
    /// `sha256:` of the bytes.
    pub digest: Digest,
    /// Media type the source declared.
    pub media_type: Option<String>,
}

impl std::fmt::Debug for FetchedEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchedEvidence")
            .field("url", &self.url.as_str())
            .field("bytes", &self.bytes.len())
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

/// Fetch every request (one after the other: deliverables name few files, and a worker must not
/// be able to make the gateway open many connections at once), each within `timeout` and
/// `limit_bytes`.
pub async fn fetch_all(
    client: &OutboundClient,
    requests: &[EvidenceRequest],
    timeout: Duration,
    limit_bytes: usize,
) -> (EvidenceSet, Vec<FetchedEvidence>) {
    let mut set = EvidenceSet::new();
    let mut fetched = Vec::new();
    for request in requests {
        let outcome = fetch_one(client, &request.uri, timeout, limit_bytes).await;
        let fetch = match outcome {
            Ok((bytes, media_type)) => {
                fetched.push(FetchedEvidence {
                    url: request.uri.clone(),
                    digest: Digest::of_bytes(&bytes),
                    bytes: bytes.clone(),
                    media_type,
                });
                EvidenceFetch::Fetched(bytes)
            }
            Err(failure) => failure,
        };
        set.insert(&request.uri, fetch);
    }
    (set, fetched)
}

async fn fetch_one(
    client: &OutboundClient,
    url: &Url,
    timeout: Duration,
    limit_bytes: usize,
) -> Result<(Vec<u8>, Option<String>), EvidenceFetch> {
    let response = client
        .get(url, timeout)
        .await
        .map_err(|error| classify(&error, limit_bytes))?;
    // The outbound fetch's own status (a worker's evidence host), not an answer of ours: 401/403
    // mean the evidence exists but is not ours to read.
    let status = response.status();
    if matches!(status.as_u16(), 401 | 403) {
        return Err(EvidenceFetch::Failed(FetchFailure::AuthDenied));
    }
    if !status.is_success() {
        return Err(EvidenceFetch::Failed(FetchFailure::Unreachable));
    }
    let media_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = client
        .read_body(response, limit_bytes)
        .await
        .map_err(|error| classify(&error, limit_bytes))?;
    Ok((bytes, media_type))
}

fn classify(error: &OutboundError, limit_bytes: usize) -> EvidenceFetch {
    match error {
        OutboundError::Timeout => EvidenceFetch::Failed(FetchFailure::Timeout),
        OutboundError::ResponseTooLarge { limit } => EvidenceFetch::TooLarge {
            limit_bytes: u64::try_from(*limit.min(&limit_bytes)).unwrap_or(u64::MAX),
        },
        _ => EvidenceFetch::Failed(FetchFailure::Unreachable),
    }
}
